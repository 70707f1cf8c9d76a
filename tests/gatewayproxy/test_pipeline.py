"""Sans-IO tests of the pipeline stages: routing (globs, specificity, strategies, params), identity, vaults."""

from __future__ import annotations

import asyncio
import hashlib
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import pytest

from gatewayproxy.config.loader import validate_document
from gatewayproxy.config.models import Identity, Spend, Target, Vault, VaultCache
from gatewayproxy.context import Operation, RequestContext
from gatewayproxy.errors import ErrorCode, GatewayError, Protocol
from gatewayproxy.http.connection import Request
from gatewayproxy.pipeline.identity import IdentityStage, Principal, bearer_token
from gatewayproxy.pipeline.routing import Router, compile_glob, shape_params, weighted_order
from gatewayproxy.vaults.resolvers import EnvVault, HttpVault, Secret, StaticFileVault, VaultError, env_name

if TYPE_CHECKING:
    from gatewayproxy.state import GatewayState


# The routing and identity stages under test never read the snapshot.
NO_SNAPSHOT = cast("GatewayState", None)


def context(
    model: str = "m",
    path: str = "/v1/chat/completions",
    headers: dict[str, str] | None = None,
    scope: dict[str, str] | None = None,
) -> RequestContext:
    request = Request(method="POST", path=path, query="", headers=headers or {}, body=b"")
    return RequestContext(
        request=request,
        operation=Operation.CHAT,
        protocol=Protocol.VENDOR_A,
        state=NO_SNAPSHOT,
        body={"model": model},
        principal=Principal("p", scope or {}),
    )


def router(*routes: dict[str, Any]) -> Router:
    document = {
        "identity": {"scope_dims": ["team", "env"]},
        "vaults": [{"name": "v", "resolver": "env"}],
        "destinations": {name: {"kind": "vendor_a", "credentials": {"vault": "v"}} for name in "abc"},
        "routes": list(routes),
    }
    return Router(validate_document(document).config.routes)


def route(
    name: str, match: dict[str, Any] | None = None, targets: str = "a", mode: str = "fallback", **strategy: Any
) -> dict[str, Any]:
    return {
        "name": name,
        "match": match or {},
        "strategy": {"mode": mode, "targets": [{"destination": t} for t in targets], **strategy},
    }


@pytest.mark.parametrize(
    ("pattern", "matching", "not_matching"),
    [
        ("gpt-4o", ["gpt-4o"], ["gpt-4o-mini"]),
        ("*", ["anything", ""], []),
        ("gpt-*", ["gpt-4o", "gpt-"], ["chatgpt"]),
        ("*-mini", ["gpt-4o-mini"], ["mini-x"]),
        ("*sonnet*", ["claude-sonnet-4", "sonnet"], ["opus"]),
    ],
)
def test_model_globs(pattern: str, matching: list[str], not_matching: list[str]) -> None:
    glob = compile_glob(pattern)
    assert all(glob(value) for value in matching)
    assert not any(glob(value) for value in not_matching)


def test_every_clause_must_hold() -> None:
    routes = router(
        route("r", {"path": "/v1/messages", "model": "m*", "header": {"X-Tier": "gold"}}), route("fallback")
    )
    assert routes.match(context(path="/v1/messages", headers={"x-tier": "gold"})).name == "r"  # type: ignore[union-attr]
    assert routes.match(context(path="/v1/messages")).name == "fallback"  # type: ignore[union-attr]
    assert routes.match(context(headers={"x-tier": "gold"})).name == "fallback"  # type: ignore[union-attr]


def test_most_specific_scope_wins_and_ties_go_to_config_order() -> None:
    routes = router(
        route("open"),
        route("team", {"scope": {"team": "red"}}),
        route("team-env", {"scope": {"team": "red", "env": "prod"}}),
        route("team-again", {"scope": {"team": "red"}}),
    )
    assert routes.match(context(scope={"team": "red", "env": "prod"})).name == "team-env"  # type: ignore[union-attr]
    assert routes.match(context(scope={"team": "red"})).name == "team"  # type: ignore[union-attr]
    assert routes.match(context(scope={"team": "blue"})).name == "open"  # type: ignore[union-attr]


