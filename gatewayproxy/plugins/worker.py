"""A process-wide background worker shared by config snapshots: it runs while at least one snapshot uses it."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any

from gatewayproxy.server.tasks import cancel_and_wait


class SharedWorker:
    """Counts the snapshots attached; the first starts `run()`, the last stops it and calls `drain()`.

    A snapshot swap starts the new snapshot and closes the old one in either order without a gap or a second
    copy of the work (one writer of a hash chain, one poller of a file).
    """

    def __init__(self) -> None:
        self._users = 0
        self._task: asyncio.Task[None] | None = None

    async def attach(self) -> None:
        """A snapshot starts using the worker."""
        if self._users == 0:
            await self.open()
            self._task = asyncio.get_running_loop().create_task(self.run())
        self._users += 1

    async def detach(self) -> None:
        """A snapshot stops using the worker; the last one out stops it and drains what is left."""
        self._users -= 1
        if self._users > 0 or self._task is None:
            return
        await cancel_and_wait(self._task)
        self._task = None
        await self.drain()

    async def open(self) -> None:
        """Prepare before the first run (load state); runs on the event loop."""

    async def run(self) -> None:
        """The background loop; cancelled when the last snapshot detaches."""

    async def drain(self) -> None:
        """Finish queued work after the loop stopped."""


class Uninterrupted:
    """Runs a background loop's steps (a file append, a Redis pipeline, a POST) so that cancelling the loop
    never cuts one in half; `finish()` waits for the step in progress."""

    def __init__(self) -> None:
        self._step: asyncio.Future[None] | None = None

    async def run(self, step: Coroutine[Any, Any, None]) -> None:
        """Run `step`; a cancellation of the caller lets it complete in the background."""
        self._step = asyncio.ensure_future(step)
        await asyncio.shield(self._step)

    async def finish(self) -> None:
        """Wait for the step in progress, if any."""
        if self._step is not None:
            await self._step
