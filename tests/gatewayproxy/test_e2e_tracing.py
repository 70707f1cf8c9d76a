"""Trace exporters end to end: OTLP/HTTP spans received and decoded by a local collector (the gateway's span
joining the caller's W3C trace), and the signed tape checked by `manage.py verifytape` (intact, tampered, deleted
and reordered lines)."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from django.core.management import CommandError, call_command
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from fakes.http_server import LoopbackHttpServer, QuietHandler
from fakes.waiting import wait_until
from gatewayproxy.config.loader import ConfigError, validate_document
from gatewayproxy.context import continue_trace
from gatewayproxy.metrics import GatewayMetrics
from gatewayproxy.pipeline.stages import SharedParts
from gatewayproxy.server.upstream import UpstreamPool
from gatewayproxy.state import build_state
from tests.support.gateway.policy import chat, gateway_document
from tests.support.gateway.provider import FakeProvider
from tests.support.gateway.thread import GatewayFactory
from tests.support.live import ROOT
from tests.support.serving import served, serving

pytestmark = pytest.mark.e2e


class Collector(LoopbackHttpServer):
    """An OTLP/HTTP traces receiver on loopback that decodes every export it gets."""

    def __init__(self) -> None:
        super().__init__(CollectorHandler)
        self.requests: list[ExportTraceServiceRequest] = []
        self.content_types: list[str] = []

    @property
    def traces_url(self) -> str:
        return f"{self.url}/v1/traces"

    def spans(self) -> list[Any]:
        return [
            span
            for request in self.requests
            for resource in request.resource_spans
            for scope in resource.scope_spans
            for span in scope.spans
        ]


class CollectorHandler(QuietHandler):
    def do_POST(self) -> None:
        collector: Collector = self.owner
        body = self.rfile.read(int(self.headers["content-length"]))
        collector.content_types.append(self.headers["content-type"])
        collector.requests.append(ExportTraceServiceRequest.FromString(body))
        self.reply(200, b"", {"content-type": "application/x-protobuf"})


@pytest.fixture
def collector() -> Iterator[Collector]:
    yield from served(Collector().start())


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


def test_otlp_exports_a_span_per_request(
    gateway_factory: GatewayFactory, collector: Collector, primary: FakeProvider
) -> None:
    exporter = {
        "name": "otel",
        "kind": "otlp",
        "endpoint": collector.traces_url,
        "batch_delay_ms": 50,
        "service_name": "gw-test",
    }
    gateway = gateway_factory(gateway_document(primary, plugins={"trace_exporters": [exporter]}))
    assert chat(gateway, "m", "client-secret-key").status_code == 200
    # exported by the batch worker while the gateway serves
    wait_until(lambda: len(collector.spans()) == 1, what="the first span exported")
    assert chat(gateway, "m").status_code == 200
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


TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
CALLER_SPAN = "00f067aa0ba902b7"
UNSAMPLED_TRACE = "5bf92f3577b34da6a3ce929d0e0e4737"


def sent_traceparent(provider: FakeProvider, request_id: str) -> list[str]:
    """The `traceparent` of the provider's request carrying `request_id`, split into its four fields."""
    [received] = [item for item in provider.received if item.headers.get("x-request-id") == request_id]
    return received.headers["traceparent"].split("-")


def test_the_gateway_span_continues_the_callers_trace(
    gateway_factory: GatewayFactory, collector: Collector, primary: FakeProvider
) -> None:
    primary.reset()
    exporter = {"name": "otel", "kind": "otlp", "endpoint": collector.traces_url, "batch_delay_ms": 50}
    gateway = gateway_factory(gateway_document(primary, plugins={"trace_exporters": [exporter]}))
    traced = chat(gateway, "m", traceparent=f"00-{TRACE_ID}-{CALLER_SPAN}-01")
    untraced = chat(gateway, "m")
    malformed = chat(gateway, "m", traceparent=f"00-{'0' * 32}-{CALLER_SPAN}-01")
    unsampled = chat(gateway, "m", traceparent=f"00-{UNSAMPLED_TRACE}-{CALLER_SPAN}-00")
    gateway.stop()  # flushes the batched spans
    assert all(response.status_code == 200 for response in (traced, untraced, malformed, unsampled))
    spans: dict[str, Any] = {attributes(span)["gateway.request_id"]: span for span in collector.spans()}

    span = spans[traced.headers["x-request-id"]]
    assert span.name == "gateway.request"
    assert (span.trace_id.hex(), span.parent_span_id.hex()) == (TRACE_ID, CALLER_SPAN)
    assert sent_traceparent(primary, traced.headers["x-request-id"]) == ["00", TRACE_ID, span.span_id.hex(), "01"]

    for response in (untraced, malformed):  # a new trace, the gateway's span its root
        span = spans[response.headers["x-request-id"]]
        _, trace_id, parent, flags = sent_traceparent(primary, response.headers["x-request-id"])
        assert span.parent_span_id == b"" and trace_id not in (TRACE_ID, "0" * 32)
        assert (span.trace_id.hex(), span.span_id.hex(), flags) == (trace_id, parent, "01")

    # The caller did not sample its trace: no span is exported, and the provider gets the trace unsampled.
    assert unsampled.headers["x-request-id"] not in spans and len(spans) == 3
    _, trace_id, parent, flags = sent_traceparent(primary, unsampled.headers["x-request-id"])
    assert (trace_id, flags) == (UNSAMPLED_TRACE, "00") and parent != CALLER_SPAN


