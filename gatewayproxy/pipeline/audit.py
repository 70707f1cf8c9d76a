"""Audit records (one per data-plane request: who, where, the outcome, never a payload or a secret) queued to
the audit sinks (`plugins.audit_sinks`) off the request path."""

from __future__ import annotations

from gatewayproxy.context import RequestContext
from gatewayproxy.errors import ErrorCode, GatewayError
from gatewayproxy.pipeline.deps import StageDeps
from gatewayproxy.pipeline.stages import SinkStage, Stage
from gatewayproxy.pipeline.usage import NULLABLE_STRING, latency_ms, reached_upstream, record_schema, utc_timestamp
from gatewayproxy.plugins.sinks.base import Record
from gatewayproxy.plugins.sinks.catalog import build_pipelines
from gatewayproxy.plugins.sinks.pipeline import SinkPipeline

AVRO_SCHEMA = record_schema(
    "AuditRecord",
    [
        *({"name": name, "type": NULLABLE_STRING} for name in ("route", "destination")),
        {"name": "method", "type": "string"},
        {"name": "path", "type": "string"},
        {"name": "status", "type": "int"},
        {"name": "outcome", "type": "string"},
        *({"name": name, "type": NULLABLE_STRING} for name in ("error_code", "refused_by")),
        {"name": "latency_ms", "type": "double"},
    ],
)
FAIL_CLOSED_KINDS = frozenset({"ext_proc"})


def outcome(context: RequestContext) -> str:
    """`served` (an upstream answered), `refused` (the gateway answered before any upstream call) or `failed`
    (the gateway answered with an error after calling an upstream)."""
    if context.error_code is None:
        return "served"
    return "failed" if reached_upstream(context) else "refused"


def audit_record(context: RequestContext) -> Record:
    """The audit record of a finished request."""
    request = context.request
    return {
        "request_id": request.request_id,
        "ts": utc_timestamp(),
        "kind": context.operation.value,
        "principal": context.principal.id,
        "route": context.route,
        "destination": context.destination,
        "method": request.method,
        "path": request.path,
        "status": context.status,
        "outcome": outcome(context),
        "error_code": context.error_code,
        "refused_by": context.refused_by,
        "latency_ms": latency_ms(context),
    }


class AuditStage(SinkStage):
    """Offers an audit record per request to every audit sink; while a fail-closed sink (`ext_proc` with
    `failure_mode: deny`) is failing, new requests are refused with 503 `audit_unavailable`."""

    name = "audit"

    def __init__(self, pipelines: list[SinkPipeline], fail_closed: list[SinkPipeline]) -> None:
        super().__init__(pipelines)
        self.fail_closed = fail_closed

    async def admit(self, context: RequestContext) -> None:
        for pipeline in self.fail_closed:
            if pipeline.failing:
                raise GatewayError(ErrorCode.AUDIT_UNAVAILABLE, f"audit sink {pipeline.name!r} is failing")

    def settle(self, context: RequestContext) -> None:
        record = audit_record(context)
        for pipeline in self.pipelines:
            pipeline.offer(record)


def build(deps: StageDeps) -> list[Stage]:
    """The audit stage, when audit sinks other than `noop` are configured."""
    pipelines = build_pipelines("audit_sinks", deps, AVRO_SCHEMA)
    deny = {
        instance.name
        for instance in deps.config.plugins.audit_sinks
        if instance.kind in FAIL_CLOSED_KINDS and instance.failure_mode == "deny"
    }
    return [AuditStage(pipelines, [pipeline for pipeline in pipelines if pipeline.name in deny])] if pipelines else []
