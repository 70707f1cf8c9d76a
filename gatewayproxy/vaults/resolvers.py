"""The vault resolvers: they turn (vault, credential id, scope) into a provider `Secret`.

Formats are in decisions.md: a static file maps ids to a secret string or to `{scheme, token, ...}`;
`env` reads `env_var` or `<prefix><VAULT>__<CREDENTIAL_ID>` (upper-cased, non-alphanumerics as `_`).
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import re
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote

from gatewayproxy.config.loader import read_yaml_file
from gatewayproxy.config.models import Vault


class VaultError(Exception):
    """A credential cannot be resolved."""


class VaultUnavailable(VaultError):
    """The vault service cannot be reached or failed (an outage, not a missing credential)."""


@dataclass(frozen=True)
class Secret:
    """A provider credential: its scheme, its main token, and any other fields of the scheme."""

    scheme: str
    token: str
    fields: Mapping[str, Any] = field(default_factory=dict)


def secret_from(value: Any, default_scheme: str = "bearer") -> Secret:
    """A `Secret` from a stored value: a plain string, a JSON object string, or a mapping."""
    if isinstance(value, str) and value.lstrip().startswith("{"):
        with contextlib.suppress(json.JSONDecodeError):
            value = json.loads(value)
    if isinstance(value, str):
        return Secret(scheme=default_scheme, token=value)
    if isinstance(value, Mapping):
        fields = {key: item for key, item in value.items() if key not in ("scheme", "token")}
        return Secret(
            scheme=str(value.get("scheme") or default_scheme), token=str(value.get("token") or ""), fields=fields
        )
    raise VaultError(f"unsupported secret value of type {type(value).__name__}")


@functools.lru_cache(maxsize=256)
def _parsed_secret(value: str, scheme: str) -> Secret:
    return secret_from(value, scheme)


def env_name(prefix: str, vault: str, credential_id: str) -> str:
    """The derived environment variable of a credential."""

    def normalize(text: str) -> str:
        return re.sub(r"[^A-Z0-9]", "_", text.upper())

    return f"{prefix}{normalize(vault)}__{normalize(credential_id)}"


Fetch = Callable[[str, dict[str, str], float], Awaitable[tuple[int, bytes]]]


class EnvVault:
    """Reads credentials from the process environment."""

    def __init__(self, vault: Vault) -> None:
        self.vault = vault

    def variable(self, credential_id: str) -> str:
        """The variable a credential is read from."""
        return self.vault.env_var or env_name(self.vault.prefix, self.vault.name, credential_id)

    def lookup(self, credential_id: str) -> Secret:
        """Resolve synchronously (used by live validation too); the environment is read on every call."""
        variable = self.variable(credential_id)
        value = os.environ.get(variable)
        if value is None:
            raise VaultError(f"environment variable {variable} is not set")
        return _parsed_secret(value, self.vault.scheme or "bearer")

    async def resolve(self, credential_id: str, scope: Mapping[str, str]) -> Secret:
        """The credential for `credential_id`."""
        return self.lookup(credential_id)


def load_secret_file(path: str) -> dict[str, Any]:
    """Parse a static_file vault (YAML or JSON)."""
    document = read_yaml_file(path, "vault file", VaultError)
    if not isinstance(document, dict):
        raise VaultError(f"vault file {path} must map credential ids to secrets")
    return document


class StaticFileVault:
    """Credentials loaded from a file at startup."""

    def __init__(self, vault: Vault) -> None:
        assert vault.file is not None
        self.vault = vault
        self._secrets = {str(key): secret_from(value) for key, value in load_secret_file(vault.file).items()}

    def lookup(self, credential_id: str) -> Secret:
        """Resolve synchronously (used by live validation too)."""
        try:
            return self._secrets[credential_id]
        except KeyError:
            raise VaultError(f"credential {credential_id!r} is not in {self.vault.file}") from None

    async def resolve(self, credential_id: str, scope: Mapping[str, str]) -> Secret:
        """The credential for `credential_id`."""
        return self.lookup(credential_id)


_TEMPLATE_FIELD = re.compile(r"\{(credential_id|scope\.[^}]+)\}")


def filled_template(
    fields: re.Pattern[str], template: str, value: str, scope: Mapping[str, str], missing: Callable[[str], Exception]
) -> str:
    """A URL template with its fields (what `fields` matches: one named field, or `scope.<dim>`) filled in,
    URL-quoted: the named field with `value`, a scope field with the principal's value of the dimension; a
    dimension `scope` lacks raises `missing(dim)`."""

    def filled(match: re.Match[str]) -> str:
        name = match.group(1)
        if not name.startswith("scope."):
            return quote(value, safe="")
        dim = name.removeprefix("scope.")
        if dim not in scope:
            raise missing(dim)
        return quote(scope[dim], safe="")

    return fields.sub(filled, template)


class HttpVault:
    """Fetches credentials from an HTTP service (`url_template`), with a TTL and size-bounded cache."""

    def __init__(self, vault: Vault, fetch: Fetch) -> None:
        assert vault.url_template is not None
        self.vault = vault
        self._fetch = fetch
        self._cache: OrderedDict[str, tuple[float, Secret]] = OrderedDict()

    def url_for(self, credential_id: str, scope: Mapping[str, str]) -> str:
        """The URL of a credential; a scope dimension the principal lacks is an error."""

        assert self.vault.url_template is not None
        return filled_template(
            _TEMPLATE_FIELD,
            self.vault.url_template,
            credential_id,
            scope,
            lambda dim: VaultError(f"scope dimension {dim!r} is needed by vault {self.vault.name!r}"),
        )

    async def resolve(self, credential_id: str, scope: Mapping[str, str]) -> Secret:
        """The credential, from the cache while fresh."""
        url = self.url_for(credential_id, scope)
        cached = self._cache.get(url)
        if cached is not None and cached[0] > time.monotonic():
            self._cache.move_to_end(url)
            return cached[1]
        secret = await self._download(url)
        if self.vault.cache.enabled:
            self._remember(url, secret)
        return secret

    async def _download(self, url: str) -> Secret:
        headers = {"accept": "application/json"}
        if self.vault.bearer_token_file:
            headers["authorization"] = "Bearer " + read_token_file(self.vault.bearer_token_file)
        try:
            status, body = await self._fetch(url, headers, self.vault.timeout_ms / 1000)
        except Exception as error:  # the fetcher's connection, timeout and protocol failures
            raise VaultUnavailable(f"vault {self.vault.name!r} cannot be reached: {error}") from None
        if status >= 500:
            raise VaultUnavailable(f"vault {self.vault.name!r} answered {status}")
        if status != 200:
            raise VaultError(f"vault {self.vault.name!r} answered {status}")
        text = body.decode("utf-8", "replace")
        try:
            document = json.loads(text)
        except json.JSONDecodeError:
            return Secret(scheme=self.vault.scheme or "bearer", token=text.strip())
        if isinstance(document, dict) and "secret" in document and "token" not in document:
            document = document["secret"]
        return secret_from(document, self.vault.scheme or "bearer")

    def _remember(self, url: str, secret: Secret) -> None:
        self._cache[url] = (time.monotonic() + self.vault.cache.ttl_secs, secret)
        self._cache.move_to_end(url)
        while len(self._cache) > self.vault.cache.max_entries:
            self._cache.popitem(last=False)


def read_token_file(path: str) -> str:
    """A bearer token file, reread on each use so rotation needs no restart."""
    with open(path, encoding="utf-8") as handle:
        return handle.read().strip()


VaultResolver = EnvVault | StaticFileVault | HttpVault


def build_vault(vault: Vault, fetch: Fetch) -> VaultResolver:
    """The resolver of a vault section."""
    if vault.resolver == "env":
        return EnvVault(vault)
    if vault.resolver == "static_file":
        return StaticFileVault(vault)
    return HttpVault(vault, fetch)
