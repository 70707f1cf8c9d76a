"""mozilla-django-oidc backend that resolves a validated access token to a workspace, not a Django user.

The provider's userinfo endpoint validates the token; its `sub` claim must have a membership row.
Validated tokens are remembered for REGISTRY_OIDC_CACHE_SECONDS, keyed by the token's digest.
"""

from __future__ import annotations

import hashlib
from typing import Any

from django.conf import settings
from django.core.cache import cache
from mozilla_django_oidc.auth import OIDCAuthenticationBackend

from registry.workspaces.models import OidcMembership
from registry.workspaces.selectors import membership_for_subject


class WorkspaceOIDCBackend(OIDCAuthenticationBackend):  # type: ignore[misc]
    """Validate a bearer token at the provider and map its subject to a workspace id."""

    def get_or_create_user(self, access_token: str, id_token: Any, payload: Any) -> OidcMembership | None:
        cache_key = "oidc:" + hashlib.sha256(access_token.encode()).hexdigest()
        subject = cache.get(cache_key)
        if subject is None:
            user_info = self.get_userinfo(access_token, id_token, payload)
            subject = user_info.get("sub") if isinstance(user_info, dict) else None
            if not subject:
                return None
            cache.set(cache_key, subject, settings.REGISTRY_OIDC_CACHE_SECONDS)
        return membership_for_subject(subject)
