"""Prometheus metrics of one gateway process (its own registry, exposed by the admin plane's /metrics)."""

from __future__ import annotations

import os
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest, multiprocess, values

LATENCY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120)
OVERHEAD_BUCKETS = (0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.05)
_multiprocess_dir: str | None = None  # set in a worker of several: metrics live in files shared by the workers


def enable_multiprocess(directory: str) -> None:
    """Keep every metric made from now on in this process's files under `directory` (prometheus-client's
    multiprocess mode), where any worker's exposition reads and sums every worker's."""
    global _multiprocess_dir
    os.environ["PROMETHEUS_MULTIPROC_DIR"] = directory
    values.ValueClass = values.MultiProcessValue()
    _multiprocess_dir = directory


def process_exited(pid: int, directory: str) -> None:
    """A worker ended: its live gauges (requests in flight) leave the totals."""
    multiprocess.mark_process_dead(pid, directory)


class GatewayMetrics:
    """The gateway's counters, gauges and histograms."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self._children: dict[tuple[int, tuple[str, ...]], Any] = {}
        registry = self.registry
        self.requests = Counter(
            "gateway_requests", "Data-plane requests served.", ["route", "status"], registry=registry
        )
        self.latency = Histogram(
            "gateway_request_duration_seconds",
            "Time to the last byte of a response.",
            ["route"],
            buckets=LATENCY_BUCKETS,
            registry=registry,
        )
        self.overhead = Histogram(
            "gateway_overhead_seconds",
            "Request time not spent waiting on the upstream.",
            buckets=OVERHEAD_BUCKETS,
            registry=registry,
        )
        self.attempts = Counter(
            "gateway_upstream_attempts", "Upstream calls by outcome.", ["destination", "outcome"], registry=registry
        )
        self.retries = Counter("gateway_retries", "Repeated calls to the same target.", ["route"], registry=registry)
        self.fallbacks = Counter("gateway_fallbacks", "Moves to the next target.", ["route"], registry=registry)
        self.errors = Counter("gateway_errors", "Error responses by code.", ["code"], registry=registry)
        self.in_flight = Gauge(
            "gateway_in_flight_requests",
            "Data-plane requests being served.",
            registry=registry,
            multiprocess_mode="livesum",
        )
        self.tokens = Counter(
            "gateway_tokens", "Tokens by destination and direction.", ["destination", "direction"], registry=registry
        )
        self.destination_ejected = Gauge(
            "gateway_destination_ejected",
            "1 while outlier detection has ejected the destination.",
            ["destination"],
            registry=registry,
        )
        self.upstream_auth_failures = Counter(
            "gateway_upstream_auth_failures",
            "Provider refusals (401/403) of the gateway's own credential.",
            ["destination"],
            registry=registry,
        )
        self.price_refresh_failures = Counter(
            "gateway_price_refresh_failures", "Failed fetches of a price table.", ["cost_model"], registry=registry
        )

    def child(self, metric: Any, *labels: str) -> Any:
        """`metric.labels(*labels)`, memoized: the hot path skips prometheus-client's label validation."""
        key = (id(metric), labels)
        found = self._children.get(key)
        if found is None:
            found = self._children[key] = metric.labels(*labels)
        return found

    def exposition(self) -> bytes:
        """The text exposition format (of every worker, when there are several)."""
        if _multiprocess_dir is not None:
            registry = CollectorRegistry()
            multiprocess.MultiProcessCollector(registry, path=_multiprocess_dir)
            return generate_latest(registry)
        return generate_latest(self.registry)
