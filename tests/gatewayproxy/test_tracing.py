"""Trace exporters end to end: OTLP/HTTP spans received and decoded by a local collector, and the signed tape
checked by `manage.py verifytape` (intact, tampered, deleted and reordered lines)."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from django.core.management import CommandError, call_command
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from gatewayproxy.config.loader import ConfigError, validate_document
from gatewayproxy.metrics import GatewayMetrics
from gatewayproxy.pipeline.stages import SharedParts
from gatewayproxy.server.upstream import UpstreamPool
from gatewayproxy.state import build_state
from tests.gatewayproxy.fake_provider import FakeProvider
from tests.gatewayproxy.harness import GatewayThread
from tests.gatewayproxy.policy_support import chat, gateway_document
from tests.support.live import ROOT

pytestmark = pytest.mark.e2e


def poll(condition: Callable[[], bool], timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "condition not reached in time"
        time.sleep(0.05)


class Collector:
    """An OTLP/HTTP traces receiver on loopback that decodes every export it gets."""

    def __init__(self) -> None:
        self.requests: list[ExportTraceServiceRequest] = []
        self.content_types: list[str] = []
        collector = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["content-length"]))
                collector.content_types.append(self.headers["content-type"])
                collector.requests.append(ExportTraceServiceRequest.FromString(body))
                self.send_response(200)
                self.send_header("content-type", "application/x-protobuf")
                self.send_header("content-length", "0")
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                """Quiet."""

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1/traces"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def spans(self) -> list[Any]:
        return [
            span
            for request in self.requests
            for resource in request.resource_spans
            for scope in resource.scope_spans
            for span in scope.spans
        ]


@pytest.fixture
def collector() -> Iterator[Collector]:
    running = Collector()
    yield running
    running.server.shutdown()
    running.server.server_close()


def attributes(span: Any) -> dict[str, Any]:
    values = {}
    for attribute in span.attributes:
        value = attribute.value
        values[attribute.key] = (
            value.int_value
            if value.HasField("int_value")
            else (value.double_value if value.HasField("double_value") else value.string_value)
        )
    return values


def test_otlp_exports_a_span_per_request(collector: Collector, primary: FakeProvider) -> None:
    exporter = {
        "name": "otel",
        "kind": "otlp",
        "endpoint": collector.url,
        "batch_delay_ms": 50,
        "service_name": "gw-test",
    }
    gateway = GatewayThread(gateway_document(primary, plugins={"trace_exporters": [exporter]})).start()
    try:
        assert chat(gateway, "m", "client-secret-key").status_code == 200
        poll(lambda: len(collector.spans()) == 1)  # exported by the batch worker while the gateway serves
        assert chat(gateway, "m").status_code == 200
    finally:
        gateway.stop()
    assert collector.content_types[0] == "application/x-protobuf"
    spans = collector.spans()
    assert len(spans) == 2
    span = attributes(spans[0])
    assert span["gateway.route"] == "all" and span["gateway.destination"] == "upstream"
    assert span["http.response.status_code"] == 200 and span["gen_ai.request.model"] == "m"
    assert span["gen_ai.usage.input_tokens"] == 11 and span["gen_ai.usage.output_tokens"] == 7
    assert spans[0].end_time_unix_nano > spans[0].start_time_unix_nano
    resource = collector.requests[0].resource_spans[0].resource
    assert any(item.key == "service.name" and item.value.string_value == "gw-test" for item in resource.attributes)
    exported = b"".join(request.SerializeToString() for request in collector.requests)
    assert b"client-secret-key" not in exported and os.environ["PATH"].encode() not in exported


def write_signer(directory: Path) -> tuple[Path, Path]:
    key = Ed25519PrivateKey.generate()
    private, public = directory / "signer.pem", directory / "signer.pub.pem"
    private.write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    public.write_bytes(
        key.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    )
    return private, public


def tape_document(provider: FakeProvider, tape: Path, private: Path) -> dict[str, Any]:
    plugins = {
        "signers": [{"name": "local", "kind": "ed25519_local", "private_key_file": str(private)}],
        "trace_exporters": [{"name": "tape", "kind": "signed_tape", "path": str(tape)}],
    }
    return gateway_document(provider, plugins=plugins)


def serve_requests(document: dict[str, Any], count: int) -> None:
    gateway = GatewayThread(document).start()
    try:
        for _ in range(count):
            assert chat(gateway, "m", "client-secret-key").status_code == 200
    finally:
        gateway.stop()


def verify(tape: Path, public: Path | str) -> None:
    call_command("verifytape", str(tape), "--public-key", str(public))


def test_the_signed_tape_chains_signs_and_catches_tampering(tmp_path: Path, primary: FakeProvider) -> None:
    private, public = write_signer(tmp_path)
    tape = tmp_path / "tape.jsonl"
    serve_requests(tape_document(primary, tape, private), 3)
    serve_requests(tape_document(primary, tape, private), 1)  # a restart continues the chain
    lines = tape.read_text().splitlines()
    assert len(lines) == 4 and b"client-secret-key" not in tape.read_bytes()
    verify(tape, public)
    verify(tape, public.read_text())  # the PEM text itself works too

    def broken(mutated: list[str]) -> str:
        copy = tmp_path / "broken.jsonl"
        copy.write_text("\n".join(mutated) + "\n")
        with pytest.raises(CommandError) as raised:
            verify(copy, public)
        return str(raised.value)

    assert broken([lines[0], lines[1].replace('"status": 200', '"status": 500'), *lines[2:]]).startswith("line 2:")
    assert broken([lines[0], *lines[2:]]).startswith("line 2:")  # deleted
    assert broken([lines[0], lines[2], lines[1], lines[3]]).startswith("line 2:")  # reordered
    (tmp_path / "other").mkdir()
    _, other_public = write_signer(tmp_path / "other")
    with pytest.raises(CommandError, match="line 1: the signature does not verify"):
        verify(tape, other_public)


def test_verifytape_exits_non_zero_naming_the_line(tmp_path: Path, primary: FakeProvider) -> None:
    private, public = write_signer(tmp_path)
    tape = tmp_path / "tape.jsonl"
    serve_requests(tape_document(primary, tape, private), 2)
    lines = tape.read_text().splitlines()
    tape.write_text(lines[0] + "\n" + lines[1].replace('"model": "m"', '"model": "x"') + "\n")
    finished = subprocess.run(
        [sys.executable, "manage.py", "verifytape", str(tape), "--public-key", str(public)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert finished.returncode != 0 and "line 2" in finished.stderr


def test_a_tape_needs_a_signer(tmp_path: Path, primary: FakeProvider) -> None:
    document = gateway_document(
        primary,
        plugins={"trace_exporters": [{"name": "tape", "kind": "signed_tape", "path": str(tmp_path / "tape.jsonl")}]},
    )
    with pytest.raises(ConfigError, match=r"plugins\.trace_exporters\[0\]\.signer"):
        build_state(validate_document(document), UpstreamPool(), SharedParts(), GatewayMetrics())
    document["plugins"]["trace_exporters"][0]["colour"] = "blue"
    with pytest.raises(ConfigError, match=r"plugins\.trace_exporters\[0\]\.colour: unknown key"):
        build_state(validate_document(document), UpstreamPool(), SharedParts(), GatewayMetrics())
