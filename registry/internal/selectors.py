"""Reads for gateways: the session-scoped guardrail bundle (plain or as an ES256 JWS), and the JWKS that
verifies the runtime's model-call tokens; and the usage records' totals per day, workspace, key and model
(the admin's usage and spend page)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

import jwt
from django.conf import settings
from django.db.models import Count, QuerySet, Sum
from django.db.models.fields.json import KeyTextTransform
from django.db.models.functions import TruncDate
from django.utils import timezone

from registry.core.secrets import unseal
from registry.core.serialization import timestamp
from registry.extensions.selectors import guardrail_objects, guardrails_for_workspace
from registry.internal.models import SigningKey, UsageRecord
from registry.sessions.models import Session


def guardrail_bundle(session: Session) -> dict[str, Any]:
    """The guardrails in force for the session's workspace, with its stored guardrail state."""
    now = timezone.now()
    guardrails = guardrails_for_workspace(session.workspace_id)
    state = getattr(session, "guardrail_state", None)
    version = max((guardrail.updated_at for guardrail in guardrails), default=now)
    return {
        "type": "guardrail_bundle",
        "workspace_id": session.workspace_id,
        "session_id": session.id,
        "version": int(version.timestamp() * 1000),
        "issued_at": timestamp(now),
        "expires_at": timestamp(now + timedelta(seconds=settings.REGISTRY_BUNDLE_TTL_SECONDS)),
        "guardrails": guardrail_objects(guardrails),
        "state": state.state if state else {},
    }


def signed(bundle: dict[str, Any]) -> str | None:
    """The bundle as a compact ES256 JWS, or None when no signing key is configured."""
    key_file = settings.REGISTRY_BUNDLE_SIGNING_KEY_FILE
    if not key_file:
        return None
    headers = {"kid": settings.REGISTRY_BUNDLE_KEY_ID, "typ": "guardrail-bundle+jws"}
    return jwt.encode(bundle, Path(key_file).read_text(), algorithm="ES256", headers=headers)


def jwks_document() -> dict[str, Any]:
    """The public keys that verify the runtime's model-call tokens (`/.well-known/jwks.json`)."""
    return {"keys": [key.public_jwk for key in SigningKey.objects.filter(retired_at__isnull=True).order_by("kid")]}


def signing_private_key(key: SigningKey) -> str:
    """The PEM private key of a signing key, for the runtime's use only."""
    return unseal(key.sealed_private_key, context=f"signing-key:{key.kid}")


@dataclass(frozen=True)
class UsageTotal:
    """Totals of the usage records of one day, workspace, key (the record's principal) and model."""

    day: date
    workspace_id: str | None
    key: str | None
    model: str
    requests: int
    input_tokens: int
    output_tokens: int
    cost_usd: Decimal


@dataclass(frozen=True)
class UsageFilter:
    """Which usage records a totals query covers: since when, within which workspaces (None: every one,
    records without a workspace included), and optionally one workspace, key and model."""

    since: datetime
    workspace_ids: set[str] | None = None
    workspace: str | None = None
    key: str | None = None
    model: str | None = None


def _usage_records(within: UsageFilter) -> QuerySet[UsageRecord]:
    records = UsageRecord.objects.filter(ts__gte=within.since).annotate(key=KeyTextTransform("principal", "record"))
    if within.workspace_ids is not None:
        records = records.filter(workspace_id__in=within.workspace_ids)
    chosen = {"workspace_id": within.workspace, "key": within.key, "model": within.model}
    return records.filter(**{field: value for field, value in chosen.items() if value})


def usage_totals(within: UsageFilter) -> list[UsageTotal]:
    """Requests, tokens and cost per day (UTC), workspace, key and model; newest day first."""
    grouped = (
        _usage_records(within)
        .annotate(day=TruncDate("ts"))
        .values("day", "workspace_id", "key", "model")
        .annotate(
            requests=Count("id"),
            input_tokens=Sum("input_tokens"),
            output_tokens=Sum("output_tokens"),
            cost_usd=Sum("cost_usd"),
        )
        .order_by("-day", "workspace_id", "key", "model")
    )
    return [UsageTotal(**row) for row in grouped]


def usage_choices(within: UsageFilter) -> dict[str, list[str]]:
    """The workspaces, keys and models the records since `within.since` in its workspaces name (for filters)."""
    records = _usage_records(UsageFilter(since=within.since, workspace_ids=within.workspace_ids))
    return {
        field: sorted({value for value in records.values_list(field, flat=True).distinct() if value})
        for field in ("workspace_id", "key", "model")
    }