def test_without_tracing_the_provider_still_gets_the_callers_trace(
    gateway_factory: GatewayFactory, primary: FakeProvider
) -> None:
    primary.reset()
    gateway = gateway_factory(gateway_document(primary))
    traced = chat(gateway, "m", traceparent=f"00-{TRACE_ID}-{CALLER_SPAN}-01")
    again = chat(gateway, "m", traceparent=f"00-{TRACE_ID}-{CALLER_SPAN}-01")
    first = sent_traceparent(primary, traced.headers["x-request-id"])
    second = sent_traceparent(primary, again.headers["x-request-id"])
    assert first[:2] == second[:2] == ["00", TRACE_ID] and first[3] == second[3] == "01"
    assert len({first[2], second[2], CALLER_SPAN}) == 3  # a new span id per request


def test_a_request_fixes_its_trace_context_from_the_traceparent() -> None:
    continued = continue_trace({"traceparent": f" 00-{TRACE_ID}-{CALLER_SPAN}-01 "})
    assert (continued.trace_id, continued.parent_id, continued.flags) == (TRACE_ID, CALLER_SPAN, "01")
    assert continued.traceparent == f"00-{TRACE_ID}-{continued.span_id}-01" and continued.span_id != CALLER_SPAN
    for bad in (
        "",
        "garbage",
        f"00-{TRACE_ID}-{'0' * 16}-01",
        f"00-{TRACE_ID.upper()}-{CALLER_SPAN}-01",
    ):
        fresh = continue_trace({"traceparent": bad} if bad else {})
        assert fresh.parent_id == "" and fresh.flags == "01" and fresh.trace_id != TRACE_ID
        assert len(fresh.trace_id) == 32 and len(fresh.span_id) == 16


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


@dataclass
class Tape:
    """A signed tape, the public key that verifies it, and `serve(count)`: `count` requests through a gateway of
    its own writing to it, stopped at the end (which flushes the tape)."""

    path: Path
    public: Path
    serve: Callable[[int], None]


@pytest.fixture
def tape(gateway_factory: GatewayFactory, tmp_path: Path, primary: FakeProvider) -> Tape:
    private, public = write_signer(tmp_path)
    path = tmp_path / "tape.jsonl"

    def serve(count: int) -> None:
        with serving(gateway_factory(tape_document(primary, path, private))) as gateway:
            for _ in range(count):
                assert chat(gateway, "m", "client-secret-key").status_code == 200

    return Tape(path, public, serve)


def verify(tape: Path, public: Path | str) -> None:
    call_command("verifytape", str(tape), "--public-key", str(public))


def test_the_signed_tape_chains_signs_and_catches_tampering(tape: Tape, tmp_path: Path) -> None:
    tape.serve(3)
    tape.serve(1)  # a restart continues the chain
    lines = tape.path.read_text().splitlines()
    assert len(lines) == 4 and b"client-secret-key" not in tape.path.read_bytes()
    verify(tape.path, tape.public)
    verify(tape.path, tape.public.read_text())  # the PEM text itself works too

    def broken(mutated: list[str]) -> str:
        copy = tmp_path / "broken.jsonl"
        copy.write_text("\n".join(mutated) + "\n")
        with pytest.raises(CommandError) as raised:
            verify(copy, tape.public)
        return str(raised.value)

    assert broken([lines[0], lines[1].replace('"status": 200', '"status": 500'), *lines[2:]]).startswith("line 2:")
    assert broken([lines[0], *lines[2:]]).startswith("line 2:")  # deleted
    assert broken([lines[0], lines[2], lines[1], lines[3]]).startswith("line 2:")  # reordered
    (tmp_path / "other").mkdir()
    _, other_public = write_signer(tmp_path / "other")
    with pytest.raises(CommandError, match="line 1: the signature does not verify"):
        verify(tape.path, other_public)


def test_verifytape_exits_non_zero_naming_the_line(tape: Tape) -> None:
    tape.serve(2)
    lines = tape.path.read_text().splitlines()
    tape.path.write_text(lines[0] + "\n" + lines[1].replace('"model": "m"', '"model": "x"') + "\n")
    finished = subprocess.run(
        [sys.executable, "manage.py", "verifytape", str(tape.path), "--public-key", str(tape.public)],
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
