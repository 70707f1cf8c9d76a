"""The gateway's composition root: build the state, bind the data and admin listeners, swap snapshots on reload
(retiring the old one once its requests finish), drain on SIGTERM, and run N worker processes that share the
ports through SO_REUSEPORT. Each listener may speak TLS; the data listener caps its concurrent requests; each
snapshot sets the upstream pool's per-origin limits."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import os
import signal
import socket
import time
from collections.abc import Awaitable, Callable
from typing import Protocol as Interface

import uvloop

from gatewayproxy.config.checks import is_loopback, split_address
from gatewayproxy.config.loader import LoadedConfig
from gatewayproxy.config.models import Tls
from gatewayproxy.http.connection import HttpLimits
from gatewayproxy.metrics import GatewayMetrics
from gatewayproxy.pipeline.stages import SharedParts
from gatewayproxy.planes.admin import AdminPlane, ConfigWriter
from gatewayproxy.planes.data import DataPlane, protocol_of_path
from gatewayproxy.server.protocol import (
    Capacity,
    ConnectionTracker,
    Handler,
    HttpProtocol,
    ProtocolOf,
    Timeouts,
    TlsHttpProtocol,
)
from gatewayproxy.server.tls import ServerTls
from gatewayproxy.server.upstream import Origin, UpstreamLimits, UpstreamPool
from gatewayproxy.server.workers import WorkerSet
from gatewayproxy.state import GatewayState, Runtime, build_state

logger = logging.getLogger("gatewayproxy.server")
DRAIN_POLL_SECONDS = 0.05
BACKLOG = 2048


Install = Callable[[GatewayState], Awaitable[None]]
Build = Callable[[LoadedConfig], GatewayState]


class ConfigStore(ConfigWriter, Interface):
    """A database-backed config (`gatewayproxy.store.source.DatabaseConfig`, which needs Django set up, so it
    is handed in rather than imported): the config to boot with, then reloads and writes swapped in."""

    version: int  # the stored config version being served

    async def load(self, build: Build) -> GatewayState:
        """The stored config to boot with, built by `build`, which builds every later version too."""
        ...

    def start(self, swap: Install) -> None:
        """Begin watching for new versions; `swap` installs each one's snapshot, built once."""
        ...

    async def close(self) -> None:
        """Stop watching and release the store's connections."""
        ...


def upstream_limits(state: GatewayState) -> dict[tuple[str, str, int], UpstreamLimits]:
    """Each destination origin's connection cap and wait; model destinations also get the stream idle timeout
    as their read timeout (an MCP server may rightly stay silent longer). Destinations sharing an origin share
    the most generous cap."""
    config = state.config
    idle = config.server.stream_idle_timeout_ms / 1000
    origins: dict[tuple[str, str, int], UpstreamLimits] = {}
    for name, destination in config.destinations.items():
        adapter = state.adapters.get(name)
        if adapter is not None:
            origin, read_timeout = adapter.origin, idle
        else:
            url = destination.base_url or destination.url
            try:
                origin = Origin.parse(url or "")
            except ValueError:
                continue
            read_timeout = None
        limits = UpstreamLimits(destination.max_connections, destination.max_connections_wait_ms / 1000, read_timeout)
        known = origins.get(origin.key)
        if known is not None:
            limits = UpstreamLimits(
                max(known.max_connections, limits.max_connections),
                max(known.wait_seconds, limits.wait_seconds),
                None if known.read_timeout is None or read_timeout is None else max(known.read_timeout, read_timeout),
            )
        origins[origin.key] = limits
    return origins


class Listener:
    """One bound server with the connections it tracks (and its TLS, which reloads changed certificates)."""

    def __init__(self, server: asyncio.Server, tracker: ConnectionTracker, tls: ServerTls | None = None) -> None:
        self.server = server
        self.tracker = tracker
        self.tls = tls

    @property
    def port(self) -> int:
        """The bound port (useful when the config asked for port 0)."""
        return int(self.server.sockets[0].getsockname()[1])


