"""End to end identity: api_key digests, JWTs from a JWKS (fetched, cached, refetched) and static PEM keys,
scope-based routing, trusted scope headers, and the client credential never reaching the provider."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import httpx
import jwt
import pytest
import yaml
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from tests.support.gateway.callers import api_key_identity
from tests.support.gateway.documents import destination, fallback_route, file_vault
from tests.support.gateway.provider import FakeProvider
from tests.support.gateway.thread import GatewayFactory, GatewayThread

pytestmark = pytest.mark.e2e
HI: Any = [{"role": "user", "content": "hi"}]
ISSUER, AUDIENCE = "https://issuer.test", "gateway"


def _private_key() -> rsa.RSAPrivateKey:
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


@pytest.fixture(scope="module")
def keys() -> dict[str, rsa.RSAPrivateKey]:
    return {"jwks-1": _private_key(), "jwks-2": _private_key(), "static": _private_key()}


def _jwk(kid: str, key: rsa.RSAPrivateKey) -> dict[str, Any]:
    jwk: dict[str, Any] = jwt.algorithms.RSAAlgorithm.to_jwk(key.public_key(), as_dict=True)
    return {**jwk, "kid": kid, "alg": "RS256", "use": "sig"}


def token(key: rsa.RSAPrivateKey, kid: str | None, **claims: Any) -> str:
    payload = {"iss": ISSUER, "aud": AUDIENCE, "sub": "user-1", "exp": int(time.time()) + 300, **claims}
    return jwt.encode(payload, key, algorithm="RS256", headers={"kid": kid} if kid else None)


@pytest.fixture(scope="module")
def identity_gateway(
    module_gateway_factory: GatewayFactory,
    tmp_path_factory: pytest.TempPathFactory,
    primary: FakeProvider,
    secondary: FakeProvider,
    keys: dict[str, rsa.RSAPrivateKey],
) -> GatewayThread:
    directory = tmp_path_factory.mktemp("identity")
    callers = {"key-team-red": ("svc-red", {"team": "red"}), "key-no-team": ("svc-plain", {})}
    [api_keys] = api_key_identity(directory, callers, relative=True)["validators"]
    pem = (
        keys["static"]
        .public_key()
        .public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    )
    (directory / "static.pem").write_bytes(pem)
    (directory / "vault.yaml").write_text(yaml.safe_dump({"provider": {"scheme": "bearer", "token": "sk-provider"}}))
    document = {
        "identity": {
            "scope_dims": ["team", "tier"],
            "validators": [
                api_keys,
                {
                    "name": "idp",
                    "kind": "jwt",
                    "issuers": [ISSUER],
                    "audiences": [AUDIENCE],
                    "jwks_url": f"{secondary.url}/jwks",
                    "scope_from": {"jwt_claims": {"org_team": "team"}},
                },
                {
                    "name": "static",
                    "kind": "jwt",
                    "static_public_key_pem": "static.pem",
                    "insecure_allow_any_issuer": True,
                    "insecure_allow_any_audience": True,
                },
            ],
        },
        "spend": {"trusted_header_dims": ["tier"]},
        "vaults": [file_vault("vault.yaml")],
        "destinations": {"one": destination("vendor_a", f"{primary.url}/v1", "files", "provider")},
        "routes": [
            {
                "name": "red",
                "match": {"scope": {"team": "red"}},
                "strategy": {"mode": "fallback", "targets": [{"destination": "one", "override_params": {"seed": 7}}]},
            },
            {
                "name": "gold",
                "match": {"scope": {"tier": "gold"}},
                "strategy": {"mode": "fallback", "targets": [{"destination": "one", "override_params": {"seed": 9}}]},
            },
            fallback_route("any", None, "one"),
        ],
    }
    return module_gateway_factory(document, base_dir=directory)


def post(gateway: GatewayThread, credential: str | None, headers: dict[str, str] | None = None) -> httpx.Response:
    all_headers = {**({"authorization": f"Bearer {credential}"} if credential else {}), **(headers or {})}
    return httpx.post(f"{gateway.url}/v1/chat/completions", json={"model": "m", "messages": HI}, headers=all_headers)


def test_missing_or_wrong_credentials_are_401(identity_gateway: GatewayThread) -> None:
    for credential in (None, "wrong"):
        response = post(identity_gateway, credential)
        assert response.status_code == 401 and response.json()["error"]["code"] == "unauthenticated"
    response = httpx.post(
        f"{identity_gateway.url}/v1/messages",
        json={"model": "m", "max_tokens": 1, "messages": HI},
        headers={"x-api-key": "key-team-red"},
    )
    assert response.status_code == 401 and response.json()["type"] == "error"


def test_api_key_scope_picks_the_most_specific_route(identity_gateway: GatewayThread, primary: FakeProvider) -> None:
    assert post(identity_gateway, "key-team-red").status_code == 200
    assert primary.received[0].body["seed"] == 7
    assert primary.received[0].headers["authorization"] == "Bearer sk-provider"
    assert post(identity_gateway, "key-no-team").status_code == 200
    assert "seed" not in primary.received[1].body


def test_jwks_keys_are_fetched_cached_and_refetched_for_a_new_kid(
    identity_gateway: GatewayThread, secondary: FakeProvider, keys: dict[str, rsa.RSAPrivateKey]
) -> None:
    secondary.documents["/jwks"] = {"keys": [_jwk("jwks-1", keys["jwks-1"])]}
    assert post(identity_gateway, token(keys["jwks-1"], "jwks-1")).status_code == 200
    assert post(identity_gateway, token(keys["jwks-1"], "jwks-1")).status_code == 200
    fetches = [r for r in secondary.received if r.path == "/jwks"]
    assert len(fetches) == 1
    secondary.documents["/jwks"] = {"keys": [_jwk("jwks-1", keys["jwks-1"]), _jwk("jwks-2", keys["jwks-2"])]}
    validator: Any = identity_gateway.gateway.runtime.state.identity._validators[1]  # type: ignore[union-attr]
    validator._fetched_at = float("-inf")  # the refetch interval has passed
    assert post(identity_gateway, token(keys["jwks-2"], "jwks-2")).status_code == 200
    assert len([r for r in secondary.received if r.path == "/jwks"]) == 2


def test_jwt_claims_map_to_scope(
    identity_gateway: GatewayThread, primary: FakeProvider, secondary: FakeProvider, keys: dict[str, rsa.RSAPrivateKey]
) -> None:
    secondary.documents["/jwks"] = {"keys": [_jwk("jwks-1", keys["jwks-1"])]}
    assert post(identity_gateway, token(keys["jwks-1"], "jwks-1", org_team="red")).status_code == 200
    assert primary.received[0].body["seed"] == 7


def test_jwt_with_wrong_audience_or_expired_is_refused(
    identity_gateway: GatewayThread, secondary: FakeProvider, keys: dict[str, rsa.RSAPrivateKey]
) -> None:
    secondary.documents["/jwks"] = {"keys": [_jwk("jwks-1", keys["jwks-1"])]}
    assert post(identity_gateway, token(keys["jwks-1"], "jwks-1", aud="other")).status_code == 401
    assert post(identity_gateway, token(keys["jwks-1"], "jwks-1", exp=int(time.time()) - 60)).status_code == 401


def test_static_pem_validator_accepts_any_issuer_when_flagged(
    identity_gateway: GatewayThread, keys: dict[str, rsa.RSAPrivateKey]
) -> None:
    assert post(identity_gateway, token(keys["static"], None, iss="anyone", aud="anything")).status_code == 200
    assert post(identity_gateway, token(_private_key(), None)).status_code == 401


def test_trusted_scope_header_counts_only_without_a_verified_value(
    identity_gateway: GatewayThread, primary: FakeProvider
) -> None:
    assert post(identity_gateway, "key-no-team", {"x-scope-tier": "gold"}).status_code == 200
    assert primary.received[0].body["seed"] == 9
    assert post(identity_gateway, "key-no-team", {"x-scope-team": "red"}).status_code == 200
    assert "seed" not in primary.received[1].body


def test_client_credential_is_never_forwarded(identity_gateway: GatewayThread, primary: FakeProvider) -> None:
    post(identity_gateway, "key-team-red", {"x-api-key": "client-secret", "cookie": "c=1"})
    sent = primary.received[0].headers
    assert "key-team-red" not in str(sent) and "client-secret" not in str(sent) and "cookie" not in sent


def test_keys_file_paths_resolve_beside_the_config(identity_gateway: GatewayThread) -> None:
    validator = identity_gateway.loaded.config.identity.validators[0]
    assert validator.keys_file is not None and Path(validator.keys_file).is_absolute()
