"""Identity: who sent a request (api_key digests or JWTs) and the scope it carries.

Only `Authorization: Bearer` carries credentials; validators are tried in config order.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import time
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

import jwt

from gatewayproxy.config.loader import read_yaml_file
from gatewayproxy.config.models import Identity, Spend, Validator
from gatewayproxy.context import ANONYMOUS, Principal
from gatewayproxy.errors import ErrorCode, GatewayError
from gatewayproxy.server.tasks import cancel_and_wait
from gatewayproxy.vaults.resolvers import Fetch

logger = logging.getLogger("gatewayproxy.identity")
JWT_ALGORITHMS = ["RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512", "EdDSA"]
# An unknown kid triggers a JWKS refetch at most this often, so forged kids cannot flood the issuer.
JWKS_REFETCH_INTERVAL_SECONDS = 10.0
JWKS_FETCH_TIMEOUT_SECONDS = 5.0
SCOPE_HEADER_PREFIX = "x-scope-"


class KeysFileError(ValueError):
    """The api_key keys file is missing or malformed."""


def load_keys_file(path: str) -> dict[str, Principal]:
    """Digest to principal, from a keys file: `keys: [{sha256, principal, scope}]` in YAML or JSON."""
    document = read_yaml_file(path, "keys file", KeysFileError)
    entries = document.get("keys") if isinstance(document, dict) else None
    if not isinstance(entries, list):
        raise KeysFileError(f"keys file {path} needs a `keys` list")
    principals = {}
    for index, entry in enumerate(entries):
        digest = str(entry.get("sha256", "")).lower() if isinstance(entry, dict) else ""
        if len(digest) != 64 or any(char not in "0123456789abcdef" for char in digest):
            raise KeysFileError(f"keys[{index}].sha256 must be a hex SHA-256 digest")
        if not entry.get("principal"):
            raise KeysFileError(f"keys[{index}].principal is required")
        scope = {str(key): str(value) for key, value in (entry.get("scope") or {}).items()}
        principals[digest] = Principal(id=str(entry["principal"]), scope=scope)
    return principals


class ApiKeyValidator:
    """Checks a bearer token against SHA-256 digests."""

    def __init__(self, config: Validator) -> None:
        assert config.keys_file is not None
        self.name = config.name
        self._principals = {
            digest: replace(principal, validator=self.name)
            for digest, principal in load_keys_file(config.keys_file).items()
        }

    async def authenticate(self, token: str) -> Principal | None:
        """The principal of `token`, or None (principals are immutable: each key's is built once)."""
        return self._principals.get(hashlib.sha256(token.encode()).hexdigest())


def load_public_key(path: str) -> Any:
    """A PEM public key (or certificate) from disk, parsed."""
    from cryptography import x509
    from cryptography.hazmat.primitives.serialization import load_pem_public_key

    with open(path, "rb") as handle:
        data = handle.read()
    if b"CERTIFICATE" in data:
        return x509.load_pem_x509_certificate(data).public_key()
    return load_pem_public_key(data)


class JwtValidator:
    """Verifies JWTs against a static key or a JWKS fetched, cached, refetched on an unknown kid and every
    `jwks_refresh_secs` in the background (so keys removed from the JWKS stop verifying tokens)."""

    def __init__(self, config: Validator, fetch: Fetch) -> None:
        self.name = config.name
        self.config = config
        self._fetch = fetch
        self._static_key = load_public_key(config.static_public_key_pem) if config.static_public_key_pem else None
        self._keys: dict[str, Any] = {}
        self._fetched_at = float("-inf")
        self._fetch_failed = False  # the last JWKS fetch failed: an unknown key is the issuer's outage, not a forgery
        self._lock = asyncio.Lock()
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        """Refresh the JWKS every `jwks_refresh_secs` in the background (never on the request path; the boot
        does not wait for a first fetch, which the first token makes)."""
        if self.config.jwks_url is not None and self._static_key is None:
            self._task = asyncio.get_running_loop().create_task(self._refresh_forever())

    async def close(self) -> None:
        """Stop refreshing."""
        await cancel_and_wait(self._task)
        self._task = None

    async def _refresh_forever(self) -> None:
        while True:
            await asyncio.sleep(self.config.jwks_refresh_secs)
            await self._refresh(periodic=True)

    async def authenticate(self, token: str) -> Principal | None:
        """The principal of a valid token, or None."""
        try:
            key = await self._key_for(jwt.get_unverified_header(token))
            if key is None:
                return None
            claims = jwt.decode(token, key=key, algorithms=JWT_ALGORITHMS, **self._checks())
        except jwt.PyJWTError as error:
            logger.debug("jwt rejected by %s: %s", self.name, error)
            return None
        scope = {dim: str(claims[claim]) for claim, dim in self.config.scope_from.jwt_claims.items() if claim in claims}
        return Principal(id=str(claims.get("sub", "")), scope=scope, validator=self.name)

    def _checks(self) -> dict[str, Any]:
        config = self.config
        options: dict[str, Any] = {"verify_aud": bool(config.audiences), "verify_iss": bool(config.issuers)}
        if config.require_exp:
            options["require"] = ["exp"]
        return {
            "audience": config.audiences or None,
            "issuer": config.issuers or None,
            "options": options,
            "leeway": config.leeway_secs,  # applied to `exp` and `nbf`
        }

    async def _key_for(self, header: dict[str, Any]) -> Any:
        if self._static_key is not None:
            return self._static_key
        kid = str(header.get("kid", ""))
        if kid not in self._keys:
            await self._refresh()
        if kid in self._keys:
            return self._keys[kid]
        # A single-key JWKS serves tokens without a kid.
        if not kid and len(self._keys) == 1:
            return next(iter(self._keys.values()))
        if self._fetch_failed:
            raise GatewayError(ErrorCode.IDENTITY_UNAVAILABLE, f"the signing keys of {self.name!r} cannot be fetched")
        return None

    async def _refresh(self, periodic: bool = False) -> None:
        """Refetch the JWKS: on an unknown kid at most every JWKS_REFETCH_INTERVAL_SECONDS, always when
        `periodic`."""
        async with self._lock:
            if not periodic and time.monotonic() - self._fetched_at < JWKS_REFETCH_INTERVAL_SECONDS:
                return
            self._fetched_at = time.monotonic()
            assert self.config.jwks_url is not None
            try:
                status, body = await self._fetch(
                    self.config.jwks_url, {"accept": "application/json"}, JWKS_FETCH_TIMEOUT_SECONDS
                )
                if status != 200:
                    raise ValueError(f"the JWKS answered {status}")
                self._keys = _parse_jwks(body)  # keys removed from the JWKS are dropped here
                self._fetch_failed = False
            except Exception as error:  # connection, timeout, status and parse failures alike
                if not self._fetch_failed:
                    logger.warning("cannot fetch JWKS of %s: %s", self.name, error)
                self._fetch_failed = True


def _parse_jwks(body: bytes) -> dict[str, Any]:
    keys = {}
    for index, entry in enumerate(json.loads(body).get("keys", [])):
        keys[str(entry.get("kid", f"#{index}"))] = jwt.PyJWK(entry).key
    return keys


def bearer_token(headers: Mapping[str, str]) -> str | None:
    """The token of an `Authorization: Bearer` header."""
    value = headers.get("authorization")
    if value is None:
        return None
    scheme, _, token = value.partition(" ")
    return token.strip() if scheme.lower() == "bearer" and token.strip() else None


class IdentityStage:
    """Authenticates requests; with no validators configured every caller is anonymous."""

    def __init__(self, identity: Identity, spend: Spend, fetch: Fetch) -> None:
        self._validators = [
            ApiKeyValidator(v) if v.kind == "api_key" else JwtValidator(v, fetch) for v in identity.validators
        ]
        self._trusted_header_dims = tuple(spend.trusted_header_dims)

    def start(self) -> None:
        """Start the validators' background JWKS refreshes."""
        for validator in self._validators:
            if isinstance(validator, JwtValidator):
                validator.start()

    async def close(self) -> None:
        """Stop them."""
        for validator in self._validators:
            if isinstance(validator, JwtValidator):
                await validator.close()

    async def authenticate(self, headers: Mapping[str, str]) -> Principal:
        """The caller's principal with its scope; raises 401 `unauthenticated`."""
        principal = await self._verified(headers)
        return self._with_trusted_headers(principal, headers)

    async def _verified(self, headers: Mapping[str, str]) -> Principal:
        if not self._validators:
            return ANONYMOUS
        token = bearer_token(headers)
        if token is None:
            raise GatewayError(ErrorCode.UNAUTHENTICATED, "missing `Authorization: Bearer` credential")
        unavailable: GatewayError | None = None
        for validator in self._validators:
            try:
                principal = await validator.authenticate(token)
            except GatewayError as error:  # this validator cannot judge now; another may still accept the token
                unavailable = error
                continue
            if principal is not None:
                return principal
        if unavailable is not None:
            raise unavailable
        raise GatewayError(ErrorCode.UNAUTHENTICATED, "the credential was not accepted")

    def _with_trusted_headers(self, principal: Principal, headers: Mapping[str, str]) -> Principal:
        """Raw `X-Scope-<dim>` headers fill only trusted dimensions that no verified value covers."""
        extra = {
            dim: headers[SCOPE_HEADER_PREFIX + dim]
            for dim in self._trusted_header_dims
            if dim not in principal.scope and SCOPE_HEADER_PREFIX + dim in headers
        }
        if not extra:
            return principal
        return Principal(
            id=principal.id,
            scope={**principal.scope, **extra},
            validator=principal.validator,
            header_dims=frozenset(extra),
        )
