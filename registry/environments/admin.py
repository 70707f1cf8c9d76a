"""Django admin for environments."""

from django.contrib import admin

from registry.environments.models import Environment


@admin.register(Environment)
class EnvironmentAdmin(admin.ModelAdmin):  # type: ignore[type-arg]
    list_display = ("id", "name", "workspace", "scope", "created_at", "archived_at")
    list_filter = ("archived_at", "scope")
    search_fields = ("id", "name")
    readonly_fields = ("id", "created_at", "updated_at")
