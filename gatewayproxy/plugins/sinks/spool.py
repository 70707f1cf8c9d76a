"""The spool: append-only JSONL files in one directory, fsynced per batch, replayed to the sink when it is back.

Each writer holds an exclusive `flock` on the file it appends to; a file is replayed only by whoever can take
that lock, so a file of a live process (another worker, another snapshot) is never replayed under it, while a
file left by a killed process is free. Blocking methods; the pipeline calls them in a worker thread.
"""

from __future__ import annotations

import fcntl
import os
import time
import uuid
from dataclasses import dataclass
from typing import BinaryIO

SUFFIX = ".jsonl"


@dataclass
class Claim:
    """A spool file locked for replay, with its lines."""

    path: str
    handle: BinaryIO
    lines: list[bytes]


def _write_synced(handle: BinaryIO, lines: list[bytes]) -> None:
    handle.write(b"".join(line + b"\n" for line in lines))
    handle.flush()
    os.fsync(handle.fileno())


def _line_count(path: str) -> int:
    try:
        with open(path, "rb") as handle:
            return sum(1 for line in handle if line.strip())
    except FileNotFoundError:
        return 0


class Spool:
    """The spool directory of one sink; `count` is how many events it holds (as this process knows it)."""

    def __init__(self, directory: str, max_events: int) -> None:
        os.makedirs(directory, exist_ok=True)
        self.directory = directory
        self.max_events = max_events
        self._active: BinaryIO | None = None
        self.count = sum(_line_count(path) for path in self.files())

    def room(self) -> int:
        """How many more events fit before `max_events`."""
        return max(self.max_events - self.count, 0)

    def files(self) -> list[str]:
        """Every spool file in the directory, oldest name first."""
        names = sorted(name for name in os.listdir(self.directory) if name.endswith(SUFFIX))
        return [os.path.join(self.directory, name) for name in names]

    def append(self, lines: list[bytes]) -> None:
        """Append encoded records to this writer's file and fsync them."""
        if self._active is None:
            self._active = self._new_file()
        _write_synced(self._active, lines)
        self.count += len(lines)

    def seal(self) -> None:
        """Close the file being appended to (releasing its lock), so it can be replayed; the next append starts
        a new file."""
        if self._active is not None:
            self._active.close()
            self._active = None

    def claim(self, path: str) -> Claim | None:
        """Lock a spool file for replay and read it; None when someone else holds it or it is gone."""
        try:
            handle = open(path, "rb")  # noqa: SIM115 - held open (and locked) until `release`
        except FileNotFoundError:
            return None
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            # Another replayer may have deleted the file between our open and our lock.
            if os.fstat(handle.fileno()).st_ino != os.stat(path).st_ino:
                raise FileNotFoundError(path)
        except (BlockingIOError, FileNotFoundError):
            handle.close()
            return None
        return Claim(path, handle, [line.rstrip(b"\n") for line in handle if line.strip()])

    def release(self, claim: Claim, delivered: int) -> None:
        """Forget the first `delivered` lines of a claimed file: what is left is rewritten to a new file first,
        then the claimed file is deleted and unlocked."""
        rest = claim.lines[delivered:]
        if rest:
            with self._new_file() as handle:
                _write_synced(handle, rest)
        os.unlink(claim.path)
        claim.handle.close()
        self.count = max(self.count - delivered, 0)

    def _new_file(self) -> BinaryIO:
        name = f"spool-{time.time_ns()}-{os.getpid()}-{uuid.uuid4().hex[:8]}{SUFFIX}"
        handle = open(os.path.join(self.directory, name), "ab")  # noqa: SIM115 - the writer's long-lived file
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return handle