def test_no_route() -> None:
    assert router(route("r", {"model": "x"})).match(context()) is None


def test_fallback_plan_and_attempts() -> None:
    routes = router(
        route("r", targets="abc", retry={"triggers": ["5xx"], "max_attempts": 2, "backoff_ms": 5}, timeout_ms=1500)
    )
    plan = routes.routes[0].plan(context())
    assert [t.destination for t in plan.targets] == ["a", "b", "c"]
    assert (plan.attempts.max_attempts, plan.attempts.backoff_ms, plan.attempts.timeout_seconds) == (2, 5, 1.5)
    assert plan.attempts.triggers == frozenset({"5xx"})


def test_unset_triggers_mean_one_attempt() -> None:
    plan = router(route("r", retry={"max_attempts": 5})).routes[0].plan(context())
    assert plan.attempts.max_attempts == 1


def test_unsafe_route_plans_one_target_one_attempt() -> None:
    document = route("r", targets="ab", retry={"triggers": ["5xx"], "max_attempts": 3})
    plan = router({**document, "idempotency_safe": False}).routes[0].plan(context())
    assert [t.destination for t in plan.targets] == ["a"] and plan.attempts.max_attempts == 1


def test_conditional_first_holding_condition_then_default() -> None:
    routes = router(
        {
            "name": "r",
            "strategy": {
                "mode": "conditional",
                "conditions": [{"if": {"model": "big-*"}, "target": "b"}, {"if": {"scope.team": "red"}, "target": "c"}],
                "targets": [{"destination": "a"}, {"destination": "c", "override_params": {"seed": 1}}],
            },
        }
    )
    compiled = routes.routes[0]
    assert [t.destination for t in compiled.plan(context(model="big-1", scope={"team": "red"})).targets] == ["b"]
    (chosen,) = compiled.plan(context(scope={"team": "red"})).targets
    assert chosen.destination == "c" and chosen.override_params == {"seed": 1}
    assert [t.destination for t in compiled.plan(context()).targets] == ["a"]


def test_weighted_order_distribution_and_exclusion() -> None:
    targets = [
        Target(destination="a", weight=70),
        Target(destination="b", weight=30),
        Target(destination="c", weight=0),
    ]
    firsts = Counter(weighted_order(targets)[0].destination for _ in range(4000))
    assert abs(firsts["a"] - 2800) < 200 and firsts["c"] == 0
    assert sorted(t.destination for t in weighted_order(targets)) == ["a", "b"]
    assert len(weighted_order([Target(destination="a"), Target(destination="b")])) == 2


def test_params_are_applied_default_override_drop() -> None:
    target = Target(
        destination="a",
        default_params={"temperature": 0.2, "top_p": 1},
        override_params={"max_tokens": 5, "seed": 3},
        drop_params=["seed", "user"],
    )
    assert shape_params({"temperature": 0.9, "user": "u", "max_tokens": 99}, target) == {
        "temperature": 0.9,
        "top_p": 1,
        "max_tokens": 5,
    }


def identity(tmp_path: Path, **spend: Any) -> IdentityStage:
    keys = tmp_path / "keys.yaml"
    keys.write_text(
        f"keys: [{{sha256: {hashlib.sha256(b'secret').hexdigest()}, principal: svc, scope: {{team: red}}}}]"
    )
    validators: Any = [{"name": "k", "kind": "api_key", "keys_file": str(keys)}]  # validated into Validator
    config = Identity(scope_dims=["team", "tier"], validators=validators)

    async def no_fetch(url: str, headers: dict[str, str], timeout: float) -> tuple[int, bytes]:
        raise AssertionError("api keys never fetch")

    return IdentityStage(config, Spend(**spend), no_fetch)


