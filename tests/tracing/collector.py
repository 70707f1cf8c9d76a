"""A fake OpenTelemetry collector: `POST /v1/traces` (OTLP/HTTP, protobuf) on loopback, keeping every span."""

from __future__ import annotations

import gzip
import threading
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)


@dataclass(frozen=True)
class ReceivedSpan:
    """One exported span: ids in lower-case hex (`parent_span_id` empty for a root), and its service."""

    service: str
    name: str
    trace_id: str
    span_id: str
    parent_span_id: str
    kind: int
    attributes: dict[str, Any]


def attribute_value(value: Any) -> Any:
    kind = value.WhichOneof("value")
    if kind == "array_value":
        return [attribute_value(item) for item in value.array_value.values]
    return getattr(value, kind) if kind else None


def decode(payload: bytes) -> list[ReceivedSpan]:
    request = ExportTraceServiceRequest()
    request.ParseFromString(payload)
    spans: list[ReceivedSpan] = []
    for resource_spans in request.resource_spans:
        resource = {item.key: attribute_value(item.value) for item in resource_spans.resource.attributes}
        for scope_spans in resource_spans.scope_spans:
            for span in scope_spans.spans:
                spans.append(
                    ReceivedSpan(
                        service=str(resource.get("service.name", "")),
                        name=span.name,
                        trace_id=span.trace_id.hex(),
                        span_id=span.span_id.hex(),
                        parent_span_id=span.parent_span_id.hex(),
                        kind=span.kind,
                        attributes={item.key: attribute_value(item.value) for item in span.attributes},
                    )
                )
    return spans


class FakeCollector:
    """The server and what it received; `in_trace` reads the spans of one trace id."""

    def __init__(self) -> None:
        self.spans: list[ReceivedSpan] = []
        self.lock = threading.Lock()
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), CollectorHandler)
        self.server.daemon_threads = True
        self.server.collector = self  # type: ignore[attr-defined]
        self.thread = threading.Thread(target=self.server.serve_forever, name="fake-collector", daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        host, port = self.server.server_address[:2]
        return f"http://{host!s}:{port}"

    def receive(self, spans: list[ReceivedSpan]) -> None:
        with self.lock:
            self.spans.extend(spans)

    def in_trace(self, trace_id: str) -> list[ReceivedSpan]:
        with self.lock:
            return [span for span in self.spans if span.trace_id == trace_id]

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


class CollectorHandler(BaseHTTPRequestHandler):
    """Accepts protobuf exports on `/v1/traces`; anything else is a 404."""

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet: the test output is for assertions."""

    def do_POST(self) -> None:
        payload = self.rfile.read(int(self.headers.get("content-length", 0)))
        if self.path != "/v1/traces" or self.headers.get("content-type") != "application/x-protobuf":
            self.reply(404, b"")
            return
        if self.headers.get("content-encoding") == "gzip":
            payload = gzip.decompress(payload)
        self.server.collector.receive(decode(payload))  # type: ignore[attr-defined]
        self.reply(200, ExportTraceServiceResponse().SerializeToString())

    def reply(self, status: int, body: bytes) -> None:
        self.send_response(status)
        self.send_header("content-type", "application/x-protobuf")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
