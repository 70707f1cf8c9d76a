"""Django admin for vaults and credentials: public fields only; sealed secrets are never shown."""

from django.contrib import admin
from django.utils.safestring import SafeString

from registry.core.admin import ArchivableAdmin, ReadOnlyInline, changelist_link
from registry.vaults.models import Vault, VaultCredential


class VaultCredentialInline(ReadOnlyInline):
    model = VaultCredential
    fields = ("id", "display_name", "kind", "created_at", "archived_at")
    show_change_link = True

    @admin.display(description="type")
    def kind(self, credential: VaultCredential) -> str:
        return str(credential.auth.get("type", ""))


@admin.register(Vault)
class VaultAdmin(ArchivableAdmin):
    list_display = ("id", "display_name", "workspace", "created_at", "archived_at")
    list_select_related = ("workspace",)
    search_fields = ("id", "display_name")
    readonly_fields = ("id", "sessions", "created_at", "updated_at")
    inlines = [VaultCredentialInline]

    @admin.display(description="sessions")
    def sessions(self, vault: Vault) -> SafeString:
        return changelist_link("agent_sessions.Session", "sessions using this vault", vault_ids__icontains=vault.pk)


@admin.register(VaultCredential)
class VaultCredentialAdmin(ArchivableAdmin):
    list_display = ("id", "display_name", "vault", "created_at", "archived_at")
    list_select_related = ("vault",)
    search_fields = ("id", "display_name")
    exclude = ("sealed",)
    readonly_fields = ("id", "workspace", "vault", "auth", "created_at", "updated_at")

    def has_add_permission(self, request: object) -> bool:
        return False  # secrets enter through the API, where they are validated and sealed
