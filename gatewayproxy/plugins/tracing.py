"""The `otlp` trace exporter: one span per request through the OpenTelemetry SDK, batched and exported over
OTLP/HTTP by the SDK's own worker thread, off the request path.

The span is made when the request settles, with the ids its `TraceContext` fixed when the request started (the
span id was already sent upstream as the provider's parent): a child of the caller's span (the SDK's parent-based
sampler follows the caller's sampled flag), or the root of the trace the request started. The SDK takes those ids
from the provider's id generator, which `record` primes just before it starts the span."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Annotated

from pydantic import Field

from gatewayproxy.context import TraceContext
from gatewayproxy.plugins.decisions import PluginOptions

if TYPE_CHECKING:
    from opentelemetry.context import Context
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.id_generator import IdGenerator
    from opentelemetry.trace import Tracer

SPAN_NAME = "gateway.request"


class OtlpOptions(PluginOptions):
    """`otlp`: the collector's traces URL (e.g. `http://collector:4318/v1/traces`), the service name, the export
    timeout and how long spans wait to be batched."""

    endpoint: str
    service_name: str = "gatewayproxy"
    timeout_ms: Annotated[int, Field(gt=0)] = 10000
    batch_delay_ms: Annotated[int, Field(gt=0)] = 5000


class PresetIds:
    """The (trace id, span id) the provider's id generator hands out next; None: random ids."""

    ids: tuple[int, int] | None = None


def preset_id_generator(preset: PresetIds) -> IdGenerator:
    """An SDK id generator reading `preset` (made only once the SDK is imported). The SDK asks for ids only inside
    `start_span`, which `record` calls on the event loop's thread with `preset.ids` set for that one call."""
    from opentelemetry.sdk.trace.id_generator import RandomIdGenerator

    class Generator(RandomIdGenerator):
        def generate_trace_id(self) -> int:
            return preset.ids[0] if preset.ids else super().generate_trace_id()

        def generate_span_id(self) -> int:
            return preset.ids[1] if preset.ids else super().generate_span_id()

        def is_trace_id_random(self) -> bool:
            return True  # `continue_trace` draws new trace ids from `secrets`

    return Generator()


class OtlpTracer:
    """A tracer provider with a batch span processor; made when the snapshot starts, flushed when it closes."""

    def __init__(self, options: OtlpOptions) -> None:
        self.options = options
        self._provider: TracerProvider | None = None
        self._preset = PresetIds()
        self.tracer: Tracer | None = None

    def start(self) -> None:
        """Create the provider (its batch worker thread starts here, not at build time). The SDK is imported only
        by a gateway that exports traces: it costs a worker about 14 MB."""
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor
        from opentelemetry.trace import SpanKind, Status, StatusCode

        options = self.options
        resource = Resource.create({"service.name": options.service_name})
        self._provider = TracerProvider(resource=resource, id_generator=preset_id_generator(self._preset))
        exporter = OTLPSpanExporter(endpoint=options.endpoint, timeout=options.timeout_ms / 1000)
        self._provider.add_span_processor(BatchSpanProcessor(exporter, schedule_delay_millis=options.batch_delay_ms))
        self.tracer = self._provider.get_tracer("gatewayproxy")
        self._server_kind, self._error_status = SpanKind.SERVER, Status(StatusCode.ERROR)

    async def close(self) -> None:
        """Export what is batched and stop the worker (in a thread: it blocks on the exporter)."""
        if self._provider is not None:
            await asyncio.to_thread(self._provider.shutdown)
            self._provider, self.tracer = None, None

    def record(
        self,
        trace: TraceContext,
        started_ns: int,
        ended_ns: int,
        attributes: dict[str, str | int | float],
        failed: bool,
    ) -> None:
        """One finished request as a server span with `trace`'s ids."""
        if self.tracer is None:
            return
        self._preset.ids = (int(trace.trace_id, 16), int(trace.span_id, 16))
        try:
            span = self.tracer.start_span(
                SPAN_NAME, _caller(trace), kind=self._server_kind, attributes=attributes, start_time=started_ns
            )
        finally:
            self._preset.ids = None
        if failed:
            span.set_status(self._error_status)
        span.end(end_time=ended_ns)


def _caller(trace: TraceContext) -> Context:
    """The OpenTelemetry context whose current span is the caller's (remote) span; an empty one (no parent: a new
    trace, whatever context the thread has) when the request started the trace."""
    from opentelemetry.context import Context
    from opentelemetry.trace import NonRecordingSpan, SpanContext, TraceFlags, set_span_in_context

    if not trace.parent_id:
        return Context()
    flags = TraceFlags(int(trace.flags, 16))
    caller = SpanContext(int(trace.trace_id, 16), int(trace.parent_id, 16), is_remote=True, trace_flags=flags)
    return set_span_in_context(NonRecordingSpan(caller))
