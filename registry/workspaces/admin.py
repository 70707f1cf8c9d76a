"""Django admin for workspace staff: workspaces (with links to their resources), API keys (a new key is
shown once), memberships."""

from __future__ import annotations

from typing import Any

from django.contrib import admin, messages
from django.http import HttpRequest
from django.utils.html import format_html_join
from django.utils.safestring import SafeString

from registry.core.admin import ReadOnlyInline, changelist_link
from registry.workspaces import services
from registry.workspaces.models import ApiKey, OidcMembership, Workspace

# The lists a workspace's page links to (by name: the apps of these models sit above this one).
RESOURCE_LISTS = (
    ("agents", "agents.Agent"),
    ("sessions", "agent_sessions.Session"),
    ("environments", "environments.Environment"),
    ("vaults", "vaults.Vault"),
)


class ApiKeyInline(ReadOnlyInline):
    model = ApiKey
    fields = ("name", "display_prefix", "created_at", "last_used_at", "revoked_at")
    readonly_fields = ("display_prefix", "created_at", "last_used_at")


@admin.register(Workspace)
class WorkspaceAdmin(admin.ModelAdmin):  # type: ignore[type-arg]
    list_display = ("id", "name", "created_at")
    search_fields = ("id", "name")
    readonly_fields = ("id", "resources", "created_at")
    inlines = [ApiKeyInline]

    @admin.display(description="resources")
    def resources(self, workspace: Workspace) -> SafeString:
        links = ((changelist_link(model, name, workspace=workspace.pk),) for name, model in RESOURCE_LISTS)
        return format_html_join(" · ", "{}", links)


@admin.register(ApiKey)
class ApiKeyAdmin(admin.ModelAdmin):  # type: ignore[type-arg]
    """Keys are issued here through the service; the plaintext appears once, in a message."""

    list_display = ("display_prefix", "name", "workspace", "created_at", "last_used_at", "revoked_at")
    list_filter = ("revoked_at",)
    fields = ("workspace", "name", "display_prefix", "created_at", "last_used_at", "revoked_at")
    readonly_fields = ("display_prefix", "created_at", "last_used_at")
    actions = ["revoke"]

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> tuple[str, ...]:
        return (*self.readonly_fields, "workspace") if obj is not None else self.readonly_fields

    def save_model(self, request: HttpRequest, obj: ApiKey, form: Any, change: bool) -> None:
        if change:
            super().save_model(request, obj, form, change)
            services.forget_key(obj)  # a revocation here takes effect at once in this process
            return
        issued = services.api_key_issue(workspace=obj.workspace, name=obj.name)
        obj.pk = issued.api_key.pk
        obj.display_prefix = issued.api_key.display_prefix
        obj.digest = issued.api_key.digest
        messages.warning(request, f"New API key (copy it now, it is not shown again): {issued.plaintext}")

    @admin.action(description="Revoke selected keys")
    def revoke(self, request: HttpRequest, queryset: Any) -> None:
        for api_key in queryset:
            services.api_key_revoke(api_key=api_key)


@admin.register(OidcMembership)
class OidcMembershipAdmin(admin.ModelAdmin):  # type: ignore[type-arg]
    list_display = ("subject", "workspace", "created_at")
    search_fields = ("subject",)
