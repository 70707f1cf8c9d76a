"""What the observability tests read from the processes they start: a process started with a health port and
JSON logs (`Watched`), samples of a Prometheus exposition, and this host's non-loopback address."""

from __future__ import annotations

import json
import socket
from pathlib import Path
from typing import Any

import httpx
from prometheus_client.parser import text_string_to_metric_families

from tests.support.processes import Process


class Watched:
    """A process started with `REGISTRY_HEALTH_PORT=0` and `LOG_FORMAT=json`, and its health server."""

    def __init__(self, process: Process, started: dict[str, Any]) -> None:
        self.process = process
        self.started = started
        self.url = f"http://127.0.0.1:{started['message'].rsplit('health port ', 1)[1].rstrip(')')}"

    def get(self, path: str) -> httpx.Response:
        return httpx.get(f"{self.url}{path}", timeout=5)

    def metric(self, name: str, **labels: str) -> float | None:
        return sample(self.get("/metrics").text, name, **labels)

    def log_lines(self) -> list[dict[str, Any]]:
        return [json.loads(line) for line in self.process.log.read_text().splitlines() if line.strip()]


def sample(exposition: str, name: str, **labels: str) -> float | None:
    """The value of the sample `name` with these labels in a Prometheus text exposition, or None."""
    for family in text_string_to_metric_families(exposition):
        for item in family.samples:
            if item.name == name and all(item.labels.get(key) == value for key, value in labels.items()):
                return float(item.value)
    return None


def started_line(log: Path) -> dict[str, Any] | None:
    for line in log.read_text().splitlines():
        if line.startswith("{") and " started (" in (record := json.loads(line))["message"]:
            return dict(record)
    return None


def outside_address() -> str:
    """This host's address on its outgoing interface, which is not loopback (a UDP connect sends nothing)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        probe.connect(("198.51.100.1", 9))
        return str(probe.getsockname()[0])
