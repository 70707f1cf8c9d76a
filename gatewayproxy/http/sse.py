"""Server-Sent Events: encoding frames and an incremental decoder for upstream streams."""

from __future__ import annotations

from typing import NamedTuple

_BLANK_LINE = b"\n\n"


class SseEvent(NamedTuple):
    """One decoded event: its `event` name (empty when unnamed) and joined `data` lines."""

    event: str
    data: str


def encode_event(data: bytes, event: str | None = None) -> bytes:
    """One SSE frame; `data` must not contain newlines (JSON from orjson never does)."""
    if event is None:
        return b"data: " + data + b"\n\n"
    return b"event: " + event.encode() + b"\ndata: " + data + b"\n\n"


def _normalized(buffer: bytes) -> bytes:
    """CRLF and CR line ends as LF; a trailing CR may be half of a CRLF and is kept for the next chunk."""
    if b"\r" not in buffer:
        return buffer
    keep_cr = buffer.endswith(b"\r")
    body = buffer[:-1] if keep_cr else buffer
    return body.replace(b"\r\n", b"\n").replace(b"\r", b"\n") + (b"\r" if keep_cr else b"")


def _event_of(block: str) -> SseEvent | None:
    """The event of one blank-line-terminated block (comments and unknown fields skipped)."""
    name = ""
    data: list[str] = []
    for line in block.split("\n"):
        field, _, value = line.partition(":")
        value = value[1:] if value.startswith(" ") else value
        if field == "data":
            data.append(value)
        elif field == "event":
            name = value
    if not data and not name:
        return None
    return SseEvent(name, "\n".join(data))


class SseDecoder:
    """Turns arbitrary byte chunks into complete events (LF, CR and CRLF line ends; comments skipped).

    Events end at a blank line, so only the unterminated tail of the stream is carried between chunks; what
    is complete is decoded as UTF-8 at once (a blank line never splits a character).
    """

    def __init__(self) -> None:
        self._buffer = b""

    def feed(self, chunk: bytes) -> list[SseEvent]:
        """Decode what `chunk` completes."""
        buffer = _normalized(self._buffer + chunk if self._buffer else chunk)
        end = buffer.rfind(_BLANK_LINE)
        if end < 0:
            self._buffer = buffer
            return []
        self._buffer = buffer[end + 2 :]
        events = []
        for block in buffer[:end].decode("utf-8").split("\n\n"):
            if block.startswith("data: ") and "\n" not in block:  # the common block: one unnamed data line
                events.append(SseEvent("", block[6:]))
            elif (event := _event_of(block.strip("\n"))) is not None:
                events.append(event)
        return events
