"""The usage outage with a kill in the middle: a `rungateway` process whose PostgreSQL ledger becomes
unreachable spools what it serves, is SIGKILLed during the outage, and a new process on the same spool
directory delivers every request exactly once when the database is back."""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from fakes.waiting import wait_until
from tests.support.gateway.provider import FakeProvider
from tests.support.gateway.sinks import HI, ledger_rows, metric, scratch_table
from tests.support.live import free_port

pytestmark = pytest.mark.e2e
PROJECT = Path(__file__).resolve().parents[2]
POSTGRES_PORT = 5432
SERVED_DURING_OUTAGE = 20


class CuttableProxy:
    """A TCP forwarder on loopback to PostgreSQL; `cut` refuses new connections and drops open ones."""

    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self.port = free_port()
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.server: asyncio.Server | None = None
        self.writers: set[asyncio.StreamWriter] = set()

    def __enter__(self) -> CuttableProxy:
        self.thread.start()
        self.restore()
        return self

    def __exit__(self, *exc: object) -> None:
        self.cut()
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join()
        self.loop.close()

    def restore(self) -> None:
        """Accept and forward connections again, on the same port."""
        self.server = self._run(asyncio.start_server(self._forward, "127.0.0.1", self.port))

    def cut(self) -> None:
        """Stop listening and abort every forwarded connection."""

        async def cut() -> None:
            assert self.server is not None
            self.server.close()
            for writer in list(self.writers):
                writer.transport.abort()
            await self.server.wait_closed()

        self._run(cut())

    def _run(self, coroutine: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop).result(timeout=10)

    async def _forward(self, client_reader: asyncio.StreamReader, client_writer: asyncio.StreamWriter) -> None:
        upstream_reader, upstream_writer = await asyncio.open_connection("127.0.0.1", self.target_port)
        self.writers |= {client_writer, upstream_writer}

        async def pump(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            try:
                while data := await reader.read(65536):
                    writer.write(data)
                    await writer.drain()
            except ConnectionError:
                pass
            finally:
                writer.transport.abort()
                self.writers.discard(writer)

        await asyncio.gather(pump(client_reader, upstream_writer), pump(upstream_reader, client_writer))


@pytest.fixture
def proxy() -> Iterator[CuttableProxy]:
    with CuttableProxy(POSTGRES_PORT) as running:
        yield running


def gateway_document(provider: FakeProvider, proxy_port: int, table: str, spool: Path) -> dict[str, Any]:
    sink = {
        "name": "ledger",
        "kind": "postgres",
        "table": table,
        "flush_interval_ms": 0,
        "dsn": f"postgresql://postgres@127.0.0.1:{proxy_port}/postgres",
        "connect_timeout_ms": 1000,
        "write_timeout_ms": 2000,
        "spool": {"directory": str(spool), "retry_interval_ms": 200},
    }
    return {
        "server": {"listen": f"127.0.0.1:{free_port()}", "admin_listen": f"127.0.0.1:{free_port()}"},
        "vaults": [{"name": "v", "resolver": "env", "env_var": "PATH"}],
        "destinations": {"one": {"kind": "vendor_a", "base_url": f"{provider.url}/v1", "credentials": {"vault": "v"}}},
        "routes": [{"name": "all", "strategy": {"mode": "fallback", "targets": [{"destination": "one"}]}}],
        "plugins": {"usage_sinks": [sink]},
    }


class GatewayProcess:
    """`manage.py rungateway --config FILE` as a child process."""

    def __init__(self, config: Path, log: Path) -> None:
        self.document = yaml.safe_load(config.read_text())
        self.log = log.open("ab")
        self.process = subprocess.Popen(
            [sys.executable, "manage.py", "rungateway", "--config", str(config)],
            cwd=PROJECT,
            stdout=self.log,
            stderr=subprocess.STDOUT,
        )
        self.url = f"http://{self.document['server']['listen']}"
        self.admin = f"http://{self.document['server']['admin_listen']}"
        wait_until(self._ready, timeout=30, what="the gateway to be ready")

    def _ready(self) -> bool:
        assert self.process.poll() is None, "the gateway exited"
        try:
            return httpx.get(f"{self.admin}/readyz").status_code == 200
        except httpx.TransportError:
            return False

    def chat(self) -> str:
        response = httpx.post(f"{self.url}/v1/chat/completions", json={"model": "m", "messages": HI}, timeout=10)
        assert response.status_code == 200
        return response.headers["x-request-id"]

    def outcome(self, outcome: str) -> float:
        text = httpx.get(f"{self.admin}/metrics").text
        return metric(text, "gateway_sink_records_total", slot="usage_sinks", sink="ledger", outcome=outcome)

    def end(self, signum: int) -> None:
        self.process.send_signal(signum)
        self.process.wait(timeout=20)
        self.log.close()


def spooled_lines(spool: Path) -> int:
    return sum(len(path.read_text().splitlines()) for path in spool.glob("*.jsonl"))


def test_every_request_arrives_exactly_once_after_a_kill_during_the_outage(
    tmp_path: Path, primary: FakeProvider, proxy: CuttableProxy
) -> None:
    spool = tmp_path / "spool"
    with scratch_table() as table:
        config = tmp_path / "gateway.yaml"
        config.write_text(yaml.safe_dump(gateway_document(primary, proxy.port, table, spool)))
        first = GatewayProcess(config, tmp_path / "gateway.log")
        before = [first.chat() for _ in range(3)]
        wait_until(lambda: len(ledger_rows(table)) == 3, what="the rows written before the outage")

        proxy.cut()
        during = [first.chat() for _ in range(SERVED_DURING_OUTAGE)]
        wait_until(lambda: first.outcome("spooled") == SERVED_DURING_OUTAGE, what="the outage's records spooled")
        first.end(signal.SIGKILL)
        assert spooled_lines(spool) == SERVED_DURING_OUTAGE
        assert len(ledger_rows(table)) == 3

        proxy.restore()
        second = GatewayProcess(config, tmp_path / "gateway.log")
        try:
            wait_until(lambda: len(ledger_rows(table)) == 3 + SERVED_DURING_OUTAGE, what="the spool replayed")
            wait_until(lambda: spooled_lines(spool) == 0, what="the spool emptied")
            assert second.outcome("replayed") == SERVED_DURING_OUTAGE
        finally:
            second.end(signal.SIGTERM)
        ids = [row["request_id"] for row in ledger_rows(table)]
        assert sorted(ids) == sorted(before + during) and len(set(ids)) == len(ids)
