"""Reads for git credentials: the credential a repository URL's host uses."""

from __future__ import annotations

from urllib.parse import urlsplit

from registry.gitcreds.models import GitCredential


def git_credential_for_url(*, workspace_id: str, url: str) -> GitCredential | None:
    """The newest live credential for the repository URL's host (with its port, if any)."""
    host = (urlsplit(url).netloc.rpartition("@")[2]).lower()
    return (
        GitCredential.objects.filter(workspace_id=workspace_id, host=host, archived_at__isnull=True)
        .order_by("-created_at")
        .first()
    )


def live_git_credential(*, workspace_id: str, credential_id: str) -> GitCredential | None:
    """The workspace's git credential with this id, unless it is archived."""
    return GitCredential.objects.filter(workspace_id=workspace_id, archived_at__isnull=True, pk=credential_id).first()
