"""Authorizers end to end: `yaml_acl` rules, OPA's data API and an external processor played by loopback servers
(one of them hanging, under each failure mode), `allow_all`, and bad options failing boot."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from gatewayproxy.config.loader import ConfigError, load_config_file, validate_document
from gatewayproxy.metrics import GatewayMetrics
from gatewayproxy.pipeline.stages import SharedParts
from gatewayproxy.server.upstream import UpstreamPool
from gatewayproxy.state import build_state
from tests.support.gateway.callers import write_identity
from tests.support.gateway.decisions import HANG, JsonServer
from tests.support.gateway.documents import destination, fallback_route, static_vault
from tests.support.gateway.provider import FakeProvider
from tests.support.gateway.thread import GatewayFactory, GatewayThread
from tests.support.serving import serving

pytestmark = pytest.mark.e2e
ACL = {
    "rules": [
        {"name": "alice", "principal": "alice", "models": ["a-*"]},
        {"name": "blue-team", "scope": {"team": "blue"}, "paths": ["/v1/messages"]},
    ]
}


@pytest.fixture
def authorized(
    gateway_factory: GatewayFactory, primary: FakeProvider, tmp_path: Path
) -> Callable[[list[dict[str, Any]]], GatewayThread]:
    """Starts a gateway (for the test) before `primary` whose callers are the three `CALLERS`, with these
    authorizers."""

    def start(authorizers: list[dict[str, Any]]) -> GatewayThread:
        document = {
            "identity": write_identity(tmp_path),
            "vaults": [static_vault(tmp_path, {"provider": "provider-secret"}, name="files")],
            "destinations": {"chat": destination("vendor_a", f"{primary.url}/v1", "files", "provider")},
            "routes": [fallback_route("all", None, "chat")],
            "plugins": {"authorizers": authorizers},
        }
        return gateway_factory(document)

    return start


def call(
    gateway: GatewayThread, key: str, model: str = "a-large", path: str = "/v1/chat/completions"
) -> httpx.Response:
    body: dict[str, Any] = {"model": model, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 5}
    return httpx.post(f"{gateway.url}{path}", json=body, headers={"authorization": f"Bearer {key}"})


def outcome(response: httpx.Response) -> int | str:
    """The status of a success, the code of a refusal."""
    if response.status_code == 200:
        return 200
    document = response.json()
    return str(document["error"]["code"])


def test_yaml_acl_first_matching_rule_decides_and_strangers_are_denied(
    authorized: Callable[[list[dict[str, Any]]], GatewayThread], primary: FakeProvider, tmp_path: Path
) -> None:
    (tmp_path / "acl.yaml").write_text(yaml.safe_dump(ACL))
    gateway = authorized([{"name": "acl", "kind": "yaml_acl", "file": str(tmp_path / "acl.yaml")}])
    outcomes = {
        "alice a-model": outcome(call(gateway, "key-alice")),
        "alice other model": outcome(call(gateway, "key-alice", model="b-small")),
        "bob messages": outcome(call(gateway, "key-bob", path="/v1/messages")),
        "bob chat": outcome(call(gateway, "key-bob")),
        "carol": outcome(call(gateway, "key-carol")),
    }
    refused = call(gateway, "key-bob")
    assert outcomes == {
        "alice a-model": 200,
        "alice other model": "forbidden",
        "bob messages": 200,
        "bob chat": "forbidden",
        "carol": "forbidden",
    }
    assert refused.status_code == 403
    assert "path '/v1/chat/completions' is not allowed by blue-team" in refused.json()["error"]["message"]
    assert len(primary.received) == 2  # nothing was spent on a refused request


def test_opa_decides_on_the_request_facts(authorized: Callable[[list[dict[str, Any]]], GatewayThread]) -> None:
    def policy(path: str, asked: Any) -> tuple[int, Any]:
        facts = asked["input"]
        if path.endswith("/allow"):
            return 200, {"result": facts["scope"].get("team") == "red"}
        return 200, {"result": {"allow": facts["principal"] == "alice", "reason": "only alice"}}

    with serving(JsonServer(policy).start()) as opa:
        gateway = authorized(
            [
                {"name": "opa-object", "kind": "opa_http", "url": opa.url, "package": "gateway.authz"},
                {
                    "name": "opa-boolean",
                    "kind": "opa_http",
                    "url": opa.url,
                    "package": "gateway/authz",
                    "rule": "allow",
                },
            ]
        )
        alice, bob = call(gateway, "key-alice"), call(gateway, "key-bob")
    assert alice.status_code == 200
    assert bob.status_code == 403 and "only alice" in bob.json()["error"]["message"]
    path, asked, _ = opa.received[0]
    assert path == "/v1/data/gateway/authz"
    facts = asked["input"]
    assert facts["principal"] == "alice" and facts["scope"] == {"team": "red"} and facts["model"] == "a-large"
    assert facts["route"] == "all" and facts["path"] == "/v1/chat/completions" and facts["operation"] == "chat"
    assert [path for path, _, _ in opa.received[:2]] == ["/v1/data/gateway/authz", "/v1/data/gateway/authz/allow"]


@pytest.mark.parametrize(("failure_mode", "expected"), [("deny", "forbidden"), ("allow", 200), ("log_only", 200)])
def test_a_hanging_opa_follows_failure_mode_within_its_timeout(
    authorized: Callable[[list[dict[str, Any]]], GatewayThread], failure_mode: str, expected: int | str
) -> None:
    with serving(JsonServer(lambda path, asked: HANG).start()) as opa:
        opa_options = {"package": "authz", "timeout_ms": 200, "failure_mode": failure_mode}
        gateway = authorized([{"name": "opa", "kind": "opa_http", "url": opa.url, **opa_options}])
        started = time.monotonic()
        response = call(gateway, "key-alice")
        elapsed = time.monotonic() - started
        metrics = gateway.metrics_text
    assert outcome(response) == expected and elapsed < 2
    if failure_mode != "deny":
        assert (
            f'gateway_authorizer_backend_failures_passed_total{{authorizer="opa",failure_mode="{failure_mode}"}} '
            "1.0" in metrics
        )


def test_ext_proc_and_allow_all_must_all_allow(authorized: Callable[[list[dict[str, Any]]], GatewayThread]) -> None:
    def processor(path: str, facts: Any) -> tuple[int, Any]:
        return 200, {"allow": facts["principal"] != "carol", "reason": "carol is suspended"}

    with serving(JsonServer(processor).start()) as server:
        gateway = authorized(
            [
                {"name": "everyone", "kind": "allow_all"},
                {"name": "proc", "kind": "ext_proc", "url": f"{server.url}/authorize", "timeout_ms": 500},
            ]
        )
        alice, carol = call(gateway, "key-alice"), call(gateway, "key-carol")
        metrics = gateway.metrics_text
    assert alice.status_code == 200
    assert carol.status_code == 403 and "carol is suspended" in carol.json()["error"]["message"]
    assert server.received[0][0] == "/authorize" and server.received[0][1]["principal"] == "alice"
    assert 'gateway_authorizer_decisions_total{authorizer="proc",outcome="denied"} 1.0' in metrics


@pytest.mark.parametrize(
    ("authorizer", "problem"),
    [
        ({"kind": "opa_http", "url": "http://opa"}, "plugins.authorizers[0].package: Field required"),
        ({"kind": "ext_proc", "url": "opa:8181"}, "plugins.authorizers[0].url"),
        ({"kind": "allow_all", "mode": "open"}, "plugins.authorizers[0].mode: unknown key"),
        ({"kind": "yaml_acl", "file": "/nonexistent/acl.yaml"}, "plugins.authorizers[0].file: cannot read"),
    ],
)
def test_bad_authorizer_options_fail_boot_naming_the_key(authorizer: dict, problem: str) -> None:
    loaded = validate_document({"plugins": {"authorizers": [{"name": "a", **authorizer}]}})
    with pytest.raises(ConfigError) as failed:
        build_state(loaded, UpstreamPool(), SharedParts(), GatewayMetrics())
    assert any(problem in line for line in failed.value.problems)


def test_a_malformed_acl_rule_fails_boot(tmp_path: Path) -> None:
    (tmp_path / "acl.yaml").write_text(yaml.safe_dump({"rules": [{"principal": "x", "modles": ["*"]}]}))
    loaded = validate_document(
        {"plugins": {"authorizers": [{"name": "acl", "kind": "yaml_acl", "file": str(tmp_path / "acl.yaml")}]}}
    )
    with pytest.raises(ConfigError) as failed:
        build_state(loaded, UpstreamPool(), SharedParts(), GatewayMetrics())
    assert failed.value.problems == ["plugins.authorizers[0].file: rules.0.modles: Extra inputs are not permitted"]


def test_the_example_builds_with_its_acl_file_relative_to_the_config(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("VAULT__KEYS__VENDOR_A", "example")
    example = Path(__file__).resolve().parents[2] / "examples" / "gateway" / "guardrails.yaml"
    state = build_state(load_config_file(str(example)), UpstreamPool(), SharedParts(), GatewayMetrics())
    assert [stage.name for stage in state.stages][:2] == ["authorize", "guardrails"]
    assert [stage.name for stage in state.output_inspectors] == ["guardrails"]
