"""Cross-section checks of a structurally valid config, and the startup warnings it deserves."""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterable, Iterator
from urllib.parse import urlsplit

from gatewayproxy.config.auth import AuthPlacement
from gatewayproxy.config.models import GatewayConfig, Route

_TEMPLATE_SCOPE = re.compile(r"\{scope\.([^}]+)\}")


def _duplicates(kind: str, names: Iterable[str]) -> Iterator[str]:
    seen: set[str] = set()
    for name in names:
        if name in seen:
            yield f"{kind}: duplicate name {name!r}"
        seen.add(name)


def _undeclared_dims(key: str, dims: Iterable[str], declared: set[str]) -> Iterator[str]:
    for dim in dims:
        if dim not in declared:
            yield f"{key}: scope dimension {dim!r} is not declared in identity.scope_dims"


def split_address(listen: str) -> tuple[str, int]:
    """`host:port` (IPv6 hosts in brackets) to a (host, port) pair."""
    host, _, port = listen.rpartition(":")
    return host.strip("[]"), int(port)


def is_loopback(listen: str) -> bool:
    """Whether a `host:port` listener is reachable only from this machine (`localhost` or a loopback address;
    an empty host or `0.0.0.0` listens everywhere)."""
    host = listen.rpartition(":")[0].strip("[]")
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _route_problems(index: int, route: Route, config: GatewayConfig, declared: set[str]) -> Iterator[str]:
    key = f"routes[{index}]"
    yield from _undeclared_dims(f"{key}.match.scope", route.match.scope, declared)
    strategy = route.strategy
    named = [(f"{key}.strategy.targets[{i}].destination", t.destination) for i, t in enumerate(strategy.targets)]
    named += [(f"{key}.strategy.conditions[{i}].target", c.target) for i, c in enumerate(strategy.conditions)]
    if strategy.default is not None:
        named.append((f"{key}.strategy.default", strategy.default))
    for field, destination in named:
        if destination not in config.destinations:
            yield f"{field}: destination {destination!r} is not declared"
    for i, condition in enumerate(strategy.conditions):
        for field in condition.if_:
            yield from _condition_field_problems(f"{key}.strategy.conditions[{i}].if.{field}", field, declared)


def _condition_field_problems(key: str, field: str, declared: set[str]) -> Iterator[str]:
    if field in ("model", "path") or field.startswith("header."):
        return
    if field.startswith("scope."):
        yield from _undeclared_dims(key, [field.removeprefix("scope.")], declared)
        return
    yield f"{key}: a condition field is `model`, `path`, `header.<name>` or `scope.<dim>`"


def _guardrail_problems(config: GatewayConfig) -> Iterator[str]:
    source, state = config.guardrail_source, config.guardrail_state
    if config.guardrails_policy.mode != "off" and source is None:
        yield "guardrail_source: required when guardrails_policy.mode is observe or enforce"
    if state is not None and state.kind == "redis" and source is not None and source.kind == "registry":
        parts = urlsplit(source.base_url or "")
        if parts.path not in ("", "/") or parts.query or parts.fragment:
            yield "guardrail_source.base_url: must be a bare service root when paired with a redis guardrail_state"


def _pricing_problems(config: GatewayConfig) -> Iterator[str]:
    """A spend budget needs a way to price requests: destination pricing or a cost model."""
    priced = any(destination.pricing is not None for destination in config.destinations.values())
    if priced or config.plugins.cost_model is not None:
        return
    for index, limit in enumerate(config.rate_limits):
        for field in ("budget_usd_per_month", "budget_usd_per_day"):
            if getattr(limit, field) is not None:
                yield f"rate_limits[{index}].{field}: needs destination pricing or plugins.cost_model"


def _native_problems(config: GatewayConfig) -> Iterator[str]:
    """A native API-key provider names exactly one destination, with a readable `auth` and absolute paths."""
    providers: set[str] = set()
    for name, destination in config.destinations.items():
        if destination.kind != "native_api_key":
            continue
        key = f"destinations.{name}"
        if destination.provider in providers:
            yield f"{key}.provider: another native_api_key destination already serves {destination.provider!r}"
        providers.add(destination.provider or "")
        try:
            AuthPlacement.parse(destination.auth or {})
        except ValueError as error:
            yield f"{key}.auth: {error}"
        for index, path in enumerate(destination.allowed_paths or []):
            if not path.startswith("/"):
                yield f"{key}.allowed_paths[{index}]: must start with `/`"


def config_problems(config: GatewayConfig) -> list[str]:
    """Every cross-reference problem of `config`, each naming its key."""
    declared = set(config.identity.scope_dims)
    vault_names = {vault.name for vault in config.vaults}
    problems = [
        *_duplicates("identity.validators", (v.name for v in config.identity.validators)),
        *_duplicates("routes", (route.name for route in config.routes)),
        *_duplicates("vaults", (vault.name for vault in config.vaults)),
        *_duplicates("rate_limits", (limit.name for limit in config.rate_limits)),
        *_undeclared_dims("spend.key_dims", config.spend.key_dims, declared),
        *_undeclared_dims("spend.trusted_header_dims", config.spend.trusted_header_dims, declared),
        *_guardrail_problems(config),
        *_pricing_problems(config),
        *_native_problems(config),
    ]
    for i, validator in enumerate(config.identity.validators):
        problems += _undeclared_dims(
            f"identity.validators[{i}].scope_from.jwt_claims", validator.scope_from.jwt_claims.values(), declared
        )
    for name, destination in config.destinations.items():
        if destination.credentials is not None and destination.vault_name not in vault_names:
            problems.append(
                f"destinations.{name}.credentials.vault: vault {destination.vault_name!r} is not declared in vaults"
            )
    for i, route in enumerate(config.routes):
        problems += _route_problems(i, route, config, declared)
    for i, limit in enumerate(config.rate_limits):
        problems += _undeclared_dims(f"rate_limits[{i}].match.scope", limit.match.scope, declared)
    for i, vault in enumerate(config.vaults):
        problems += _undeclared_dims(
            f"vaults[{i}].url_template", _TEMPLATE_SCOPE.findall(vault.url_template or ""), declared
        )
    if not is_loopback(config.server.admin_listen) and config.server.admin_token_file is None:
        problems.append("server.admin_listen: a non-loopback admin listener requires server.admin_token_file")
    return problems


def config_warnings(config: GatewayConfig) -> list[str]:
    """The startup warnings of a valid config (insecure flags, deprecated keys, inert settings)."""
    warnings = []
    for i, validator in enumerate(config.identity.validators):
        if validator.insecure_allow_any_issuer:
            warnings.append(f"identity.validators[{i}]: insecure_allow_any_issuer accepts tokens from any issuer")
        if validator.insecure_allow_any_audience:
            warnings.append(f"identity.validators[{i}]: insecure_allow_any_audience accepts tokens for any audience")
    for i, limit in enumerate(config.rate_limits):
        if limit.budget_usd_per_day is not None:
            warnings.append(f"rate_limits[{i}].budget_usd_per_day is deprecated; use a policy guardrail")
    return warnings
