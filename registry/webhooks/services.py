"""Writes for webhook endpoints and deliveries: create, update, delete, regenerate the signing secret, redeliver.

Rules (each refusal is a 400 `invalid_request_error`, or the named status, whose `error.details.error_code`
is one of `ErrorCode`, and which writes nothing):

- `url`: an absolute http(s) URL with a host, no user name or password, no whitespace, at most 2048
  characters (`webhook_url_invalid`); every address its host resolves to must be one the registry may reach
  (`registry.core.egress.check_url`: public addresses unless `REGISTRY_EGRESS_ALLOW` lists them;
  `webhook_url_not_allowed`), checked at create and at every update that gives a `url`; `https` is required
  unless `REGISTRY_EGRESS_ALLOW` lifts the host or its addresses (`webhook_url_https_required`).
- `enabled_events`: each a workspace event type (`event_types.WORKSPACE_EVENT_TYPES`); an organisation-level
  type is `webhook_event_type_not_allowed`, anything else `webhook_event_type_unknown`, naming the entry.
  Duplicates collapse to the first occurrence (the set is what matters; the order given is kept).
  On update the list replaces the whole set, and an empty list leaves it unchanged.
- `state`: `enabled` clears `disabled_reason` and resets the failure run (`consecutive_failures`,
  `failing_since`, `retry_after`); `disabled` stops deliveries, with an empty `disabled_reason` (a user's).
- At most `MAX_ENDPOINTS_PER_WORKSPACE` endpoints per workspace, enabled or disabled
  (`webhook_endpoint_limit_exceeded`).
- The signing secret is shown only by create and regeneration; a regenerated secret replaces the old one at
  once (signing: `registry.webhooks.signing`).
- Redelivery puts a delivery of any status back to `pending`, due now, unleased; refused with 409
  `conflict_error` / `webhook_endpoint_disabled` while its endpoint is disabled.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any
from urllib.parse import SplitResult, urlsplit

from django.db import transaction
from django.utils import timezone

from registry.core.egress import EgressRefused, IpAddress, check_url, runtime_rules
from registry.core.errors import ApiError, ErrorType
from registry.core.ids import new_id
from registry.webhooks.event_types import ORGANIZATION_EVENT_TYPES, WORKSPACE_EVENT_TYPES
from registry.webhooks.models import WebhookDelivery, WebhookEndpoint
from registry.webhooks.signing import new_signing_secret, sealed_signing_secret
from registry.workspaces.models import Workspace

MAX_ENDPOINTS_PER_WORKSPACE = 32  # the reference client's number for organization endpoints
MAX_URL_LENGTH = 2048
ENDPOINT_ID_PREFIX = "whep"
_WORKSPACE_TYPES = frozenset(WORKSPACE_EVENT_TYPES)
_ORGANIZATION_TYPES = frozenset(ORGANIZATION_EVENT_TYPES)


class ErrorCode(enum.StrEnum):
    """The machine-readable causes of the webhooks API's refusals (`error.details.error_code`)."""

    URL_INVALID = "webhook_url_invalid"
    URL_NOT_ALLOWED = "webhook_url_not_allowed"
    URL_HTTPS_REQUIRED = "webhook_url_https_required"
    EVENT_TYPE_UNKNOWN = "webhook_event_type_unknown"
    EVENT_TYPE_NOT_ALLOWED = "webhook_event_type_not_allowed"
    ENDPOINT_LIMIT_EXCEEDED = "webhook_endpoint_limit_exceeded"
    ENDPOINT_DISABLED = "webhook_endpoint_disabled"


class WebhookRefusal(ApiError):
    """A refusal with its `ErrorCode` (the views add it to the envelope, as the reference client reads it)."""

    def __init__(self, code: ErrorCode, message: str, error_type: ErrorType = ErrorType.INVALID_REQUEST) -> None:
        super().__init__(error_type, message)
        self.error_code = code


@dataclass(frozen=True)
class NewEndpoint:
    """A created endpoint and its signing secret in clear (for the create response only)."""

    endpoint: WebhookEndpoint
    signing_secret: str


# -- validation ------------------------------------------------------------------------------------------------
def checked_url(url: str) -> str:
    """`url` if deliveries may go there (the module docstring's rules), else a `WebhookRefusal`."""
    parts = _parsed_url(url)
    host = str(parts.hostname)
    port = parts.port or (443 if parts.scheme == "https" else 80)
    try:
        addresses = check_url(url)
    except EgressRefused as refused:
        if refused.address is None:
            raise WebhookRefusal(ErrorCode.URL_NOT_ALLOWED, f"url: the host {host} could not be resolved.") from None
        raise WebhookRefusal(
            ErrorCode.URL_NOT_ALLOWED,
            f"url: {host} is not a public address; webhooks are delivered to public addresses.",
        ) from None
    if parts.scheme == "http" and not _lifted(host, addresses, port):
        raise WebhookRefusal(
            ErrorCode.URL_HTTPS_REQUIRED, "url: must use https (http only to hosts the registry's operator allows)."
        )
    return url


def _parsed_url(url: str) -> SplitResult:
    if len(url) > MAX_URL_LENGTH:
        raise WebhookRefusal(ErrorCode.URL_INVALID, f"url: must be at most {MAX_URL_LENGTH} characters.")
    if any(character.isspace() or not character.isprintable() for character in url):
        raise WebhookRefusal(ErrorCode.URL_INVALID, "url: must not contain whitespace or control characters.")
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 (a port out of range or not a number raises here)
    except ValueError:
        raise WebhookRefusal(ErrorCode.URL_INVALID, "url: is not a valid URL.") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise WebhookRefusal(ErrorCode.URL_INVALID, "url: must be an absolute http or https URL with a host.")
    if "@" in parts.netloc:
        raise WebhookRefusal(ErrorCode.URL_INVALID, "url: must not carry a user name or password.")
    return parts


