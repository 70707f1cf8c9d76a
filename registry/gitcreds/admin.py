"""Django admin for git credentials: the sealed token is never shown; tokens enter through the API, where they
are sealed. Changes go through the API's serializer and services."""

from django.contrib import admin
from django.http import HttpRequest

from registry.core.admin import ArchivableAdmin, ServiceWriteAdmin
from registry.core.views import WriteServices
from registry.gitcreds import services
from registry.gitcreds.models import GitCredential
from registry.gitcreds.serializers import GitCredentialWriteSerializer


@admin.register(GitCredential)
class GitCredentialAdmin(ServiceWriteAdmin, ArchivableAdmin):
    list_display = ("id", "display_name", "host", "workspace", "created_at", "archived_at")
    list_select_related = ("workspace",)
    search_fields = ("id", "display_name", "host")
    fields = (
        "id",
        "workspace",
        "display_name",
        "host",
        "username",
        "metadata",
        "created_at",
        "updated_at",
        "archived_at",
    )
    readonly_fields = ("id", "created_at", "updated_at")
    write_serializer = GitCredentialWriteSerializer
    write_services = WriteServices(services.git_credential_create, services.git_credential_update, "credential")

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False
