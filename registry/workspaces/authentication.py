"""DRF authentication: `x-api-key` decides alone when present; otherwise a Bearer token.

A Bearer token is an environment key or a work item's sessions token when it carries their prefix (decided
before any OIDC validation; see `registry.workspaces.scoped_credentials`), else an OIDC access token.
Each resolves to a `Principal` bound to exactly one workspace (interface.md, Authentication 1-3).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from mozilla_django_oidc.contrib.drf import OIDCAuthentication
from requests.exceptions import RequestException
from rest_framework import authentication, exceptions
from rest_framework.request import Request

from registry.core.callers import Caller
from registry.workspaces.models import Workspace
from registry.workspaces.scoped_credentials import (
    ENVIRONMENT_KEY,
    ENVIRONMENT_KEY_PREFIX,
    WORK_SECRET,
    WORK_SECRET_PREFIX,
    environment_key_for_plaintext,
    work_secret_for_plaintext,
)
from registry.workspaces.selectors import api_key_for_plaintext
from registry.workspaces.services import KEY_PREFIX, api_key_mark_used


@dataclass(frozen=True)
class Principal(Caller):
    """The caller: one workspace, and how it proved it."""

    workspace: Workspace
    credential_kind: str  # "api_key", "oidc", "environment_key" or "work_secret"
    subject: str
    is_org_admin: bool = False
    environment_id: str | None = None  # "environment_key" and "work_secret" only
    session_id: str | None = None  # "work_secret" only
    work_id: str | None = None  # "work_secret" only


class WorkspaceAuthentication(authentication.BaseAuthentication):
    """Resolve `x-api-key` or `Authorization: Bearer` to a Principal; failure is final."""

    def authenticate(self, request: Request) -> tuple[Principal, Any] | None:
        api_key_header = request.META.get("HTTP_X_API_KEY")
        if api_key_header is not None:
            return self._authenticate_api_key(api_key_header)
        return self._authenticate_bearer(request)

    @staticmethod
    def _authenticate_api_key(plaintext: str) -> tuple[Principal, Any]:
        api_key = api_key_for_plaintext(plaintext.strip()) if plaintext.strip() else None
        if api_key is None:
            raise exceptions.AuthenticationFailed("Invalid API key.")
        api_key_mark_used(api_key=api_key)
        return Principal(api_key.workspace, "api_key", api_key.display_prefix, api_key.is_org_admin), api_key

    @staticmethod
    def _authenticate_bearer(request: Request) -> tuple[Principal, Any] | None:
        oidc = OIDCAuthentication()
        token = oidc.get_access_token(request)
        if token is None:
            return None
        if token.startswith(ENVIRONMENT_KEY_PREFIX):
            return _authenticate_environment_key(token)
        if token.startswith(WORK_SECRET_PREFIX):
            return _authenticate_work_secret(token)
        if token.startswith(KEY_PREFIX):  # the SDK's `api_key` goes out as a Bearer token: say where a key goes
            raise exceptions.AuthenticationFailed(
                "A workspace API key is sent in the x-api-key header, not as Authorization: Bearer (with the "
                'anthropic client: default_headers={"x-api-key": KEY} and api_key unset).'
            )
        try:
            result = oidc.authenticate(request)
        except RequestException as error:
            raise exceptions.AuthenticationFailed("The access token could not be validated.") from error
        if result is None:
            return None
        membership, _ = result
        return Principal(membership.workspace, "oidc", membership.subject), None

    def authenticate_header(self, request: Request) -> str:
        return 'Bearer realm="api"'


def _authenticate_environment_key(token: str) -> tuple[Principal, Any]:
    key = environment_key_for_plaintext(token)
    if key is None:
        raise exceptions.AuthenticationFailed("Invalid or revoked environment key.")
    return Principal(key.workspace, ENVIRONMENT_KEY, key.display_prefix, environment_id=key.environment_id), key


def _authenticate_work_secret(token: str) -> tuple[Principal, Any]:
    secret = work_secret_for_plaintext(token)
    if secret is None:
        raise exceptions.AuthenticationFailed("Invalid work secret, or its work item has stopped.")
    principal = Principal(
        secret.workspace,
        WORK_SECRET,
        f"work:{secret.work_id}",
        environment_id=secret.environment_id,
        session_id=secret.session_id,
        work_id=secret.work_id,
    )
    return principal, secret
