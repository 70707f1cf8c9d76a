"""Usage records (one per request that reached an upstream) queued to the usage sinks off the request path,
and `GET /admin/v1/spend/usage` over the `postgres` sink's ledger."""

from __future__ import annotations

import asyncio
import time
from datetime import UTC, datetime
from typing import Any

from gatewayproxy.config.models import GatewayConfig
from gatewayproxy.context import RequestContext, Usage
from gatewayproxy.errors import ErrorCode, GatewayError
from gatewayproxy.pipeline.cache import cache_hit
from gatewayproxy.pipeline.deps import StageDeps
from gatewayproxy.pipeline.stages import SinkStage, Stage
from gatewayproxy.plugins.sinks.base import Record, SinkError
from gatewayproxy.plugins.sinks.catalog import build_pipelines
from gatewayproxy.plugins.sinks.ledger import GROUP_COLUMNS, Ledger, LedgerQuery
from gatewayproxy.plugins.sinks.pipeline import SinkPipeline

TAG_HEADER_PREFIX = "x-gateway-tag-"
MAX_TAG_CHARS = 256
NO_USAGE = Usage()
QUERY_PARAMETERS = frozenset({"from", "to", "group_by"})
NULLABLE_STRING = ["null", "string"]


def record_schema(name: str, fields: list[dict[str, Any]]) -> dict[str, Any]:
    """The Avro schema of the gateway's record `name`: the fields every record starts with, then `fields`."""
    return {
        "type": "record",
        "name": name,
        "namespace": "gateway",
        "fields": [
            {"name": "request_id", "type": "string"},
            {"name": "ts", "type": "string"},
            {"name": "kind", "type": "string"},
            {"name": "principal", "type": "string"},
            *fields,
        ],
    }


AVRO_SCHEMA = record_schema(
    "UsageRecord",
    [
        {"name": "scope", "type": {"type": "map", "values": "string"}},
        *({"name": name, "type": NULLABLE_STRING} for name in ("route", "destination", "provider", "model")),
        *(
            {"name": name, "type": "long"}
            for name in ("input_tokens", "output_tokens", "cache_read_tokens", "cache_write_tokens", "reasoning_tokens")
        ),
        {"name": "cost_usd", "type": ["null", "double"]},
        {"name": "status", "type": "int"},
        {"name": "latency_ms", "type": "double"},
        {"name": "streamed", "type": "boolean"},
        {"name": "partial", "type": "boolean", "default": False},
        {"name": "tags", "type": {"type": "map", "values": "string"}},
        {"name": "cache_hit", "type": "boolean", "default": False},
    ],
)


def utc_timestamp() -> str:
    """Now, as ISO 8601 in UTC with milliseconds."""
    return datetime.now(UTC).isoformat(timespec="milliseconds")


def latency_ms(context: RequestContext) -> float:
    """Milliseconds from the request's arrival until now."""
    return round((time.perf_counter() - context.started) * 1000, 3)


def reached_upstream(context: RequestContext) -> bool:
    """Whether the gateway called an upstream for this request (a model attempt, MCP or the native proxy)."""
    return context.attempts > 0 or context.upstream_seconds > 0


def request_tags(context: RequestContext, allowlist: dict[str, str]) -> dict[str, str]:
    """The client's tags whose keys are allowlisted: the body's `metadata` object (string values), then
    `x-gateway-tag-<key>` headers, which win. `allowlist` maps lower-cased keys to their configured spelling."""
    if not allowlist:
        return {}
    tags: dict[str, str] = {}
    metadata = context.body.get("metadata")
    if isinstance(metadata, dict):
        tags.update(
            {
                allowlist[key.lower()]: value
                for key, value in metadata.items()
                if isinstance(key, str) and key.lower() in allowlist and isinstance(value, str)
            }
        )
    for name, value in context.request.headers.items():
        key = name.removeprefix(TAG_HEADER_PREFIX)
        if name.startswith(TAG_HEADER_PREFIX) and key in allowlist:
            tags[allowlist[key]] = value
    return {key: value[:MAX_TAG_CHARS] for key, value in tags.items()}


def usage_record(context: RequestContext, allowlist: dict[str, str]) -> Record:
    """The usage record of a finished request (decisions.md, "Usage record"), plus its `kind` (operation)."""
    usage = context.usage or NO_USAGE
    destination = context.state.config.destinations.get(context.destination or "")
    return {
        "request_id": context.request.request_id,
        "ts": utc_timestamp(),
        "kind": context.operation.value,
        "principal": context.principal.id,
        "scope": context.scope,
        "route": context.route,
        "destination": context.destination,
        "provider": destination.kind if destination else None,
        "model": context.model,
        "input_tokens": usage.input_tokens,
        "output_tokens": usage.output_tokens,
        "cache_read_tokens": usage.cache_read_tokens,
        "cache_write_tokens": usage.cache_write_tokens,
        "reasoning_tokens": usage.reasoning_tokens,
        "cost_usd": context.cost_usd,
        "status": context.status,
        "latency_ms": latency_ms(context),
        "streamed": context.stream,
        "partial": context.partial,
        "tags": request_tags(context, allowlist),
        "cache_hit": cache_hit(context),
    }


