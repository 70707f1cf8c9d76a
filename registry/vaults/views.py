"""Vault endpoints and the credentials inside a vault. No response ever carries a secret."""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import extend_schema, extend_schema_view, inline_serializer
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response

from registry.core.errors import not_found
from registry.core.openapi import LIST_PARAMETERS, list_response
from registry.core.services import resource_archive
from registry.core.views import DeleteMixin, WorkspaceViewSet
from registry.vaults import selectors, services
from registry.vaults.models import Vault, VaultCredential
from registry.vaults.serializers import (
    CredentialSerializer,
    CredentialWriteSerializer,
    VaultSerializer,
    VaultWriteSerializer,
)


def deleted(kind: str) -> Any:
    return inline_serializer(
        f"{kind.title().replace('_', '')}Deleted",
        {"id": serializers.CharField(), "type": serializers.ChoiceField(choices=[f"{kind}_deleted"])},
    )


@extend_schema_view(
    create=extend_schema(request=VaultWriteSerializer, responses=VaultSerializer),
    partial_update=extend_schema(request=VaultWriteSerializer, responses=VaultSerializer),
    retrieve=extend_schema(responses=VaultSerializer),
    list=extend_schema(parameters=LIST_PARAMETERS, responses=list_response("VaultList", VaultSerializer)),
    destroy=extend_schema(responses=deleted("vault")),
)
class VaultViewSet(DeleteMixin, WorkspaceViewSet):
    model = Vault
    resource_type = "vault"
    render_object = staticmethod(selectors.render_vault)
    serializer_class = VaultSerializer

    def create(self, request: Request) -> Response:
        body = VaultWriteSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        return Response(
            self.render(services.vault_create(workspace=self.principal.workspace, values=dict(body.validated_data)))
        )

    def partial_update(self, request: Request, id: str) -> Response:
        vault = self.get_object()
        body = VaultWriteSerializer(data=request.data, partial=True)
        body.is_valid(raise_exception=True)
        return Response(self.render(services.vault_update(vault=vault, values=dict(body.validated_data))))


class CredentialViewSet(WorkspaceViewSet):
    """`/v1/vaults/{id}/credentials[/{credential_id}[/archive]]`."""

    model = Vault
    resource_type = "vault"
    operation_name = "vault_credential"

    def credential(self) -> VaultCredential:
        credential = VaultCredential.objects.filter(vault=self.get_object(), pk=self.kwargs["credential_id"]).first()
        if credential is None:
            raise not_found(f"Credential {self.kwargs['credential_id']} not found.")
        return credential

    @extend_schema(parameters=LIST_PARAMETERS, responses=list_response("CredentialList", CredentialSerializer))
    def list(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        credentials = VaultCredential.objects.filter(vault=self.get_object())
        if request.query_params.get("include_archived", "").lower() not in ("true", "1"):
            credentials = credentials.filter(archived_at__isnull=True)
        rows, links = self.pagination.paginate(credentials, request)
        return self.pagination.response([selectors.render_credential(row) for row in rows], links)

    @extend_schema(request=CredentialWriteSerializer, responses=CredentialSerializer)
    def create(self, request: Request, id: str) -> Response:
        body = CredentialWriteSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        credential = services.credential_create(vault=self.get_object(), values=dict(body.validated_data))
        return Response(selectors.render_credential(credential))

    @extend_schema(responses=CredentialSerializer)
    def retrieve(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        return Response(selectors.render_credential(self.credential()))

    @extend_schema(request=CredentialWriteSerializer, responses=CredentialSerializer)
    def partial_update(self, request: Request, id: str, credential_id: str) -> Response:
        credential = self.credential()
        body = CredentialWriteSerializer(data=request.data, partial=True)
        body.is_valid(raise_exception=True)
        return Response(
            selectors.render_credential(
                services.credential_update(credential=credential, values=dict(body.validated_data))
            )
        )

    @extend_schema(request=None, responses=CredentialSerializer)
    def archive(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        return Response(selectors.render_credential(resource_archive(instance=self.credential())))

    @extend_schema(responses=deleted("vault_credential"))
    def destroy(self, request: Request, id: str, credential_id: str) -> Response:
        self.credential().delete()
        return Response({"id": credential_id, "type": "vault_credential_deleted"})
