"""Builds the sink pipelines of a slot (`usage_sinks`, `audit_sinks`) from the config: each kind's options
validated at boot (a bad key fails it, named), the metrics registered once per process."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from gatewayproxy.config.kinds import canonical_kind
from gatewayproxy.plugins.decisions import plugin_options
from gatewayproxy.plugins.deps import PluginDeps
from gatewayproxy.plugins.sinks.base import Sink, SinkOptions
from gatewayproxy.plugins.sinks.ext_proc import ExtProcOptions, ExtProcSink
from gatewayproxy.plugins.sinks.file import FileOptions, FileSink
from gatewayproxy.plugins.sinks.kafka_options import KafkaOptions
from gatewayproxy.plugins.sinks.ledger import PostgresOptions
from gatewayproxy.plugins.sinks.pipeline import SinkMetrics, SinkPipeline
from gatewayproxy.plugins.sinks.registry import RegistryOptions, RegistrySink
from gatewayproxy.plugins.sinks.stdout import StdoutOptions, StdoutSink


def _postgres(deps: PluginDeps, options: Any, schema: dict[str, Any]) -> Sink:
    from gatewayproxy.plugins.sinks.postgres import PostgresSink  # psycopg: only where a ledger is configured

    return PostgresSink(options)


def _kafka(deps: PluginDeps, options: Any, schema: dict[str, Any]) -> Sink:
    from gatewayproxy.plugins.sinks.kafka import KafkaSink  # aiokafka and fastavro: only where Kafka is configured

    return KafkaSink(deps.pool, options, schema)


# kind -> (its options model, a factory of the sink from deps, options and the slot's Avro schema)
SinkFactory = Callable[[PluginDeps, Any, dict[str, Any]], Sink]
KINDS: dict[str, tuple[type[SinkOptions], SinkFactory]] = {
    "stdout": (StdoutOptions, lambda deps, options, schema: StdoutSink(options)),
    "file": (FileOptions, lambda deps, options, schema: FileSink(options)),
    "postgres": (PostgresOptions, _postgres),
    "kafka": (KafkaOptions, _kafka),
    "registry": (RegistryOptions, lambda deps, options, schema: RegistrySink(deps.pool, options)),
    "ext_proc": (ExtProcOptions, lambda deps, options, schema: ExtProcSink(deps.pool, options)),
}
DISCARDING_KINDS = frozenset({"noop"})


def sink_metrics(deps: PluginDeps) -> SinkMetrics:
    """The process's sink metrics, registered on the first snapshot and shared by every later one."""
    return deps.shared.get("sinks.metrics", lambda: SinkMetrics(deps.metrics.registry))


def build_pipelines(slot: str, deps: PluginDeps, avro_schema: dict[str, Any]) -> list[SinkPipeline]:
    """One pipeline per configured instance of `slot` (a `noop` instance needs none)."""
    pipelines = []
    for index, instance in enumerate(getattr(deps.config.plugins, slot)):
        kind = canonical_kind(slot, instance.kind)
        if kind in DISCARDING_KINDS:
            continue
        options_model, factory = KINDS[kind]
        options = plugin_options(options_model, instance, f"plugins.{slot}[{index}]", deps.base_dir)
        pipelines.append(
            SinkPipeline(slot, instance.name, factory(deps, options, avro_schema), options, sink_metrics(deps))
        )
    return pipelines
