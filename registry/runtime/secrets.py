"""A session's `environment_variable` credentials as its sandbox gets them: placeholders in its
environment, and the injections its egress proxy uses to put the real secrets in on the way out."""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Iterable

from django.conf import settings

from registry.sandbox.hostnames import HostPattern, parse_host_entry
from registry.sandbox.interception import SecretInjection
from registry.vaults import selectors as vault_selectors
from registry.vaults.models import VaultCredential
from registry.vaults.services import secret_of

PLACEHOLDER_PREFIX = "regsec_"


def session_injections(
    *, session_id: str, workspace_id: str, vault_ids: list[str]
) -> tuple[dict[str, str], tuple[SecretInjection, ...]]:
    """(sandbox env: secret_name -> placeholder, injections) from the live credentials of the session's
    vaults; for a name in several vaults, the first vault in the session's order wins."""
    env: dict[str, str] = {}
    injections: list[SecretInjection] = []
    for credential in vault_selectors.environment_credentials(workspace_id=workspace_id, vault_ids=vault_ids):
        name = credential.auth["secret_name"]
        value = secret_of(credential, "secret_value")
        if name in env or value is None:
            continue
        env[name] = placeholder_for(session_id, credential.id)
        injections.append(_injection(credential, env[name], value))
    return env, tuple(injections)


def placeholder_for(session_id: str, credential_id: str) -> str:
    """Stable for the session and credential (a new shell or worker keeps it, so a placeholder the
    agent wrote down still works), keyed by the deployment's secret: it says nothing of the secret."""
    digest = hmac.new(settings.SECRET_KEY.encode(), f"{session_id}:{credential_id}".encode(), hashlib.sha256)
    return f"{PLACEHOLDER_PREFIX}{digest.hexdigest()[:32]}"


def _injection(credential: VaultCredential, placeholder: str, value: str) -> SecretInjection:
    """`networking.type` unrestricted: any host; `injection_location`: headers unless said otherwise."""
    networking = credential.auth.get("networking") or {}
    location = credential.auth.get("injection_location") or {}
    hosts = None
    if networking.get("type") == "limited":
        hosts = tuple(_host_patterns(networking.get("allowed_hosts") or ()))
    return SecretInjection(
        placeholder=placeholder,
        value=value,
        hosts=hosts,
        in_headers=bool(location.get("header", True)),
        in_body=bool(location.get("body", False)),
    )


def _host_patterns(entries: Iterable[object]) -> list[HostPattern]:
    """The entries as (host, port or None); one stored before entries were checked, and not valid, is left
    out (the secret does not go there)."""
    patterns = []
    for entry in entries:
        try:
            patterns.append(parse_host_entry(str(entry)))
        except ValueError:
            continue
    return patterns
