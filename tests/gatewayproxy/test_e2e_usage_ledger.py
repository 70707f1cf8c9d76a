"""The `postgres` usage sink on the real PostgreSQL: rows per request, deduplication on request id, and
`GET /admin/v1/spend/usage` (grouping, filters, bad parameters, 503 without a ledger)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from fakes.waiting import wait_until
from gatewayproxy.plugins.sinks.ledger import PostgresOptions
from gatewayproxy.plugins.sinks.postgres import PostgresSink
from tests.support.gateway.callers import api_key_identity
from tests.support.gateway.sinks import HI, POSTGRES_DSN, ledger_rows, scratch_table
from tests.support.gateway.thread import GatewayThread

pytestmark = pytest.mark.e2e
KEYS = {"key-alice": ("alice", {"team": "red"}), "key-bob": ("bob", {"team": "blue"})}


@pytest.fixture
def ledger(two_shape_gateway: Callable[..., GatewayThread], tmp_path: Path) -> Iterator[tuple[GatewayThread, str]]:
    with scratch_table() as table:
        sink = {"name": "ledger", "kind": "postgres", "dsn": POSTGRES_DSN, "table": table, "flush_interval_ms": 0}
        running = two_shape_gateway(identity=api_key_identity(tmp_path, KEYS), plugins={"usage_sinks": [sink]})
        yield running, table
        running.stop()  # before its table is dropped


def chat(gateway: GatewayThread, key: str, model: str) -> str:
    response = httpx.post(
        f"{gateway.url}/v1/chat/completions",
        json={"model": model, "messages": HI},
        headers={"authorization": f"Bearer {key}"},
    )
    assert response.status_code == 200, response.text
    return response.headers["x-request-id"]


def usage(gateway: GatewayThread, **parameters: str) -> httpx.Response:
    return httpx.get(f"{gateway.admin_url}/admin/v1/spend/usage", params=parameters)


def test_rows_dedup_and_grouped_query(ledger: tuple[GatewayThread, str]) -> None:
    gateway, table = ledger
    sent = [
        chat(gateway, "key-alice", "a-large"),
        chat(gateway, "key-alice", "b-small"),
        chat(gateway, "key-bob", "a-large"),
    ]
    rows = wait_until(lambda: (found := ledger_rows(table)) and len(found) == 3 and found, what="3 ledger rows")
    assert sorted(row["request_id"] for row in rows) == sorted(sent)
    alice = next(row for row in rows if row["request_id"] == sent[1])
    assert (alice["principal"], alice["scope"], alice["provider"], alice["input_tokens"]) == (
        "alice",
        {"team": "red"},
        "vendor_b",
        13,
    )

    replay = {**{key: value for key, value in alice.items() if key != "ts"}, "ts": alice["ts"].isoformat()}
    fresh = {**replay, "request_id": "replayed-fresh"}
    asyncio.run(_write_once(table, [replay, fresh, fresh]))
    assert sorted(row["request_id"] for row in ledger_rows(table)) == sorted([*sent, "replayed-fresh"])

    by_principal = usage(gateway, group_by="principal", **{"dim.team": "red"}).json()["groups"]
    assert by_principal == [
        {
            "key": {"principal": "alice"},
            "requests": 3,
            "input_tokens": 37,
            "output_tokens": 17,
            "cache_read_tokens": 0,
            "cache_write_tokens": 0,
            "reasoning_tokens": 0,
            "cost_usd": 0.0,
            "unpriced_requests": 3,
        }
    ]
    by_team = usage(gateway, group_by="dim.team,provider,day").json()["groups"]
    assert [(group["key"]["dim.team"], group["key"]["provider"], group["requests"]) for group in by_team] == [
        ("blue", "vendor_a", 1),
        ("red", "vendor_a", 1),
        ("red", "vendor_b", 2),
    ]
    assert len({group["key"]["day"] for group in by_team}) == 1
    assert usage(gateway).json()["groups"][0]["requests"] == 4
    future = {"from": "2999-01-01T00:00:00Z"}
    assert usage(gateway, **future).json()["groups"][0]["requests"] == 0
    assert usage(gateway, group_by="model", **future).json()["groups"] == []


async def _write_once(table: str, records: list[dict[str, Any]]) -> None:
    sink = PostgresSink(PostgresOptions(dsn=POSTGRES_DSN, table=table))
    try:
        await sink.write(records)
    finally:
        await sink.close()


@pytest.mark.parametrize(
    "parameters",
    [
        {"group_by": "colour"},
        {"group_by": "principal,principal"},
        {"from": "yesterday"},
        {"from": "2030-01-02", "to": "2030-01-01"},
        {"dim.region": "eu"},
        {"limit": "3"},
    ],
)
def test_bad_parameters_are_invalid_request(ledger: tuple[GatewayThread, str], parameters: dict[str, str]) -> None:
    response = usage(ledger[0], **parameters)
    assert response.status_code == 400 and response.json()["error"]["code"] == "invalid_request"


def test_without_a_postgres_sink_the_query_is_unavailable(two_shape_gateway: Callable[..., GatewayThread]) -> None:
    gateway = two_shape_gateway(plugins={"usage_sinks": [{"name": "out", "kind": "stdout"}]})
    response = usage(gateway, group_by="principal")
    assert response.status_code == 503 and response.json()["error"]["code"] == "usage_query_unavailable"
