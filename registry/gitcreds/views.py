"""Git credential endpoints (`/v1/git-creds`): create, retrieve, update, list, archive, delete."""

from __future__ import annotations

from typing import Any

from registry.core.openapi import resource_schema
from registry.core.views import DeleteMixin, WorkspaceViewSet, WriteMixin
from registry.gitcreds import services
from registry.gitcreds.models import GitCredential
from registry.gitcreds.serializers import GitCredentialSerializer, GitCredentialWriteSerializer


@resource_schema("git_credential", read=GitCredentialSerializer, write=GitCredentialWriteSerializer)
class GitCredentialViewSet(WriteMixin, DeleteMixin, WorkspaceViewSet):
    model = GitCredential
    resource_type = "git_credential"
    serializer_class = GitCredentialSerializer

    write_serializer = GitCredentialWriteSerializer

    def create_instance(self, values: dict[str, Any]) -> GitCredential:
        return services.git_credential_create(workspace=self.principal.workspace, values=values)

    def update_instance(self, instance: GitCredential, values: dict[str, Any]) -> GitCredential:
        return services.git_credential_update(credential=instance, values=values)