def _lifted(host: str, addresses: list[IpAddress], port: int) -> bool:
    """Whether the operator's exceptions (`REGISTRY_EGRESS_ALLOW`) cover the host at every address."""
    rules = runtime_rules()
    return bool(addresses) and all(rules.lifts(host, address, port) for address in addresses)


def checked_event_types(entries: list[str]) -> list[str]:
    """The subscribed types, duplicates collapsed in the order given, each a workspace event type."""
    for index, entry in enumerate(entries):
        if entry in _ORGANIZATION_TYPES:
            raise WebhookRefusal(
                ErrorCode.EVENT_TYPE_NOT_ALLOWED,
                f"enabled_events[{index}]: {entry!r} is an organization-level event type; "
                "a workspace endpoint cannot subscribe to it.",
            )
        if entry not in _WORKSPACE_TYPES:
            raise WebhookRefusal(
                ErrorCode.EVENT_TYPE_UNKNOWN, f"enabled_events[{index}]: {entry!r} is not a webhook event type."
            )
    return list(dict.fromkeys(entries))


# -- endpoints -------------------------------------------------------------------------------------------------
@transaction.atomic
def webhook_endpoint_create(*, workspace: Workspace, values: dict[str, Any]) -> NewEndpoint:
    """A new endpoint with a fresh signing secret (returned in clear here, and stored only sealed)."""
    url = checked_url(values["url"])  # resolves the host: before any lock is taken
    events = checked_event_types(values["enabled_events"])
    # The workspace row serialises creates, so concurrent ones cannot pass the limit together.
    Workspace.objects.select_for_update().only("pk").get(pk=workspace.pk)
    if WebhookEndpoint.objects.filter(workspace=workspace).count() >= MAX_ENDPOINTS_PER_WORKSPACE:
        raise WebhookRefusal(
            ErrorCode.ENDPOINT_LIMIT_EXCEEDED,
            f"A workspace can have at most {MAX_ENDPOINTS_PER_WORKSPACE} webhook endpoints; delete one first.",
        )
    endpoint_id = new_id(ENDPOINT_ID_PREFIX)
    secret = new_signing_secret()
    endpoint = WebhookEndpoint.objects.create(
        id=endpoint_id,
        workspace=workspace,
        url=url,
        name=values.get("name", ""),
        description=values.get("description", ""),
        enabled_events=events,
        signing_secret_sealed=sealed_signing_secret(secret, endpoint_id=endpoint_id),
    )
    return NewEndpoint(endpoint=endpoint, signing_secret=secret)


@transaction.atomic
def webhook_endpoint_update(*, endpoint: WebhookEndpoint, values: dict[str, Any]) -> WebhookEndpoint:
    """Apply a partial update: omitted fields keep their value; `enabled_events` replaces the set unless empty."""
    url = checked_url(values["url"]) if "url" in values else None
    events = checked_event_types(values["enabled_events"]) if values.get("enabled_events") else None
    locked = WebhookEndpoint.objects.select_for_update().get(pk=endpoint.pk)
    if url is not None:
        locked.url = url
    if events is not None:
        locked.enabled_events = events
    for field in ("name", "description"):
        if field in values:
            setattr(locked, field, values[field])
    if "state" in values:
        _set_state(locked, values["state"])
    locked.save()
    return locked


def _set_state(endpoint: WebhookEndpoint, state: str) -> None:
    endpoint.state = state
    endpoint.disabled_reason = ""  # enabled, or disabled by a user: no reason to show
    if state == WebhookEndpoint.State.ENABLED:
        endpoint.consecutive_failures = 0
        endpoint.failing_since = None
        endpoint.retry_after = None


@transaction.atomic
def webhook_endpoint_delete(*, endpoint: WebhookEndpoint) -> None:
    """Delete the endpoint with its deliveries and their attempts (the events stay in the outbox)."""
    endpoint.delete()


@transaction.atomic
def webhook_endpoint_regenerate_signing_secret(*, endpoint: WebhookEndpoint) -> str:
    """Replace the signing secret at once; the new one in clear (for this response only)."""
    locked = WebhookEndpoint.objects.select_for_update().get(pk=endpoint.pk)
    secret = new_signing_secret()
    locked.signing_secret_sealed = sealed_signing_secret(secret, endpoint_id=locked.pk)
    locked.save(update_fields=["signing_secret_sealed", "updated_at"])
    return secret


# -- deliveries ------------------------------------------------------------------------------------------------
@transaction.atomic
def webhook_delivery_redeliver(*, delivery: WebhookDelivery) -> WebhookDelivery:
    """Send the delivery again: `pending`, due now, not completed, its lease cleared (any status); its next
    attempt is marked `manual` (`redelivery_requested`, which the delivery process clears when it settles)."""
    locked = WebhookDelivery.objects.select_for_update().get(pk=delivery.pk)
    state = WebhookEndpoint.objects.filter(pk=locked.endpoint_id).values_list("state", flat=True).first()
    if state != WebhookEndpoint.State.ENABLED:
        raise WebhookRefusal(
            ErrorCode.ENDPOINT_DISABLED,
            f"Webhook endpoint {locked.endpoint_id} is disabled; enable it before redelivering.",
            ErrorType.CONFLICT,
        )
    locked.status = WebhookDelivery.Status.PENDING
    locked.next_attempt_at = timezone.now()
    locked.completed_at = None
    locked.lease_until = None
    locked.leased_by = ""
    locked.redelivery_requested = True
    fields = ["status", "next_attempt_at", "completed_at", "lease_until", "leased_by", "redelivery_requested"]
    locked.save(update_fields=fields)
    return locked
