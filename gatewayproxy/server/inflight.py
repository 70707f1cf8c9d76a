"""Requests in flight per config snapshot, counted by the server so a swapped-out snapshot retires only once the
requests that started on it have finished (the snapshot itself holds no counter)."""

from __future__ import annotations


class InFlight:
    """Counts of unfinished requests, keyed by the identity of the snapshot each one started on."""

    def __init__(self) -> None:
        self._counts: dict[int, int] = {}

    def enter(self, snapshot: object) -> None:
        """A request starts on `snapshot`."""
        key = id(snapshot)
        self._counts[key] = self._counts.get(key, 0) + 1

    def leave(self, snapshot: object) -> None:
        """A request that started on `snapshot` has finished (a snapshot with none left is forgotten)."""
        key = id(snapshot)
        left = self._counts[key] - 1
        if left:
            self._counts[key] = left
        else:
            del self._counts[key]

    def count(self, snapshot: object) -> int:
        """Requests running on `snapshot` now."""
        return self._counts.get(id(snapshot), 0)
