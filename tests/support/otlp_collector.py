"""A fake OpenTelemetry collector for the tracing tests: `POST /v1/traces` (OTLP/HTTP, protobuf) on loopback,
keeping every span."""

from __future__ import annotations

import gzip
import threading
from dataclasses import dataclass
from typing import Any

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)

from fakes.http_server import LoopbackHttpServer, QuietHandler

PROTOBUF = {"content-type": "application/x-protobuf"}


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


class FakeCollector(LoopbackHttpServer):
    """The server (serving once `start()` is called) and what it received; `in_trace` reads the spans of one
    trace id."""

    def __init__(self) -> None:
        super().__init__(CollectorHandler, name="fake-collector")
        self.spans: list[ReceivedSpan] = []
        self.lock = threading.Lock()

    def receive(self, spans: list[ReceivedSpan]) -> None:
        with self.lock:
            self.spans.extend(spans)

    def in_trace(self, trace_id: str) -> list[ReceivedSpan]:
        with self.lock:
            return [span for span in self.spans if span.trace_id == trace_id]


class CollectorHandler(QuietHandler):
    """Accepts protobuf exports on `/v1/traces`; anything else is a 404."""

    def do_POST(self) -> None:
        payload = self.rfile.read(int(self.headers.get("content-length", 0)))
        if self.path != "/v1/traces" or self.headers.get("content-type") != "application/x-protobuf":
            self.reply(404, b"", PROTOBUF)
            return
        if self.headers.get("content-encoding") == "gzip":
            payload = gzip.decompress(payload)
        self.owner.receive(decode(payload))
        self.reply(200, ExportTraceServiceResponse().SerializeToString(), PROTOBUF)
