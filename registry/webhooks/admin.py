"""Django admin for webhooks, scoped to the staff member's workspaces: endpoints (never their sealed secret; enabled
and disabled by confirmed actions through the service), deliveries with their attempts (read-only; redelivered by
an action; deletable, as deleting an endpoint takes its deliveries), and the outbox's events (read-only).
Endpoints enter only through the API, which alone shows the signing secret, once."""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.http import HttpRequest, HttpResponse
from django.utils.safestring import SafeString

from registry.core.admin import ReadOnlyAdmin, ReadOnlyInline, change_link, changelist_link
from registry.webhooks import services
from registry.webhooks.models import WebhookAttempt, WebhookDelivery, WebhookEndpoint, WebhookEvent


@admin.register(WebhookEndpoint)
class WebhookEndpointAdmin(ReadOnlyAdmin):
    list_display = ("id", "name", "url", "workspace", "state", "consecutive_failures", "created_at")
    list_select_related = ("workspace",)
    list_filter = ("state",)
    search_fields = ("id", "name", "url")
    # Every field but `signing_secret_sealed`: no page shows a secret, sealed or not.
    fields = (
        "id",
        "workspace",
        "name",
        "description",
        "url",
        "enabled_events",
        "state",
        "disabled_reason",
        "consecutive_failures",
        "failing_since",
        "retry_after",
        "deliveries",
        "created_at",
        "updated_at",
    )
    readonly_fields = ("deliveries",)
    actions = ["disable", "enable"]

    @admin.display(description="deliveries")
    def deliveries(self, endpoint: WebhookEndpoint) -> SafeString:
        return changelist_link(
            "webhooks.WebhookDelivery", "deliveries to this endpoint", endpoint__id__exact=endpoint.pk
        )

    def has_toggle_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return self.permits(request, "change", obj)

    @admin.action(description="Disable selected %(verbose_name_plural)s", permissions=["toggle"])
    def disable(self, request: HttpRequest, queryset: Any) -> HttpResponse | None:
        return self.confirmed(request, queryset, action="disable", verb="Disable", done="Disabled", perform=self.off)

    @admin.action(description="Enable selected %(verbose_name_plural)s", permissions=["toggle"])
    def enable(self, request: HttpRequest, queryset: Any) -> HttpResponse | None:
        return self.confirmed(request, queryset, action="enable", verb="Enable", done="Enabled", perform=self.on)

    @staticmethod
    def off(endpoint: WebhookEndpoint) -> None:
        services.webhook_endpoint_update(endpoint=endpoint, values={"state": WebhookEndpoint.State.DISABLED})

    @staticmethod
    def on(endpoint: WebhookEndpoint) -> None:
        services.webhook_endpoint_update(endpoint=endpoint, values={"state": WebhookEndpoint.State.ENABLED})

    def delete_model(self, request: HttpRequest, obj: Any) -> None:
        services.webhook_endpoint_delete(endpoint=obj)


class WebhookAttemptInline(ReadOnlyInline):
    model = WebhookAttempt
    fields = ("number", "manual", "started_at", "latency_ms", "response_status", "error", "succeeded", "response_body")
    ordering = ("number",)


@admin.register(WebhookDelivery)
class WebhookDeliveryAdmin(ReadOnlyAdmin):
    workspace_path = "endpoint__workspace"
    list_display = ("id", "endpoint", "event_type", "status", "attempt_count", "next_attempt_at", "created_at")
    list_select_related = ("endpoint", "event")
    list_filter = ("status",)
    search_fields = ("id", "endpoint__id", "event__id")
    fields = (
        "id",
        "endpoint",
        "event_link",
        "event_type",
        "status",
        "attempt_count",
        "next_attempt_at",
        "lease_until",
        "leased_by",
        "created_at",
        "completed_at",
    )
    readonly_fields = ("event_link", "event_type")
    inlines = [WebhookAttemptInline]
    actions = ["redeliver"]

    @admin.display(description="event type", ordering="event__type")
    def event_type(self, delivery: WebhookDelivery) -> str:
        return delivery.event.type

    @admin.display(description="event")
    def event_link(self, delivery: WebhookDelivery) -> SafeString:
        return change_link(WebhookEvent, delivery.event_id, delivery.event.id)

    def has_redeliver_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return self.permits(request, "act", obj)

    @admin.action(description="Redeliver selected %(verbose_name_plural)s", permissions=["redeliver"])
    def redeliver(self, request: HttpRequest, queryset: Any) -> HttpResponse | None:
        return self.confirmed(
            request, queryset, action="redeliver", verb="Redeliver", done="Redelivered", perform=self.again
        )

    @staticmethod
    def again(delivery: WebhookDelivery) -> None:
        services.webhook_delivery_redeliver(delivery=delivery)


class WorkspaceIdFilter(admin.AllValuesFieldListFilter):
    """The workspace filter over a plain workspace id (the values of the rows the page may show)."""

    def __init__(self, field: Any, request: HttpRequest, params: Any, model: Any, model_admin: Any, field_path: str):
        super().__init__(field, request, params, model, model_admin, field_path)
        self.title = "workspace"


@admin.register(WebhookEvent)
class WebhookEventAdmin(ReadOnlyAdmin):
    """The outbox: each event row as written by the change that caused it (its workspace is a plain id)."""

    workspace_path = "workspace_id"
    deletable = False
    list_display = ("id", "type", "workspace_id", "created_at", "dispatched_at")
    list_filter = ("type",)
    search_fields = ("id", "type", "workspace_id")
    fields = ("seq", "id", "workspace_id", "type", "data", "created_at", "dispatched_at")

    def workspace_of(self, obj: Any) -> str:
        return str(obj.workspace_id)

    def get_list_filter(self, request: HttpRequest) -> Any:
        """The type, and the workspace (a plain id here, not a relation) for those who reach more than one."""
        reach = self.reach(request, "view")
        if reach is not None and len(reach) < 2:
            return self.list_filter
        return (*self.list_filter, ("workspace_id", WorkspaceIdFilter))
