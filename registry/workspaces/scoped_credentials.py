"""Scoped credentials of self-hosted environments: environment keys and work secrets (issue 26).

- An environment key (`sk-env-…`) is minted by staff for one `self_hosted` environment and sent as
  `Authorization: Bearer`. Its principal has `credential_kind == "environment_key"` and `environment_id`.
- A work secret is the per-item `secret` a poll returns: URL-safe base64 JSON carrying a `sessions_token`
  (`sk-wst-…`), which the reference client's worker decodes and sends as `Authorization: Bearer`. Its
  principal has `credential_kind == "work_secret"`, `environment_id`, `session_id` and `work_id`. It is
  valid until the item stops (`revoke_work_secrets`).

Both are recognised by their prefix before any OIDC validation, are stored as SHA-256 digests only, and
are looked up on every use, so a revocation is refused on the next request in every process.

Scoped principals are refused by the default permission (`registry.core.callers.IsWorkspaceMember`); a
view opts in with `accepts_scoped_credentials = (ENVIRONMENT_KEY, WORK_SECRET)` (or one of them) and checks
every object it touches with `scoped_access(request.user, environment_id=…, session_id=…, work_id=…)`.
"""

from __future__ import annotations

import base64
import json
import secrets
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from django.apps import apps
from django.db import transaction
from django.utils import timezone

from registry.core.callers import ENVIRONMENT_KEY, SCOPED_KINDS, WORK_SECRET, scoped_access
from registry.workspaces.models import EnvironmentKey, WorkSecret, Workspace
from registry.workspaces.services import digest_of

__all__ = [
    "ENVIRONMENT_KEY",
    "ENVIRONMENT_KEY_PREFIX",
    "SCOPED_KINDS",
    "WORK_SECRET",
    "WORK_SECRET_PREFIX",
    "IssuedEnvironmentKey",
    "SessionGrants",
    "environment_key_for_plaintext",
    "environment_key_issue",
    "environment_key_revoke",
    "mint_work_secret",
    "revoke_work_secrets",
    "scoped_access",
    "session_grants",
    "work_secret_for_plaintext",
]

ENVIRONMENT_KEY_PREFIX = "sk-env-"
WORK_SECRET_PREFIX = "sk-wst-"
# `last_used_at` of an environment key is refreshed at most this often.
LAST_USED_RESOLUTION = timedelta(seconds=60)


@dataclass(frozen=True)
class IssuedEnvironmentKey:
    """A freshly minted environment key: the row and the plaintext, which exists only in this object."""

    environment_key: EnvironmentKey
    plaintext: str


@transaction.atomic
def environment_key_issue(*, workspace: Workspace, environment_id: str, name: str = "") -> IssuedEnvironmentKey:
    """Mint a key for `environment_id`; the caller has checked it is a self_hosted environment of `workspace`."""
    plaintext = ENVIRONMENT_KEY_PREFIX + secrets.token_urlsafe(32)
    key = EnvironmentKey.objects.create(
        workspace=workspace,
        environment_id=environment_id,
        name=name,
        digest=digest_of(plaintext),
        display_prefix=plaintext[:12],
    )
    return IssuedEnvironmentKey(environment_key=key, plaintext=plaintext)


@transaction.atomic
def environment_key_revoke(*, environment_key: EnvironmentKey) -> EnvironmentKey:
    """Revoke a key: it is refused on its next use."""
    environment_key.revoked_at = environment_key.revoked_at or timezone.now()
    environment_key.save(update_fields=["revoked_at"])
    return environment_key


def environment_key_for_plaintext(plaintext: str) -> EnvironmentKey | None:
    """The live (unrevoked) environment key with this plaintext, or None. Never cached."""
    key = (
        EnvironmentKey.objects.select_related("workspace")
        .filter(digest=digest_of(plaintext), revoked_at__isnull=True)
        .first()
    )
    if key is not None and (key.last_used_at is None or timezone.now() - key.last_used_at > LAST_USED_RESOLUTION):
        EnvironmentKey.objects.filter(pk=key.pk).update(last_used_at=timezone.now())
    return key


def _workspace_id_of_environment(environment_id: str) -> str:
    # The environments app sits above this one: ask the app registry, not an import.
    environment_model = apps.get_model("environments", "Environment")
    workspace_id = environment_model.objects.filter(pk=environment_id).values_list("workspace_id", flat=True).first()
    if workspace_id is None:
        raise ValueError(f"No environment {environment_id!r}.")
    return str(workspace_id)


@transaction.atomic
def mint_work_secret(*, work_id: str, session_id: str, environment_id: str, workspace_id: str | None = None) -> str:
    """The `secret` of a polled work item: base64url JSON carrying a fresh `sessions_token` for `session_id`
    and `work_id`. Only the token's digest is stored. Each call mints a new token; all of an item's tokens
    stop working at `revoke_work_secrets(work_id)`."""
    token = WORK_SECRET_PREFIX + secrets.token_urlsafe(32)
    WorkSecret.objects.create(
        workspace_id=workspace_id or _workspace_id_of_environment(environment_id),
        environment_id=environment_id,
        session_id=session_id,
        work_id=work_id,
        digest=digest_of(token),
    )
    payload = {"version": 1, "sessions_token": token, "work_id": work_id, "session_id": session_id}
    return base64.urlsafe_b64encode(json.dumps(payload, separators=(",", ":")).encode()).decode().rstrip("=")


def revoke_work_secrets(work_id: str) -> None:
    """The item stopped: every sessions token minted for it is refused from now on."""
    WorkSecret.objects.filter(work_id=work_id, revoked_at__isnull=True).update(revoked_at=timezone.now())


def work_secret_for_plaintext(plaintext: str) -> WorkSecret | None:
    """The live (unrevoked) work secret whose sessions token is `plaintext`, or None. Never cached."""
    return (
        WorkSecret.objects.select_related("workspace")
        .filter(digest=digest_of(plaintext), revoked_at__isnull=True)
        .first()
    )


@dataclass(frozen=True)
class SessionGrants:
    """What a work secret may read beyond its session: the skills of the session's agent, and the memory
    stores attached to the session (store id -> `read_write` or `read_only`)."""

    skill_ids: frozenset[str]
    memory_stores: dict[str, str]


def session_grants(caller: Any) -> SessionGrants:
    """The skills and memory stores of a work secret's session; nothing for any other caller."""
    if getattr(caller, "credential_kind", None) != WORK_SECRET or caller.session_id is None:
        return SessionGrants(frozenset(), {})
    # The sessions app sits above this one: ask the app registry, not an import.
    session_model = apps.get_model("agent_sessions", "Session")
    row = (
        session_model.objects.filter(pk=caller.session_id, workspace_id=caller.workspace_id)
        .values("agent_snapshot", "resources")
        .first()
    )
    if row is None:
        return SessionGrants(frozenset(), {})
    skills = (row["agent_snapshot"] or {}).get("skills") or []
    stores = {
        str(resource["memory_store_id"]): str(resource.get("access") or "read_write")
        for resource in row["resources"] or []
        if isinstance(resource, dict) and resource.get("type") == "memory_store" and resource.get("memory_store_id")
    }
    skill_ids = frozenset(
        str(skill["skill_id"]) for skill in skills if isinstance(skill, dict) and skill.get("skill_id")
    )
    return SessionGrants(skill_ids, stores)
