"""The bearer token a session uses for one of its agent's MCP servers, from the session's vaults.

`static_bearer` gives its token; `mcp_oauth` its access token, refreshed first when it has expired
and has refresh settings (a refresh that fails writes `vault_credential.refresh_failed`, and the expired
token is used). No matching credential: the server is called without authentication.
"""

from __future__ import annotations

import logging

import httpx

from registry.core.egress import EgressRefused
from registry.vaults import selectors as vault_selectors
from registry.vaults import services as vault_services

logger = logging.getLogger(__name__)


def bearer_for(*, workspace_id: str, vault_ids: list[str], server_url: str) -> str | None:
    credential = vault_selectors.mcp_credential_for(
        vault_ids=vault_ids, workspace_id=workspace_id, server_url=server_url
    )
    if credential is None:
        return None
    if credential.auth["type"] == "static_bearer":
        return vault_services.secret_of(credential, "token")
    if vault_selectors.oauth_expired(credential) and credential.auth.get("refresh"):
        try:
            credential = vault_services.credential_refresh_oauth(credential=credential)
        except (httpx.HTTPError, EgressRefused) as error:
            logger.warning(
                "credential %s: refreshing the access token failed (%s)", credential.id, type(error).__name__
            )
            vault_services.credential_refresh_failed(credential=credential)
    return vault_services.secret_of(credential, "access_token")
