"""`emit`: write a webhook event into the outbox, in the transaction of the change that caused it.

Services call it where the change happens (never a view), inside their `transaction.atomic`, so an
event exists exactly when its change committed. The delivery process (`delivery.py`) does the rest.
"""

from __future__ import annotations

from django.conf import settings

from registry.core.ids import new_id
from registry.webhooks.event_types import EXTRA_FIELDS, WORKSPACE_EVENT_TYPES
from registry.webhooks.models import WebhookEvent

EVENT_ID_PREFIX = "wevt"
_KNOWN_TYPES = frozenset(WORKSPACE_EVENT_TYPES)


def event_data(event_type: str, *, workspace_id: str, object_id: str, **extra: str) -> dict[str, str]:
    """The `data` of an event's payload: the SDK's `BetaWebhook*EventData` fields for this type."""
    if event_type not in _KNOWN_TYPES:
        raise ValueError(f"unknown webhook event type {event_type!r}")
    expected = EXTRA_FIELDS.get(event_type)
    if set(extra) != ({expected} if expected else set()):
        raise ValueError(f"{event_type} carries {expected or 'no extra field'}, not {sorted(extra)}")
    return {
        "type": event_type,
        "id": object_id,
        "workspace_id": workspace_id,
        "organization_id": settings.REGISTRY_ORGANIZATION_ID,
        **extra,
    }


def emit(event_type: str, *, workspace_id: str, object_id: str, **extra: str) -> WebhookEvent:
    """Insert one event; call it inside the transaction of the change (outside one it commits alone)."""
    data = event_data(event_type, workspace_id=workspace_id, object_id=object_id, **extra)
    return WebhookEvent.objects.create(
        id=new_id(EVENT_ID_PREFIX), workspace_id=workspace_id, type=event_type, data=data
    )


def payload(event: WebhookEvent) -> dict[str, object]:
    """The body a delivery posts: the SDK's `BetaWebhookEvent`."""
    return {
        "type": "event",
        "id": event.id,
        "created_at": event.created_at.isoformat().replace("+00:00", "Z"),
        "data": event.data,
    }
