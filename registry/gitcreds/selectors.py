"""Reads for git credentials: rendering, and the credential a repository URL's host uses."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

from registry.core.serialization import timestamp
from registry.gitcreds.models import GitCredential


def render_git_credential(credential: GitCredential) -> dict[str, Any]:
    return {
        "id": credential.id,
        "type": "git_credential",
        "display_name": credential.display_name,
        "host": credential.host,
        "username": credential.username,
        "metadata": credential.metadata,
        "created_at": timestamp(credential.created_at),
        "updated_at": timestamp(credential.updated_at),
        "archived_at": timestamp(credential.archived_at),
    }


def git_credential_for_url(*, workspace_id: str, url: str) -> GitCredential | None:
    """The newest live credential for the repository URL's host (with its port, if any)."""
    host = (urlsplit(url).netloc.rpartition("@")[2]).lower()
    return (
        GitCredential.objects.filter(workspace_id=workspace_id, host=host, archived_at__isnull=True)
        .order_by("-created_at")
        .first()
    )