class UsageStage(SinkStage):
    """Builds a usage record in `settle` and offers it to every usage sink (never blocking the request)."""

    name = "usage"

    def __init__(self, pipelines: list[SinkPipeline], tag_allowlist: list[str]) -> None:
        super().__init__(pipelines)
        self.allowlist = {key.lower(): key for key in tag_allowlist}

    @property
    def ledger(self) -> Ledger | None:
        """The first `postgres` sink, which answers the usage query."""
        return next((pipeline.sink for pipeline in self.pipelines if isinstance(pipeline.sink, Ledger)), None)

    def settle(self, context: RequestContext) -> None:
        if not reached_upstream(context) and not cache_hit(context):
            return
        record = usage_record(context, self.allowlist)
        for pipeline in self.pipelines:
            pipeline.offer(record)


def build(deps: StageDeps) -> list[Stage]:
    """The usage stage, when usage sinks are configured."""
    pipelines = build_pipelines("usage_sinks", deps, AVRO_SCHEMA)
    return [UsageStage(pipelines, deps.config.spend.request_tag_allowlist)] if pipelines else []


def _instant(query: dict[str, str], name: str) -> datetime | None:
    text = query.get(name)
    if text is None:
        return None
    try:
        instant = datetime.fromisoformat(text)
    except ValueError:
        raise GatewayError(ErrorCode.INVALID_REQUEST, f"`{name}` must be an ISO 8601 date or time") from None
    return instant if instant.tzinfo is not None else instant.replace(tzinfo=UTC)


def _group_by(query: dict[str, str], scope_dims: list[str]) -> tuple[str, ...]:
    keys = tuple(key.strip() for key in query.get("group_by", "").split(",") if key.strip())
    allowed = {*GROUP_COLUMNS, "day", *(f"dim.{dimension}" for dimension in scope_dims)}
    unknown = [key for key in keys if key not in allowed]
    if unknown or len(set(keys)) != len(keys):
        raise GatewayError(
            ErrorCode.INVALID_REQUEST, f"`group_by` takes distinct keys among {sorted(allowed)}; got {list(keys)}"
        )
    return keys


def ledger_query(query: dict[str, str], config: GatewayConfig) -> LedgerQuery:
    """Validate the query parameters (400 `invalid_request` naming the bad one)."""
    dimensions = {key.removeprefix("dim."): value for key, value in query.items() if key.startswith("dim.")}
    unknown = sorted(set(query) - QUERY_PARAMETERS - {f"dim.{dimension}" for dimension in dimensions})
    undeclared = sorted(set(dimensions) - set(config.identity.scope_dims))
    if unknown or undeclared:
        raise GatewayError(
            ErrorCode.INVALID_REQUEST,
            f"unknown parameters {unknown or undeclared}: use `from`, "
            "`to`, `group_by` and `dim.<declared scope dimension>`",
        )
    start, end = _instant(query, "from"), _instant(query, "to")
    if start is not None and end is not None and start >= end:
        raise GatewayError(ErrorCode.INVALID_REQUEST, "`from` must be before `to`")
    return LedgerQuery(
        start, end, _group_by(query, config.identity.scope_dims), dimensions, config.spend.budget_timezone
    )


async def query_usage(config: GatewayConfig, stages: list[Stage], query: dict[str, str]) -> dict[str, Any]:
    """`GET /admin/v1/spend/usage`: the relational ledger of a snapshot (its config and stages), filtered and
    grouped."""
    stage = next((stage for stage in stages if isinstance(stage, UsageStage)), None)
    ledger = stage.ledger if stage is not None else None
    if ledger is None:
        raise GatewayError(ErrorCode.USAGE_QUERY_UNAVAILABLE, "no queryable relational usage sink is configured")
    parsed = ledger_query(query, config)
    try:
        async with asyncio.timeout(ledger.options.query_timeout_ms / 1000 + ledger.options.connect_timeout_ms / 1000):
            groups = await ledger.query(parsed)
    except (TimeoutError, SinkError) as error:
        raise GatewayError(
            ErrorCode.USAGE_QUERY_UNAVAILABLE, f"the usage ledger cannot be read now: {type(error).__name__}"
        ) from None
    return {"from": query.get("from"), "to": query.get("to"), "group_by": list(parsed.group_by), "groups": groups}
