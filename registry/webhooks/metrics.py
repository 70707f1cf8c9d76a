"""What `runwebhooks` reports to Prometheus: attempts by outcome, deliveries failed for good, delivery lag,
endpoints disabled, and the queue's depth (read from the database at scrape time)."""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram

from registry.core.observability import DatabaseGauge
from registry.webhooks import deliveries

ATTEMPTS = Counter(
    "registry_webhook_attempts_total",
    "Webhook attempts this sender made, by outcome (succeeded, http_status, redirect, timeout, connection, tls, "
    "protocol, egress_refused, invalid_url, no_secret, error).",
    ["outcome"],
)
FAILED_DELIVERIES = Counter(
    "registry_webhook_deliveries_failed_total", "Deliveries this sender marked failed: their retry schedule was spent."
)
EVENTS_DISPATCHED = Counter(
    "registry_webhook_events_dispatched_total", "Outbox events this sender fanned out into deliveries."
)
ENDPOINTS_DISABLED = Counter(
    "registry_webhook_endpoint_disables_total", "Endpoints this sender disabled after sustained failure."
)
IN_FLIGHT = Gauge("registry_webhook_requests_in_flight", "Webhook requests this sender has in flight now.")
DELIVERY_LAG = Histogram(
    "registry_webhook_delivery_lag_seconds",
    "From an event's creation to its delivery's first successful send (manual redeliveries not counted).",
    buckets=(0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 1800, 3600, 4 * 3600, 86400),
)
QUEUE_DEPTH = DatabaseGauge(
    "registry_webhook_queue_depth",
    "Work waiting in the database, counted when scraped: pending deliveries and undispatched events.",
    deliveries.queue_depth,
    labels=("kind",),
)
DISABLED_ENDPOINTS = DatabaseGauge(
    "registry_webhook_endpoints_disabled",
    "Webhook endpoints that are disabled (by a user or after sustained failure), counted when scraped.",
    deliveries.disabled_endpoints,
)
SCRAPED = (QUEUE_DEPTH, DISABLED_ENDPOINTS)
