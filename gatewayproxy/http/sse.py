"""Server-Sent Events: encoding frames and an incremental decoder for upstream streams."""

from __future__ import annotations

from dataclasses import dataclass

_BLANK_LINE = b"\n\n"


@dataclass(frozen=True)
class SseEvent:
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


def _event_of(block: bytes) -> SseEvent | None:
    """The event of one blank-line-terminated block (comments and unknown fields skipped)."""
    name = ""
    data: list[str] = []
    for line in block.split(b"\n"):
        field, _, value = line.partition(b":")
        value = value[1:] if value.startswith(b" ") else value
        if field == b"data":
            data.append(value.decode("utf-8"))
        elif field == b"event":
            name = value.decode("utf-8")
    if not data and not name:
        return None
    return SseEvent(event=name, data="\n".join(data))


class SseDecoder:
    """Turns arbitrary byte chunks into complete events (LF, CR and CRLF line ends; comments skipped).

    Events end at a blank line, so only the unterminated tail of the stream is carried between chunks.
    """

    def __init__(self) -> None:
        self._buffer = b""

    def feed(self, chunk: bytes) -> list[SseEvent]:
        """Decode what `chunk` completes."""
        self._buffer = _normalized(self._buffer + chunk)
        end = self._buffer.rfind(_BLANK_LINE)
        if end < 0:
            return []
        complete, self._buffer = self._buffer[:end], self._buffer[end + 2 :]
        events = []
        for block in complete.split(_BLANK_LINE):
            event = _event_of(block.strip(b"\n"))
            if event is not None:
                events.append(event)
        return events
