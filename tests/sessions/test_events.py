"""User events' fast validation (`validated_events`, used by the append) gives the values and the errors
that `SendEventsSerializer` gives, for good and bad bodies alike."""

from __future__ import annotations

from typing import Any

import pytest
from rest_framework import serializers

from registry.sessions.events import SendEventsSerializer, validated_events

TEXT = [{"type": "text", "text": "hello"}]
MESSAGE = {"type": "user.message", "content": TEXT}


def by_serializer(data: Any) -> Any:
    """What `SendEventsSerializer` makes of a body: its events, or its error detail."""
    body = SendEventsSerializer(data=data)
    return body.validated_data["events"] if body.is_valid() else body.errors


def by_validated_events(data: Any) -> Any:
    try:
        return validated_events(data)
    except serializers.ValidationError as error:
        return error.detail


@pytest.mark.parametrize(
    "data",
    [
        {"events": [MESSAGE]},
        {"events": [{"type": "user.message", "content": [{"type": "text", "text": ""}]}]},
        {"events": [{"type": "user.message", "content": [{"type": "text", "text": "  ünïcødé ✓  "}]}]},
        {"events": [{"type": "user.message", "content": [*TEXT, {"type": "text", "text": "two"}]}]},
        {"events": [MESSAGE] * 100},
        {"events": [MESSAGE] * 101},
        {"events": []},
        {"events": [MESSAGE], "extra": 1},
        {"events": "no"},
        ["events"],
        {"events": [{"type": "user.message", "content": []}]},
        {"events": [{"type": "user.message", "content": TEXT, "extra": 1}]},
        {"events": [{"type": "user.message", "content": [{"type": "text", "text": "a\x00b"}]}]},
        {"events": [{"type": "user.message", "content": [{"type": "text", "text": "a\ud800b"}]}]},
        {"events": [{"type": "user.message", "content": [{"type": "text", "text": "x" * 1_000_001}]}]},
        {"events": [{"type": "user.message", "content": [{"type": "text", "text": 5}]}]},
        {"events": [{"type": "user.message", "content": [{"type": "text", "text": "t", "cache": 1}]}]},
        {"events": [{"type": "user.message", "content": [{"type": "image", "source": {"type": "url", "url": "u"}}]}]},
        {"events": [MESSAGE, {"type": "user.interrupt"}]},
        {"events": [{"type": "user.mesage", "content": TEXT}]},
    ],
)
def test_validated_events_match_the_serializer(data: Any) -> None:
    assert by_validated_events(data) == by_serializer(data)
