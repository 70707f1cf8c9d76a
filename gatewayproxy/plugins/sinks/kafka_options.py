"""The `kafka` sink's options, apart from the sink so a config can be validated without the Kafka client."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from gatewayproxy.config.models import FilePath
from gatewayproxy.plugins.decisions import PluginOptions
from gatewayproxy.plugins.sinks.base import SinkOptions

SCHEMA_REGISTRY_TIMEOUT_MS = 3000


class Serialization(PluginOptions):
    """`format`: `json` (default) or `avro`."""

    format: Literal["json", "avro"] = "json"


class SchemaRegistry(PluginOptions):
    """Where the Avro schema is registered; `subject` defaults to `<topic>-value`."""

    url: str
    subject: str | None = None
    bearer_token_file: FilePath | None = None
    timeout_ms: int = Field(default=SCHEMA_REGISTRY_TIMEOUT_MS, gt=0)


class KafkaOptions(SinkOptions):
    """`bootstrap_servers` (a `host:port` list or comma-separated string) and `topic`; Avro needs a
    `schema_registry`."""

    bootstrap_servers: str | list[str]
    topic: str
    client_id: str = "gateway"
    acks: Literal["all", 0, 1] = "all"
    serialization: Serialization = Serialization()
    schema_registry: SchemaRegistry | None = None

    @model_validator(mode="after")
    def _avro_needs_a_registry(self) -> KafkaOptions:
        if self.serialization.format == "avro" and self.schema_registry is None:
            raise ValueError("`serialization.format: avro` requires a `schema_registry` block")
        return self
