"""How a runtime worker learns of work at once: PostgreSQL `LISTEN`, or a call from this process.

Appending user events, archiving and deleting a session `pg_notify` the session id on
`RUNTIME_CHANNEL` (see `registry.sessions.notify`); the listener hands each id to the worker. When
the database cannot listen (SQLite), only an embedded worker in the registry's own process is told
directly; separate processes fall back to the worker's poll.
"""

from __future__ import annotations

from collections.abc import Callable

from django.db import connection

from registry.sessions import notify


class NotificationListener(notify.ChannelListener):
    """The runtime's listener: session ids of `RUNTIME_CHANNEL` handed to `deliver`; `None` after a lost
    connection (the worker claims what the database shows)."""

    def __init__(self, deliver: Callable[[str | None], None]) -> None:
        super().__init__(notify.RUNTIME_CHANNEL, deliver, name="runtime-listen")


def can_listen() -> bool:
    return connection.vendor == "postgresql"
