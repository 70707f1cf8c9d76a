"""Wake-ups: streams and deltas over the channel layer, runtime workers over LISTEN/NOTIFY.

Only signals: a lost message delays, never loses (streams and workers also read on a timer).
On PostgreSQL a `pg_notify` on `RUNTIME_CHANNEL` is delivered to every worker when the transaction
commits; a worker running in this process (the embedded default) is also called directly.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable
from typing import Any

import psycopg
from channels.layers import get_channel_layer
from django.db import connection, transaction

logger = logging.getLogger(__name__)

# Django's connection parameters a LISTEN connection takes (not Django's own options, such as its pool).
CONNECTION_KEYS = (
    "dbname",
    "user",
    "password",
    "host",
    "port",
    "service",
    "sslmode",
    "sslrootcert",
    "sslcert",
    "sslkey",
    "connect_timeout",
    "options",
)


def listen_parameters() -> dict[str, object]:
    """The connection parameters of Django's database, for a connection of its own that LISTENs."""
    params = connection.get_connection_params()
    return {key: value for key, value in params.items() if key in CONNECTION_KEYS and value not in (None, "")}


class ChannelListener:
    """A thread on its own autocommit connection that LISTENs on `channel` and calls `deliver(payload)`.

    On a lost connection it reconnects with backoff and calls `deliver(None)` (something may have been
    missed: the listener's users look at the database again); it also does once connected.
    """

    def __init__(self, channel: str, deliver: Callable[[str | None], None], *, name: str) -> None:
        self.channel = channel
        self.deliver = deliver
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self.params = listen_parameters()

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stopped.set()
        self._thread.join(timeout=5)

    def _run(self) -> None:
        backoff = 0.2
        while not self._stopped.is_set():
            try:
                with psycopg.connect(**self.params, autocommit=True) as listening:  # type: ignore[arg-type]
                    listening.execute(f"LISTEN {self.channel}")
                    backoff = 0.2
                    self.deliver(None)
                    while not self._stopped.is_set():
                        for message in listening.notifies(timeout=1.0):
                            self.deliver(message.payload)
            except psycopg.Error as error:
                logger.warning("LISTEN %s connection lost (%s); reconnecting", self.channel, type(error).__name__)
                self.deliver(None)
                self._stopped.wait(backoff)
                backoff = min(backoff * 2, 5.0)


RUNTIME_CHANNEL = "registry_runtime"
# Runtime workers in this process (the embedded default), called with a session id after commit.
_local_runtime_listeners: list[Callable[[str], None]] = []
# The event loop of this process's stream consumers; the in-memory channel layer lives on it.
_consumer_loop: asyncio.AbstractEventLoop | None = None
_loop_lock = threading.Lock()


def group_name(session_id: str) -> str:
    return f"session.{session_id}"


def register_consumer_loop() -> None:
    """Called by a stream consumer on its loop: sends from other threads are handed to that loop."""
    global _consumer_loop
    with _loop_lock:
        _consumer_loop = asyncio.get_running_loop()


class _Publisher:
    """Sends wake-ups and deltas in order from one coroutine on an event loop, so a writer never waits
    for the channel layer. Its own background loop, or the consumers' loop for the in-memory layer."""

    def __init__(self, loop: asyncio.AbstractEventLoop | None = None) -> None:
        self.loop = loop or self._background_loop()
        self.queue: asyncio.Queue[tuple[Any, str, dict[str, Any]]] | None = None
        self.loop.call_soon_threadsafe(self._start)

    @staticmethod
    def _background_loop() -> asyncio.AbstractEventLoop:
        loop = asyncio.new_event_loop()
        threading.Thread(target=loop.run_forever, name="channel-publisher", daemon=True).start()
        return loop

    def _start(self) -> None:
        self.queue = asyncio.Queue()
        self.drain = asyncio.ensure_future(self._drain())

    def put(self, layer: Any, session_id: str, message: dict[str, Any]) -> None:
        self.loop.call_soon_threadsafe(lambda: self.queue.put_nowait((layer, session_id, message)))  # type: ignore[union-attr]

    async def _drain(self) -> None:
        assert self.queue is not None
        while True:
            layer, session_id, message = await self.queue.get()
            try:
                await layer.group_send(group_name(session_id), message)
            except Exception as error:  # only a wake-up: streams fall back to their database timer
                logger.warning("channel layer unavailable for %s: %s", session_id, type(error).__name__)


_publishers: dict[int, _Publisher] = {}


def _publisher_for(loop: asyncio.AbstractEventLoop | None) -> _Publisher:
    with _loop_lock:
        key = id(loop)
        publisher = _publishers.get(key)
        if publisher is None or publisher.loop.is_closed():
            publisher = _publishers[key] = _Publisher(loop)
        return publisher


def _send(session_id: str, message: dict[str, Any]) -> None:
    """Queue a message for the channel layer, in order, without waiting for it."""
    layer = get_channel_layer()
    if layer is None:
        return
    loop = _consumer_loop
    in_memory = loop is not None and loop.is_running() and layer.__class__.__name__ == "InMemoryChannelLayer"
    # The in-memory layer's queues belong to the consumers' loop; any other layer: a loop of our own.
    _publisher_for(loop if in_memory else None).put(layer, session_id, message)


def add_local_runtime_listener(listener: Callable[[str], None]) -> None:
    _local_runtime_listeners.append(listener)


def remove_local_runtime_listener(listener: Callable[[str], None]) -> None:
    if listener in _local_runtime_listeners:
        _local_runtime_listeners.remove(listener)


def wake_runtime(session_id: str) -> None:
    """Tell runtime workers that a session has new work or changed (appended events, archive, delete)."""
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_notify(%s, %s)", [RUNTIME_CHANNEL, session_id])
    wake_local_runtime(session_id)


def wake_local_runtime(session_id: str) -> None:
    """Tell the runtime workers of this process (the embedded default), once the transaction commits."""
    if _local_runtime_listeners:
        transaction.on_commit(lambda: [listener(session_id) for listener in list(_local_runtime_listeners)])


def wake_after_commit(session_id: str) -> None:
    """Tell the session's streams to read the database once the current transaction commits."""
    transaction.on_commit(lambda: _send(session_id, {"type": "session.wakeup"}))


# Names the child thread whose stream a preview frame is for (absent: the session's, the primary thread's).
DELTA_THREAD_FIELD = "thread_id"


def publish_delta(session_id: str, event_type: str, frame: dict[str, Any], thread_id: str | None = None) -> None:
    """A preview frame (`event_start`/`event_delta`) for streams that asked for `event_type`; a child
    thread's (`thread_id`) is for that thread's streams only."""
    message = {"type": "session.delta", "event_type": event_type, "frame": frame}
    if thread_id is not None:
        message[DELTA_THREAD_FIELD] = thread_id
    _send(session_id, message)
