"""The event taxonomy: which types exist, which are portable, and the shapes of user events.

Default dialect: the portable types only, without `seq`/`subpath`. `native-beta`: every public type
with the full envelope. Internal types never leave the server.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rest_framework import serializers

from registry.core.fields import (
    StrictBooleanField,
    StrictCharField,
    StrictIntegerField,
    StrictSerializer,
    TaggedUnionField,
)

USER_EVENT_TYPES = (
    "user.message",
    "user.interrupt",
    "user.tool_confirmation",
    "user.custom_tool_result",
    "user.define_outcome",
    "user.tool_result",
)
PORTABLE_TYPES = frozenset(
    {
        *USER_EVENT_TYPES,
        "agent.message",
        "agent.thinking",
        "agent.custom_tool_use",
        "agent.mcp_tool_use",
        "agent.mcp_tool_result",
        "agent.tool_use",
        "agent.tool_result",
        "agent.thread_context_compacted",
        "session.status_idle",
        "session.status_running",
        "session.status_rescheduled",
        "session.status_terminated",
        "session.error",
        # A session's threads (`thread_log`): in the parent's log, the thread's own, and cross-posted to the primary's.
        "session.thread_created",
        "session.thread_status_running",
        "session.thread_status_idle",
        "session.thread_status_rescheduled",
        "session.thread_status_terminated",
        "agent.thread_message_sent",
        "agent.thread_message_received",
    }
)
NATIVE_ONLY_TYPES = frozenset(
    {
        "span.model_request_start",
        "span.model_request_end",
        "span.outcome_evaluation_start",
        "span.outcome_evaluation_end",
    }
)
PUBLIC_TYPES = PORTABLE_TYPES | NATIVE_ONLY_TYPES
ENVELOPE_FIELDS = ("seq", "subpath")
# Recorded on an appended event when its request carried `native-beta`; never rendered.
NATIVE_BETA_FIELD = "_native_beta"
DELTA_TYPES = ("agent.message", "agent.thinking")
TOOL_CALL_TYPES = ("agent.tool_use", "agent.mcp_tool_use", "agent.custom_tool_use")
# The events that answer a tool call, by the field naming the call they answer.
TOOL_ANSWER_FIELDS = {
    "agent.tool_result": "tool_use_id",
    "agent.mcp_tool_result": "mcp_tool_use_id",
    "user.tool_result": "tool_use_id",
    "user.custom_tool_result": "custom_tool_use_id",
    "user.tool_confirmation": "tool_use_id",
}
MAX_ITERATIONS_DEFAULT = 3
MAX_ITERATIONS_LIMIT = 20
SEND_EVENTS_MAX = 100  # events in one `POST /events`
MESSAGE_TEXT_MAX = 1_000_000  # characters in one text block


class TextBlockSerializer(StrictSerializer):
    type = serializers.ChoiceField(choices=["text"])
    text = StrictCharField(allow_blank=True, trim_whitespace=False, max_length=MESSAGE_TEXT_MAX)


class MediaSourceSerializer(StrictSerializer):
    """Where an image or document comes from: inline base64 or text, a URL, or an uploaded file."""

    type = serializers.ChoiceField(choices=["base64", "text", "url", "file"])
    media_type = StrictCharField(required=False, max_length=128)
    data = StrictCharField(required=False, trim_whitespace=False)  # type: ignore[assignment]
    url = StrictCharField(required=False, max_length=4096)
    file_id = serializers.RegexField(r"^file_[A-Za-z0-9_-]+$", required=False)

    REQUIRED = {"base64": ("media_type", "data"), "text": ("data",), "url": ("url",), "file": ("file_id",)}

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        missing = [name for name in self.REQUIRED[attrs["type"]] if name not in attrs]
        if missing:
            raise serializers.ValidationError({name: ["required for this source type."] for name in missing})
        return attrs


class ImageBlockSerializer(StrictSerializer):
    type = serializers.ChoiceField(choices=["image"])
    source = MediaSourceSerializer()  # type: ignore[assignment]


class DocumentBlockSerializer(StrictSerializer):
    type = serializers.ChoiceField(choices=["document"])
    source = MediaSourceSerializer()  # type: ignore[assignment]
    context = StrictCharField(required=False, allow_null=True, allow_blank=True)  # type: ignore[assignment]
    title = StrictCharField(required=False, allow_null=True, allow_blank=True)


class CitationsSerializer(StrictSerializer):
    enabled = StrictBooleanField()


class SearchResultBlockSerializer(StrictSerializer):
    type = serializers.ChoiceField(choices=["search_result"])
    source = StrictCharField()  # type: ignore[assignment]
    title = StrictCharField(allow_blank=True)
    content = TextBlockSerializer(many=True)
    citations = CitationsSerializer(required=False)


MESSAGE_BLOCKS = {"text": TextBlockSerializer, "image": ImageBlockSerializer, "document": DocumentBlockSerializer}
TOOL_RESULT_BLOCKS = {**MESSAGE_BLOCKS, "search_result": SearchResultBlockSerializer}


def block_list(kinds: Mapping[str, type[serializers.Serializer[Any]]], *, required: bool, name: str) -> Any:
    return serializers.ListField(
        child=TaggedUnionField(kinds, component_name=name), required=required, allow_empty=not required
    )


class UserMessageSerializer(StrictSerializer):
    type = serializers.ChoiceField(choices=["user.message"])
    content = block_list(MESSAGE_BLOCKS, required=True, name="MessageBlock")


class UserInterruptSerializer(StrictSerializer):
    type = serializers.ChoiceField(choices=["user.interrupt"])
    session_thread_id = StrictCharField(required=False, allow_null=True)  # absent: every thread


class UserToolConfirmationSerializer(StrictSerializer):
    type = serializers.ChoiceField(choices=["user.tool_confirmation"])
    tool_use_id = StrictCharField()
    result = serializers.ChoiceField(choices=["allow", "deny"])
    deny_message = StrictCharField(required=False, allow_null=True, allow_blank=True)


class UserCustomToolResultSerializer(StrictSerializer):
    type = serializers.ChoiceField(choices=["user.custom_tool_result"])
    custom_tool_use_id = StrictCharField()
    content = block_list(TOOL_RESULT_BLOCKS, required=False, name="ToolResultBlock")
    is_error = StrictBooleanField(required=False, allow_null=True)


class UserToolResultSerializer(StrictSerializer):
    type = serializers.ChoiceField(choices=["user.tool_result"])
    tool_use_id = StrictCharField()
    content = block_list(TOOL_RESULT_BLOCKS, required=False, name="ToolResultBlock")
    is_error = StrictBooleanField(required=False, allow_null=True)


class TextRubricSerializer(StrictSerializer):
    type = serializers.ChoiceField(choices=["text"])
    content = StrictCharField(max_length=262_144)


class FileRubricSerializer(StrictSerializer):
    type = serializers.ChoiceField(choices=["file"])
    file_id = serializers.RegexField(r"^file_[A-Za-z0-9_-]+$")


class UserDefineOutcomeSerializer(StrictSerializer):
    type = serializers.ChoiceField(choices=["user.define_outcome"])
    description = StrictCharField(max_length=10_000)
    rubric = TaggedUnionField({"text": TextRubricSerializer, "file": FileRubricSerializer}, component_name="Rubric")
    max_iterations = StrictIntegerField(required=False, allow_null=True, min_value=1, max_value=MAX_ITERATIONS_LIMIT)


USER_EVENT_SERIALIZERS: dict[str, type[serializers.Serializer[Any]]] = {
    "user.message": UserMessageSerializer,
    "user.interrupt": UserInterruptSerializer,
    "user.tool_confirmation": UserToolConfirmationSerializer,
    "user.custom_tool_result": UserCustomToolResultSerializer,
    "user.define_outcome": UserDefineOutcomeSerializer,
    "user.tool_result": UserToolResultSerializer,
}
INITIAL_EVENT_SERIALIZERS = {key: USER_EVENT_SERIALIZERS[key] for key in ("user.message", "user.define_outcome")}


class SendEventsSerializer(StrictSerializer):
    """`POST /v1/sessions/{id}/events`: one or more user events, accepted or refused together."""

    events = serializers.ListField(
        child=TaggedUnionField(USER_EVENT_SERIALIZERS, component_name="UserEvent"),
        min_length=1,
        max_length=SEND_EVENTS_MAX,
    )


def _plain_text(block: Any) -> bool:
    """A `{type: "text", text}` block whose text every rule of `TextBlockSerializer` accepts."""
    if not (isinstance(block, dict) and block.keys() == {"type", "text"} and block["type"] == "text"):
        return False
    text = block["text"]
    if not isinstance(text, str) or len(text) > MESSAGE_TEXT_MAX or "\x00" in text:
        return False
    try:
        text.encode()  # a lone surrogate does not encode: the serializer names it
    except UnicodeEncodeError:
        return False
    return True


def _plain_message(event: Any) -> bool:
    return (
        isinstance(event, dict)
        and event.keys() == {"type", "content"}
        and event["type"] == "user.message"
        and isinstance(event["content"], list)
        and len(event["content"]) > 0
        and all(_plain_text(block) for block in event["content"])
    )


def validated_events(data: Any) -> list[dict[str, Any]]:
    """The events of a `POST /events` body, as `SendEventsSerializer` validates them.

    Text-only `user.message` batches (most appends) are recognised without DRF's field machinery and
    give the same values; anything else, every error included, goes through the serializer.
    """
    events = data.get("events") if isinstance(data, dict) and data.keys() == {"events"} else None
    if (
        isinstance(events, list)
        and 1 <= len(events) <= SEND_EVENTS_MAX
        and all(_plain_message(event) for event in events)
    ):
        return [
            {"type": "user.message", "content": [{"type": "text", "text": block["text"]} for block in event["content"]]}
            for event in events
        ]
    body = SendEventsSerializer(data=data)
    body.is_valid(raise_exception=True)
    return list(body.validated_data["events"])