class Gateway:
    """A running gateway in this process: runtime state plus its two listeners.

    File-backed with `loaded`; database-backed with `database` (the config is read at start, admin writes
    and reloads swap snapshots). Listeners and their limits come from the config at start only.
    """

    def __init__(
        self, loaded: LoadedConfig | None = None, *, reuse_port: bool = False, database: ConfigStore | None = None
    ) -> None:
        if (loaded is None) == (database is None):
            raise ValueError("a gateway serves either a loaded config or a database-backed one")
        self._loaded = loaded
        self.database = database
        self.reuse_port = reuse_port
        self.runtime: Runtime | None = None
        self.data: Listener | None = None
        self.admin: Listener | None = None
        self._stopping = asyncio.Event()
        self._retiring: set[asyncio.Task[None]] = set()

    @property
    def loaded(self) -> LoadedConfig:
        """The config the gateway started with."""
        assert self._loaded is not None, "the database-backed config is read at start"
        return self._loaded

    async def start(self) -> None:
        """Construct the state and bind both listeners; readiness turns on last."""
        pool, shared, metrics = UpstreamPool(), SharedParts(), GatewayMetrics()

        def build(loaded: LoadedConfig) -> GatewayState:
            return build_state(loaded, pool, shared, metrics)

        if self.database is not None:
            state = await self.database.load(build)
            self._loaded = state.loaded
        else:
            state = build(self.loaded)
        runtime = Runtime(state=state, pool=pool, metrics=metrics, shared=shared, file_backed=self.database is None)
        self.runtime = runtime
        pool.configure(upstream_limits(state))
        await runtime.state.start()
        server = self.loaded.config.server
        self.data = await self._listen(
            server.listen,
            DataPlane(runtime),
            server.tls,
            Capacity(server.max_concurrent_requests),
            protocol_of_path,
        )
        admin = AdminPlane(runtime, writer=self.database)
        self.admin = await self._listen(server.admin_listen, admin, server.admin_tls)
        if self.database is not None:
            self.database.start(self.install)
        runtime.ready = True
        logger.info("gateway listening: data %s, admin %s (pid %d)", server.listen, server.admin_listen, os.getpid())
        if not state.config.identity.validators and not is_loopback(server.listen):
            logger.warning(
                "the data plane listens on %s, beyond loopback, with no identity validators: every caller is "
                "anonymous (configure identity.validators)",
                server.listen,
            )

    async def _listen(
        self,
        address: str,
        handler: Handler,
        tls_config: Tls | None,
        capacity: Capacity | None = None,
        protocol_of: ProtocolOf | None = None,
    ) -> Listener:
        tls = ServerTls(tls_config.cert, tls_config.key) if tls_config is not None else None
        limits_config = self.loaded.config.server.limits
        limits = HttpLimits(
            limits_config.max_header_bytes, limits_config.max_header_count, limits_config.max_body_bytes
        )
        timeouts = Timeouts(limits_config.header_read_timeout_ms / 1000, limits_config.idle_timeout_ms / 1000)
        tracker = ConnectionTracker()
        protocol = HttpProtocol if tls is None else TlsHttpProtocol
        host, port = split_address(address)
        server = await asyncio.get_running_loop().create_server(
            lambda: protocol(handler, limits, timeouts, tracker, capacity, protocol_of),
            host,
            port,
            reuse_port=self.reuse_port or None,
            backlog=BACKLOG,
            ssl=tls.context if tls is not None else None,
            ssl_handshake_timeout=timeouts.request_read if tls is not None else None,
        )
        for sock in server.sockets:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if tls is not None:
            tls.start()
        return Listener(server, tracker, tls)

    async def swap(self, loaded: LoadedConfig) -> None:
        """Serve `loaded` from now on; requests already running finish on the snapshot they started on."""
        assert self.runtime is not None
        runtime = self.runtime
        await self.install(build_state(loaded, runtime.pool, runtime.shared, runtime.metrics))

    async def install(self, fresh: GatewayState) -> None:
        """Serve `fresh` (built from this runtime's parts, not yet started) from now on; the snapshot it replaces
        retires once its requests finished."""
        assert self.runtime is not None
        runtime = self.runtime
        await fresh.start()
        runtime.pool.configure(upstream_limits(fresh))
        retired, runtime.state = runtime.state, fresh
        task = asyncio.get_running_loop().create_task(self._retire(retired))
        self._retiring.add(task)
        task.add_done_callback(self._retiring.discard)

    async def _retire(self, state: GatewayState) -> None:
        """Close a swapped-out snapshot once its requests finished (or the drain deadline passed)."""
        assert self.runtime is not None
        in_flight = self.runtime.in_flight
        deadline = time.monotonic() + self.loaded.config.server.limits.drain_timeout_ms / 1000
        while in_flight.count(state) > 0 and time.monotonic() < deadline:
            await asyncio.sleep(DRAIN_POLL_SECONDS)
        await state.close()

    def stop(self) -> None:
        """Ask `serve_until_stopped` to drain and return."""
        self._stopping.set()

    async def serve_until_stopped(self) -> None:
        """Serve until SIGTERM/SIGINT (or `stop`), then drain."""
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(signum, self.stop)
        await self._stopping.wait()
        await self.shutdown()

    async def shutdown(self) -> None:
        """Stop accepting, let in-flight requests finish up to the drain deadline, then close everything."""
        listeners = [listener for listener in (self.data, self.admin) if listener is not None]
        if self.runtime is not None:
            self.runtime.ready = False
        for listener in listeners:
            listener.server.close()
            listener.tracker.drain()
            if listener.tls is not None:
                await listener.tls.close()
        deadline = time.monotonic() + self.loaded.config.server.limits.drain_timeout_ms / 1000
        while any(listener.tracker.busy for listener in listeners) and time.monotonic() < deadline:
            await asyncio.sleep(DRAIN_POLL_SECONDS)
        for listener in listeners:
            for connection in list(listener.tracker.connections):
                connection.abort()
        if self.database is not None:
            await self.database.close()
        await asyncio.gather(*self._retiring)
        if self.runtime is not None:
            await self.runtime.state.close()
            self.runtime.pool.close()
        logger.info("gateway stopped (pid %d)", os.getpid())


