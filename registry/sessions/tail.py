"""Per-process state of each streamed session: the newest events, read by one query at a time, and
one channel-layer subscription whose wake-ups and deltas are fanned out to the local streams.

Every stream of a session in this process shares one `SessionTail`: a wake-up costs one Redis
message and one database read for all of them, which keeps fan-out cheap with hundreds of streams.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import weakref
from typing import Any, Protocol

import orjson
from channels.db import database_sync_to_async
from channels.layers import get_channel_layer

from registry.sessions import selectors
from registry.sessions.models import SessionEvent
from registry.sessions.notify import DELTA_THREAD_FIELD, group_name
from registry.sessions.serializers import EventSerializer

logger = logging.getLogger(__name__)

CACHE_LIMIT = 2000
BATCH = 500

read_events_after = database_sync_to_async(selectors.events_after, thread_sensitive=False)


def sse_frame(event: dict[str, Any], *, seq: int | None = None) -> bytes:
    """One frame: `id` (the seq, for complete events), `event`, `data`, blank line."""
    head = f"id: {seq}\n" if seq is not None else ""
    return f"{head}event: {event['type']}\n".encode() + b"data: " + orjson.dumps(event) + b"\n\n"


class Subscriber(Protocol):
    """What a tail tells a stream: read again, or here is a preview frame (of an event of the child thread
    `thread_id`, or of the primary thread's when None: `notify.publish_delta`)."""

    wake: asyncio.Event

    async def on_delta(self, event_type: str, frame: dict[str, Any], thread_id: str | None) -> None: ...


class SessionTail:
    """The contiguous newest events of one session known to this process, and its subscribers."""

    def __init__(self, session_id: str) -> None:
        self.session_id = session_id
        self.events: list[SessionEvent] = []
        self.known_through: int | None = None  # every event up to here (from events[0]) is cached
        self.refreshed_at = 0.0
        self.lock = asyncio.Lock()
        self.subscribers: set[Subscriber] = set()
        self.listener: asyncio.Task[None] | None = None
        self.frames: dict[tuple[str, bool], bytes] = {}

    def frame(self, event: SessionEvent, *, native: bool) -> bytes:
        """The event's SSE frame in a dialect, rendered once for all of this process's streams."""
        key = (event.id, native)
        encoded = self.frames.get(key)
        if encoded is None:
            encoded = sse_frame(EventSerializer.render(event, native=native), seq=event.seq)
            if len(self.frames) >= CACHE_LIMIT:
                self.frames.clear()
            self.frames[key] = encoded
        return encoded

    # -- reading ------------------------------------------------------------------------------
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

    # -- the channel layer: one subscription per session and process --------------------------
    def subscribe(self, subscriber: Subscriber) -> None:
        self.subscribers.add(subscriber)
        if self.listener is None or self.listener.done():
            self.listener = asyncio.create_task(self._listen())

    def unsubscribe(self, subscriber: Subscriber) -> None:
        self.subscribers.discard(subscriber)
        if not self.subscribers and self.listener is not None:
            self.listener.cancel()
            self.listener = None

    async def _listen(self) -> None:
        """Subscribe to the session's group; on any layer failure, retry while the streams' timers carry on."""
        layer = get_channel_layer()
        if layer is None:
            return
        backoff = 0.5
        while True:
            try:
                channel = await layer.new_channel()
                await layer.group_add(group_name(self.session_id), channel)
                self._wake_all()  # anything sent while we were not subscribed is in the database
                backoff = 0.5
                while True:
                    await self._dispatch(await layer.receive(channel))
            except asyncio.CancelledError:
                with contextlib.suppress(Exception):
                    await layer.group_discard(group_name(self.session_id), channel)
                raise
            except Exception as error:
                logger.warning(
                    "session %s: channel layer unavailable (%s); timer only", self.session_id, type(error).__name__
                )
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, 5.0)

    async def _dispatch(self, message: dict[str, Any]) -> None:
        if message.get("type") == "session.delta":
            thread_id = message.get(DELTA_THREAD_FIELD)
            for subscriber in list(self.subscribers):
                await subscriber.on_delta(str(message.get("event_type")), message["frame"], thread_id)
        else:
            self._wake_all()

    def _wake_all(self) -> None:
        for subscriber in self.subscribers:
            subscriber.wake.set()


_tails: weakref.WeakValueDictionary[str, SessionTail] = weakref.WeakValueDictionary()


def tail_for(session_id: str) -> SessionTail:
    """The shared tail of a session; it lives as long as some stream holds it."""
    tail = _tails.get(session_id)
    if tail is None:
        tail = _tails[session_id] = SessionTail(session_id)
    return tail
