"""The audit page of the admin: what staff did (the admin's LogEntry rows: who, which object, which action,
when, the change message, a gateway config change linking to its revision's before and after), newest first,
filterable by user, action and kind of object, read-only.

A workspace staff member sees the entries of objects in the workspaces they may view, found through each
registered page's own scoping (`StaffScopedAdmin.within`); superusers see every entry. An entry whose object
no longer exists (a deletion) can no longer be placed in a workspace, so only superusers see it."""

from __future__ import annotations

import functools
import operator
import re
from typing import Any

from django.apps import apps
from django.contrib import admin
from django.contrib.admin.models import DELETION, LogEntry
from django.contrib.contenttypes.models import ContentType
from django.db.models import Q, QuerySet, TextField
from django.db.models.functions import Cast
from django.http import HttpRequest, HttpResponse
from django.urls import reverse
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString

from registry.core.admin import StaffScopedAdmin, is_superuser, staff_reach

NOTHING = Q(pk__in=[])


def scoped_pages(site: admin.AdminSite) -> list[tuple[type[Any], StaffScopedAdmin]]:
    """Every model whose registered page scopes its rows by workspace, with that page."""
    pages = (site.get_model_admin(model) for model in apps.get_models() if site.is_registered(model))
    return [(page.model, page) for page in pages if isinstance(page, StaffScopedAdmin)]


def entries_within(request: HttpRequest, model: type[Any], page: StaffScopedAdmin) -> Q:
    """The entries of `model`'s objects that `page` lets the request's user view (none if it places no row in
    a workspace, or lets them view none: pages of organization-wide rows, superusers-only pages)."""
    reach = page.reach(request, "view")
    if page.workspace_path is None or (reach is not None and not reach):
        return NOTHING
    keys = page.within(model._default_manager.all(), reach).order_by()
    content_type = ContentType.objects.get_for_model(model, for_concrete_model=False)
    return Q(content_type=content_type, object_id__in=keys.annotate(key=Cast("pk", TextField())).values("key"))


def visible_entries(request: HttpRequest, site: admin.AdminSite) -> Q:
    """The entries the request's user may read: those of objects they may view on the registered pages."""
    found = [entries_within(request, model, page) for model, page in scoped_pages(site)]
    return functools.reduce(operator.or_, found, NOTHING)


def with_admin_links(text: str) -> SafeString:
    """`text`, escaped, with each path into the admin in it made a link: the gateway config pages end their
    log messages with the history page of the revision a save recorded (its body before and after)."""
    pieces = re.split(f"({re.escape(reverse('admin:index'))}\\S+)", text)
    # re.split with one group: every second piece is a path.
    links = (
        format_html('<a href="{}">{}</a>', piece, piece) if index % 2 else piece for index, piece in enumerate(pieces)
    )
    return format_html_join("", "{}", ((piece,) for piece in links))


@admin.register(LogEntry)
class AuditLogAdmin(admin.ModelAdmin):  # type: ignore[type-arg]
    """The staff actions recorded in the admin log, read-only and scoped to the reader's workspaces."""

    list_display = ("action_time", "user", "action", "kind", "target", "change_text")
    list_display_links = ("action_time",)
    list_filter = (
        ("user", admin.RelatedOnlyFieldListFilter),
        "action_flag",
        ("content_type", admin.RelatedOnlyFieldListFilter),
    )
    list_select_related = ("user", "content_type")
    search_fields = ("object_repr", "object_id", "change_message")
    ordering = ("-action_time", "-id")
    fields = ("action_time", "user", "action", "kind", "target", "object_id", "change_text")
    readonly_fields = fields

    def get_queryset(self, request: HttpRequest) -> QuerySet[LogEntry]:
        queryset = super().get_queryset(request)
        return queryset if is_superuser(request) else queryset.filter(visible_entries(request, self.admin_site))

    def changelist_view(self, request: HttpRequest, extra_context: dict[str, Any] | None = None) -> HttpResponse:
        return super().changelist_view(request, {"title": "Audit log: what staff did", **(extra_context or {})})

    # -- permissions: staff of some workspace read; nobody writes ----------------------------------------------
    def has_view_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return is_superuser(request) or bool(staff_reach(request, "view"))

    def has_module_permission(self, request: HttpRequest) -> bool:
        return self.has_view_permission(request)

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    # -- columns -------------------------------------------------------------------------------------------------
    @admin.display(description="action", ordering="action_flag")
    def action(self, entry: LogEntry) -> str:
        return str(entry.get_action_flag_display())

    @admin.display(description="kind of object", ordering="content_type")
    def kind(self, entry: LogEntry) -> str:
        return str(entry.content_type.name) if entry.content_type else ""

    @admin.display(description="object")
    def target(self, entry: LogEntry) -> str:
        """The object's name, linked to its page while it exists."""
        url = "" if entry.action_flag == DELETION else entry.get_admin_url()
        return format_html('<a href="{}">{}</a>', url, entry.object_repr) if url else entry.object_repr

    @admin.display(description="change")
    def change_text(self, entry: LogEntry) -> str:
        return with_admin_links(str(entry.get_change_message()))