MakeGateway = Callable[[bool], Gateway]


async def _serve(make_gateway: MakeGateway, reuse_port: bool) -> None:
    gateway = make_gateway(reuse_port)
    await gateway.start()
    await gateway.serve_until_stopped()


def run_single(make_gateway: MakeGateway, *, reuse_port: bool = False) -> None:
    """Run one gateway (`make_gateway(reuse_port)`) on uvloop in this process until SIGTERM.

    The modules loaded by now live as long as the process: frozen out of the collector's sight, a full
    collection walks only what requests and config snapshots allocate (walking it all paused the loop
    15-27 ms every few seconds under load). Snapshots are built after this, so a swapped-out one is
    still collected.
    """
    gc.freeze()
    uvloop.run(_serve(make_gateway, reuse_port))


def run_workers(make_gateway: MakeGateway, workers: int) -> int:
    """Fork `workers` processes sharing the ports; forward SIGTERM/SIGINT; return the worst exit status."""
    if workers <= 1:
        run_single(make_gateway)
        return 0
    children = []
    worker_set = WorkerSet(workers)  # the run directory the workers share (metrics files, sibling sockets)
    for index in range(workers):
        pid = os.fork()
        if pid == 0:
            code = 0
            try:
                worker_set.enter(index)
                run_single(make_gateway, reuse_port=True)
            except BaseException:
                logger.exception("worker failed")
                code = 1
            finally:
                os._exit(code)
        children.append(pid)

    def forward(signum: int, frame: object) -> None:
        for child in children:
            with contextlib.suppress(ProcessLookupError):
                os.kill(child, signum)

    signal.signal(signal.SIGTERM, forward)
    signal.signal(signal.SIGINT, forward)
    worst = 0
    for child in children:
        _, status = os.waitpid(child, 0)
        worker_set.exited(child)
        worst = max(worst, os.waitstatus_to_exitcode(status))
    worker_set.close()
    return worst
