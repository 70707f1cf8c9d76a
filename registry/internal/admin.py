"""The admin's usage and spend page: the usage records gateways report through their `registry` usage sink
(`UsageRecord`, the only usage the database holds), totalled per day, workspace, key (the record's principal)
and model, with a bar chart of each day's cost drawn server-side as SVG. Superusers see every record; a staff
member sees the records of the workspaces they are staff of (records without a workspace: superusers only)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from decimal import Decimal
from typing import Any

from django.contrib import admin
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse
from django.template.response import TemplateResponse
from django.utils import timezone

from registry.core.admin import StaffScopedAdmin
from registry.internal import selectors
from registry.internal.models import UsageRecord
from registry.workspaces.staff import staff_workspace_ids

DEFAULT_DAYS = 30
MAX_DAYS = 366
CHART_HEIGHT = 120  # pixels of the tallest bar
BAR_WIDTH = 18


@dataclass(frozen=True)
class DayBar:
    """One day's bar of the chart: its totals and where the SVG draws it."""

    day: str
    requests: int
    tokens: int
    cost_usd: Decimal
    x: int
    y: int
    height: int


def day_bars(totals: list[selectors.UsageTotal]) -> list[DayBar]:
    """A bar per day (oldest first), its height the day's cost against the costliest day's (requests when
    nothing is priced)."""
    days: dict[str, list[selectors.UsageTotal]] = {}
    for total in sorted(totals, key=lambda total: total.day):
        days.setdefault(total.day.isoformat(), []).append(total)
    sums = {
        day: (
            sum(row.requests for row in rows),
            sum(row.input_tokens + row.output_tokens for row in rows),
            sum((row.cost_usd or Decimal(0) for row in rows), Decimal(0)),
        )
        for day, rows in days.items()
    }
    priced = any(cost for _, _, cost in sums.values())
    measure = {day: float(cost if priced else requests) for day, (requests, _, cost) in sums.items()}
    tallest = max(measure.values(), default=0.0) or 1.0
    bars = []
    for index, (day, (requests, tokens, cost)) in enumerate(sums.items()):
        height = max(1, round(measure[day] / tallest * CHART_HEIGHT))
        bars.append(DayBar(day, requests, tokens, cost, index * (BAR_WIDTH + 4), CHART_HEIGHT - height, height))
    return bars


def _days(request: HttpRequest) -> int:
    try:
        return min(max(int(request.GET.get("days") or DEFAULT_DAYS), 1), MAX_DAYS)
    except ValueError:
        return DEFAULT_DAYS


@admin.register(UsageRecord)
class UsageAdmin(StaffScopedAdmin):
    """The usage and spend page (the list of usage records replaced by their totals), read-only. It lists no
    objects (`workspace_path` None): it totals the records of the workspaces the user is staff of itself."""

    workspace_path = None

    def reach(self, request: HttpRequest, permission: str) -> set[str] | None:
        """Viewing reaches the workspaces the user is staff of (None: every one); nothing else is allowed."""
        return staff_workspace_ids(request.user) if permission == "view" else set()

    def has_view_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return obj is None and self.permits(request, "view")

    def changelist_view(self, request: HttpRequest, extra_context: Any = None) -> HttpResponse:
        if not self.has_view_permission(request):
            raise PermissionDenied
        days = _days(request)
        within = selectors.UsageFilter(
            since=timezone.now() - timedelta(days=days),
            workspace_ids=self.reach(request, "view"),
            workspace=request.GET.get("workspace") or None,
            key=request.GET.get("key") or None,
            model=request.GET.get("model") or None,
        )
        totals = selectors.usage_totals(within)
        bars = day_bars(totals)
        context = {
            **self.admin_site.each_context(request),
            **(extra_context or {}),
            "title": "Usage and spend",
            "opts": self.opts,
            "days": days,
            "within": within,
            "choices": selectors.usage_choices(within),
            "totals": totals,
            "bars": bars,
            "chart_width": max(len(bars), 1) * (BAR_WIDTH + 4),
            "chart_height": CHART_HEIGHT,
            "bar_width": BAR_WIDTH,
            "grand": {
                "requests": sum(bar.requests for bar in bars),
                "tokens": sum(bar.tokens for bar in bars),
                "cost_usd": sum((bar.cost_usd for bar in bars), Decimal(0)),
            },
        }
        return TemplateResponse(request, "admin/internal/usage.html", context)
