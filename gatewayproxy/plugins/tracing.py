"""The `otlp` trace exporter: one span per request through the OpenTelemetry SDK, batched and exported over
OTLP/HTTP by the SDK's own worker thread, off the request path."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Annotated

from pydantic import Field

from gatewayproxy.plugins.decisions import PluginOptions

if TYPE_CHECKING:
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.trace import Tracer

SPAN_NAME = "gateway.request"


class OtlpOptions(PluginOptions):
    """`otlp`: the collector's traces URL (e.g. `http://collector:4318/v1/traces`), the service name, the export
    timeout and how long spans wait to be batched."""

    endpoint: str
    service_name: str = "gatewayproxy"
    timeout_ms: Annotated[int, Field(gt=0)] = 10000
    batch_delay_ms: Annotated[int, Field(gt=0)] = 5000


class OtlpTracer:
    """A tracer provider with a batch span processor; made when the snapshot starts, flushed when it closes."""

    def __init__(self, options: OtlpOptions) -> None:
        self.options = options
        self._provider: TracerProvider | None = None
        self.tracer: Tracer | None = None

    def start(self) -> None:
        """Create the provider (its batch worker thread starts here, not at build time). The SDK is imported only
        by a gateway that exports traces: it costs a worker about 14 MB."""
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor

        options = self.options
        self._provider = TracerProvider(resource=Resource.create({"service.name": options.service_name}))
        exporter = OTLPSpanExporter(endpoint=options.endpoint, timeout=options.timeout_ms / 1000)
        self._provider.add_span_processor(BatchSpanProcessor(exporter, schedule_delay_millis=options.batch_delay_ms))
        self.tracer = self._provider.get_tracer("gatewayproxy")
        from opentelemetry.trace import SpanKind, Status, StatusCode

        self._server_kind, self._error_status = SpanKind.SERVER, Status(StatusCode.ERROR)

    async def close(self) -> None:
        """Export what is batched and stop the worker (in a thread: it blocks on the exporter)."""
        if self._provider is not None:
            await asyncio.to_thread(self._provider.shutdown)
            self._provider, self.tracer = None, None

    def record(self, started_ns: int, ended_ns: int, attributes: dict[str, str | int | float], failed: bool) -> None:
        """One finished request as a server span."""
        if self.tracer is None:
            return
        span = self.tracer.start_span(SPAN_NAME, kind=self._server_kind, start_time=started_ns, attributes=attributes)
        if failed:
            span.set_status(self._error_status)
        span.end(end_time=ended_ns)
