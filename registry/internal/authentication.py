"""The service credential of the internal endpoints: `Authorization: Bearer <token>` from a file."""

from __future__ import annotations

import hmac
from pathlib import Path
from typing import Any

from django.conf import settings
from rest_framework import authentication, exceptions, permissions
from rest_framework.request import Request

SERVICE = "internal-service"


def configured_token() -> str | None:
    """The token, reread on every request so it can rotate without a restart; None when unset."""
    path = settings.REGISTRY_INTERNAL_TOKEN_FILE
    if not path:
        return None
    token = Path(path).read_text().strip()
    return token or None


class ServiceTokenAuthentication(authentication.BaseAuthentication):
    """Accept exactly the configured service token; any other credential is refused."""

    def authenticate(self, request: Request) -> tuple[str, None]:
        expected = configured_token()
        header = request.META.get("HTTP_AUTHORIZATION", "")
        scheme, _, token = header.partition(" ")
        if expected is None or scheme.lower() != "bearer" or not hmac.compare_digest(token.strip(), expected):
            raise exceptions.AuthenticationFailed("A valid service token is required.")
        return SERVICE, None

    def authenticate_header(self, request: Request) -> str:
        return 'Bearer realm="internal"'


class IsService(permissions.BasePermission):
    def has_permission(self, request: Request, view: Any) -> bool:
        return request.user == SERVICE
