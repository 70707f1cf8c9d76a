"""Helpers of the usage and audit sink tests: polling, scratch ledger tables, metric values, documents."""

from __future__ import annotations

import contextlib
import hashlib
import json
import threading
import time
import uuid
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import psycopg
import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families
from psycopg import sql
from psycopg.rows import dict_row

from tests.gatewayproxy.fake_provider import FakeProvider
from tests.support.waiting import wait_until

POSTGRES_DSN = "postgresql://postgres@127.0.0.1:5432/postgres"
HI = [{"role": "user", "content": "hi"}]


@contextlib.contextmanager
def scratch_table() -> Iterator[str]:
    """A unique ledger table name in the `postgres` database, dropped afterwards."""
    table = f"usage_test_{uuid.uuid4().hex[:12]}"
    try:
        yield table
    finally:
        with psycopg.connect(POSTGRES_DSN, autocommit=True) as connection:
            connection.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(sql.Identifier(table)))


def ledger_rows(table: str) -> list[dict[str, Any]]:
    """Every row of a ledger table (none while it does not exist yet)."""
    with psycopg.connect(POSTGRES_DSN, autocommit=True, row_factory=dict_row) as connection:
        exists = connection.execute("SELECT to_regclass(%s) IS NOT NULL AS found", (table,)).fetchone()
        if not exists or not exists["found"]:
            return []
        return connection.execute(sql.SQL("SELECT * FROM {} ORDER BY ts").format(sql.Identifier(table))).fetchall()


def metric(text: str, name: str, **labels: str) -> float:
    """The value of one sample in a Prometheus exposition (0 when absent)."""
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name and all(sample.labels.get(key) == value for key, value in labels.items()):
                return float(sample.value)
    return 0.0


def static_vault(directory: Path, secrets: dict[str, str]) -> dict[str, Any]:
    """A `static_file` vault holding `secrets` (credential id to key)."""
    path = directory / "vault.yaml"
    path.write_text(yaml.safe_dump(secrets))
    return {"name": "keys", "resolver": "static_file", "file": str(path)}


def two_shapes(vault: dict[str, Any], chat: FakeProvider, messages: FakeProvider, **sections: Any) -> dict[str, Any]:
    """Models `a-*` to a chat-shaped destination `shape_a`, `b-*` to a messages-shaped `shape_b`."""
    return {
        "vaults": [vault],
        "destinations": {
            "shape_a": {
                "kind": "vendor_a",
                "base_url": f"{chat.url}/v1",
                "credentials": {"vault": "keys", "credential_id": "a"},
            },
            "shape_b": {
                "kind": "vendor_b",
                "base_url": messages.url,
                "credentials": {"vault": "keys", "credential_id": "b"},
            },
        },
        "routes": [
            {
                "name": "to_a",
                "match": {"model": "a-*"},
                "strategy": {"mode": "fallback", "targets": [{"destination": "shape_a"}]},
            },
            {
                "name": "to_b",
                "match": {"model": "b-*"},
                "strategy": {"mode": "fallback", "targets": [{"destination": "shape_b"}]},
            },
        ],
        **sections,
    }


class RecordingProcessor:
    """An external processor on loopback: records the JSON bodies POSTed to it and answers `answer` (500 while
    `failing`; `refusing_with` another status, recording nothing), after `delay` seconds."""

    def __init__(self, answer: Any = None) -> None:
        self.bodies: list[Any] = []
        self.answer = json.dumps(answer or {}).encode()
        self.failing = False
        self.refusing_with: int | None = None
        self.delay = 0.0
        processor = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["content-length"])))
                time.sleep(processor.delay)
                status = 500 if processor.failing else processor.refusing_with or 200
                if status == 200:
                    processor.bodies.append(body)
                self.send_response(status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(processor.answer)))
                self.end_headers()
                self.wfile.write(processor.answer)

            def log_message(self, format: str, *args: Any) -> None:
                """Quiet."""

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        """The root URL."""
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    @property
    def records(self) -> list[dict[str, Any]]:
        """Every record received (bodies are `{"records": [...]}`)."""
        return [record for body in self.bodies for record in body["records"]]

    def __enter__(self) -> RecordingProcessor:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join()


def keyed_identity(directory: Path, keys: dict[str, tuple[str, str]]) -> dict[str, Any]:
    """An `api_key` identity section: client key to (principal, team), with `team` declared."""
    entries = [
        {"sha256": hashlib.sha256(key.encode()).hexdigest(), "principal": principal, "scope": {"team": team}}
        for key, (principal, team) in keys.items()
    ]
    (directory / "keys.yaml").write_text(yaml.safe_dump({"keys": entries}))
    return {
        "scope_dims": ["team"],
        "validators": [{"name": "keys", "kind": "api_key", "keys_file": str(directory / "keys.yaml")}],
    }


def jsonl(path: Path) -> list[dict[str, Any]]:
    """The records of a JSON-lines file (none while it does not exist)."""
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


class StdoutRecords:
    """The JSON lines the stdout sink printed so far."""

    def __init__(self, capsys: pytest.CaptureFixture[str]) -> None:
        self.capsys = capsys
        self.lines: list[dict[str, Any]] = []

    def of(self, request_id: str) -> dict[str, Any]:
        """The record of one request, waiting for it."""

        def found() -> dict[str, Any] | None:
            self.lines += [
                json.loads(line) for line in self.capsys.readouterr().out.splitlines() if line.startswith("{")
            ]
            return next((record for record in self.lines if record["request_id"] == request_id), None)

        record: dict[str, Any] = wait_until(found, what=f"the usage record of {request_id}")
        return record
