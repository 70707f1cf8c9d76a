"""Admin pieces shared by the apps: read-only inlines and pages, one-by-one deletion, links between pages,
the archived filter (idempotency keys themselves are internal and get no page)."""

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


def changelist_link(model: str, text: str, **filters: Any) -> SafeString:
    """A link to the admin list of `model` ("app_label.model_name", so that a page links to another app's
    list without importing it) narrowed by `filters` (field lookups, as the list's query string)."""
    app_label, model_name = model.lower().split(".")
    url = reverse(f"admin:{app_label}_{model_name}_changelist")
    return format_html('<a href="{}?{}">{}</a>', url, urlencode(filters), text)


class ReadOnlyAdmin(admin.ModelAdmin):  # type: ignore[type-arg]
    """A page of objects that enter and change only through the API: staff read them (and delete them,
    unless `deletable` is False), never add or change them here."""

    deletable = True

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return self.deletable and super().has_delete_permission(request, obj)


class OneByOneDeletion(admin.ModelAdmin):  # type: ignore[type-arg]
    """A deletion of many objects goes through `delete_model` for each (where the app's service deletes
    what the object keeps outside the database too)."""

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> None:
        for obj in queryset:
            self.delete_model(request, obj)


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


class ArchivableAdmin(admin.ModelAdmin):  # type: ignore[type-arg]
    """The page of a resource with `archived_at`: its list filters on archived first, then on `list_filter`."""

    def get_list_filter(self, request: HttpRequest) -> Any:
        return (ArchivedFilter, *super().get_list_filter(request))
