"""Git credential endpoints (`/v1/git-creds`): create, retrieve, update, list, archive, delete."""

from __future__ import annotations

from registry.core.views import DeleteMixin, WorkspaceViewSet, WriteMixin, WriteServices
from registry.gitcreds import services
from registry.gitcreds.models import GitCredential
from registry.gitcreds.serializers import GitCredentialSerializer, GitCredentialWriteSerializer


class GitCredentialViewSet(WriteMixin, DeleteMixin, WorkspaceViewSet):
    model = GitCredential
    serializer_class = GitCredentialSerializer
    write_serializer = GitCredentialWriteSerializer
    write_services = WriteServices(services.git_credential_create, services.git_credential_update, "credential")
