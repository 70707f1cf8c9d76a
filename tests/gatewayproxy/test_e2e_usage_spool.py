"""The spool's edges: a full spool drops and counts new records without blocking requests, and closing a
gateway flushes its queue to the sink (or to the spool while the sink is down) within a bounded time."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from fakes.waiting import wait_until
from tests.support.gateway.sinks import HI, POSTGRES_DSN, ledger_rows, metric, scratch_table
from tests.support.gateway.thread import GatewayThread
from tests.support.live import free_port

pytestmark = pytest.mark.e2e
MAX_EVENTS = 5
SERVED = 12


@pytest.fixture
def gateway_with(two_shape_gateway: Callable[..., GatewayThread]) -> Callable[[dict[str, Any]], GatewayThread]:
    """Starts a gateway (for the test) whose `postgres` usage sink `ledger` has these options."""
    return lambda sink: two_shape_gateway(plugins={"usage_sinks": [{"name": "ledger", "kind": "postgres", **sink}]})


def outcome(gateway: GatewayThread, name: str) -> float:
    return metric(gateway.metrics_text, "gateway_sink_records_total", sink="ledger", outcome=name)


def spooled_lines(spool: Path) -> int:
    return sum(len(path.read_text().splitlines()) for path in spool.glob("*.jsonl"))


def test_a_full_spool_drops_and_counts_without_blocking(
    gateway_with: Callable[[dict[str, Any]], GatewayThread], tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    unreachable = f"postgresql://postgres@127.0.0.1:{free_port()}/postgres"
    spool = tmp_path / "spool"
    gateway = gateway_with(
        {
            "dsn": unreachable,
            "flush_interval_ms": 0,
            "spool": {"directory": str(spool), "max_events": MAX_EVENTS, "retry_interval_ms": 60000},
        },
    )
    with caplog.at_level(logging.WARNING, logger="gatewayproxy.sinks"), httpx.Client() as client:
        durations = []
        for _ in range(SERVED):
            started = time.perf_counter()
            response = client.post(f"{gateway.url}/v1/chat/completions", json={"model": "a-1", "messages": HI})
            durations.append(time.perf_counter() - started)
            assert response.status_code == 200
        wait_until(
            lambda: outcome(gateway, "spooled") + outcome(gateway, "dropped") == SERVED,
            what="every record spooled or dropped",
        )
    assert (outcome(gateway, "spooled"), outcome(gateway, "dropped")) == (MAX_EVENTS, SERVED - MAX_EVENTS)
    assert metric(gateway.metrics_text, "gateway_sink_spool_events", sink="ledger") == MAX_EVENTS
    assert max(durations) < 0.5
    assert spooled_lines(spool) == MAX_EVENTS
    assert "the spool is full (5 events)" in caplog.text
    assert unreachable not in caplog.text


def test_close_flushes_the_queue_to_the_sink(
    gateway_with: Callable[[dict[str, Any]], GatewayThread], tmp_path: Path
) -> None:
    with scratch_table() as table:
        gateway = gateway_with(
            {"dsn": POSTGRES_DSN, "table": table, "flush_interval_ms": 60000, "close_timeout_ms": 3000},
        )
        sent = [
            httpx.post(f"{gateway.url}/v1/chat/completions", json={"model": "a-1", "messages": HI}).headers[
                "x-request-id"
            ]
            for _ in range(3)
        ]
        assert ledger_rows(table) == []
        started = time.perf_counter()
        gateway.stop()
        assert time.perf_counter() - started < 5
        assert sorted(row["request_id"] for row in ledger_rows(table)) == sorted(sent)


def test_close_spools_the_queue_while_the_sink_is_down(
    gateway_with: Callable[[dict[str, Any]], GatewayThread], tmp_path: Path
) -> None:
    spool = tmp_path / "spool"
    gateway = gateway_with(
        {
            "dsn": f"postgresql://postgres@127.0.0.1:{free_port()}/postgres",
            "flush_interval_ms": 60000,
            "close_timeout_ms": 2000,
            "spool": {"directory": str(spool), "retry_interval_ms": 60000},
        },
    )
    for _ in range(3):
        httpx.post(f"{gateway.url}/v1/chat/completions", json={"model": "a-1", "messages": HI})
    started = time.perf_counter()
    gateway.stop()
    assert time.perf_counter() - started < 4
    assert spooled_lines(spool) == 3
