"""Django admin for deployments and their runs, read-only: a change must go through the API's services, which
validate it and keep the schedule and `status` consistent. Staff act on deployments with confirmed actions
(pause, unpause, run now, archive) that call the same services, webhook events included; runs are an
append-only record, never changed or deleted here."""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse

from registry.core.admin import ArchivableAdmin, ReadOnlyAdmin, ReadOnlyInline
from registry.deployments import services
from registry.deployments.models import Deployment, DeploymentRun

RUN_FIELDS = ("id", "trigger_type", "scheduled_at", "session_id", "error", "created_at")


class DeploymentRunInline(ReadOnlyInline):
    model = DeploymentRun
    fields = RUN_FIELDS
    ordering = ("-created_at",)
    show_change_link = True


@admin.register(Deployment)
class DeploymentAdmin(ArchivableAdmin, ReadOnlyAdmin):
    deletable = False  # archive is final; the API deletes no deployment
    list_display = ("id", "name", "workspace", "agent", "status", "schedule_expression", "next_fire_at", "archived_at")
    list_filter = ("status",)
    list_select_related = ("workspace", "agent")
    search_fields = ("id", "name")
    inlines = [DeploymentRunInline]
    actions = ["archive", "pause", "unpause", "run_now"]

    def archive_one(self, obj: Deployment) -> None:
        services.deployment_archive(deployment=obj)

    def has_operate_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return self.permits(request, "act", obj)

    @admin.action(description="Pause selected %(verbose_name_plural)s", permissions=["operate"])
    def pause(self, request: HttpRequest, queryset: QuerySet[Deployment]) -> HttpResponse | None:
        return self.confirmed(
            request,
            queryset,
            action="pause",
            verb="Pause",
            done="Paused",
            perform=lambda deployment: services.deployment_pause(deployment=deployment),
        )

    @admin.action(description="Unpause selected %(verbose_name_plural)s", permissions=["operate"])
    def unpause(self, request: HttpRequest, queryset: QuerySet[Deployment]) -> HttpResponse | None:
        return self.confirmed(
            request,
            queryset,
            action="unpause",
            verb="Unpause",
            done="Unpaused",
            perform=lambda deployment: services.deployment_unpause(deployment=deployment),
        )

    @admin.action(description="Run selected %(verbose_name_plural)s now", permissions=["operate"])
    def run_now(self, request: HttpRequest, queryset: QuerySet[Deployment]) -> HttpResponse | None:
        return self.confirmed(
            request,
            queryset,
            action="run_now",
            verb="Run",
            done="Ran",
            perform=lambda deployment: services.deployment_run(deployment=deployment),
        )


@admin.register(DeploymentRun)
class DeploymentRunAdmin(ReadOnlyAdmin):
    deletable = False  # the record of what each fire did
    list_display = ("id", "deployment", "workspace", "trigger_type", "scheduled_at", "session_id", "created_at")
    list_filter = ("trigger_type",)
    list_select_related = ("workspace", "deployment")
    search_fields = ("id", "deployment__id", "session_id")
    fields = ("id", "workspace", "deployment", "agent_id", "agent_version", *RUN_FIELDS[1:])
