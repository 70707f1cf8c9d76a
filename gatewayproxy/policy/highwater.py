"""The rollback high-water mark of a file source: the newest bundle accepted for a `source_id`, kept on disk.

The file is JSON `{"source_id": ..., "version": ..., "issued_at": <unix seconds>}`, replaced atomically
(write a temporary file, fsync, rename, fsync the directory) so a crash leaves the old mark or the new one.
"""

from __future__ import annotations

import json
import os
import tempfile


class HighWaterError(Exception):
    """The mark is missing, unreadable or belongs to another source: a signed source fails closed."""


class HighWaterMark:
    """Reads and advances the mark of one source."""

    def __init__(self, path: str, source_id: str) -> None:
        self.path = path
        self.source_id = source_id

    def read(self) -> tuple[int, float] | None:
        """The (version, issued_at) accepted last, or None when the file does not exist."""
        try:
            with open(self.path, encoding="utf-8") as handle:
                document = json.load(handle)
        except FileNotFoundError:
            return None
        except (OSError, ValueError) as error:
            raise HighWaterError(f"cannot read the high-water mark {self.path}: {error}") from None
        if not isinstance(document, dict) or document.get("source_id") != self.source_id:
            raise HighWaterError(f"the high-water mark {self.path} does not belong to source {self.source_id!r}")
        try:
            return int(document["version"]), float(document.get("issued_at", 0))
        except (KeyError, TypeError, ValueError):
            raise HighWaterError(f"the high-water mark {self.path} is malformed") from None

    def write(self, mark: tuple[int, float]) -> None:
        """Replace the mark atomically and durably."""
        directory = os.path.dirname(os.path.abspath(self.path))
        document = {"source_id": self.source_id, "version": mark[0], "issued_at": mark[1]}
        descriptor, temporary = tempfile.mkstemp(prefix=".highwater-", dir=directory)
        try:
            with os.fdopen(descriptor, "w", encoding="utf-8") as handle:
                json.dump(document, handle)
                handle.flush()
                os.fsync(handle.fileno())
            os.replace(temporary, self.path)
        except BaseException:
            if os.path.exists(temporary):
                os.unlink(temporary)
            raise
        directory_descriptor = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(directory_descriptor)
        finally:
            os.close(directory_descriptor)
