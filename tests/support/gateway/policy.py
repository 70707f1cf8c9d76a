"""Helpers of the policy guardrail tests: ES256 keys, bundles (plain or signed), gateway documents."""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import jwt
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from fakes.waiting import wait_until
from tests.support.gateway.provider import FakeProvider
from tests.support.gateway.thread import GatewayThread

VAULT = "static"


class SigningKey:
    """An ES256 key pair; `public_pem` is what a gateway verifies with."""

    def __init__(self) -> None:
        self.private = ec.generate_private_key(ec.SECP256R1())
        self.private_pem = self.private.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
        self.public_pem = (
            self.private.public_key()
            .public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
            .decode()
        )

    def sign(self, bundle: dict[str, Any]) -> str:
        return jwt.encode(bundle, self.private_pem, algorithm="ES256", headers={"typ": "guardrail-bundle+jws"})


def poll(condition: Callable[[], bool], timeout: float = 10.0) -> None:
    """Wait until `condition()` holds, failing after `timeout` seconds."""
    wait_until(condition, timeout=timeout)


def rule(guardrail_type: str, config: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {
        "type": "guardrail",
        "name": f"{guardrail_type}-rule",
        "guardrail_type": guardrail_type,
        "config": config,
        "phases": [],
        "action": "deny",
        "enabled": True,
        **extra,
    }


def bundle(version: int, *rules: dict[str, Any], expires_in: float = 900) -> dict[str, Any]:
    now = datetime.now(UTC)
    return {
        "type": "guardrail_bundle",
        "version": version,
        "issued_at": now.isoformat(),
        "expires_at": (now + timedelta(seconds=expires_in)).isoformat(),
        "guardrails": list(rules),
    }


def allow_models(version: int, *models: str) -> dict[str, Any]:
    return bundle(version, rule("model_allowlist", {"models": list(models)}))


def seed_high_water(path: Path, source_id: str, version: int = 0) -> None:
    path.write_text(json.dumps({"source_id": source_id, "version": version, "issued_at": 0}))


def gateway_document(provider: FakeProvider, **sections: Any) -> dict[str, Any]:
    """One priced vendor-A destination behind a route for every model, plus `sections`."""
    return {
        "vaults": [{"name": VAULT, "resolver": "env", "env_var": "PATH"}],
        "destinations": {
            "upstream": {
                "kind": "vendor_a_compatible",
                "base_url": f"{provider.url}/v1",
                "credentials": {"vault": VAULT},
                "pricing": {"input_per_1m": 1000.0, "output_per_1m": 1000.0},
            }
        },
        "routes": [
            {
                "name": "all",
                "match": {"model": "*"},
                "strategy": {"mode": "fallback", "targets": [{"destination": "upstream"}]},
            }
        ],
        **sections,
    }


def chat(gateway: GatewayThread, model: str, key: str = "client-key", **headers: str) -> httpx.Response:
    return httpx.post(
        f"{gateway.url}/v1/chat/completions",
        timeout=10,
        headers={"authorization": f"Bearer {key}", **headers},
        json={"model": model, "messages": [{"role": "user", "content": "hello"}]},
    )


def error_code(response: httpx.Response) -> str | None:
    return response.json().get("error", {}).get("code") if response.status_code >= 400 else None
