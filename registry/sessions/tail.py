"""Per-process cache of the newest events of each streamed session, refreshed by one query at a time.

Every stream of a session in this process shares one `SessionTail`: a wake-up makes one database
read for all of them instead of one each, which keeps fan-out cheap with hundreds of open streams.
"""

from __future__ import annotations

import asyncio
import time
import weakref

from channels.db import database_sync_to_async

from registry.sessions import selectors
from registry.sessions.models import SessionEvent

CACHE_LIMIT = 2000
BATCH = 500

read_events_after = database_sync_to_async(selectors.events_after, thread_sensitive=False)


class SessionTail:
    """The contiguous newest events of one session known to this process."""

    def __init__(self, session_id: str) -> None:
        self.session_id = session_id
        self.events: list[SessionEvent] = []
        self.known_through: int | None = None  # every event up to here (from events[0]) is cached
        self.refreshed_at = 0.0
        self.lock = asyncio.Lock()

    def covers(self, after_seq: int) -> bool:
        if self.known_through is None:
            return False
        first = self.events[0].seq if self.events else self.known_through + 1
        return first is not None and first <= after_seq + 1 <= self.known_through + 1

    async def events_after(self, after_seq: int, *, max_age: float) -> list[SessionEvent]:
        """Events after `after_seq`, read no earlier than `max_age` seconds ago (0: read after this call)."""
        asked_at = time.monotonic()
        if not self.covers(after_seq):
            return await read_events_after(session_id=self.session_id, after_seq=after_seq, limit=BATCH)
        async with self.lock:
            if self.refreshed_at < asked_at - max_age and self.covers(after_seq):
                await self._refresh()
        return [event for event in self.events if (event.seq or 0) > after_seq][:BATCH]

    async def seed(self, through_seq: int) -> None:
        """Start the cache at the end of the log as a new stream without a cursor sees it."""
        async with self.lock:
            if self.known_through is None:
                self.known_through = through_seq
                self.refreshed_at = time.monotonic()

    async def _refresh(self) -> None:
        assert self.known_through is not None
        while True:
            fresh = await read_events_after(session_id=self.session_id, after_seq=self.known_through, limit=BATCH)
            self.refreshed_at = time.monotonic()
            if not fresh:
                break
            self.events = (self.events + fresh)[-CACHE_LIMIT:]
            self.known_through = fresh[-1].seq
            if len(fresh) < BATCH:
                break


_tails: weakref.WeakValueDictionary[str, SessionTail] = weakref.WeakValueDictionary()


def tail_for(session_id: str) -> SessionTail:
    """The shared tail of a session; it lives as long as some stream holds it."""
    tail = _tails.get(session_id)
    if tail is None:
        tail = _tails[session_id] = SessionTail(session_id)
    return tail
