"""Live validation: what can only be checked against the machine (files exist, PEM keys parse, vault
references resolve), run at boot and by `POST /admin/v1/config/validate`. It lives above the config layer
because it loads keys files and vaults the way the pipeline will."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator

from cryptography import x509
from cryptography.hazmat.primitives.serialization import load_pem_private_key

from gatewayproxy.config.models import GatewayConfig
from gatewayproxy.pipeline.identity import KeysFileError, load_keys_file, load_public_key
from gatewayproxy.vaults.resolvers import EnvVault, StaticFileVault, VaultError


def _readable(key: str, path: str | None) -> Iterator[str]:
    if path is not None and not os.path.isfile(path):
        yield f"{key}: file {path} does not exist"


def _parses(key: str, path: str | None, parse: Callable[[str], object]) -> Iterator[str]:
    if path is None:
        return
    if not os.path.isfile(path):
        yield f"{key}: file {path} does not exist"
        return
    try:
        parse(path)
    except (ValueError, TypeError, OSError, KeysFileError) as error:
        yield f"{key}: cannot parse {path}: {error}"


def _certificate(path: str) -> object:
    with open(path, "rb") as handle:
        return x509.load_pem_x509_certificate(handle.read())


def _private_key(path: str) -> object:
    with open(path, "rb") as handle:
        return load_pem_private_key(handle.read(), password=None)


def _server_problems(config: GatewayConfig) -> Iterator[str]:
    server = config.server
    for name, tls in (("server.tls", server.tls), ("server.admin_tls", server.admin_tls)):
        if tls is not None:
            yield from _parses(f"{name}.cert", tls.cert, _certificate)
            yield from _parses(f"{name}.key", tls.key, _private_key)
    yield from _readable("server.admin_token_file", server.admin_token_file)


def _identity_problems(config: GatewayConfig) -> Iterator[str]:
    for index, validator in enumerate(config.identity.validators):
        key = f"identity.validators[{index}]"
        yield from _parses(f"{key}.keys_file", validator.keys_file, load_keys_file)
        yield from _parses(f"{key}.static_public_key_pem", validator.static_public_key_pem, load_public_key)


def _vault_problems(config: GatewayConfig) -> Iterator[str]:
    resolvers: dict[str, EnvVault | StaticFileVault] = {}
    for index, vault in enumerate(config.vaults):
        yield from _readable(f"vaults[{index}].bearer_token_file", vault.bearer_token_file)
        try:
            if vault.resolver == "env":
                resolvers[vault.name] = EnvVault(vault)
            elif vault.resolver == "static_file":
                resolvers[vault.name] = StaticFileVault(vault)
        except VaultError as error:
            yield f"vaults[{index}].file: {error}"
    for name, destination in config.destinations.items():
        resolver = resolvers.get(destination.vault_name)
        if resolver is None:
            continue
        try:
            resolver.lookup(destination.credential_id)
        except VaultError as error:
            yield f"destinations.{name}.credentials: {error}"


def _guardrail_problems(config: GatewayConfig) -> Iterator[str]:
    source = config.guardrail_source
    if source is None:
        return
    yield from _readable("guardrail_source.bearer_token_file", source.bearer_token_file)
    yield from _parses(
        "guardrail_source.verification.public_key_file", source.verification.public_key_file, load_public_key
    )
    if source.kind == "file":
        yield from _readable("guardrail_source.path", source.path)


def live_problems(config: GatewayConfig) -> list[str]:
    """Every live problem of a structurally valid config, each naming its key."""
    return [
        *_server_problems(config),
        *_identity_problems(config),
        *_vault_problems(config),
        *_guardrail_problems(config),
    ]
