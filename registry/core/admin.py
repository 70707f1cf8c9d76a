"""Admin pieces shared by the apps: read-only inlines, links between pages, the archived filter
(idempotency keys themselves are internal and get no page)."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlencode

from django.contrib import admin
from django.contrib.admin.utils import quote
from django.db.models import Model, QuerySet
from django.http import HttpRequest
from django.urls import reverse
from django.utils.html import format_html
from django.utils.safestring import SafeString


class ReadOnlyInline(admin.TabularInline):  # type: ignore[type-arg]
    """An inline that staff never add to or delete from; its fields are read-only unless it names
    `readonly_fields` itself (then the rest stay editable)."""

    extra = 0
    can_delete = False

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> Any:
        return self.readonly_fields or self.fields or ()

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


def change_link(model: type[Model], pk: Any, text: str) -> SafeString:
    """A link to one object's admin page (the key quoted as the admin quotes it: `_` is `_5F`)."""
    url = reverse(f"admin:{model._meta.app_label}_{model._meta.model_name}_change", args=[quote(pk)])
    return format_html('<a href="{}">{}</a>', url, text)


def changelist_link(model: type[Model], text: str, **filters: Any) -> SafeString:
    """A link to a model's admin list narrowed by `filters` (field lookups, as the list's query string)."""
    url = reverse(f"admin:{model._meta.app_label}_{model._meta.model_name}_changelist")
    return format_html('<a href="{}?{}">{}</a>', url, urlencode(filters), text)


class ArchivedFilter(admin.SimpleListFilter):
    """Archived or not, for every resource with `archived_at`."""

    title = "archived"
    parameter_name = "archived"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [("no", "No"), ("yes", "Yes")]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        if self.value() not in ("yes", "no"):
            return queryset
        return queryset.filter(archived_at__isnull=self.value() == "no")
