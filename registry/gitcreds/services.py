"""Writes for git credentials: the token is sealed with AES-GCM bound to the credential id."""

from __future__ import annotations

from typing import Any

from django.db import transaction

from registry.core.ids import new_id
from registry.core.secrets import seal, unseal
from registry.core.services import apply_updates
from registry.gitcreds.models import GitCredential
from registry.workspaces.models import Workspace

DEFAULT_USERNAME = "x-access-token"


def token_of(credential: GitCredential) -> str:
    """The plaintext token, for cloning only."""
    return unseal(credential.sealed_token, context=credential.id)


@transaction.atomic
def git_credential_create(*, workspace: Workspace, values: dict[str, Any]) -> GitCredential:
    credential_id = new_id("gitcred")
    return GitCredential.objects.create(
        id=credential_id,
        workspace=workspace,
        host=values["host"].lower(),
        username=values.get("username") or DEFAULT_USERNAME,
        display_name=values.get("display_name"),
        metadata=values.get("metadata", {}),
        sealed_token=seal(values["token"], context=credential_id),
    )


@transaction.atomic
def git_credential_update(*, credential: GitCredential, values: dict[str, Any]) -> GitCredential:
    locked = GitCredential.objects.select_for_update().get(pk=credential.pk)
    if "host" in values:
        locked.host = values["host"].lower()
    if "token" in values:
        locked.sealed_token = seal(values["token"], context=locked.id)
    apply_updates(locked, values, ("username", "display_name"))
    locked.save()
    return locked
