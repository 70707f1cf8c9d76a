"""Writes from gateways (guardrail state write-back, usage ingestion idempotent on request id), and the
registry's signing keys for the runtime's model-call tokens."""

from __future__ import annotations

import base64
import hashlib
import json
from datetime import datetime
from decimal import Decimal, InvalidOperation
from typing import Any

import jwt
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.serialization import Encoding, NoEncryption, PrivateFormat
from django.db import transaction
from django.utils import timezone

from registry.core.errors import invalid_request
from registry.core.secrets import seal
from registry.internal.models import GuardrailState, SigningKey, UsageRecord
from registry.sessions.models import Session


@transaction.atomic
def guardrail_state_merge(*, session: Session, update: dict[str, Any]) -> GuardrailState:
    """Merge a gateway's coalesced state update into the session's state (top-level keys replaced)."""
    state, _ = GuardrailState.objects.select_for_update().get_or_create(session=session)
    state.state = {**state.state, **update}
    state.save()
    return state


def _usage_row(record: dict[str, Any]) -> UsageRecord:
    request_id = record.get("request_id")
    if not isinstance(request_id, str) or not request_id:
        raise invalid_request("records[].request_id: required, a non-empty string.")
    scope = record.get("scope") or {}
    try:
        cost = Decimal(str(record.get("cost_usd") or 0))
        ts = datetime.fromisoformat(record["ts"]) if record.get("ts") else timezone.now()
    except (InvalidOperation, ValueError, TypeError):
        raise invalid_request(f"records[]: cost_usd or ts of {request_id} is malformed.") from None
    return UsageRecord(
        request_id=request_id,
        workspace_id=scope.get("workspace"),
        session_id=scope.get("session"),
        model=str(record.get("model") or ""),
        input_tokens=int(record.get("input_tokens") or 0),
        output_tokens=int(record.get("output_tokens") or 0),
        cost_usd=cost,
        ts=ts,
        record=record,
    )


@transaction.atomic
def usage_ingest(*, records: list[dict[str, Any]]) -> tuple[int, int]:
    """Store records not seen before; (accepted, duplicates). Replays of a batch change nothing."""
    rows = {row.request_id: row for row in (_usage_row(record) for record in records)}
    seen = set(UsageRecord.objects.filter(request_id__in=list(rows)).values_list("request_id", flat=True))
    fresh = [row for request_id, row in rows.items() if request_id not in seen]
    UsageRecord.objects.bulk_create(fresh, ignore_conflicts=True)  # a concurrent replay loses the race quietly
    return len(fresh), len(records) - len(fresh)


def signing_key_ensure() -> SigningKey:
    """The newest active signing key, generated (P-256, private half sealed) when there is none."""
    current = SigningKey.objects.filter(retired_at__isnull=True).order_by("-created_at").first()
    if current is not None:
        return current
    private_key = ec.generate_private_key(ec.SECP256R1())
    public_jwk = json.loads(jwt.algorithms.ECAlgorithm.to_jwk(private_key.public_key()))
    kid = jwk_thumbprint(public_jwk)
    pem = private_key.private_bytes(Encoding.PEM, PrivateFormat.PKCS8, NoEncryption()).decode()
    key, _ = SigningKey.objects.get_or_create(
        kid=kid,
        defaults={
            "sealed_private_key": seal(pem, context=f"signing-key:{kid}"),
            "public_jwk": {**public_jwk, "kid": kid, "use": "sig", "alg": "ES256"},
        },
    )
    return key


def jwk_thumbprint(public_jwk: dict[str, Any]) -> str:
    """The RFC 7638 thumbprint of an EC public key: the key id."""
    members = {name: public_jwk[name] for name in ("crv", "kty", "x", "y")}
    canonical = json.dumps(members, separators=(",", ":"), sort_keys=True).encode()
    return base64.urlsafe_b64encode(hashlib.sha256(canonical).digest()).rstrip(b"=").decode()
