"""What operators see of every process: JSON log lines carrying request, session and trace ids,
Prometheus metrics (the API's requests and database pool, gauges read from the database at scrape
time), and the small `/healthz` `/readyz` `/metrics` server of `runsessions` and `runtriggers`.
"""

from __future__ import annotations

import contextvars
import hmac
import ipaddress
import logging
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import orjson
from django.conf import settings
from django.db import DatabaseError, connection, connections
from django.http import HttpRequest, HttpResponse
from prometheus_client import CONTENT_TYPE_LATEST, REGISTRY, Counter, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector

logger = logging.getLogger(__name__)

# -- ids in log lines ----------------------------------------------------------------------------
request_id: contextvars.ContextVar[str | None] = contextvars.ContextVar("request_id", default=None)
session_id: contextvars.ContextVar[str | None] = contextvars.ContextVar("session_id", default=None)
trace_id: contextvars.ContextVar[str | None] = contextvars.ContextVar("trace_id", default=None)
LOG_IDS = {"request_id": request_id, "session_id": session_id, "trace_id": trace_id}


@contextmanager
def log_ids(**values: str | None) -> Iterator[None]:
    """Log lines written inside (in this thread or task) carry these ids (`session_id=...`)."""
    tokens = [(LOG_IDS[name], LOG_IDS[name].set(value)) for name, value in values.items()]
    try:
        yield
    finally:
        for variable, token in reversed(tokens):
            variable.reset(token)


class JsonFormatter(logging.Formatter):
    """One JSON object per line: time, level, logger, message, the known ids, and any traceback.

    Only the message the code wrote goes out (never the record's arguments or extra fields apart),
    so what a line may contain is decided where it is logged.
    """

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        for name, variable in LOG_IDS.items():
            if (value := variable.get()) is not None:
                line[name] = value
        if record.exc_info:
            line["exception"] = self.formatException(record.exc_info)
        return orjson.dumps(line).decode()


def trace_of(traceparent: str) -> str | None:
    """The trace id of a W3C `traceparent` header (`00-<32 hex>-<16 hex>-<2 hex>`), if well formed."""
    parts = traceparent.strip().split("-")
    if len(parts) == 4 and len(parts[1]) == 32 and all(c in "0123456789abcdef" for c in parts[1]):
        return parts[1]
    return None


# -- the API's request metrics -------------------------------------------------------------------
HTTP_REQUESTS = Counter(
    "registry_http_requests_total", "API requests answered, by method, route and status.", ["method", "route", "status"]
)
HTTP_LATENCY = Histogram(
    "registry_http_request_duration_seconds", "API request latency, by method and route.", ["method", "route"]
)
KNOWN_METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})


class RequestObservabilityMiddleware:
    """Counts and times each request by its route pattern (not its path, which holds ids), and puts the
    request id (set by RequestIdMiddleware, which must come first) and the caller's trace id in log lines."""

    sync_capable = True
    async_capable = False

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        started = time.perf_counter()
        trace = trace_of(request.headers.get("traceparent", ""))
        with log_ids(request_id=getattr(request, "request_id", None), trace_id=trace):
            response = self.get_response(request)
        method = request.method if request.method in KNOWN_METHODS else "other"
        match = request.resolver_match
        route = match.route if match is not None else "unmatched"
        HTTP_REQUESTS.labels(method, route, str(response.status_code)).inc()
        HTTP_LATENCY.labels(method, route).observe(time.perf_counter() - started)
        return response


class DatabasePoolCollector(Collector):
    """The psycopg pool of each database alias that has one (`DATABASE_POOL`), from its own counters."""

    GAUGES = {
        "pool_size": ("pool_size", "Connections open, in use or idle."),
        "pool_available": ("pool_available", "Idle connections."),
        "pool_max": ("pool_max", "The pool's upper bound."),
        "requests_waiting": ("pool_requests_waiting", "Requests waiting for a connection now."),
    }
    COUNTERS = {
        "requests_num": ("requests", "Connections asked of the pool."),
        "requests_queued": ("requests_queued", "Requests that had to wait for a connection."),
        "requests_errors": ("requests_errors", "Requests that got no connection (timeout or error)."),
        "connections_num": ("connections_opened", "Connections the pool opened."),
    }

    def collect(self) -> Iterable[Metric]:
        pools = {alias: getattr(connections[alias], "pool", None) for alias in connections}
        stats = {alias: pool.get_stats() for alias, pool in pools.items() if pool is not None}
        if not stats:
            return []
        families: list[Metric] = []
        for key, (name, documentation) in self.GAUGES.items():
            family = GaugeMetricFamily(f"registry_db_{name}", documentation, labels=["alias"])
            for alias, values in stats.items():
                family.add_metric([alias], values.get(key, 0))
            families.append(family)
        for key, (name, documentation) in self.COUNTERS.items():
            counter = CounterMetricFamily(f"registry_db_pool_{name}", documentation, labels=["alias"])
            for alias, values in stats.items():
                counter.add_metric([alias], values.get(key, 0))
            families.append(counter)
        return families


def loopback(address: str) -> bool:
    try:
        return ipaddress.ip_address(address).is_loopback
    except ValueError:
        return False


