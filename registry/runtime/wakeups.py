"""How a runtime worker learns of work at once: PostgreSQL `LISTEN`, or a call from this process.

Appending user events, archiving and deleting a session `pg_notify` the session id on
`RUNTIME_CHANNEL` (see `registry.sessions.notify`); the listener hands each id to the worker. When
the database cannot listen (SQLite), only an embedded worker in the registry's own process is told
directly; separate processes fall back to the worker's poll.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

import psycopg
from django.db import connection

from registry.sessions import notify

logger = logging.getLogger(__name__)


class NotificationListener:
    """A thread on its own autocommit connection that LISTENs and calls `deliver(session_id)`.

    On a lost connection it reconnects with backoff and calls `deliver(None)` (something may have
    been missed: the worker claims what the database shows).
    """

    def __init__(self, deliver: Callable[[str | None], None]) -> None:
        self.deliver = deliver
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._run, name="runtime-listen", daemon=True)
        self.params = notify.listen_parameters()

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
                    listening.execute(f"LISTEN {notify.RUNTIME_CHANNEL}")
                    backoff = 0.2
                    self.deliver(None)
                    while not self._stopped.is_set():
                        for message in listening.notifies(timeout=1.0):
                            self.deliver(message.payload)
            except psycopg.Error as error:
                logger.warning("runtime LISTEN connection lost (%s); reconnecting", type(error).__name__)
                self.deliver(None)
                self._stopped.wait(backoff)
                backoff = min(backoff * 2, 5.0)


def can_listen() -> bool:
    return connection.vendor == "postgresql"
