"""The policy bundle the registry serves (and a file source holds): its parsed form, ES256 JWS verification."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import jwt
import orjson
from cryptography.hazmat.primitives.serialization import load_pem_public_key

from gatewayproxy.config.models import Verification

PEM_BLOCK = re.compile(rb"-----BEGIN PUBLIC KEY-----.+?-----END PUBLIC KEY-----", re.DOTALL)
SIGNATURE_ALGORITHMS = ["ES256"]


class BundleError(ValueError):
    """A bundle that cannot be used: malformed, unsigned where a signature is required, or badly signed."""


@dataclass(frozen=True)
class Rule:
    """One guardrail of a bundle: its type, its own config, the phases it checks and what a hit does."""

    name: str
    guardrail_type: str
    config: dict[str, Any]
    phases: tuple[str, ...]
    action: str


@dataclass(frozen=True)
class Bundle:
    """A parsed bundle; `document` is what the registry (or the file) said, kept for the admin plane."""

    version: int
    issued_at: datetime
    expires_at: datetime | None
    rules: tuple[Rule, ...]
    document: dict[str, Any] = field(default_factory=dict)

    @property
    def mark(self) -> tuple[int, float]:
        """What rollback protection compares: the version, then the issue time."""
        return self.version, self.issued_at.timestamp()


def _time(value: Any, key: str) -> datetime | None:
    if value is None:
        return None
    if isinstance(value, int | float):
        return datetime.fromtimestamp(value, UTC)
    try:
        parsed = datetime.fromisoformat(str(value))
    except ValueError:
        raise BundleError(f"`{key}` is not an ISO 8601 time: {value!r}") from None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


def _rule(entry: Any, index: int) -> Rule | None:
    if not isinstance(entry, dict) or not isinstance(entry.get("guardrail_type"), str):
        raise BundleError(f"guardrails[{index}] needs a `guardrail_type`")
    if entry.get("enabled") is False:
        return None
    config = entry.get("config") or {}
    if not isinstance(config, dict):
        raise BundleError(f"guardrails[{index}].config must be an object")
    return Rule(
        name=str(entry.get("name") or f"guardrail-{index}"),
        guardrail_type=entry["guardrail_type"],
        config=config,
        phases=tuple(entry.get("phases") or ()),
        action=str(entry.get("action") or "deny"),
    )


def parse_bundle(document: Any) -> Bundle:
    """A bundle from its JSON form (`version`, `issued_at`, `expires_at`, `guardrails[]`)."""
    if not isinstance(document, dict) or not isinstance(document.get("guardrails"), list):
        raise BundleError("a bundle is an object with a `guardrails` list")
    version = document.get("version", 0)
    if not isinstance(version, int) or isinstance(version, bool):
        raise BundleError("`version` must be an integer")
    issued_at = _time(document.get("issued_at"), "issued_at") or datetime.fromtimestamp(0, UTC)
    rules = tuple(rule for index, entry in enumerate(document["guardrails"]) if (rule := _rule(entry, index)))
    return Bundle(
        version=version,
        issued_at=issued_at,
        expires_at=_time(document.get("expires_at"), "expires_at"),
        rules=rules,
        document=document,
    )


def allow_all_bundle() -> Bundle:
    """What `on_backend_error: allow` substitutes: no rules, never expiring."""
    now = datetime.now(UTC)
    document = {
        "type": "guardrail_bundle",
        "version": 0,
        "issued_at": now.isoformat(),
        "expires_at": None,
        "guardrails": [],
        "allow_all": True,
    }
    return Bundle(version=0, issued_at=now, expires_at=None, rules=(), document=document)


def load_public_keys(verification: Verification) -> list[Any]:
    """Every ES256 public key of `public_key_file` and `public_key_pem` (each may hold several PEM blocks)."""
    material = verification.public_key_pem.encode() if verification.public_key_pem else b""
    if verification.public_key_file:
        with open(verification.public_key_file, "rb") as handle:
            material += b"\n" + handle.read()
    return [load_pem_public_key(block) for block in PEM_BLOCK.findall(material)]


def verify_signed(token: bytes, keys: list[Any]) -> dict[str, Any]:
    """The payload of a compact ES256 JWS that one of `keys` signed; raises `BundleError` otherwise."""
    for key in keys:
        try:
            payload: dict[str, Any] = jwt.decode(
                token, key=key, algorithms=SIGNATURE_ALGORITHMS, options={"verify_exp": False, "verify_aud": False}
            )
            return payload
        except jwt.InvalidSignatureError:
            continue
        except jwt.PyJWTError as error:
            raise BundleError(f"not a valid ES256 JWS: {error}") from None
    raise BundleError("no configured public key verifies the bundle's signature")


def read_bundle(raw: bytes, keys: list[Any], allow_unsigned: bool) -> Bundle:
    """A bundle from the bytes of a file or a registry answer: a JWS, or plain JSON only when unsigned input is
    allowed."""
    text = raw.strip()
    if text.startswith(b"{"):
        if not allow_unsigned:
            raise BundleError("an unsigned bundle is refused (verification.allow_unsigned is off)")
        try:
            return parse_bundle(orjson.loads(text))
        except orjson.JSONDecodeError as error:
            raise BundleError(f"invalid JSON: {error}") from None
    if not keys:
        raise BundleError("a signed bundle arrived but no verification key is configured")
    return parse_bundle(verify_signed(text, keys))