def metrics_view(request: HttpRequest) -> HttpResponse:
    """The API's `/metrics`: with `REGISTRY_METRICS_TOKEN` set, for its bearer only; else loopback only."""
    # Here, not at the top: the logging configuration imports this module before the apps are loaded.
    from registry.core.errors import ErrorType, json_error

    token = settings.REGISTRY_METRICS_TOKEN
    if token:
        offered = request.headers.get("authorization", "").removeprefix("Bearer ").strip()
        if not hmac.compare_digest(offered.encode(), token.encode()):
            return json_error(request, ErrorType.AUTHENTICATION, "Metrics need the metrics bearer token.")
    elif not loopback(request.META.get("REMOTE_ADDR", "")):
        return json_error(request, ErrorType.PERMISSION, "Metrics are served to loopback clients only.")
    return HttpResponse(exposition(DatabasePoolCollector()), content_type=CONTENT_TYPE_LATEST)


# -- gauges read from the database, and the exposition ------------------------------------------
class DatabaseGauge(Collector):
    """A gauge counted in the database when scraped; a failed read leaves it out of that scrape.

    With `labels`, `read` returns `{label values: value}`, one sample each; without, a single value."""

    def __init__(self, name: str, documentation: str, read: Callable[[], Any], labels: tuple[str, ...] = ()) -> None:
        self.name, self.documentation, self.read, self.labels = name, documentation, read, labels

    def collect(self) -> Iterable[Metric]:
        try:
            value = self.read()
        except DatabaseError as error:
            logger.warning("reading %s failed: %s", self.name, type(error).__name__)
            return []
        finally:
            connection.close()  # each scrape runs in its own thread: give its connection back
        if not self.labels:
            return [GaugeMetricFamily(self.name, self.documentation, value=value)]
        family = GaugeMetricFamily(self.name, self.documentation, labels=list(self.labels))
        for label_values, sample in value.items():
            family.add_metric(list(label_values), sample)
        return [family]


class Exposition(Collector):
    """The process's metrics (the default registry) and some collected on demand only."""

    def __init__(self, extra: Iterable[Collector]) -> None:
        self.extra = list(extra)

    def collect(self) -> Iterable[Metric]:
        for collector in (REGISTRY, *self.extra):
            yield from collector.collect()


def exposition(*extra: Collector) -> bytes:
    return generate_latest(Exposition(extra))


def database_reachable() -> bool:
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
        return True
    except DatabaseError:
        return False
    finally:
        connection.close()


# -- the health server of the worker processes --------------------------------------------------
Readiness = Callable[[], str | None]  # None when ready, else why not


class HealthHandler(BaseHTTPRequestHandler):
    """`/healthz` (the process is up), `/readyz` (it can do its job), `/metrics` (Prometheus text)."""

    server: HealthHttpServer

    def do_GET(self) -> None:
        path = self.path.split("?", 1)[0]
        if path == "/healthz":
            self.answer(200, b"ok\n")
        elif path == "/readyz":
            reason = self.server.ready()
            if reason is None:
                self.answer(200, b"ready\n")
            else:
                self.answer(503, f"{reason}\n".encode())
        elif path == "/metrics":
            self.answer(200, exposition(*self.server.samples), CONTENT_TYPE_LATEST)
        else:
            self.answer(404, b"not found\n")

    def answer(self, status: int, body: bytes, content_type: str = "text/plain; charset=utf-8") -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        """Probes and scrapes every few seconds are not worth a log line each."""


class HealthHttpServer(ThreadingHTTPServer):
    """The listening socket, with what the handler answers from."""

    daemon_threads = True

    def __init__(self, address: tuple[str, int], ready: Readiness, samples: Iterable[Collector]) -> None:
        super().__init__(address, HealthHandler)
        self.ready = ready
        self.samples = list(samples)


class HealthServer:
    """The health server of one process, bound at construction (so its port is known) and served by a
    daemon thread from `start()`."""

    def __init__(self, *, bind: str, port: int, ready: Readiness, samples: Iterable[Collector] = ()) -> None:
        self.http = HealthHttpServer((bind, port), ready, samples)
        self._thread = threading.Thread(target=self.http.serve_forever, name="health", daemon=True)

    @property
    def port(self) -> int:
        return int(self.http.server_address[1])

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        if self._thread.is_alive():
            self.http.shutdown()
        self.http.server_close()


def health_server(default_port: int, ready: Readiness, samples: Iterable[Collector] = ()) -> HealthServer | None:
    """The process's health server per `REGISTRY_HEALTH_PORT` (empty: `default_port`, 0: a free port
    the "started" log line names, `off`: none) on `REGISTRY_HEALTH_BIND`.

    A port set on purpose that is taken fails the start; the default port taken (several workers on
    one host, `manage.py up` twice) falls back to a free one with a warning.
    """
    raw = settings.REGISTRY_HEALTH_PORT.strip().lower()
    if raw == "off":
        return None
    bind = settings.REGISTRY_HEALTH_BIND
    if raw:
        return HealthServer(bind=bind, port=int(raw), ready=ready, samples=samples)
    try:
        return HealthServer(bind=bind, port=default_port, ready=ready, samples=samples)
    except OSError as error:
        logger.warning("health port %d unavailable (%s): using a free port", default_port, error.strerror)
        return HealthServer(bind=bind, port=0, ready=ready, samples=samples)
