"""The `kafka` sink (usage and audit): records produced to `topic`, keyed by request id, as JSON or as Avro in
the schema-registry wire format (magic byte 0, the 4-byte schema id, the Avro body)."""

from __future__ import annotations

import io
import struct
from typing import Any

import fastavro
import orjson
from aiokafka import AIOKafkaProducer
from aiokafka.errors import KafkaError

from gatewayproxy.plugins.decisions import BackendError, post_json
from gatewayproxy.plugins.sinks.base import Record, Sink, SinkError
from gatewayproxy.plugins.sinks.kafka_options import KafkaOptions, SchemaRegistry
from gatewayproxy.server.upstream import UpstreamPool

AVRO_MAGIC = b"\x00"


class JsonEncoding:
    """Records as JSON documents."""

    async def ready(self) -> None:
        """Nothing to prepare."""

    def encode(self, record: Record) -> bytes:
        """One record's message value."""
        return orjson.dumps(record)


class AvroEncoding:
    """Records as Avro in the schema-registry wire format; the schema is registered once, on first use."""

    def __init__(self, pool: UpstreamPool, registry: SchemaRegistry, subject: str, schema: dict[str, Any]) -> None:
        self.pool, self.registry, self.subject, self.schema = pool, registry, subject, schema
        self.parsed = fastavro.parse_schema(schema)
        self.schema_id: int | None = None

    async def ready(self) -> None:
        """Register the schema (idempotent at the registry) and keep its id."""
        if self.schema_id is not None:
            return
        url = f"{self.registry.url.rstrip('/')}/subjects/{self.subject}/versions"
        try:
            answer = await post_json(
                self.pool,
                url,
                {"schema": orjson.dumps(self.schema).decode()},
                self.registry.timeout_ms / 1000,
                self.registry.bearer_token_file,
            )
        except BackendError as error:
            raise SinkError(f"schema registry: {error}") from None
        if not isinstance(answer, dict) or not isinstance(answer.get("id"), int):
            raise SinkError("schema registry: the answer has no schema id")
        self.schema_id = answer["id"]

    def encode(self, record: Record) -> bytes:
        """One record's message value."""
        assert self.schema_id is not None
        body = io.BytesIO()
        fastavro.schemaless_writer(body, self.parsed, record)
        return AVRO_MAGIC + struct.pack(">I", self.schema_id) + body.getvalue()


class KafkaSink(Sink):
    """A producer started on first use (and restarted after a failure), so a broker that is down at boot only
    sends records to the spool."""

    def __init__(self, pool: UpstreamPool, options: KafkaOptions, avro_schema: dict[str, Any]) -> None:
        self.options = options
        self.encoding: JsonEncoding | AvroEncoding = JsonEncoding()
        if options.schema_registry is not None and options.serialization.format == "avro":
            subject = options.schema_registry.subject or f"{options.topic}-value"
            self.encoding = AvroEncoding(pool, options.schema_registry, subject, avro_schema)
        self._producer: AIOKafkaProducer | None = None

    async def write(self, batch: list[Record]) -> None:
        await self.encoding.ready()
        try:
            producer = await self._started_producer()
            deliveries = [
                await producer.send(
                    self.options.topic, self.encoding.encode(record), key=str(record["request_id"]).encode()
                )
                for record in batch
            ]
            for delivery in deliveries:
                await delivery
        except KafkaError as error:
            await self.close()
            raise SinkError(f"kafka: {type(error).__name__}: {error}") from None

    async def close(self) -> None:
        if self._producer is not None:
            producer, self._producer = self._producer, None
            await producer.stop()

    async def _started_producer(self) -> AIOKafkaProducer:
        if self._producer is None:
            servers = self.options.bootstrap_servers
            producer = AIOKafkaProducer(
                bootstrap_servers=servers if isinstance(servers, str) else ",".join(servers),
                client_id=self.options.client_id,
                acks=self.options.acks,
                request_timeout_ms=self.options.write_timeout_ms,
            )
            try:
                await producer.start()
            except BaseException:
                await producer.stop()
                raise
            self._producer = producer
        return self._producer
