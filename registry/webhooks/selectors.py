"""Reads for webhooks: a workspace's endpoints, an endpoint's deliveries (each with a summary of its last attempt)
and their attempts, and the `after_id` / `before_id` pages the reference client's lists walk."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.db.models import OuterRef, Prefetch, QuerySet, Subquery

from registry.core.errors import invalid_request
from registry.core.pagination import after_condition
from registry.webhooks.models import WebhookAttempt, WebhookDelivery, WebhookEndpoint

PAGE_KEYS = ("created_at", "id")


def webhook_endpoints(*, workspace_id: str) -> QuerySet[WebhookEndpoint]:
    return WebhookEndpoint.objects.filter(workspace_id=workspace_id)


def endpoint_deliveries(*, endpoint: WebhookEndpoint, status: str | None = None) -> QuerySet[WebhookDelivery]:
    """The endpoint's deliveries with their event and `last_attempt_*` (the highest-numbered attempt's
    number, response status, latency and error; null without an attempt)."""
    latest = WebhookAttempt.objects.filter(delivery=OuterRef("pk")).order_by("-number")
    deliveries = (
        WebhookDelivery.objects.filter(endpoint=endpoint)
        .select_related("event")
        .annotate(
            last_attempt_number=Subquery(latest.values("number")[:1]),
            last_attempt_response_status=Subquery(latest.values("response_status")[:1]),
            last_attempt_latency_ms=Subquery(latest.values("latency_ms")[:1]),
            last_attempt_error=Subquery(latest.values("error")[:1]),
        )
    )
    return deliveries if status is None else deliveries.filter(status=status)


def endpoint_delivery(*, endpoint: WebhookEndpoint, delivery_id: str) -> WebhookDelivery | None:
    """One delivery of the endpoint with its attempts in order (`attempts_in_order`), or None."""
    attempts = Prefetch("attempts", queryset=WebhookAttempt.objects.order_by("number"), to_attr="attempts_in_order")
    return endpoint_deliveries(endpoint=endpoint).prefetch_related(attempts).filter(pk=delivery_id).first()


@dataclass(frozen=True)
class Page:
    """One page of a list: its rows in list order, and whether more follow them in the walked direction."""

    rows: list[Any]
    has_more: bool


def page_of(
    queryset: QuerySet[Any],
    *,
    limit: int,
    descending: bool,
    after_id: str | None = None,
    before_id: str | None = None,
    cursors: QuerySet[Any] | None = None,
) -> Page:
    """A page of `queryset` ordered by (created_at, id), newest first when `descending`.

    `after_id`: the first `limit` rows after that row in list order. `before_id` (as the reference client's
    lists define it): the first `limit` rows that come before that row in list order, from the list's start.
    A cursor id is looked up in `cursors` (by default `queryset`; a filtered list passes its unfiltered rows,
    so a row that left the filter since the last page still marks the place); one not there is a 400.
    """
    source = queryset if cursors is None else cursors
    ordering = [f"-{key}" if descending else key for key in PAGE_KEYS]
    if after_id is not None:
        queryset = queryset.filter(after_condition(PAGE_KEYS, _cursor(source, after_id, "after_id"), descending))
    if before_id is not None:
        cursor = _cursor(source, before_id, "before_id")
        queryset = queryset.filter(after_condition(PAGE_KEYS, cursor, not descending))
    rows = list(queryset.order_by(*ordering)[: limit + 1])
    return Page(rows=rows[:limit], has_more=len(rows) > limit)


def _cursor(queryset: QuerySet[Any], identifier: str, name: str) -> tuple[Any, ...]:
    found = queryset.filter(pk=identifier).values_list(*PAGE_KEYS).first()
    if found is None:
        raise invalid_request(f"{name}: {identifier} is not an item of this list.")
    return tuple(found)
