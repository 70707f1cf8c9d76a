"""One W3C trace per turn: spans of the API's requests and of the runtime's turns, model calls and tool calls,
exported over OTLP/HTTP by the OpenTelemetry SDK when an endpoint is configured. Without one, no span is
recorded and the caller's `traceparent` is only carried along (into stored events, on to the gateway).
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from django.conf import settings
from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.trace import Span, SpanKind, Status, StatusCode
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

if TYPE_CHECKING:
    from opentelemetry.sdk.trace import TracerProvider

API_SERVICE = "registry-api"
RUNTIME_SERVICE = "registry-runtime"
# The trace context of the request that appended a user event, kept in the stored body; never rendered.
TRACEPARENT_FIELD = "_traceparent"

SERVER, CLIENT, INTERNAL = SpanKind.SERVER, SpanKind.CLIENT, SpanKind.INTERNAL
ERROR = Status(StatusCode.ERROR)

_propagator = TraceContextTextMapPropagator()
_tracers: dict[str, trace.Tracer | None] = {}
_providers: list[TracerProvider] = []
_lock = threading.Lock()


def traces_endpoint() -> str:
    """The OTLP/HTTP traces URL (`OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`, or `<OTEL_EXPORTER_OTLP_ENDPOINT>/v1/traces`);
    empty: spans are not recorded."""
    if settings.OTEL_SDK_DISABLED:
        return ""
    if settings.OTEL_EXPORTER_OTLP_TRACES_ENDPOINT:
        return str(settings.OTEL_EXPORTER_OTLP_TRACES_ENDPOINT)
    base = str(settings.OTEL_EXPORTER_OTLP_ENDPOINT)
    return f"{base.rstrip('/')}/v1/traces" if base else ""


def tracer(service: str) -> trace.Tracer | None:
    """The tracer of one service (`registry-api`, `registry-runtime`: both may run in one process), made on
    first use; None when no endpoint is configured. The SDK is imported only then."""
    if service in _tracers:
        return _tracers[service]
    with _lock:
        if service not in _tracers:
            _tracers[service] = _make_tracer(service)
    return _tracers[service]


def _make_tracer(service: str) -> trace.Tracer | None:
    endpoint = traces_endpoint()
    if not endpoint:
        return None
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    # Batched and exported by the SDK's worker thread (OTEL_BSP_* tune it); flushed at interpreter exit.
    provider = TracerProvider(resource=Resource.create({"service.name": service}))
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=endpoint)))
    _providers.append(provider)
    return provider.get_tracer("registry")


def shutdown() -> None:
    """Export what is batched and stop (tests; the SDK also does this at exit)."""
    with _lock:
        for provider in _providers:
            provider.shutdown()
        _providers.clear()
        _tracers.clear()


def carried(traceparent: str | None) -> Context:
    """A fresh context holding the remote span of `traceparent` (empty when absent or malformed)."""
    return _propagator.extract({"traceparent": traceparent}) if traceparent else Context()


def current_traceparent() -> str | None:
    """The `traceparent` header of the current span (the carried one when nothing is recorded), if any."""
    carrier: dict[str, str] = {}
    _propagator.inject(carrier)
    return carrier.get("traceparent")


@contextmanager
def continuing(
    traceparent: str | None,
    name: str,
    *,
    service: str,
    kind: SpanKind = INTERNAL,
    attributes: Mapping[str, Any] | None = None,
) -> Iterator[Span]:
    """A span continuing a carried trace context (a request's header, a stored event's), or starting a trace;
    current while the block runs. Without export, the carried context alone is made current."""
    parent = carried(traceparent)
    recorder = tracer(service)
    if recorder is None:
        token = otel_context.attach(parent)
        try:
            yield trace.get_current_span(parent)
        finally:
            otel_context.detach(token)
        return
    with recorder.start_as_current_span(name, context=parent, kind=kind, attributes=attributes) as span:
        yield span


@contextmanager
def child(
    name: str, *, service: str, kind: SpanKind = INTERNAL, attributes: Mapping[str, Any] | None = None
) -> Iterator[Span]:
    """A span under the current one (a model call, a tool call); nothing is recorded without export."""
    recorder = tracer(service)
    if recorder is None:
        yield trace.get_current_span()
        return
    with recorder.start_as_current_span(name, kind=kind, attributes=attributes) as span:
        yield span
