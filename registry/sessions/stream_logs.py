"""The logs an event stream follows (`consumers.py`): the session's, which is its primary thread's, read through
the session's shared tail; and a child thread's, read from the database after every wake-up of the session."""

from __future__ import annotations

from typing import Protocol

from channels.db import database_sync_to_async

from registry.sessions import selectors
from registry.sessions.models import Session, SessionEvent, SessionThread, primary_thread_id
from registry.sessions.serializers import EventSerializer
from registry.sessions.tail import BATCH, SessionTail, sse_frame, tail_for

read_thread_events_after = database_sync_to_async(selectors.thread_events_after, thread_sensitive=False)


class StreamedLog(Protocol):
    """A log as a stream reads it: from after `start_seq` without a cursor, up to its `terminal_type` event."""

    terminal_type: str
    start_seq: int

    async def seed(self) -> None:
        """Called once a stream without a cursor opens, at `start_seq`."""

    async def events_after(self, after_seq: int, *, max_age: float) -> list[SessionEvent]: ...

    def ended(self) -> bool:
        """After an empty read: the log will have no more events, though it has no terminal event."""

    def frame(self, event: SessionEvent, *, native: bool) -> bytes: ...

    def previews(self, thread_id: str | None) -> bool:
        """The log's stream carries the previews of events of `thread_id` (None: the primary thread's)."""


class SessionLog:
    """The session's log: its primary thread's. Every stream of the session in this process shares its tail."""

    terminal_type = "session.status_terminated"

    def __init__(self, session: Session) -> None:
        self.tail: SessionTail = tail_for(session.pk)
        self.start_seq = session.last_seq
        self.thread_id = primary_thread_id(session.pk)

    async def seed(self) -> None:
        await self.tail.seed(self.start_seq)

    async def events_after(self, after_seq: int, *, max_age: float) -> list[SessionEvent]:
        return await self.tail.events_after(after_seq, max_age=max_age)

    def ended(self) -> bool:
        return False  # a session's stream ends on its terminal event only

    def frame(self, event: SessionEvent, *, native: bool) -> bytes:
        return self.tail.frame(event, native=native)

    def previews(self, thread_id: str | None) -> bool:
        return thread_id is None or thread_id == self.thread_id


class ThreadLog:
    """A child thread's log, read from the database (every read says whether the thread had already ended)."""

    terminal_type = "session.thread_status_terminated"

    def __init__(self, thread: SessionThread) -> None:
        self.thread = thread
        self.start_seq = thread.last_seq
        self.terminated = False

    async def seed(self) -> None:
        return None

    async def events_after(self, after_seq: int, *, max_age: float) -> list[SessionEvent]:
        events, self.terminated = await read_thread_events_after(self.thread, after_seq, BATCH)
        return events

    def ended(self) -> bool:
        # Terminated before the read that found nothing new: the thread's log was complete. (A session that ends
        # terminates its threads without writing to their logs.)
        return self.terminated

    def frame(self, event: SessionEvent, *, native: bool) -> bytes:
        return sse_frame(EventSerializer.render(event, native=native), seq=event.seq)

    def previews(self, thread_id: str | None) -> bool:
        return thread_id == self.thread.pk


def log_of(followed: Session | SessionThread) -> StreamedLog:
    """The log of a session (its primary thread) or of a child thread."""
    return SessionLog(followed) if isinstance(followed, Session) else ThreadLog(followed)
