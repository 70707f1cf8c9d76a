"""The `stdout` sink: one JSON line per record on the process's standard output."""

from __future__ import annotations

import asyncio
import sys

import orjson

from gatewayproxy.plugins.sinks.base import Record, Sink, SinkOptions


def json_lines(batch: list[Record]) -> str:
    """A batch as JSON lines."""
    return "".join(orjson.dumps(record).decode() + "\n" for record in batch)


class StdoutOptions(SinkOptions):
    """No options of its own."""


class StdoutSink(Sink):
    """Writes each batch to `sys.stdout` (looked up per write, so a redirected stdout is followed)."""

    def __init__(self, options: StdoutOptions) -> None:
        self.options = options

    async def write(self, batch: list[Record]) -> None:
        await asyncio.to_thread(self._write, json_lines(batch))

    @staticmethod
    def _write(text: str) -> None:
        sys.stdout.write(text)
        sys.stdout.flush()
