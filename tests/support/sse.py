"""Reading the registry's Server-Sent Events in tests: frames parsed, a reader that drops and resumes, and the
stream settings that make a live registry's streams quick to notice new events."""

from __future__ import annotations

import json
import random
import threading
from dataclasses import dataclass, field

import httpx

FAST = {"REGISTRY_STREAM_POLL_SECONDS": "0.2", "REGISTRY_STREAM_KEEPALIVE_SECONDS": "0.5"}


@dataclass
class Frame:
    """One parsed SSE frame (comments are kept apart)."""

    id: int | None = None
    event: str | None = None
    data: dict = field(default_factory=dict)


def parse_frames(text: str) -> tuple[list[Frame], list[str]]:
    frames, comments = [], []
    for block in text.split("\n\n"):
        frame, seen = Frame(), False
        for line in block.splitlines():
            if line.startswith(":"):
                comments.append(line)
            elif line.startswith("id: "):
                frame.id, seen = int(line[4:]), True
            elif line.startswith("event: "):
                frame.event, seen = line[7:], True
            elif line.startswith("data: "):
                frame.data, seen = json.loads(line[6:]), True
        if seen:
            frames.append(frame)
    return frames, comments


async def resuming_reader(
    url: str,
    api_key: str,
    rng: random.Random,
    opened: threading.Semaphore | None = None,
    terminal: str = "session.status_terminated",
) -> list[int]:
    """Read until the `terminal` event, dropping the connection at random and resuming after the last id;
    `opened` is released once, when the first connection is answered."""
    received: list[int] = []
    cursor = 1
    async with httpx.AsyncClient(timeout=60) as client:
        while True:
            drop_after = rng.randint(1, 25)
            buffer = ""
            async with client.stream("GET", url, headers={"x-api-key": api_key, "Last-Event-ID": str(cursor)}) as r:
                assert r.status_code == 200
                if opened is not None:
                    opened.release()
                    opened = None
                async for chunk in r.aiter_text():
                    buffer += chunk
                    *blocks, buffer = buffer.split("\n\n")
                    frames, _ = parse_frames("\n\n".join(blocks) + "\n\n")
                    for frame in frames:
                        assert frame.id is not None
                        received.append(frame.id)
                        cursor = frame.id + 1
                        if frame.event == terminal:
                            return received
                        drop_after -= 1
                    if drop_after <= 0:
                        break
