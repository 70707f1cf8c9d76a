"""The `postgres` usage sink on the real PostgreSQL: rows per request, deduplication on request id, and
`GET /admin/v1/spend/usage` (grouping, filters, bad parameters, 503 without a ledger)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from gatewayproxy.plugins.sinks.ledger import PostgresOptions
from gatewayproxy.plugins.sinks.postgres import PostgresSink
from tests.gatewayproxy.fake_provider import FakeProvider
from tests.gatewayproxy.harness import GatewayThread
from tests.gatewayproxy.sinks_support import (
    HI,
    POSTGRES_DSN,
    keyed_identity,
    ledger_rows,
    scratch_table,
    static_vault,
    two_shapes,
)
from tests.support.waiting import wait_until

pytestmark = pytest.mark.e2e
KEYS = {"key-alice": ("alice", "red"), "key-bob": ("bob", "blue")}


@pytest.fixture
def ledger(tmp_path: Path, primary: FakeProvider, secondary: FakeProvider) -> Iterator[tuple[GatewayThread, str]]:
    with scratch_table() as table:
        sink = {"name": "ledger", "kind": "postgres", "dsn": POSTGRES_DSN, "table": table, "flush_interval_ms": 0}
        document = two_shapes(
            static_vault(tmp_path, {"a": "key-a", "b": "key-b"}),
            primary,
            secondary,
            identity=keyed_identity(tmp_path, KEYS),
            plugins={"usage_sinks": [sink]},
        )
        running = GatewayThread(document).start()
        yield running, table
        running.stop()


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


def test_without_a_postgres_sink_the_query_is_unavailable(
    primary: FakeProvider, secondary: FakeProvider, tmp_path: Path
) -> None:
    document = two_shapes(
        static_vault(tmp_path, {"a": "k", "b": "k"}),
        primary,
        secondary,
        plugins={"usage_sinks": [{"name": "out", "kind": "stdout"}]},
    )
    gateway = GatewayThread(document).start()
    try:
        response = usage(gateway, group_by="principal")
    finally:
        gateway.stop()
    assert response.status_code == 503 and response.json()["error"]["code"] == "usage_query_unavailable"
