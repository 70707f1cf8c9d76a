"""Policy guardrails from a file source: signatures, rollback protection, fail-closed high-water, modes, budget,
and the admin effective endpoint."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest

from gatewayproxy.config.loader import ConfigError, validate_document
from gatewayproxy.metrics import GatewayMetrics
from gatewayproxy.pipeline.stages import SharedParts
from gatewayproxy.server.upstream import UpstreamPool
from gatewayproxy.state import build_state
from tests.gatewayproxy.fake_provider import FakeProvider
from tests.gatewayproxy.harness import GatewayThread
from tests.gatewayproxy.policy_support import (
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

pytestmark = pytest.mark.e2e
SOURCE_ID = "policy-file-tests"
DENIED = "policy_guardrail_denied"


@pytest.fixture
def key() -> SigningKey:
    return SigningKey()


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


@contextmanager
def running(provider: FakeProvider, source: dict[str, Any], **policy: Any) -> Iterator[GatewayThread]:
    document = gateway_document(provider, guardrail_source=source, guardrails_policy={"mode": "enforce", **policy})
    gateway = GatewayThread(document).start()
    try:
        yield gateway
    finally:
        gateway.stop()


def test_a_signed_bundle_replaced_by_an_older_one_is_refused(
    tmp_path: Path, key: SigningKey, primary: FakeProvider
) -> None:
    path, high_water = tmp_path / "bundle.jws", tmp_path / "high-water.json"
    seed_high_water(high_water, SOURCE_ID)
    path.write_text(key.sign(allow_models(2, "m-new")))
    with running(primary, file_source(path, key, high_water)) as gateway:
        assert chat(gateway, "m-new").status_code == 200
        assert error_code(chat(gateway, "m-old")) == DENIED
        assert json.loads(high_water.read_text())["version"] == 2
        path.write_text(key.sign(allow_models(1, "m-old")))
        poll(lambda: 'gateway_policy_bundles_rejected_total{reason="rollback"}' in gateway.metrics_text)
        assert chat(gateway, "m-new").status_code == 200  # the newer bundle stays in force
        assert error_code(chat(gateway, "m-old")) == DENIED
    assert json.loads(high_water.read_text())["version"] == 2
    with running(primary, file_source(path, key, high_water)) as restarted:
        assert error_code(chat(restarted, "m-new")) == DENIED  # nothing acceptable at boot: fail closed
    path.write_text(key.sign(allow_models(3, "m-three")))
    with running(primary, file_source(path, key, high_water)) as upgraded:
        assert chat(upgraded, "m-three").status_code == 200
    assert json.loads(high_water.read_text())["version"] == 3


def test_a_lost_high_water_mark_fails_closed(tmp_path: Path, key: SigningKey, primary: FakeProvider) -> None:
    path, high_water = tmp_path / "bundle.jws", tmp_path / "high-water.json"
    path.write_text(key.sign(allow_models(5, "m")))
    with running(primary, file_source(path, key, high_water)) as fresh:
        denied = chat(fresh, "m")
        assert error_code(denied) == DENIED and "high-water" in denied.json()["error"]["message"]
    seed_high_water(high_water, SOURCE_ID)
    with running(primary, file_source(path, key, high_water)) as gateway:
        assert chat(gateway, "m").status_code == 200
        high_water.unlink()
        poll(lambda: chat(gateway, "m").status_code == 403)
        assert 'gateway_policy_bundles_rejected_total{reason="high_water"}' in gateway.metrics_text


def test_a_mark_of_another_source_fails_closed(tmp_path: Path, key: SigningKey, primary: FakeProvider) -> None:
    path, high_water = tmp_path / "bundle.jws", tmp_path / "high-water.json"
    seed_high_water(high_water, "someone-else")
    path.write_text(key.sign(allow_models(1, "m")))
    with running(primary, file_source(path, key, high_water)) as gateway:
        assert error_code(chat(gateway, "m")) == DENIED


def test_an_unsigned_bundle_is_refused_unless_allowed(tmp_path: Path, key: SigningKey, primary: FakeProvider) -> None:
    path, high_water = tmp_path / "bundle.json", tmp_path / "high-water.json"
    seed_high_water(high_water, SOURCE_ID)
    path.write_text(json.dumps(allow_models(1, "m-ok")))
    with running(primary, file_source(path, key, high_water)) as gateway:
        assert error_code(chat(gateway, "m-ok")) == DENIED
        assert 'gateway_policy_bundles_rejected_total{reason="invalid"}' in gateway.metrics_text
    other = SigningKey()
    path.write_text(other.sign(allow_models(1, "m-ok")))
    with running(primary, file_source(path, key, high_water)) as gateway:
        assert error_code(chat(gateway, "m-ok")) == DENIED  # signed, by a key not configured
    path.write_text(json.dumps(allow_models(1, "m-ok")))
    with running(primary, file_source(path, None, None)) as unsigned:
        assert chat(unsigned, "m-ok").status_code == 200
        assert error_code(chat(unsigned, "m-other")) == DENIED
    assert json.loads((tmp_path / "bundle.json.highwater").read_text())["version"] == 1


def test_several_keys_verify(tmp_path: Path, key: SigningKey, primary: FakeProvider) -> None:
    path, high_water, keys = tmp_path / "bundle.jws", tmp_path / "high-water.json", tmp_path / "keys.pem"
    second = SigningKey()
    keys.write_text(key.public_pem + second.public_pem)
    seed_high_water(high_water, SOURCE_ID)
    path.write_text(second.sign(allow_models(1, "m")))
    source = {**file_source(path, None, high_water), "verification": {"public_key_file": str(keys)}}
    with running(primary, source) as gateway:
        assert chat(gateway, "m").status_code == 200


def test_observe_logs_what_enforce_denies(
    tmp_path: Path, primary: FakeProvider, caplog: pytest.LogCaptureFixture
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
    with running(primary, file_source(path, None, None), mode="observe") as observing:
        assert chat(observing, "x").status_code == 200
        metrics = observing.metrics_text
        assert 'gateway_policy_decisions_total{outcome="would_deny",phase="llm_request"} 1.0' in metrics
        assert "would deny" in caplog.text and "blocked term" in caplog.text
    with running(primary, file_source(path, None, None)) as enforcing:
        assert error_code(chat(enforcing, "m")) == DENIED
        assert 'gateway_policy_decisions_total{outcome="deny",phase="llm_request"} 1.0' in enforcing.metrics_text


def test_alert_rules_and_unsupported_types(tmp_path: Path, primary: FakeProvider) -> None:
    path = tmp_path / "bundle.json"
    path.write_text(
        json.dumps(bundle(1, rule("model_allowlist", {"models": ["m"]}, action="alert"), rule("brand_new_type", {})))
    )
    with running(primary, file_source(path, None, None)) as strict:
        assert "unsupported" in chat(strict, "m").json()["error"]["message"]
    with running(primary, file_source(path, None, None), on_unsupported_guardrail="skip_with_alert") as lenient:
        assert chat(lenient, "other").status_code == 200
        assert 'gateway_policy_alerts_total{phase="llm_request"} 1.0' in lenient.metrics_text


def test_missing_and_expired_bundles(tmp_path: Path, primary: FakeProvider) -> None:
    missing = tmp_path / "absent.json"
    with running(primary, file_source(missing, None, None)) as allowing:
        assert chat(allowing, "m").status_code == 200
    with running(primary, file_source(missing, None, None), on_missing="deny") as denying:
        assert error_code(chat(denying, "m")) == DENIED
    expired = tmp_path / "expired.json"
    expired.write_text(json.dumps(bundle(1, expires_in=-120)))
    with running(primary, file_source(expired, None, None), max_staleness_secs=60) as soft:
        assert chat(soft, "m").status_code == 200
        assert 'gateway_policy_alerts_total{phase="llm_request"} 1.0' in soft.metrics_text
    with running(primary, file_source(expired, None, None), max_staleness_secs=60, on_expired="deny") as hard:
        assert error_code(chat(hard, "m")) == DENIED
    with running(primary, file_source(expired, None, None), max_staleness_secs=600, on_expired="deny") as fresh:
        assert chat(fresh, "m").status_code == 200


def test_user_daily_cost_budget_denies_once_spent(tmp_path: Path, primary: FakeProvider) -> None:
    path = tmp_path / "bundle.json"
    path.write_text(json.dumps(bundle(1, rule("user_daily_cost_budget", {"usd": 0.02}))))
    with running(primary, file_source(path, None, None)) as gateway:
        # Each call costs 18 tokens at 1000 USD per million: 0.018 USD.
        assert chat(gateway, "m").status_code == 200
        assert chat(gateway, "m").status_code == 200
        denied = chat(gateway, "m")
        assert error_code(denied) == DENIED and "budget" in denied.json()["error"]["message"]
        assert len(primary.received) == 2


def test_admin_effective_endpoint(tmp_path: Path, primary: FakeProvider) -> None:
    path = tmp_path / "bundle.json"
    path.write_text(json.dumps(allow_models(7, "m")))
    with running(primary, file_source(path, None, None)) as gateway:
        answer = httpx.get(f"{gateway.admin_url}/admin/v1/guardrails/effective", params={"session_id": "s-1"})
        assert answer.status_code == 200 and answer.json()["bundle"]["version"] == 7
        assert httpx.get(f"{gateway.admin_url}/admin/v1/guardrails/effective").status_code == 400
    off = GatewayThread(gateway_document(primary)).start()
    try:
        answer = httpx.get(f"{off.admin_url}/admin/v1/guardrails/effective", params={"session_id": "s-1"})
        assert answer.status_code == 503 and answer.json()["error"]["code"] == "guardrails_unavailable"
    finally:
        off.stop()


def test_a_bad_public_key_fails_boot_naming_the_key(tmp_path: Path, primary: FakeProvider) -> None:
    path, high_water = tmp_path / "bundle.jws", tmp_path / "high-water.json"
    source = {**file_source(path, None, high_water), "verification": {"public_key_pem": "not a key"}}
    loaded = validate_document(
        gateway_document(primary, guardrail_source=source, guardrails_policy={"mode": "enforce"})
    )
    with pytest.raises(ConfigError, match=r"guardrail_source\.verification"):
        build_state(loaded, UpstreamPool(), SharedParts(), GatewayMetrics())