def test_api_key_identity(tmp_path: Path) -> None:
    stage = identity(tmp_path)
    principal = asyncio.run(stage.authenticate({"authorization": "Bearer secret"}))
    assert (principal.id, dict(principal.scope)) == ("svc", {"team": "red"})
    for headers in ({}, {"authorization": "Bearer nope"}, {"x-api-key": "secret"}, {"authorization": "Basic secret"}):
        with pytest.raises(GatewayError) as raised:
            asyncio.run(stage.authenticate(headers))
        assert raised.value.code is ErrorCode.UNAUTHENTICATED


def test_trusted_header_dims_fill_only_missing_verified_values(tmp_path: Path) -> None:
    stage = identity(tmp_path, trusted_header_dims=["team", "tier"])
    principal = asyncio.run(
        stage.authenticate({"authorization": "Bearer secret", "x-scope-team": "blue", "x-scope-tier": "gold"})
    )
    assert dict(principal.scope) == {"team": "red", "tier": "gold"}
    untrusted = identity(tmp_path)
    principal = asyncio.run(untrusted.authenticate({"authorization": "Bearer secret", "x-scope-tier": "gold"}))
    assert dict(principal.scope) == {"team": "red"}


def test_bearer_token_parsing() -> None:
    assert bearer_token({"authorization": "bearer abc "}) == "abc"
    assert bearer_token({"authorization": "Bearer"}) is None


def test_env_vault_names_and_values(monkeypatch: pytest.MonkeyPatch) -> None:
    assert env_name("VAULT__", "prod-keys", "team.a/1") == "VAULT__PROD_KEYS__TEAM_A_1"
    monkeypatch.setenv("VAULT__PROD_KEYS__AWS", '{"scheme": "aws_sigv4", "access_key_id": "AK"}')
    secret = EnvVault(Vault(name="prod-keys", resolver="env")).lookup("aws")
    assert secret.scheme == "aws_sigv4" and secret.fields["access_key_id"] == "AK"
    monkeypatch.setenv("FIXED", "sk-1")
    assert EnvVault(Vault(name="x", resolver="env", env_var="FIXED", scheme="api_key")).lookup("any") == Secret(
        "api_key", "sk-1"
    )
    with pytest.raises(VaultError):
        EnvVault(Vault(name="x", resolver="env")).lookup("missing")


def test_static_file_vault(tmp_path: Path) -> None:
    (tmp_path / "v.json").write_text('{"plain": "sk", "shaped": {"scheme": "api_key", "token": "t", "extra": 1}}')
    vault = StaticFileVault(Vault(name="f", resolver="static_file", file=str(tmp_path / "v.json")))
    assert vault.lookup("plain") == Secret("bearer", "sk")
    assert vault.lookup("shaped") == Secret("api_key", "t", {"extra": 1})
    with pytest.raises(VaultError):
        vault.lookup("absent")


def test_http_vault_interpolates_caches_and_bounds(tmp_path: Path) -> None:
    (tmp_path / "token").write_text("vault-token\n")
    calls: list[tuple[str, dict[str, str]]] = []

    async def fetch(url: str, headers: dict[str, str], timeout: float) -> tuple[int, bytes]:
        calls.append((url, headers))
        return 200, b'{"secret": {"scheme": "bearer", "token": "sk-' + url[-1:].encode() + b'"}}'

    vault = HttpVault(
        Vault(
            name="h",
            resolver="http",
            url_template="http://v/{scope.team}/{credential_id}",
            bearer_token_file=str(tmp_path / "token"),
            cache=VaultCache(max_entries=1),
        ),
        fetch,
    )

    async def scenario() -> list[Secret]:
        return [
            await vault.resolve("k1", {"team": "red a"}),
            await vault.resolve("k1", {"team": "red a"}),
            await vault.resolve("k2", {"team": "red a"}),
            await vault.resolve("k1", {"team": "red a"}),
        ]

    secrets = asyncio.run(scenario())
    assert [secret.token for secret in secrets] == ["sk-1", "sk-1", "sk-2", "sk-1"]
    assert [url for url, _ in calls] == ["http://v/red%20a/k1", "http://v/red%20a/k2", "http://v/red%20a/k1"]
    assert calls[0][1]["authorization"] == "Bearer vault-token"
    with pytest.raises(VaultError):
        asyncio.run(vault.resolve("k1", {}))
