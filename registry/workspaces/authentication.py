"""DRF authentication: `x-api-key` decides alone when present; otherwise an OIDC Bearer token.

Both resolve to a `Principal` bound to exactly one workspace (interface.md, Authentication 1-3).
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
from registry.workspaces.selectors import api_key_for_plaintext
from registry.workspaces.services import KEY_PREFIX, api_key_mark_used


@dataclass(frozen=True)
class Principal(Caller):
    """The caller: one workspace, and how it proved it."""

    workspace: Workspace
    credential_kind: str  # "api_key" or "oidc"
    subject: str
    is_org_admin: bool = False


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
