"""Django admin for triggers and their fires, read-only: a change must go through the services, which
keep `next_fire_at` and `status` consistent with the schedule; archiving is the service's too."""

from __future__ import annotations

from typing import Any

from django.contrib import admin

from registry.core.admin import ArchivableAdmin, ReadOnlyAdmin, ReadOnlyInline
from registry.triggers import services
from registry.triggers.models import Trigger, TriggerFire


class TriggerFireInline(ReadOnlyInline):
    model = TriggerFire
    fields = ("fire_at", "session", "error", "created_at")
    ordering = ("-fire_at",)


@admin.register(Trigger)
class TriggerAdmin(ArchivableAdmin, ReadOnlyAdmin):
    list_display = ("id", "name", "workspace", "schedule", "timezone", "status", "next_fire_at", "last_fired_at")
    list_filter = ("status",)
    search_fields = ("id", "name")
    inlines = [TriggerFireInline]

    def archive_one(self, obj: Any) -> None:
        services.trigger_archive(trigger=obj)
