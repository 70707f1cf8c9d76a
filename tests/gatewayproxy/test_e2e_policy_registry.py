"""Policy guardrails from the real registry: lazy session bundles (plain and ES256-signed), the cache, the admin
effective endpoint, `on_backend_error`, and Redis guardrail state written back to the registry."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis

from gatewayproxy.config.loader import ConfigError, validate_document
from registry.extensions.models import Guardrail
from registry.internal.models import GuardrailState
from tests.support.gateway.callers import api_key_identity
from tests.support.gateway.policy import (
    SigningKey,
    chat,
    error_code,
    gateway_document,
    poll,
)
from tests.support.gateway.provider import FakeProvider
from tests.support.gateway.thread import GatewayFactory, GatewayThread
from tests.support.live import live_registry
from tests.support.tenants import Tenant, make_tenant, open_session

pytestmark = pytest.mark.e2e
with_database = pytest.mark.django_db(transaction=True)
SERVICE_TOKEN = "policy-service-token"
CLIENT_KEY = "policy-client-key"
DENIED = "policy_guardrail_denied"


@pytest.fixture(scope="module")
def signing_key() -> SigningKey:
    return SigningKey()


@pytest.fixture(scope="module")
def registry(
    django_db_setup: None, django_db_blocker: Any, signing_key: SigningKey, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[str, Path]]:
    """The registry under daphne with the internal API on: its root and the service token file."""
    directory = tmp_path_factory.mktemp("registry")
    token_file, key_file = directory / "token", directory / "bundle-key.pem"
    token_file.write_text(SERVICE_TOKEN + "\n")
    key_file.write_bytes(signing_key.private_pem)
    with (
        django_db_blocker.unblock(),
        live_registry(
            REGISTRY_INTERNAL_TOKEN_FILE=str(token_file), REGISTRY_BUNDLE_SIGNING_KEY_FILE=str(key_file)
        ) as url,
    ):
        yield url, token_file


@pytest.fixture
def workspace_session() -> tuple[Tenant, str]:
    tenant = make_tenant(f"policy-{uuid.uuid4().hex[:8]}")
    return tenant, open_session(tenant.client)


def allow_only(tenant: Tenant, *models: str) -> Guardrail:
    return Guardrail.objects.create(
        name=f"models-{uuid.uuid4().hex[:8]}",
        type="model_allowlist",
        config={"models": list(models)},
        phases=["llm_request"],
        workspace_ids=[tenant.workspace.id],
    )


@pytest.fixture
def policy_gateway(
    gateway_factory: GatewayFactory, primary: FakeProvider, tmp_path: Path
) -> Callable[..., GatewayThread]:
    """Starts a gateway (for the test) before `primary` enforcing the bundles of `source`, refreshed every second;
    its caller CLIENT_KEY is alice of `workspace` unless `identity=` says otherwise; more keyword arguments are
    more sections."""

    def start(workspace: str, source: dict[str, Any], **sections: Any) -> GatewayThread:
        identity = sections.pop("identity", None) or api_key_identity(
            tmp_path, {CLIENT_KEY: ("alice", {"workspace": workspace})}
        )
        policy = {"mode": "enforce", "refresh_interval_secs": 1, **sections.pop("guardrails_policy", {})}
        document = gateway_document(
            primary, identity=identity, guardrail_source=source, guardrails_policy=policy, **sections
        )
        return gateway_factory(document)

    return start


@pytest.fixture
def session_gateway(
    registry: tuple[str, Path], workspace_session: tuple[Tenant, str], policy_gateway: Callable[..., GatewayThread]
) -> Callable[..., GatewayThread]:
    """`policy_gateway` for the workspace of `workspace_session`, its bundles from the live registry (`source=`:
    more options of the registry source)."""
    (url, token_file), (tenant, _) = registry, workspace_session

    def start(source: dict[str, Any] | None = None, **sections: Any) -> GatewayThread:
        return policy_gateway(tenant.workspace.id, registry_source(url, token_file, **(source or {})), **sections)

    return start


def registry_source(url: str, token_file: Path, **extra: Any) -> dict[str, Any]:
    """A registry source; these tests name their session with `x-session-id`, so it is trusted unless told."""
    return {
        "name": "registry",
        "kind": "registry",
        "base_url": url,
        "bearer_token_file": str(token_file),
        "trust_session_header": True,
        **extra,
    }


def effective(gateway: GatewayThread, session_id: str) -> httpx.Response:
    return httpx.get(f"{gateway.admin_url}/admin/v1/guardrails/effective", params={"session_id": session_id})


@with_database
def test_session_bundles_load_lazily_and_are_cached(
    session_gateway: Callable[..., GatewayThread], workspace_session: tuple[Tenant, str]
) -> None:
    tenant, session_id = workspace_session
    guardrail = allow_only(tenant, "m-ok")
    gateway = session_gateway()
    assert effective(gateway, session_id).status_code == 404  # nothing is fetched before the session's request
    assert chat(gateway, "m-other", CLIENT_KEY).status_code == 200  # no session: the bundle is missing (allow)
    assert chat(gateway, "m-ok", CLIENT_KEY, **{"x-session-id": session_id}).status_code == 200
    assert error_code(chat(gateway, "m-other", CLIENT_KEY, **{"x-session-id": session_id})) == DENIED
    cached = effective(gateway, session_id)
    assert cached.status_code == 200
    assert cached.json()["bundle"]["guardrails"][0]["name"] == guardrail.name
    assert cached.json()["bundle"]["session_id"] == session_id
    Guardrail.objects.filter(pk=guardrail.pk).update(enabled=False)
    assert error_code(chat(gateway, "m-other", CLIENT_KEY, **{"x-session-id": session_id})) == DENIED
    gateway.stop()
    short = session_gateway(source={"cache_ttl_secs": 1})
    assert chat(short, "m-other", CLIENT_KEY, **{"x-session-id": session_id}).status_code == 200


@with_database
def test_signed_registry_bundles_are_verified(
    session_gateway: Callable[..., GatewayThread], workspace_session: tuple[Tenant, str], signing_key: SigningKey
) -> None:
    tenant, session_id = workspace_session
    allow_only(tenant, "m-ok")
    gateway = session_gateway(source={"verification": {"public_key_pem": signing_key.public_pem}})
    assert chat(gateway, "m-ok", CLIENT_KEY, **{"x-session-id": session_id}).status_code == 200
    assert error_code(chat(gateway, "m-other", CLIENT_KEY, **{"x-session-id": session_id})) == DENIED
    gateway.stop()
    gateway = session_gateway(source={"verification": {"public_key_pem": SigningKey().public_pem}})
    refused = chat(gateway, "m-ok", CLIENT_KEY, **{"x-session-id": session_id})
    assert error_code(refused) == DENIED and "signature" in refused.json()["error"]["message"]


@pytest.mark.parametrize(("mode", "status"), [("deny", 403), ("allow", 200), ("last_known", 403)])
def test_on_backend_error(
    policy_gateway: Callable[..., GatewayThread], mode: str, status: int, secondary: FakeProvider, tmp_path: Path
) -> None:
    token_file = tmp_path / "token"
    token_file.write_text("secret-token-xyz")
    # `secondary` answers every GET with 404: a registry that fails.
    source = registry_source(secondary.url, token_file, on_backend_error=mode)
    gateway = policy_gateway("wsp_failing", source)
    answer = chat(gateway, "m", CLIENT_KEY, **{"x-session-id": "sesn_1"})
    assert answer.status_code == status
    assert "secret-token-xyz" not in answer.text
    assert secondary.received[0].headers["authorization"] == "Bearer secret-token-xyz"
    assert secondary.received[0].path.startswith("/internal/v1/guardrails/effective?workspace=wsp_failing")
    chat(gateway, "m", CLIENT_KEY, **{"x-session-id": "sesn_1"})
    assert len(secondary.received) == 1  # a failed fetch is not retried before refresh_interval_secs


def _bundle_fetches(registry: FakeProvider) -> list[str]:
    return [received.path for received in registry.received if received.path.startswith("/internal/")]


@pytest.mark.parametrize("trusted", [False, True])
def test_the_session_comes_from_verified_scope_and_from_the_header_only_when_trusted(
    policy_gateway: Callable[..., GatewayThread], trusted: bool, secondary: FakeProvider, tmp_path: Path
) -> None:
    token_file = tmp_path / "token"
    token_file.write_text("token")
    # `secondary` answers every bundle fetch with 404 and `on_backend_error: deny` refuses: a request the gateway
    # found a session for is 403 and shows its session in the fetch; one without a session is allowed unfetched.
    source = registry_source(secondary.url, token_file, on_backend_error="deny", trust_session_header=trusted)
    callers = {
        "plain": ("p", {"workspace": "wsp_1"}),
        "sessioned": ("s", {"workspace": "wsp_1", "session": "sesn_verified"}),
    }
    identity = api_key_identity(tmp_path, callers)
    gateway = policy_gateway("wsp_1", source, identity=identity, spend={"trusted_header_dims": ["session"]})
    secondary.reset()
    header = chat(gateway, "m", "plain", **{"x-session-id": "sesn_header"})
    header_fetches = _bundle_fetches(secondary)
    secondary.reset()
    # A trusted `x-scope-session` header fills the scope for limits, but it is not a verified dimension.
    scoped = chat(gateway, "m", "plain", **{"x-scope-session": "sesn_scoped"})
    assert scoped.status_code == 200 and _bundle_fetches(secondary) == []
    secondary.reset()
    verified = chat(gateway, "m", "sessioned", **{"x-session-id": "sesn_header"})
    assert error_code(verified) == DENIED
    assert [path.split("session=")[1] for path in _bundle_fetches(secondary)] == ["sesn_verified"]
    if trusted:
        assert error_code(header) == DENIED
        assert [path.split("session=")[1] for path in header_fetches] == ["sesn_header"]
    else:
        assert header.status_code == 200 and header_fetches == []


@with_database
def test_redis_state_has_ttls_and_is_written_back(
    session_gateway: Callable[..., GatewayThread], workspace_session: tuple[Tenant, str]
) -> None:
    tenant, session_id = workspace_session
    prefix = f"gwtest:{uuid.uuid4().hex}:"
    state = {
        "name": "redis",
        "kind": "redis",
        "url": "redis://127.0.0.1:6379/0",
        "key_prefix": prefix,
        "session_ttl_secs": 1000,
        "turn_ttl_secs": 100,
        "subject_day_ttl_secs": 2000,
        "subject_minute_ttl_secs": 0,
        "flush_interval_ms": 100,
    }
    client = redis.Redis.from_url("redis://127.0.0.1:6379/0")
    try:
        gateway = session_gateway(guardrail_state=state)
        for _ in range(2):
            headers = {"x-session-id": session_id, "x-turn-id": "t1"}
            assert chat(gateway, "m", CLIENT_KEY, **headers).status_code == 200

        def written_back() -> bool:
            row = GuardrailState.objects.filter(session_id=session_id).first()
            return row is not None and row.state.get("gateway_usage", {}).get("requests") == 2

        poll(written_back)
        gateway.stop()
        row = GuardrailState.objects.get(session_id=session_id)
        assert row.state["gateway_usage"]["cost_usd"] == pytest.approx(0.036)
        session_key = f"{prefix}guardrail:session:{tenant.workspace.id}:{session_id}"
        assert client.hget(session_key, "requests") == b"2"
        assert 900 < client.ttl(session_key) <= 1000
        assert 0 < client.ttl(f"{session_key}:turn:t1") <= 100
        day_keys = list(client.scan_iter(f"{prefix}guardrail:subject-day:alice:*"))
        assert len(day_keys) == 1 and 1900 < client.ttl(day_keys[0]) <= 2000
        # A TTL below 1 became 1 (the key may already be gone: -2).
        assert all(client.ttl(key) <= 1 for key in client.scan_iter(f"{prefix}guardrail:subject-minute:*"))
    finally:
        for key in client.scan_iter(f"{prefix}*"):
            client.delete(key)
        client.close()


def test_write_back_needs_a_bare_service_root(tmp_path: Path, primary: FakeProvider) -> None:
    source = registry_source("http://127.0.0.1:1/registry", tmp_path / "token")
    state = {"kind": "redis", "url": "redis://127.0.0.1:6379/0"}
    with pytest.raises(ConfigError, match="bare service root"):
        validate_document(
            gateway_document(
                primary, guardrail_source=source, guardrail_state=state, guardrails_policy={"mode": "enforce"}
            )
        )
