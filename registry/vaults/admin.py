"""Django admin for vaults and credentials: public fields only; sealed secrets are never shown."""

from django.contrib import admin

from registry.vaults.models import Vault, VaultCredential


@admin.register(Vault)
class VaultAdmin(admin.ModelAdmin):  # type: ignore[type-arg]
    list_display = ("id", "display_name", "workspace", "created_at", "archived_at")
    search_fields = ("id", "display_name")
    readonly_fields = ("id", "created_at", "updated_at")


@admin.register(VaultCredential)
class VaultCredentialAdmin(admin.ModelAdmin):  # type: ignore[type-arg]
    list_display = ("id", "display_name", "vault", "created_at", "archived_at")
    search_fields = ("id", "display_name")
    exclude = ("sealed",)
    readonly_fields = ("id", "workspace", "vault", "auth", "created_at", "updated_at")

    def has_add_permission(self, request: object) -> bool:
        return False  # secrets enter through the API, where they are validated and sealed
