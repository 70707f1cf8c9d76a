"""Django admin for vaults and credentials: public fields only; sealed secrets are never shown. Writes go
through the API's serializers and services; credentials enter only through the API (secrets are sealed)."""

from django.contrib import admin
from django.http import HttpRequest
from django.utils.safestring import SafeString

from registry.core.admin import ArchivableAdmin, ReadOnlyInline, ServiceWriteAdmin, changelist_link
from registry.core.views import WriteServices
from registry.vaults import services
from registry.vaults.models import Vault, VaultCredential
from registry.vaults.serializers import CredentialWriteSerializer, VaultWriteSerializer


class VaultCredentialInline(ReadOnlyInline):
    model = VaultCredential
    fields = ("id", "display_name", "kind", "created_at", "archived_at")
    show_change_link = True

    @admin.display(description="type")
    def kind(self, credential: VaultCredential) -> str:
        return str(credential.auth.get("type", ""))


@admin.register(Vault)
class VaultAdmin(ServiceWriteAdmin, ArchivableAdmin):
    list_display = ("id", "display_name", "workspace", "created_at", "archived_at")
    list_select_related = ("workspace",)
    search_fields = ("id", "display_name")
    fields = ("id", "workspace", "display_name", "metadata", "sessions", "created_at", "updated_at", "archived_at")
    readonly_fields = ("id", "sessions", "created_at", "updated_at")
    inlines = [VaultCredentialInline]
    write_serializer = VaultWriteSerializer
    write_services = WriteServices(services.vault_create, services.vault_update, "vault")

    def archive_one(self, obj: Vault) -> None:
        services.vault_archive(vault=obj)  # as the API's archive and delete: with their webhook event

    def delete_model(self, request: HttpRequest, obj: Vault) -> None:
        services.vault_delete(vault=obj)

    @admin.display(description="sessions")
    def sessions(self, vault: Vault) -> SafeString:
        return changelist_link("agent_sessions.Session", "sessions using this vault", vault_ids__icontains=vault.pk)


@admin.register(VaultCredential)
class VaultCredentialAdmin(ServiceWriteAdmin, ArchivableAdmin):
    list_display = ("id", "display_name", "vault", "created_at", "archived_at")
    list_select_related = ("vault",)
    search_fields = ("id", "display_name")
    fields = ("id", "workspace", "vault", "display_name", "metadata", "auth", "created_at", "updated_at", "archived_at")
    readonly_fields = ("id", "workspace", "vault", "auth", "created_at", "updated_at")
    write_serializer = CredentialWriteSerializer
    write_services = WriteServices(services.credential_create, services.credential_update, "credential")

    def archive_one(self, obj: VaultCredential) -> None:
        services.credential_archive(credential=obj)  # as the API's archive and delete: with their webhook event

    def delete_model(self, request: HttpRequest, obj: VaultCredential) -> None:
        services.credential_delete(credential=obj)

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False  # secrets enter through the API, where they are validated and sealed
