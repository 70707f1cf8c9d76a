"""Django admin for environments, each linked to the sessions that run in it. Adds and changes go through the
API's serializer and services (a config or scope the API refuses is refused here); archive and delete too."""

from typing import Any

from django import forms
from django.contrib import admin, messages
from django.http import HttpRequest
from django.utils.safestring import SafeString

from registry.core.admin import (
    ArchivableAdmin,
    RevocableKeyAdmin,
    ServiceWriteAdmin,
    adopt,
    changelist_link,
)
from registry.core.views import WriteServices
from registry.environments import services
from registry.environments.models import Environment
from registry.environments.serializers import EnvironmentWriteSerializer
from registry.workspaces import scoped_credentials
from registry.workspaces.models import EnvironmentKey


@admin.register(Environment)
class EnvironmentAdmin(ServiceWriteAdmin, ArchivableAdmin):
    list_display = ("id", "name", "workspace", "scope", "created_at", "archived_at")
    list_filter = ("scope", "created_at")
    list_select_related = ("workspace",)
    search_fields = ("id", "name")
    fields = (
        "id",
        "workspace",
        "name",
        "description",
        "config",
        "scope",
        "metadata",
        "sessions",
        "created_at",
        "updated_at",
        "archived_at",
    )
    readonly_fields = ("id", "sessions", "created_at", "updated_at")
    write_serializer = EnvironmentWriteSerializer
    write_services = WriteServices(services.environment_create, services.environment_update, "environment")

    def archive_one(self, obj: Environment) -> None:
        services.environment_archive(environment=obj)  # as the API's: its deployments pause, its webhook event

    def delete_model(self, request: HttpRequest, obj: Environment) -> None:
        services.environment_delete(environment=obj)

    @admin.display(description="sessions")
    def sessions(self, environment: Environment) -> SafeString:
        return changelist_link(
            "agent_sessions.Session", f"{environment.sessions.count()} sessions", environment=environment.pk
        )


class EnvironmentKeyForm(forms.ModelForm):  # type: ignore[type-arg]
    """The add form: which self_hosted environment the key is for (the workspace follows from it)."""

    environment = forms.ModelChoiceField(queryset=Environment.objects.none(), help_text="A self_hosted environment.")

    class Meta:
        model = EnvironmentKey
        fields = ("name",)


@admin.register(EnvironmentKey)
class EnvironmentKeyAdmin(RevocableKeyAdmin):
    """Keys of self_hosted environments (issue 26): minted here through the service (the plaintext appears
    once, in a message; the row keeps its digest) and revoked by a confirmed action (refused on its next
    use); nothing else about a key changes, and a revoked key stays revoked."""

    list_display = (
        "id",
        "display_prefix",
        "name",
        "environment_id",
        "workspace",
        "created_at",
        "last_used_at",
        "revoked_at",
    )
    list_filter = ("revoked_at",)
    list_select_related = ("workspace",)
    search_fields = ("id", "display_prefix", "name", "environment_id")
    fields = (
        "id",
        "workspace",
        "environment_id",
        "name",
        "display_prefix",
        "created_at",
        "last_used_at",
        "revoked_at",
    )
    readonly_fields = fields

    def get_fields(self, request: HttpRequest, obj: Any = None) -> Any:
        return ("environment", "name") if obj is None else self.fields

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> Any:
        return () if obj is None else self.readonly_fields

    def get_form(self, request: HttpRequest, obj: Any = None, change: bool = False, **kwargs: Any) -> Any:
        if obj is not None:
            return super().get_form(request, obj, change=change, **kwargs)
        kwargs.update(form=EnvironmentKeyForm, fields=("name",))
        form = super().get_form(request, obj, change=change, **kwargs)
        environments = self.choices(request, Environment).filter(config__type="self_hosted", archived_at__isnull=True)
        field = form.base_fields["environment"]
        assert isinstance(field, forms.ModelChoiceField)
        field.queryset = environments.order_by("name")
        return form

    def save_model(self, request: HttpRequest, obj: EnvironmentKey, form: Any, change: bool) -> None:
        environment = form.cleaned_data["environment"]
        issued = services.environment_key_mint(environment=environment, name=obj.name)
        adopt(obj, issued.environment_key)
        messages.warning(request, f"New environment key (copy it now, it is not shown again): {issued.plaintext}")

    def revoke_key(self, key: EnvironmentKey) -> EnvironmentKey:
        return scoped_credentials.environment_key_revoke(environment_key=key)
