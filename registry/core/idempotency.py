"""Idempotency keys: a unique row claims the key, the first response is stored and replayed.

Same key, same method, path and body: the first response again (errors too), with
`idempotent-replayed: true`. Same key, other request: 422. First request still running: 409.
"""

from __future__ import annotations

import hashlib
import tempfile
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.db import IntegrityError, transaction
from django.http import HttpRequest
from django.utils import timezone
from rest_framework.request import Request
from rest_framework.response import Response

from registry.core.errors import ApiError, ErrorType, conflict, invalid_request
from registry.core.models import IdempotencyKey

HEADER = "HTTP_IDEMPOTENCY_KEY"
READ_CHUNK_BYTES = 64 * 1024
SPOOL_IN_MEMORY_BYTES = 1024 * 1024
MAX_KEY_LENGTH = 255


class IdempotentReplay(Exception):
    """Raised to short-circuit a view with the stored response of an earlier request."""

    def __init__(self, response: Response) -> None:
        super().__init__("idempotent replay")
        self.response = response


@dataclass(frozen=True)
class Claim:
    """A key this request owns; its response is recorded when the view finishes."""

    row_id: int


def fingerprint_of(request: Request) -> str:
    """SHA-256 of method, path and body. A multipart body is hashed as it is read and spooled (to disk
    past 1 MiB), then put back for the view, so a large upload is neither held in memory nor read twice."""
    digest = hashlib.sha256()
    digest.update((request.method or "").encode() + b" " + request.get_full_path().encode() + b"\n")
    django_request = request._request
    if django_request.content_type == "multipart/form-data":
        _hash_and_respool(django_request, digest)
    else:
        digest.update(django_request.body)  # the raw bytes, so any byte of difference counts
    return digest.hexdigest()


def _hash_and_respool(django_request: HttpRequest, digest: Any) -> None:
    limit = int(getattr(settings, "REGISTRY_MAX_UPLOAD_BYTES", settings.REGISTRY_MAX_BODY_BYTES))
    spool = tempfile.SpooledTemporaryFile(max_size=SPOOL_IN_MEMORY_BYTES)  # noqa: SIM115 (handed to the request)
    received = 0
    while chunk := django_request.read(READ_CHUNK_BYTES):
        received += len(chunk)
        if received > limit:
            spool.close()
            raise ApiError(ErrorType.REQUEST_TOO_LARGE, f"Request body exceeds the limit of {limit} bytes.")
        digest.update(chunk)
        spool.write(chunk)
    spool.seek(0)
    # The view reads the body again from the spool; `release` closes it when the view is done.
    django_request._stream = spool  # type: ignore[assignment]
    django_request._read_started = False  # type: ignore[attr-defined]
    django_request._idempotency_spool = spool  # type: ignore[attr-defined]
    django_request.META["CONTENT_LENGTH"] = str(received)


def claim(request: Request, workspace_id: str) -> Claim | None:
    """Claim the request's key, or raise IdempotentReplay / a 409 / a 422. None without a key."""
    key = request.META.get(HEADER)
    if key is None:
        return None
    if not key or len(key) > MAX_KEY_LENGTH:
        raise invalid_request(f"Idempotency-Key: must be 1 to {MAX_KEY_LENGTH} characters.")
    fingerprint = fingerprint_of(request)
    for _ in range(3):
        try:
            with transaction.atomic():
                row = IdempotencyKey.objects.create(workspace_id=workspace_id, key=key, fingerprint=fingerprint)
            return Claim(row_id=row.pk)
        except IntegrityError:
            existing = IdempotencyKey.objects.filter(workspace_id=workspace_id, key=key).first()
            if existing is None:
                continue
            if _is_reusable(existing):
                existing.delete()
                continue
            raise _outcome_for(existing, fingerprint) from None
    raise conflict("Idempotency-Key: could not be claimed; retry the request.")


def _is_reusable(row: IdempotencyKey) -> bool:
    """Expired keys are free again; so are claims whose request died long ago without an answer."""
    age = timezone.now() - row.created_at
    if age > timedelta(seconds=settings.IDEMPOTENCY_KEY_TTL_SECONDS):
        return True
    return row.state == IdempotencyKey.State.IN_PROGRESS and age > timedelta(seconds=settings.IDEMPOTENCY_STALE_SECONDS)


def _outcome_for(row: IdempotencyKey, fingerprint: str) -> Exception:
    if row.fingerprint != fingerprint:
        return ApiError(
            ErrorType.INVALID_REQUEST,
            "Idempotency-Key: this key was already used with a different request.",
            status=422,
        )
    if row.state == IdempotencyKey.State.IN_PROGRESS:
        return conflict("Idempotency-Key: a request with this key is still in progress.")
    response = Response(row.response_body, status=row.response_status)
    response["idempotent-replayed"] = "true"
    return IdempotentReplay(response)


def release(request: Request) -> None:
    """Close the spooled copy of an upload's body, once the view is done with it."""
    spool = getattr(request._request, "_idempotency_spool", None)
    if spool is not None:
        spool.close()


def record(claimed: Claim, response: Response) -> None:
    """Store the response of the request that owns the key."""
    body: Any = response.data
    IdempotencyKey.objects.filter(pk=claimed.row_id).update(
        state=IdempotencyKey.State.COMPLETE, response_status=response.status_code, response_body=body
    )


def purge_expired() -> int:
    cutoff = timezone.now() - timedelta(seconds=settings.IDEMPOTENCY_KEY_TTL_SECONDS)
    deleted, _ = IdempotencyKey.objects.filter(created_at__lt=cutoff).delete()
    return deleted
