"""Helpers of the usage and audit sink tests: their gateway documents, scratch ledger tables, metric values, an
external processor on loopback, and the records the `file` and `stdout` sinks write."""

from __future__ import annotations

import contextlib
import json
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from prometheus_client.parser import text_string_to_metric_families
from psycopg import sql
from psycopg.rows import dict_row

from fakes.http_server import LoopbackHttpServer, QuietHandler
from fakes.waiting import wait_until
from tests.support.gateway.documents import static_vault, two_shapes
from tests.support.gateway.provider import FakeProvider

# The usage fields of the record of one unpriced, answered chat completion by the fake provider (11 in, 7 out).
CHAT_USAGE = {
    "input_tokens": 11,
    "output_tokens": 7,
    "cache_read_tokens": 0,
    "cache_write_tokens": 0,
    "reasoning_tokens": 0,
    "cost_usd": None,
    "status": 200,
}
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


class RecordingProcessor(LoopbackHttpServer):
    """An external processor on loopback: records the JSON bodies POSTed to it and answers `answer` (500 while
    `failing`; `refusing_with` another status, recording nothing), after `delay` seconds. Serving inside a
    `with` block."""

    def __init__(self, answer: Any = None) -> None:
        super().__init__(ProcessorHandler)
        self.bodies: list[Any] = []
        self.answer = answer or {}
        self.failing = False
        self.refusing_with: int | None = None
        self.delay = 0.0

    @property
    def records(self) -> list[dict[str, Any]]:
        """Every record received (bodies are `{"records": [...]}`)."""
        return [record for body in self.bodies for record in body["records"]]

    def __enter__(self) -> RecordingProcessor:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
        self.thread.join()


class ProcessorHandler(QuietHandler):
    """The `RecordingProcessor`'s answers."""

    def do_POST(self) -> None:
        processor: RecordingProcessor = self.owner
        body = json.loads(self.rfile.read(int(self.headers["content-length"])))
        time.sleep(processor.delay)
        status = 500 if processor.failing else processor.refusing_with or 200
        if status == 200:
            processor.bodies.append(body)
        self.reply_json(status, processor.answer)


def sink_document(
    directory: Path,
    primary: FakeProvider,
    secondary: FakeProvider,
    *,
    secrets: dict[str, str] | None = None,
    **sections: Any,
) -> dict[str, Any]:
    """`two_shapes` on the two providers, keys `a` and `b` (and more `secrets`) in a static vault written under
    `directory`, plus `sections` (the sinks under test)."""
    vault = static_vault(directory, {"a": "key-a", "b": "key-b", **(secrets or {})})
    return two_shapes(primary.url, secondary.url, vault=vault, **sections)


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
