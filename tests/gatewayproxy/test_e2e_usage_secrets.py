"""The secret canary: a unique provider key in a vault and a unique client key never appear in a response (data or
admin plane), a usage or audit record, sink output, spool file, log line or metric, for served, streamed and
refused requests."""

from __future__ import annotations

import json
import logging
import uuid
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest

from fakes.waiting import wait_until
from tests.support.gateway.callers import api_key_identity
from tests.support.gateway.provider import FakeProvider
from tests.support.gateway.sinks import HI, POSTGRES_DSN, ledger_rows, scratch_table
from tests.support.gateway.thread import GatewayThread

pytestmark = pytest.mark.e2e


def test_no_secret_reaches_a_record(
    two_shape_gateway: Callable[..., GatewayThread],
    tmp_path: Path,
    primary: FakeProvider,
    secondary: FakeProvider,
    capsys: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    provider_key, client_key = f"sk-canary-{uuid.uuid4().hex}", f"client-canary-{uuid.uuid4().hex}"
    trail, spool = tmp_path / "audit.jsonl", tmp_path / "spool"
    with scratch_table() as table, caplog.at_level(logging.DEBUG):
        sinks = {
            "usage_sinks": [
                {"name": "out", "kind": "stdout", "flush_interval_ms": 0},
                {"name": "ledger", "kind": "postgres", "dsn": POSTGRES_DSN, "table": table, "flush_interval_ms": 0},
                {
                    "name": "parked",
                    "kind": "postgres",
                    "dsn": "postgresql://postgres@127.0.0.1:1/postgres",
                    "flush_interval_ms": 0,
                    "spool": {"directory": str(spool), "retry_interval_ms": 60000},
                },
            ],
            "audit_sinks": [{"name": "trail", "kind": "file", "path": str(trail), "flush_interval_ms": 0}],
        }
        gateway = two_shape_gateway(
            secrets={"a": provider_key, "b": provider_key},
            identity=api_key_identity(tmp_path, {client_key: ("carol", {"team": "red"})}),
            plugins=sinks,
            spend={"request_tag_allowlist": ["team"]},
        )
        bearer = {"authorization": f"Bearer {client_key}", "x-gateway-tag-team": "red"}
        url = f"{gateway.url}/v1/chat/completions"
        served = httpx.post(url, json={"model": "a-1", "messages": HI}, headers=bearer)
        assert served.status_code == 200
        with httpx.stream(
            "POST", url, json={"model": "b-1", "messages": HI, "stream": True}, headers=bearer
        ) as streamed:
            streamed.read()
        refused = httpx.post(
            url, json={"model": "a-1", "messages": HI}, headers={"authorization": f"Bearer {provider_key}"}
        )
        assert refused.status_code == 401
        admin = [
            httpx.get(f"{gateway.admin_url}{path}").text
            for path in ("/admin/v1/config", "/admin/v1/destinations", "/metrics")
        ]
        answered = [f"{response.headers}\n{response.text}" for response in (served, streamed, refused)]
        responses = "\n".join([*answered, *admin])
        wait_until(lambda: len(ledger_rows(table)) == 2, what="the ledger rows")
        wait_until(
            lambda: len(trail.read_text().splitlines()) == 3 if trail.exists() else False, what="the audit records"
        )
        wait_until(lambda: len(list(spool.glob("*.jsonl"))) == 1, what="the spool file")
        metrics = gateway.metrics_text
        gateway.stop()
        outputs = {
            "stdout": capsys.readouterr().out,
            "ledger": json.dumps(ledger_rows(table), default=str),
            "audit": trail.read_text(),
            "spool": "".join(path.read_text() for path in spool.glob("*")),
            "log": caplog.text,
            "metrics": metrics,
            "responses": responses,
        }
    assert primary.received[0].headers["authorization"] == f"Bearer {provider_key}"
    assert secondary.received[0].headers["x-api-key"] == provider_key
    assert outputs["stdout"].count('"principal":"carol"') == 2
    for name, text in outputs.items():
        assert provider_key not in text, name
        assert client_key not in text, name
