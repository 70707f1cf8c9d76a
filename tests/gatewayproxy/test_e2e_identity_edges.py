"""End to end, JWT edge cases: `exp` required unless `require_exp: false`, `leeway_secs` on `exp` and `nbf`, a
JWKS that cannot be fetched (503 `identity_unavailable`, boot not blocked), keys dropped by the periodic JWKS
refresh, and the boot warning of a non-loopback listener without identity."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import jwt
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from tests.support.gateway.documents import destination, one_destination
from tests.support.gateway.limits import poll
from tests.support.gateway.provider import FakeProvider
from tests.support.gateway.thread import GatewayFactory, GatewayThread
from tests.support.live import free_port
from tests.support.serving import serving

pytestmark = pytest.mark.e2e
KEY = rsa.generate_private_key(public_exponent=65537, key_size=2048)


def token(**claims: Any) -> str:
    return jwt.encode({"sub": "user-1", **claims}, KEY, algorithm="RS256")


def _validator(name: str, **extra: Any) -> dict[str, Any]:
    return {
        "name": name,
        "kind": "jwt",
        "insecure_allow_any_issuer": True,
        "insecure_allow_any_audience": True,
        **extra,
    }


@pytest.fixture
def jwt_gateway(gateway_factory: GatewayFactory, tmp_path: Path, primary: FakeProvider) -> Callable[..., GatewayThread]:
    """Starts a gateway (for the test) before `primary` with these identity validators (`key.pem`: the public
    half of KEY) and more sections."""
    pem = KEY.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    (tmp_path / "key.pem").write_bytes(pem)

    def start(validators: list[dict[str, Any]], **sections: Any) -> GatewayThread:
        upstream = destination("vendor_a_compatible", f"{primary.url}/v1", "static")
        document = one_destination(upstream, vault="static", **{"identity": {"validators": validators}, **sections})
        return gateway_factory(document, base_dir=tmp_path)

    return start


@pytest.fixture
def strict(jwt_gateway: Callable[..., GatewayThread]) -> GatewayThread:
    return jwt_gateway([_validator("pem", static_public_key_pem="key.pem", leeway_secs=30)])


def post(gateway: GatewayThread, credential: str) -> httpx.Response:
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
    return httpx.post(
        f"{gateway.url}/v1/chat/completions", json=body, headers={"authorization": f"Bearer {credential}"}
    )


def test_exp_is_required_and_leeway_applies_to_exp_and_nbf(strict: GatewayThread) -> None:
    now = int(time.time())
    assert post(strict, token()).status_code == 401  # no exp
    assert post(strict, token(exp=now + 60)).status_code == 200
    assert post(strict, token(exp=now - 10)).status_code == 200  # within the 30 s leeway
    assert post(strict, token(exp=now - 120)).status_code == 401
    assert post(strict, token(exp=now + 60, nbf=now + 10)).status_code == 200  # within the leeway
    assert post(strict, token(exp=now + 600, nbf=now + 300)).status_code == 401


def test_require_exp_false_accepts_a_token_without_exp(
    jwt_gateway: Callable[..., GatewayThread], primary: FakeProvider
) -> None:
    running = jwt_gateway([_validator("pem", static_public_key_pem="key.pem", require_exp=False, leeway_secs=0)])
    assert post(running, token()).status_code == 200
    assert post(running, token(exp=int(time.time()) - 5)).status_code == 401  # no leeway


def test_an_unreachable_jwks_is_503_and_does_not_block_boot(
    jwt_gateway: Callable[..., GatewayThread], primary: FakeProvider
) -> None:
    jwks_url = f"http://127.0.0.1:{free_port()}/jwks"
    started = time.monotonic()
    running = jwt_gateway([_validator("idp", jwks_url=jwks_url)])
    assert time.monotonic() - started < 5
    assert httpx.get(f"{running.admin_url}/readyz").status_code == 200
    refused = post(running, jwt.encode({"exp": int(time.time()) + 60}, KEY, "RS256", headers={"kid": "k1"}))
    assert refused.status_code == 503 and refused.json()["error"]["code"] == "identity_unavailable"


def _jwk(kid: str, key: rsa.RSAPrivateKey) -> dict[str, Any]:
    jwk: dict[str, Any] = jwt.algorithms.RSAAlgorithm.to_jwk(key.public_key(), as_dict=True)
    return {**jwk, "kid": kid, "alg": "RS256", "use": "sig"}


def test_a_key_removed_from_the_jwks_is_refused_after_the_next_refresh(
    jwt_gateway: Callable[..., GatewayThread], primary: FakeProvider
) -> None:
    kept, removed = KEY, rsa.generate_private_key(public_exponent=65537, key_size=2048)
    primary.documents["/rotating-jwks"] = {"keys": [_jwk("kept", kept), _jwk("removed", removed)]}
    jwks_url = f"{primary.url}/rotating-jwks"
    running = jwt_gateway([_validator("idp", jwks_url=jwks_url, jwks_refresh_secs=0.2)])

    def signed(key: rsa.RSAPrivateKey, kid: str) -> str:
        return jwt.encode({"sub": "u", "exp": int(time.time()) + 60}, key, "RS256", headers={"kid": kid})

    try:
        assert post(running, signed(removed, "removed")).status_code == 200
        primary.documents["/rotating-jwks"] = {"keys": [_jwk("kept", kept)]}
        # No request asks for an unknown kid: only the background refresh can drop the key.
        assert poll(lambda: post(running, signed(removed, "removed")).status_code == 401), "the key was not dropped"
        assert post(running, signed(kept, "kept")).status_code == 200
    finally:
        running.stop()
        primary.documents.pop("/rotating-jwks", None)


def test_no_identity_on_a_non_loopback_listener_warns_at_boot(
    jwt_gateway: Callable[..., GatewayThread], caplog: pytest.LogCaptureFixture
) -> None:
    def warnings() -> list[str]:
        return [record.getMessage() for record in caplog.records if "no identity validators" in record.getMessage()]

    everywhere = {"server": {"listen": "0.0.0.0:0"}}
    for document, warned in (
        (everywhere, 1),
        ({}, 0),  # loopback: no warning
        ({**everywhere, "identity": {"validators": [_validator("pem", static_public_key_pem="key.pem")]}}, 0),
    ):
        caplog.clear()
        with serving(jwt_gateway([], **document)) as running:
            assert httpx.get(f"{running.admin_url}/readyz").status_code == 200
        assert len(warnings()) == warned, document
