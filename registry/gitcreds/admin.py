"""Django admin for git credentials: the sealed token is never shown."""

from django.contrib import admin

from registry.gitcreds.models import GitCredential


@admin.register(GitCredential)
class GitCredentialAdmin(admin.ModelAdmin):  # type: ignore[type-arg]
    list_display = ("id", "display_name", "host", "workspace", "created_at", "archived_at")
    search_fields = ("id", "display_name", "host")
    exclude = ("sealed_token",)
    readonly_fields = ("id", "workspace", "created_at", "updated_at")

    def has_add_permission(self, request: object) -> bool:
        return False  # tokens enter through the API, where they are sealed
