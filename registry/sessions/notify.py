"""Wake-ups and deltas over the channel layer. Only a signal: a lost message delays, never loses."""

from __future__ import annotations

import logging
from typing import Any

from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from django.db import transaction

logger = logging.getLogger(__name__)


def group_name(session_id: str) -> str:
    return f"session.{session_id}"


def _send(session_id: str, message: dict[str, Any]) -> None:
    layer = get_channel_layer()
    if layer is None:
        return
    try:
        async_to_sync(layer.group_send)(group_name(session_id), message)
    except Exception as error:  # the layer is only a wake-up: streams fall back to their database timer
        logger.warning("channel layer unavailable for %s: %s", session_id, type(error).__name__)


def wake_after_commit(session_id: str) -> None:
    """Tell the session's streams to read the database once the current transaction commits."""
    transaction.on_commit(lambda: _send(session_id, {"type": "session.wakeup"}))


def publish_delta(session_id: str, event_type: str, frame: dict[str, Any]) -> None:
    """A preview frame (`event_start`/`event_delta`) for streams that asked for `event_type`."""
    _send(session_id, {"type": "session.delta", "event_type": event_type, "frame": frame})
