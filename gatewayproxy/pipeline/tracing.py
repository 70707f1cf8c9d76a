"""Trace exporters (`plugins.trace_exporters`): OTLP spans and the signed tape, fed from `settle`.

Both see the same request summary: ids, route, destination, model, status, tokens, cost, latency; never a
credential, a header value or a payload.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime
from typing import Any

from gatewayproxy.config.loader import ConfigError
from gatewayproxy.config.models import PluginInstance
from gatewayproxy.context import RequestContext
from gatewayproxy.pipeline.deps import StageDeps
from gatewayproxy.pipeline.stages import Stage
from gatewayproxy.plugins.decisions import plugin_options
from gatewayproxy.plugins.tape import Signer, SignerOptions, TapeOptions, TapeWriter
from gatewayproxy.plugins.tracing import OtlpOptions, OtlpTracer


def request_summary(context: RequestContext) -> dict[str, Any]:
    """What a trace records of a finished request."""
    usage = context.usage
    return {
        "request_id": context.request.request_id,
        "ts": datetime.now(UTC).isoformat(),
        "operation": context.operation.value,
        "principal": context.principal.id,
        "route": context.route,
        "destination": context.destination,
        "model": context.model,
        "status": context.status,
        "error_code": context.error_code,
        "input_tokens": usage.input_tokens if usage else 0,
        "output_tokens": usage.output_tokens if usage else 0,
        "cost_usd": context.cost_usd,
        "latency_ms": round((time.perf_counter() - context.started) * 1000, 3),
    }


def span_attributes(summary: dict[str, Any]) -> dict[str, str | int | float]:
    """The summary as span attributes (absent values left out)."""
    names = {
        "request_id": "gateway.request_id",
        "operation": "gateway.operation",
        "principal": "enduser.id",
        "route": "gateway.route",
        "destination": "gateway.destination",
        "model": "gen_ai.request.model",
        "status": "http.response.status_code",
        "error_code": "error.type",
        "input_tokens": "gen_ai.usage.input_tokens",
        "output_tokens": "gen_ai.usage.output_tokens",
        "cost_usd": "gateway.cost_usd",
    }
    return {attribute: summary[key] for key, attribute in names.items() if summary.get(key) is not None}


class OtlpStage(Stage):
    """Exports one span per request."""

    def __init__(self, name: str, options: OtlpOptions) -> None:
        self.name = f"trace:{name}"
        self.tracer = OtlpTracer(options)

    async def start(self) -> None:
        self.tracer.start()

    async def close(self) -> None:
        await self.tracer.close()

    def settle(self, context: RequestContext) -> None:
        ended = time.time_ns()
        started = ended - int((time.perf_counter() - context.started) * 1e9)
        failed = context.status >= 500 or context.status == 0
        self.tracer.record(context.trace, started, ended, span_attributes(request_summary(context)), failed)


class TapeStage(Stage):
    """Queues each request's summary to the tape's writer, shared by every snapshot writing that file."""

    def __init__(self, name: str, writer: TapeWriter) -> None:
        self.name = f"trace:{name}"
        self.writer = writer

    async def start(self) -> None:
        await self.writer.attach()

    async def close(self) -> None:
        await self.writer.detach()

    def settle(self, context: RequestContext) -> None:
        self.writer.offer(request_summary(context))


def _signer(deps: StageDeps, wanted: str | None, key: str) -> Signer:
    """The named `plugins.signers[]` instance (or the only one), built."""
    signers = deps.config.plugins.signers
    matches = [(index, signer) for index, signer in enumerate(signers) if wanted in (None, signer.name)]
    if len(matches) != 1:
        needed = f"the signer {wanted!r}" if wanted else "exactly one signer, or `signer` naming one"
        raise ConfigError([f"{key}.signer: needs {needed} in plugins.signers"])
    index, instance = matches[0]
    signer_key = f"plugins.signers[{index}]"
    options = plugin_options(SignerOptions, instance, signer_key, deps.base_dir)
    try:
        return Signer(instance.name, options)
    except (OSError, ValueError) as error:
        raise ConfigError([f"{signer_key}.private_key_file: {error}"]) from None


def _exporter(deps: StageDeps, index: int, instance: PluginInstance) -> Stage:
    key = f"plugins.trace_exporters[{index}]"
    if instance.kind == "otlp":
        return OtlpStage(instance.name, plugin_options(OtlpOptions, instance, key, deps.base_dir))
    options = plugin_options(TapeOptions, instance, key, deps.base_dir)
    signer = _signer(deps, options.signer, key)
    writer = deps.shared.get(f"tape:{options.path}", lambda: TapeWriter(options.path, signer))
    return TapeStage(instance.name, writer)


def build(deps: StageDeps) -> list[Stage]:
    """One stage per configured trace exporter."""
    return [_exporter(deps, index, instance) for index, instance in enumerate(deps.config.plugins.trace_exporters)]
