"""URL patterns of /v1/vaults and their credentials."""

from django.urls import path

from registry.core.routing import resource_urls
from registry.vaults.views import CredentialViewSet, VaultViewSet

CREDENTIALS = "vaults/<vlt_id:id>/credentials"

urlpatterns = [
    *resource_urls("vaults", VaultViewSet, "vlt_id", name="vault"),
    path(CREDENTIALS, CredentialViewSet.as_view({"get": "list", "post": "create"}), name="vault-credentials"),
    path(
        f"{CREDENTIALS}/<vcrd_id:credential_id>",
        CredentialViewSet.as_view({"get": "retrieve", "post": "partial_update", "delete": "destroy"}),
        name="vault-credential",
    ),
    path(
        f"{CREDENTIALS}/<vcrd_id:credential_id>/archive",
        CredentialViewSet.as_view({"post": "archive"}),
        name="vault-credential-archive",
    ),
]
