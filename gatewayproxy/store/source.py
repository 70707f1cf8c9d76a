"""The gateway's side of the database-backed config: reads, validates and writes through the ORM on one
worker thread (never on the event loop), serializes this process's writes, and polls the version counter so
replicas pick up each other's writes. Validation builds the snapshot with the gateway's own `build`, and that
very snapshot is swapped in: one build per config version in each process. Loading this module needs Django
set up."""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, TypeVar

from django.db import connections

from gatewayproxy.config.loader import ConfigError, LoadedConfig
from gatewayproxy.server.tasks import cancel_and_wait
from gatewayproxy.state import GatewayState
from gatewayproxy.store import selectors, services
from gatewayproxy.store.document import Build, EntryKey, built

logger = logging.getLogger("gatewayproxy.store")
POLL_SECONDS = 1.0
Result = TypeVar("Result")
Swap = Callable[[GatewayState], Awaitable[None]]


@dataclass(frozen=True)
class VersionedConfig:
    """A validated stored config, built into a snapshot, and the version it was read at."""

    version: int
    state: GatewayState

    @property
    def loaded(self) -> LoadedConfig:
        """The validated config."""
        return self.state.loaded


def read_validated(build: Build | None = None) -> VersionedConfig:
    """The stored config, validated as at boot and built with `build` (a trial build without one); raises
    `ConfigError`."""
    stored = selectors.stored_config()
    return VersionedConfig(version=stored.version, state=built(stored.document, source=stored.source, build=build))


class DatabaseConfig:
    """Database-backed config of one gateway process: the initial load, admin writes and the reload poller."""

    def __init__(self, poll_seconds: float = POLL_SECONDS) -> None:
        self.poll_seconds = poll_seconds
        self.version = -1
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="gateway-config")
        self._lock = asyncio.Lock()
        self._swap: Swap | None = None
        self._build: Build | None = None
        self._rejected_version: int | None = None
        self._poller: asyncio.Task[None] | None = None

    async def _orm(self, function: Callable[..., Result], /, **arguments: Any) -> Result:
        """Run ORM work on the config thread, which keeps its own database connection."""
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._executor, functools.partial(function, **arguments))

    async def load(self, build: Build) -> GatewayState:
        """The stored config to boot with, built by `build` (which also builds every later version); raises
        `ConfigError` when it is invalid."""
        self._build = build
        stored = await self._orm(read_validated, build=build)
        self.version = stored.version
        return stored.state

    def start(self, swap: Swap) -> None:
        """Begin polling; `swap` installs a newly built snapshot as the serving one."""
        self._swap = swap
        self._poller = asyncio.get_running_loop().create_task(self._poll_forever())

    async def close(self) -> None:
        """Stop polling and release the thread's database connection."""
        await cancel_and_wait(self._poller)
        await self._orm(connections.close_all)
        self._executor.shutdown(wait=True)

    async def put(self, key: EntryKey, body: dict[str, Any]) -> dict[str, Any]:
        """Upsert an entry and serve the result; raises `ConfigError` and changes nothing when invalid."""
        stored = await self._write(services.config_entry_put, key=key, body=body)
        return stored.body or {}

    async def delete(self, key: EntryKey) -> None:
        """Remove an entry and serve the result; raises `EntryMissing` or `ConfigError`."""
        await self._write(services.config_entry_delete, key=key)

    async def stored_document(self) -> dict[str, Any]:
        """The document the rows hold now (for resolving a plugin name to its slot)."""
        return await self._orm(selectors.stored_document)

    async def _write(self, service: Callable[..., services.StoredChange], **arguments: Any) -> services.StoredChange:
        async with self._lock:
            stored = await self._orm(service, build=self._build, **arguments)
            await self._install(stored.version, stored.state)
            return stored

    async def _install(self, version: int, state: GatewayState) -> None:
        assert self._swap is not None
        await self._swap(state)
        self.version = version

    async def _poll_forever(self) -> None:
        while True:
            await asyncio.sleep(self.poll_seconds)
            try:
                await self.reload_if_moved()
            except Exception:
                logger.exception("config reload check failed; still serving version %d", self.version)

    async def reload_if_moved(self) -> None:
        """Rebuild and swap when another writer moved the version; an invalid config keeps the last good one."""
        version = await self._orm(selectors.config_version)
        if version in (self.version, self._rejected_version):
            return
        async with self._lock:
            try:
                stored = await self._orm(read_validated, build=self._build)
            except ConfigError as error:
                self._rejected_version = version
                logger.warning(
                    "config version %d is invalid; still serving version %d: %s",
                    version,
                    self.version,
                    "; ".join(error.problems),
                )
                return
            if stored.version != self.version:
                await self._install(stored.version, stored.state)
                logger.info("reloaded config version %d", stored.version)
