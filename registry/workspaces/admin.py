"""Django admin for workspace staff: workspaces (with links to their resources and, for superusers, their
staff members), API keys (issued through the service, the plaintext shown once; when each was last used;
revoked by a confirmed action, never brought back), OIDC memberships and staff memberships (superusers write
both); Django's users and groups, for superusers only."""

from __future__ import annotations

from typing import Any

from django.contrib import admin, messages
from django.contrib.auth.admin import GroupAdmin, UserAdmin
from django.contrib.auth.models import Group, User
from django.http import HttpRequest
from django.utils.formats import date_format
from django.utils.html import format_html_join
from django.utils.safestring import SafeString
from django.utils.timezone import localtime

from registry.core.admin import (
    ReadOnlyInline,
    RevocableKeyAdmin,
    StaffScopedAdmin,
    adopt,
    changelist_link,
    is_superuser,
)
from registry.workspaces import services
from registry.workspaces.models import ApiKey, OidcMembership, StaffMembership, Workspace

# The lists a workspace's page links to (by name: the apps of these models sit above this one).
RESOURCE_LISTS = (
    ("agents", "agents.Agent"),
    ("sessions", "agent_sessions.Session"),
    ("environments", "environments.Environment"),
    ("vaults", "vaults.Vault"),
)


def show_new_key(request: HttpRequest, issued: services.IssuedKey) -> None:
    messages.warning(request, f"New API key (copy it now, it is not shown again): {issued.plaintext}")


class KeyLastUse:
    """The `last_use` column of a page of API keys."""

    @admin.display(description="last used", ordering="last_used_at")
    def last_use(self, api_key: ApiKey) -> str:
        """When the key last authenticated a request (kept to the minute: `services.api_key_mark_used`)."""
        if api_key.last_used_at is None:
            return "never"
        return f"{date_format(localtime(api_key.last_used_at), 'DATETIME_FORMAT')} (to the minute)"


class SuperusersWrite(StaffScopedAdmin):
    """A page whose rows only superusers add and delete; nobody changes them (delete and add again)."""

    def has_add_permission(self, request: HttpRequest) -> bool:
        return is_superuser(request)

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return is_superuser(request)


class ApiKeyInline(KeyLastUse, ReadOnlyInline):
    model = ApiKey
    fields = ("name", "display_prefix", "created_at", "last_use", "revoked_at")


class StaffMembershipInline(admin.TabularInline):  # type: ignore[type-arg]
    """The workspace's staff members and their roles, which superusers manage here."""

    model = StaffMembership
    fields = ("user", "role", "created_at")
    readonly_fields = ("created_at",)
    extra = 0

    def has_view_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return is_superuser(request)

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return is_superuser(request)

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return is_superuser(request)

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return is_superuser(request)


@admin.register(Workspace)
class WorkspaceAdmin(SuperusersWrite):
    """Workspaces are made here by superusers through the service (with a first key, shown once); a name is
    fixed once given, and a workspace is never deleted here (its sandboxes and files would stay behind).
    Superusers change a workspace's page only for its staff members."""

    workspace_path = "pk"
    list_display = ("id", "name", "created_at")
    search_fields = ("id", "name")
    fields = ("id", "name", "resources", "created_at")
    readonly_fields = ("id", "resources", "created_at")
    inlines = [StaffMembershipInline, ApiKeyInline]

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return is_superuser(request)

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> Any:
        fields = tuple(super().get_readonly_fields(request, obj))
        return (*fields, "name") if obj is not None else fields

    @admin.display(description="resources")
    def resources(self, workspace: Workspace) -> SafeString:
        links = ((changelist_link(model, name, workspace=workspace.pk),) for name, model in RESOURCE_LISTS)
        return format_html_join(" · ", "{}", links)

    def save_model(self, request: HttpRequest, obj: Workspace, form: Any, change: bool) -> None:
        if change:
            return  # the name is read-only: only the staff inline changes
        workspace, issued = services.workspace_create(name=obj.name)
        adopt(obj, workspace)
        show_new_key(request, issued)


@admin.register(ApiKey)
class ApiKeyAdmin(KeyLastUse, RevocableKeyAdmin):
    """Workspace API keys, issued and revoked as every key (`RevocableKeyAdmin`)."""

    list_display = ("display_prefix", "name", "workspace", "created_at", "last_use", "revoked_at")
    list_filter = ("revoked_at",)
    search_fields = ("display_prefix", "name")
    fields = ("workspace", "name", "display_prefix", "is_org_admin", "created_at", "last_use", "revoked_at")
    readonly_fields = ("display_prefix", "is_org_admin", "created_at", "last_use", "revoked_at")

    def save_model(self, request: HttpRequest, obj: ApiKey, form: Any, change: bool) -> None:
        issued = services.api_key_issue(workspace=obj.workspace, name=obj.name)
        adopt(obj, issued.api_key)
        show_new_key(request, issued)

    def revoke_key(self, key: ApiKey) -> ApiKey:
        return services.api_key_revoke(api_key=key)


@admin.register(OidcMembership)
class OidcMembershipAdmin(SuperusersWrite):
    """OIDC subjects mapped to a workspace: its members read them; superusers map subjects through the service
    (the form refuses a subject mapped already, so nobody is moved from another workspace) and unmap them."""

    list_display = ("subject", "workspace", "created_at")
    search_fields = ("subject",)

    def save_model(self, request: HttpRequest, obj: OidcMembership, form: Any, change: bool) -> None:
        adopt(obj, services.membership_set(workspace=obj.workspace, subject=obj.subject))

    def delete_model(self, request: HttpRequest, obj: OidcMembership) -> None:
        services.membership_delete(membership=obj)


@admin.register(StaffMembership)
class StaffMembershipAdmin(StaffScopedAdmin):
    """Who is staff of which workspace, with which role: superusers only (also on each workspace's page)."""

    superusers_only = True
    list_display = ("user", "workspace", "role", "created_at")
    list_filter = ("role",)
    list_select_related = ("user", "workspace")
    search_fields = ("user__username", "workspace__id", "workspace__name")


class SuperusersOnly:
    """Pages only superusers reach, whatever Django permissions a staff user holds: users and groups (a staff
    user allowed to change users could otherwise make anyone, themselves included, a superuser)."""

    def has_module_permission(self, request: HttpRequest) -> bool:
        return is_superuser(request)

    def has_view_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return is_superuser(request)

    def has_add_permission(self, request: HttpRequest, *args: Any) -> bool:
        return is_superuser(request)

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return is_superuser(request)

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return is_superuser(request)


class SuperuserUserAdmin(SuperusersOnly, UserAdmin):  # type: ignore[misc]
    """Django's user pages, for superusers only."""


class SuperuserGroupAdmin(SuperusersOnly, GroupAdmin):  # type: ignore[misc]
    """Django's group pages, for superusers only."""


for model, model_admin in ((User, SuperuserUserAdmin), (Group, SuperuserGroupAdmin)):
    admin.site.unregister(model)
    admin.site.register(model, model_admin)
