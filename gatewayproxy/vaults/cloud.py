"""Cloud credentials found by the providers' own libraries when a destination names no vault: botocore's
credential chain (environment, shared config and profile, web identity and role assumption, container and
instance metadata) and google-auth's application default credentials, plus google-auth documents from a vault.

Every lookup or refresh that may do I/O runs in a worker thread; credentials are kept until near expiry, so the
request path awaits nothing but a dictionary read while they are fresh.
"""

from __future__ import annotations

import asyncio
import warnings
from collections.abc import Mapping
from typing import Any

from gatewayproxy.vaults.resolvers import Secret, VaultError

GOOGLE_SCOPES = ("https://www.googleapis.com/auth/cloud-platform",)


class AwsCredentialChain:
    """botocore's default credential chain for one (optional) profile, resolved once off the event loop; refreshable
    credentials (assumed roles, web identity, container and instance metadata) refresh in a thread when botocore
    says they are near expiry."""

    def __init__(self, profile: str | None = None) -> None:
        self.profile = profile
        self._credentials: Any = None
        self._frozen: Any = None
        self._lock = asyncio.Lock()

    def _resolve(self) -> Any:
        import botocore.session

        session = botocore.session.Session(profile=self.profile)
        try:
            credentials = session.get_credentials()
        except Exception as error:  # botocore raises many kinds (profile not found, STS refusals, ...)
            raise VaultError(f"the AWS credential chain failed: {error}") from error
        if credentials is None:
            raise VaultError("the AWS credential chain found no credentials")
        return credentials

    def _needs_refresh(self) -> bool:
        if self._frozen is None:
            return True
        refresh_needed = getattr(self._credentials, "refresh_needed", None)
        return bool(refresh_needed()) if refresh_needed is not None else False

    async def frozen(self) -> Any:
        """botocore `ReadOnlyCredentials` (access key, secret key, session token) valid for a while."""
        if not self._needs_refresh():
            return self._frozen
        async with self._lock:
            if self._needs_refresh():
                if self._credentials is None:
                    self._credentials = await asyncio.to_thread(self._resolve)
                try:
                    self._frozen = await asyncio.to_thread(self._credentials.get_frozen_credentials)
                except Exception as error:
                    raise VaultError(f"the AWS credentials could not be refreshed: {error}") from error
            return self._frozen


class GoogleCredentials:
    """Access tokens from google-auth: application default credentials (no secret) or a credentials document
    from a vault (service account, authorized user, external account...); refreshed in a thread when google-auth
    no longer calls them valid (a few minutes before expiry)."""

    def __init__(self) -> None:
        self._credentials: dict[str, Any] = {}
        self._lock = asyncio.Lock()

    @staticmethod
    def _default() -> Any:
        import google.auth
        import google.auth.exceptions

        try:
            credentials, _ = google.auth.default(scopes=list(GOOGLE_SCOPES))
        except google.auth.exceptions.GoogleAuthError as error:
            raise VaultError(f"no application default credentials: {error}") from error
        return credentials

    @staticmethod
    def _from_document(document: Mapping[str, Any]) -> Any:
        import google.auth
        import google.auth.exceptions
        import google.oauth2.credentials
        import google.oauth2.service_account

        info, scopes = dict(document), list(GOOGLE_SCOPES)
        try:
            if info.get("type") == "service_account":
                return google.oauth2.service_account.Credentials.from_service_account_info(info, scopes=scopes)
            if info.get("type") == "authorized_user":
                return google.oauth2.credentials.Credentials.from_authorized_user_info(info, scopes=scopes)
            # Other kinds (external account, impersonation): google-auth's generic loader, which warns that it does
            # not vet the document; the vault is the operator's own configuration.
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", DeprecationWarning)
                credentials, _ = google.auth.load_credentials_from_dict(info, scopes=scopes)
        except (google.auth.exceptions.GoogleAuthError, ValueError, KeyError) as error:
            raise VaultError(f"unusable google-auth credentials document: {error}") from error
        return credentials

    @staticmethod
    def _refresh(credentials: Any) -> None:
        import google.auth.exceptions
        import google.auth.transport.requests

        try:
            credentials.refresh(google.auth.transport.requests.Request())
        except google.auth.exceptions.GoogleAuthError as error:
            raise VaultError(f"the google-auth token could not be refreshed: {error}") from error

    @staticmethod
    def _key(secret: Secret | None) -> str:
        if secret is None:
            return ""
        fields = secret.fields
        return "{}:{}".format(fields["type"], fields.get("client_email") or fields.get("client_id") or "")

    async def token(self, secret: Secret | None) -> str:
        """A valid access token: from application default credentials when `secret` is None, the secret's own
        token when it is a plain bearer token, else from its google-auth document."""
        if secret is not None and "type" not in secret.fields:
            return secret.token
        key = self._key(secret)
        credentials = self._credentials.get(key)
        if credentials is not None and credentials.valid:
            return str(credentials.token)
        async with self._lock:
            found: Any = self._credentials.get(key)
            if found is None:
                found = await asyncio.to_thread(self._default) if secret is None else self._from_document(secret.fields)
                self._credentials[key] = found
            if not found.valid:
                await asyncio.to_thread(self._refresh, found)
            return str(found.token)
