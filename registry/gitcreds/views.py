"""Git credential endpoints (`/v1/git-creds`): create, retrieve, update, list, archive, delete."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema, extend_schema_view, inline_serializer
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response

from registry.core.openapi import LIST_PARAMETERS, list_response
from registry.core.views import DeleteMixin, WorkspaceViewSet
from registry.gitcreds import selectors, services
from registry.gitcreds.models import GitCredential
from registry.gitcreds.serializers import GitCredentialSerializer, GitCredentialWriteSerializer


@extend_schema_view(
    create=extend_schema(request=GitCredentialWriteSerializer, responses=GitCredentialSerializer),
    partial_update=extend_schema(request=GitCredentialWriteSerializer, responses=GitCredentialSerializer),
    retrieve=extend_schema(responses=GitCredentialSerializer),
    list=extend_schema(
        parameters=LIST_PARAMETERS, responses=list_response("GitCredentialList", GitCredentialSerializer)
    ),
    destroy=extend_schema(
        responses=inline_serializer(
            "GitCredentialDeleted",
            {"id": serializers.CharField(), "type": serializers.ChoiceField(choices=["git_credential_deleted"])},
        )
    ),
)
class GitCredentialViewSet(DeleteMixin, WorkspaceViewSet):
    model = GitCredential
    resource_type = "git_credential"
    render_object = staticmethod(selectors.render_git_credential)
    serializer_class = GitCredentialSerializer

    def create(self, request: Request) -> Response:
        body = GitCredentialWriteSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        return Response(
            self.render(
                services.git_credential_create(workspace=self.principal.workspace, values=dict(body.validated_data))
            )
        )

    def partial_update(self, request: Request, id: str) -> Response:
        credential = self.get_object()
        body = GitCredentialWriteSerializer(data=request.data, partial=True)
        body.is_valid(raise_exception=True)
        return Response(
            self.render(services.git_credential_update(credential=credential, values=dict(body.validated_data)))
        )
