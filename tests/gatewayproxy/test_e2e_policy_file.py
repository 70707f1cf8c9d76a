"""Policy guardrails from a file source: signatures, rollback protection, fail-closed high-water, modes, budget,
and the admin effective endpoint."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from gatewayproxy.config.loader import ConfigError, validate_document
from gatewayproxy.metrics import GatewayMetrics
from gatewayproxy.pipeline.stages import SharedParts
from gatewayproxy.server.upstream import UpstreamPool
from gatewayproxy.state import build_state
from tests.support.gateway.policy import (
    SigningKey,
    allow_models,
    bundle,
    chat,
    error_code,
    gateway_document,
    poll,
    rule,
    seed_high_water,
)
from tests.support.gateway.provider import FakeProvider
from tests.support.gateway.thread import GatewayFactory, GatewayThread

pytestmark = pytest.mark.e2e
SOURCE_ID = "policy-file-tests"
DENIED = "policy_guardrail_denied"


@pytest.fixture
def key() -> SigningKey:
    return SigningKey()


@pytest.fixture
def high_water(tmp_path: Path) -> Path:
    """The high-water mark of SOURCE_ID, at version 0."""
    path = tmp_path / "high-water.json"
    seed_high_water(path, SOURCE_ID)
    return path


def file_source(path: Path, key: SigningKey | None, high_water: Path | None, **extra: Any) -> dict[str, Any]:
    verification: dict[str, Any] = {"public_key_pem": key.public_pem} if key else {"allow_unsigned": True}
    source = {
        "name": "file",
        "kind": "file",
        "path": str(path),
        "verification": verification,
        "source_id": SOURCE_ID,
        "reload_interval_secs": 1,
        **extra,
    }
    return {**source, "high_water_path": str(high_water)} if high_water else source


@pytest.fixture
def running(gateway_factory: GatewayFactory, primary: FakeProvider) -> Callable[..., GatewayThread]:
    """Starts a gateway (for the test) before `primary` with the guardrail bundles of `source`, enforced unless
    keyword arguments (more `guardrails_policy` fields) say otherwise."""

    def start(source: dict[str, Any], **policy: Any) -> GatewayThread:
        guardrails_policy = {"mode": "enforce", **policy}
        return gateway_factory(gateway_document(primary, guardrail_source=source, guardrails_policy=guardrails_policy))

    return start


def test_a_signed_bundle_replaced_by_an_older_one_is_refused(
    running: Callable[..., GatewayThread], tmp_path: Path, key: SigningKey, primary: FakeProvider, high_water: Path
) -> None:
    path = tmp_path / "bundle.jws"
    path.write_text(key.sign(allow_models(2, "m-new")))
    gateway = running(file_source(path, key, high_water))
    assert chat(gateway, "m-new").status_code == 200
    assert error_code(chat(gateway, "m-old")) == DENIED
    assert json.loads(high_water.read_text())["version"] == 2
    path.write_text(key.sign(allow_models(1, "m-old")))
    poll(lambda: 'gateway_policy_bundles_rejected_total{reason="rollback"}' in gateway.metrics_text)
    assert chat(gateway, "m-new").status_code == 200  # the newer bundle stays in force
    assert error_code(chat(gateway, "m-old")) == DENIED
    gateway.stop()
    assert json.loads(high_water.read_text())["version"] == 2
    restarted = running(file_source(path, key, high_water))
    assert error_code(chat(restarted, "m-new")) == DENIED  # nothing acceptable at boot: fail closed
    restarted.stop()
    path.write_text(key.sign(allow_models(3, "m-three")))
    upgraded = running(file_source(path, key, high_water))
    assert chat(upgraded, "m-three").status_code == 200
    assert json.loads(high_water.read_text())["version"] == 3


def test_a_lost_high_water_mark_fails_closed(
    running: Callable[..., GatewayThread], tmp_path: Path, key: SigningKey, primary: FakeProvider
) -> None:
    path, high_water = tmp_path / "bundle.jws", tmp_path / "high-water.json"
    path.write_text(key.sign(allow_models(5, "m")))
    fresh = running(file_source(path, key, high_water))
    denied = chat(fresh, "m")
    assert error_code(denied) == DENIED and "high-water" in denied.json()["error"]["message"]
    fresh.stop()
    seed_high_water(high_water, SOURCE_ID)
    gateway = running(file_source(path, key, high_water))
    assert chat(gateway, "m").status_code == 200
    high_water.unlink()
    poll(lambda: chat(gateway, "m").status_code == 403)
    assert 'gateway_policy_bundles_rejected_total{reason="high_water"}' in gateway.metrics_text


def test_a_mark_of_another_source_fails_closed(
    running: Callable[..., GatewayThread], tmp_path: Path, key: SigningKey, primary: FakeProvider
) -> None:
    path, high_water = tmp_path / "bundle.jws", tmp_path / "high-water.json"
    seed_high_water(high_water, "someone-else")
    path.write_text(key.sign(allow_models(1, "m")))
    gateway = running(file_source(path, key, high_water))
    assert error_code(chat(gateway, "m")) == DENIED


def test_an_unsigned_bundle_is_refused_unless_allowed(
    running: Callable[..., GatewayThread], tmp_path: Path, key: SigningKey, primary: FakeProvider, high_water: Path
) -> None:
    path = tmp_path / "bundle.json"
    path.write_text(json.dumps(allow_models(1, "m-ok")))
    gateway = running(file_source(path, key, high_water))
    assert error_code(chat(gateway, "m-ok")) == DENIED
    assert 'gateway_policy_bundles_rejected_total{reason="invalid"}' in gateway.metrics_text
    gateway.stop()
    other = SigningKey()
    path.write_text(other.sign(allow_models(1, "m-ok")))
    gateway = running(file_source(path, key, high_water))
    assert error_code(chat(gateway, "m-ok")) == DENIED  # signed, by a key not configured
    gateway.stop()
    path.write_text(json.dumps(allow_models(1, "m-ok")))
    unsigned = running(file_source(path, None, None))
    assert chat(unsigned, "m-ok").status_code == 200
    assert error_code(chat(unsigned, "m-other")) == DENIED
    assert json.loads((tmp_path / "bundle.json.highwater").read_text())["version"] == 1


def test_several_keys_verify(
    running: Callable[..., GatewayThread], tmp_path: Path, key: SigningKey, primary: FakeProvider, high_water: Path
) -> None:
    path, keys = tmp_path / "bundle.jws", tmp_path / "keys.pem"
    second = SigningKey()
    keys.write_text(key.public_pem + second.public_pem)
    path.write_text(second.sign(allow_models(1, "m")))
    source = {**file_source(path, None, high_water), "verification": {"public_key_file": str(keys)}}
    gateway = running(source)
    assert chat(gateway, "m").status_code == 200


def test_observe_logs_what_enforce_denies(
    running: Callable[..., GatewayThread], tmp_path: Path, primary: FakeProvider, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "bundle.json"
    path.write_text(
        json.dumps(
            bundle(
                1,
                rule("blocked_terms", {"terms": ["HELLO"]}),
                rule("model_allowlist", {"models": ["m"]}, action="alert"),
            )
        )
    )
    observing = running(file_source(path, None, None), mode="observe")
    assert chat(observing, "x").status_code == 200
    metrics = observing.metrics_text
    assert 'gateway_policy_decisions_total{outcome="would_deny",phase="llm_request"} 1.0' in metrics
    assert "would deny" in caplog.text and "blocked term" in caplog.text
    observing.stop()
    enforcing = running(file_source(path, None, None))
    assert error_code(chat(enforcing, "m")) == DENIED
    assert 'gateway_policy_decisions_total{outcome="deny",phase="llm_request"} 1.0' in enforcing.metrics_text


def test_alert_rules_and_unsupported_types(
    running: Callable[..., GatewayThread], tmp_path: Path, primary: FakeProvider
) -> None:
    path = tmp_path / "bundle.json"
    path.write_text(
        json.dumps(bundle(1, rule("model_allowlist", {"models": ["m"]}, action="alert"), rule("brand_new_type", {})))
    )
    strict = running(file_source(path, None, None))
    assert "unsupported" in chat(strict, "m").json()["error"]["message"]
    strict.stop()
    lenient = running(file_source(path, None, None), on_unsupported_guardrail="skip_with_alert")
    assert chat(lenient, "other").status_code == 200
    assert 'gateway_policy_alerts_total{phase="llm_request"} 1.0' in lenient.metrics_text


def test_missing_and_expired_bundles(
    running: Callable[..., GatewayThread], tmp_path: Path, primary: FakeProvider
) -> None:
    missing = tmp_path / "absent.json"
    allowing = running(file_source(missing, None, None))
    assert chat(allowing, "m").status_code == 200
    allowing.stop()
    denying = running(file_source(missing, None, None), on_missing="deny")
    assert error_code(chat(denying, "m")) == DENIED
    denying.stop()
    expired = tmp_path / "expired.json"
    expired.write_text(json.dumps(bundle(1, expires_in=-120)))
    soft = running(file_source(expired, None, None), max_staleness_secs=60)
    assert chat(soft, "m").status_code == 200
    assert 'gateway_policy_alerts_total{phase="llm_request"} 1.0' in soft.metrics_text
    soft.stop()
    hard = running(file_source(expired, None, None), max_staleness_secs=60, on_expired="deny")
    assert error_code(chat(hard, "m")) == DENIED
    hard.stop()
    fresh = running(file_source(expired, None, None), max_staleness_secs=600, on_expired="deny")
    assert chat(fresh, "m").status_code == 200


def test_user_daily_cost_budget_denies_once_spent(
    running: Callable[..., GatewayThread], tmp_path: Path, primary: FakeProvider
) -> None:
    path = tmp_path / "bundle.json"
    path.write_text(json.dumps(bundle(1, rule("user_daily_cost_budget", {"usd": 0.02}))))
    gateway = running(file_source(path, None, None))
    # Each call costs 18 tokens at 1000 USD per million: 0.018 USD.
    assert chat(gateway, "m").status_code == 200
    assert chat(gateway, "m").status_code == 200
    denied = chat(gateway, "m")
    assert error_code(denied) == DENIED and "budget" in denied.json()["error"]["message"]
    assert len(primary.received) == 2


def test_admin_effective_endpoint(
    running: Callable[..., GatewayThread], gateway_factory: GatewayFactory, tmp_path: Path, primary: FakeProvider
) -> None:
    path = tmp_path / "bundle.json"
    path.write_text(json.dumps(allow_models(7, "m")))
    gateway = running(file_source(path, None, None))
    answer = httpx.get(f"{gateway.admin_url}/admin/v1/guardrails/effective", params={"session_id": "s-1"})
    assert answer.status_code == 200 and answer.json()["bundle"]["version"] == 7
    assert httpx.get(f"{gateway.admin_url}/admin/v1/guardrails/effective").status_code == 400
    gateway.stop()
    off = gateway_factory(gateway_document(primary))
    answer = httpx.get(f"{off.admin_url}/admin/v1/guardrails/effective", params={"session_id": "s-1"})
    assert answer.status_code == 503 and answer.json()["error"]["code"] == "guardrails_unavailable"


def test_a_bad_public_key_fails_boot_naming_the_key(tmp_path: Path, primary: FakeProvider) -> None:
    path, high_water = tmp_path / "bundle.jws", tmp_path / "high-water.json"
    source = {**file_source(path, None, high_water), "verification": {"public_key_pem": "not a key"}}
    loaded = validate_document(
        gateway_document(primary, guardrail_source=source, guardrails_policy={"mode": "enforce"})
    )
    with pytest.raises(ConfigError, match=r"guardrail_source\.verification"):
        build_state(loaded, UpstreamPool(), SharedParts(), GatewayMetrics())
