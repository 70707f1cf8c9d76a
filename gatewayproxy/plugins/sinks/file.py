"""The `file` audit sink: JSON lines appended to `path`, flushed and fsynced per batch."""

from __future__ import annotations

import asyncio
import os

from gatewayproxy.config.models import FilePath
from gatewayproxy.plugins.sinks.base import Record, Sink, SinkError, SinkOptions
from gatewayproxy.plugins.sinks.stdout import json_lines


class FileOptions(SinkOptions):
    """`path`: the JSONL file to append to (created when missing; relative to the config file)."""

    path: FilePath


class FileSink(Sink):
    """Appends each batch to one file."""

    def __init__(self, options: FileOptions) -> None:
        self.path = options.path

    async def write(self, batch: list[Record]) -> None:
        try:
            await asyncio.to_thread(self._append, json_lines(batch).encode())
        except OSError as error:
            raise SinkError(f"cannot append to {self.path}: {error.strerror}") from None

    def _append(self, data: bytes) -> None:
        with open(self.path, "ab") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
