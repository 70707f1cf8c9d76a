"""Vault endpoints and the credentials inside a vault. No response ever carries a secret."""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import extend_schema
from rest_framework.request import Request
from rest_framework.response import Response

from registry.core.fields import validated
from registry.core.openapi import LIST_PARAMETERS, deleted_response, list_schema
from registry.core.views import DeleteMixin, WorkspaceViewSet, WriteMixin, WriteServices, object_action
from registry.vaults import selectors, services
from registry.vaults.models import Vault, VaultCredential
from registry.vaults.serializers import (
    CredentialSerializer,
    CredentialWriteSerializer,
    VaultSerializer,
    VaultWriteSerializer,
)


class VaultViewSet(WriteMixin, DeleteMixin, WorkspaceViewSet):
    model = Vault
    serializer_class = VaultSerializer
    write_serializer = VaultWriteSerializer
    write_services = WriteServices(services.vault_create, services.vault_update, "vault")

    archive = object_action(services.vault_archive, "vault")

    def perform_delete(self, instance: Vault) -> None:
        services.vault_delete(vault=instance)


class CredentialViewSet(WorkspaceViewSet):
    """`/v1/vaults/{id}/credentials[/{credential_id}[/archive]]`."""

    model = Vault
    resource_type = "vault"
    operation_name = "vault_credential"
    serializer_class = CredentialSerializer

    def credential(self) -> VaultCredential:
        return selectors.credential_get(vault=self.get_object(), credential_id=self.kwargs["credential_id"])

    @list_schema("CredentialList", CredentialSerializer, *LIST_PARAMETERS)
    def list(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        archived = request.query_params.get("include_archived", "").lower() in ("true", "1")
        credentials = selectors.vault_credentials(vault=self.get_object(), include_archived=archived)
        rows, links = self.pagination.paginate(credentials, request)
        return self.pagination.response(self.render_many(rows), links)

    @extend_schema(request=CredentialWriteSerializer, responses=CredentialSerializer)
    def create(self, request: Request, id: str) -> Response:
        values = validated(CredentialWriteSerializer, request.data)
        return Response(self.render(services.credential_create(vault=self.get_object(), values=values)))

    @extend_schema(responses=CredentialSerializer)
    def retrieve(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        return Response(self.render(self.credential()))

    @extend_schema(request=CredentialWriteSerializer, responses=CredentialSerializer)
    def partial_update(self, request: Request, id: str, credential_id: str) -> Response:
        credential = self.credential()
        values = validated(CredentialWriteSerializer, request.data, partial=True)
        return Response(self.render(services.credential_update(credential=credential, values=values)))

    @extend_schema(request=None, responses=CredentialSerializer)
    def archive(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        return Response(self.render(services.credential_archive(credential=self.credential())))

    @extend_schema(responses=deleted_response("vault_credential"))
    def destroy(self, request: Request, id: str, credential_id: str) -> Response:
        services.credential_delete(credential=self.credential())
        return Response({"id": credential_id, "type": "vault_credential_deleted"})
