"""Provider fidelity, streamed and fanned out, with the official clients against fake providers: tool calls with
`tool_choice`, stop sequences and images both ways as streams (what the provider received, what the client's SDK
assembled), and `n > 1` towards a messages-shaped target answered by one call per choice (JSON, and streamed as
the choices' streams interleaved into one)."""

from __future__ import annotations

import base64
import json
from typing import Any

import httpx
import openai
import pytest

from tests.support.gateway.documents import two_shapes
from tests.support.gateway.provider import TOOL_ARGUMENTS, FakeProvider
from tests.support.gateway.thread import GatewayFactory, GatewayThread

pytestmark = pytest.mark.e2e
PNG = base64.b64encode(b"\x89PNG tiny").decode()
WEATHER_CHAT: Any = {"type": "function", "function": {"name": "weather", "parameters": {"type": "object"}}}
WEATHER_MESSAGES: Any = {"name": "weather", "input_schema": {"type": "object"}}


@pytest.fixture(scope="module")
def gateway(
    module_gateway_factory: GatewayFactory, primary: FakeProvider, secondary: FakeProvider, provider_keys: None
) -> GatewayThread:
    """`a-*`: chat-shaped (primary); `b-*`: messages-shaped (secondary)."""
    document = two_shapes(primary.url, secondary.url)
    return module_gateway_factory(document)


# Chat client streaming from a messages-shaped destination.


def test_streamed_tool_call_with_tool_choice_towards_messages(gateway: GatewayThread, secondary: FakeProvider) -> None:
    stream = gateway.openai.chat.completions.create(
        model="b-one",
        messages=[{"role": "user", "content": "weather?"}],
        tools=[WEATHER_CHAT],
        tool_choice={"type": "function", "function": {"name": "weather"}},
        parallel_tool_calls=False,
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = list(stream)
    sent = secondary.received[0].body
    assert sent["stream"] is True
    assert sent["tools"] == [{"name": "weather", "input_schema": {"type": "object"}}]
    assert sent["tool_choice"] == {"type": "tool", "name": "weather", "disable_parallel_tool_use": True}
    calls = [call for chunk in chunks if chunk.choices for call in chunk.choices[0].delta.tool_calls or []]
    assert calls[0].id == "toolu_1" and calls[0].function and calls[0].function.name == "weather"
    assert json.loads("".join(call.function.arguments or "" for call in calls if call.function)) == TOOL_ARGUMENTS
    assert [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason] == ["tool_calls"]
    assert chunks[-1].usage is not None and chunks[-1].usage.prompt_tokens == 13
    assert chunks[-1].usage.completion_tokens == 5


def test_streamed_stop_sequence_towards_messages(gateway: GatewayThread, secondary: FakeProvider) -> None:
    chunks = list(
        gateway.openai.chat.completions.create(
            model="b-one", messages=[{"role": "user", "content": "count"}], stop="END", stream=True
        )
    )
    assert secondary.received[0].body["stop_sequences"] == ["END"]
    text = "".join(chunk.choices[0].delta.content or "" for chunk in chunks if chunk.choices)
    assert text == "Hello from secondary"
    assert [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason] == ["stop"]


def test_streamed_images_towards_messages(gateway: GatewayThread, secondary: FakeProvider) -> None:
    content: Any = [
        {"type": "text", "text": "What is this?"},
        {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{PNG}"}},
        {"type": "image_url", "image_url": {"url": "https://example.com/cat.png"}},
    ]
    chunks = list(
        gateway.openai.chat.completions.create(
            model="b-one", messages=[{"role": "user", "content": content}], stream=True
        )
    )
    blocks = secondary.received[0].body["messages"][0]["content"]
    assert blocks[1] == {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": PNG}}
    assert blocks[2] == {"type": "image", "source": {"type": "url", "url": "https://example.com/cat.png"}}
    assert "".join(chunk.choices[0].delta.content or "" for chunk in chunks if chunk.choices) == "Hello from secondary"


# Messages client streaming from a chat-shaped destination.


def test_streamed_tool_use_with_tool_choice_towards_chat(gateway: GatewayThread, primary: FakeProvider) -> None:
    with gateway.anthropic.messages.stream(
        model="a-one",
        max_tokens=64,
        messages=[{"role": "user", "content": "weather?"}],
        tools=[WEATHER_MESSAGES],
        tool_choice={"type": "tool", "name": "weather", "disable_parallel_tool_use": True},
    ) as stream:
        events = list(stream)
        message = stream.get_final_message()
    sent = primary.received[0].body
    assert sent["stream"] is True and sent["stream_options"] == {"include_usage": True}
    assert sent["tool_choice"] == {"type": "function", "function": {"name": "weather"}}
    assert sent["parallel_tool_calls"] is False
    assert sent["tools"][0]["function"]["name"] == "weather"
    assert any(event.type == "input_json" for event in events)
    block: Any = message.content[0]
    assert (
        block.type == "tool_use" and block.id == "call_1" and block.name == "weather" and block.input == TOOL_ARGUMENTS
    )
    assert message.stop_reason == "tool_use"
    assert message.usage.input_tokens == 11 and message.usage.output_tokens == 7


def test_streamed_stop_sequences_towards_chat(gateway: GatewayThread, primary: FakeProvider) -> None:
    with gateway.anthropic.messages.stream(
        model="a-one", max_tokens=64, messages=[{"role": "user", "content": "count"}], stop_sequences=["END", "STOP"]
    ) as stream:
        message = stream.get_final_message()
    assert primary.received[0].body["stop"] == ["END", "STOP"]
    assert message.content[0].type == "text" and message.content[0].text == "Hello from primary"
    # The chat shape says only `stop`: which sequence matched is not known, so it is `end_turn` with no sequence.
    assert message.stop_reason == "end_turn" and message.stop_sequence is None


def test_streamed_images_towards_chat(gateway: GatewayThread, primary: FakeProvider) -> None:
    with gateway.anthropic.messages.stream(
        model="a-one",
        max_tokens=64,
        messages=[
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "What is this?"},
                    {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": PNG}},
                    {"type": "image", "source": {"type": "url", "url": "https://example.com/cat.png"}},
                ],
            }
        ],
    ) as stream:
        message = stream.get_final_message()
    parts = primary.received[0].body["messages"][0]["content"]
    assert parts[0] == {"type": "text", "text": "What is this?"}
    assert parts[1] == {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{PNG}"}}
    assert parts[2] == {"type": "image_url", "image_url": {"url": "https://example.com/cat.png"}}
    assert message.content[0].type == "text" and message.content[0].text == "Hello from primary"


# n > 1 towards a messages-shaped destination: fan-out.


def test_n_is_fanned_out_to_a_messages_target(gateway: GatewayThread, secondary: FakeProvider) -> None:
    completion = gateway.openai.chat.completions.create(
        model="b-one", messages=[{"role": "user", "content": "hi"}], n=3, temperature=0.9
    )
    assert len(secondary.received) == 3
    for received in secondary.received:
        assert "n" not in received.body and received.body["temperature"] == 0.9
    parents = {received.headers["traceparent"].split("-")[2] for received in secondary.received}
    assert len(parents) == 1  # every upstream call a child of the gateway's one span
    assert len({received.headers["x-request-id"] for received in secondary.received}) == 1
    assert [choice.index for choice in completion.choices] == [0, 1, 2]
    assert all(choice.message.content == "Hello from secondary" for choice in completion.choices)
    assert completion.usage is not None
    assert (completion.usage.prompt_tokens, completion.usage.completion_tokens) == (39, 15)
    assert completion.usage.total_tokens == 54


def test_fanned_out_tool_calls_keep_one_choice_each(gateway: GatewayThread, secondary: FakeProvider) -> None:
    completion = gateway.openai.chat.completions.create(
        model="b-one", messages=[{"role": "user", "content": "weather?"}], n=2, tools=[WEATHER_CHAT]
    )
    assert [choice.index for choice in completion.choices] == [0, 1]
    for choice in completion.choices:
        calls: Any = choice.message.tool_calls
        assert choice.finish_reason == "tool_calls" and json.loads(calls[0].function.arguments) == TOOL_ARGUMENTS


def test_n_is_carried_as_sent_to_a_chat_target(gateway: GatewayThread, primary: FakeProvider) -> None:
    gateway.openai.chat.completions.create(model="a-one", messages=[{"role": "user", "content": "hi"}], n=2)
    assert len(primary.received) == 1 and primary.received[0].body["n"] == 2


def test_one_failed_call_fails_the_fanned_out_attempt(gateway: GatewayThread, secondary: FakeProvider) -> None:
    secondary.reset("ok", "500")
    with pytest.raises(openai.APIStatusError) as raised:
        gateway.openai.chat.completions.create(model="b-one", messages=[{"role": "user", "content": "hi"}], n=2)
    assert raised.value.status_code == 502
    assert len(secondary.received) == 2


@pytest.mark.parametrize(
    ("n", "status", "code"),
    [(0, 400, "invalid_request"), ("2", 400, "invalid_request"), (17, 400, "unsupported_parameter")],
)
def test_n_out_of_range_is_refused_before_any_call(
    gateway: GatewayThread, secondary: FakeProvider, n: Any, status: int, code: str
) -> None:
    answer = httpx.post(
        f"{gateway.url}/v1/chat/completions",
        json={"model": "b-one", "messages": [{"role": "user", "content": "hi"}], "n": n},
    )
    assert answer.status_code == status and answer.json()["error"]["code"] == code
    assert answer.json()["error"]["param"] == ("n" if code == "unsupported_parameter" else None)
    assert secondary.received == []


# Streamed n > 1 towards a messages-shaped destination: n concurrent streams interleaved into one.


def _streamed_choices(gateway: GatewayThread, n: int = 3, **extra: Any) -> list[Any]:
    return list(
        gateway.openai.chat.completions.create(
            model="b-one", messages=[{"role": "user", "content": "hi"}], n=n, stream=True, **extra
        )
    )


def test_streamed_n_is_fanned_out_with_per_choice_indices(gateway: GatewayThread, secondary: FakeProvider) -> None:
    secondary.reset("delay:0.4", "delay:0.4", "delay:0.4")
    chunks = _streamed_choices(gateway, stream_options={"include_usage": True})
    assert len(secondary.received) == 3
    assert all(received.body["stream"] is True and "n" not in received.body for received in secondary.received)
    arrivals = [received.at for received in secondary.received]
    assert max(arrivals) - min(arrivals) < 0.3  # sent at once, not one after the other
    assert len({chunk.id for chunk in chunks}) == 1
    with_choices = [chunk for chunk in chunks if chunk.choices]
    assert all(len(chunk.choices) == 1 for chunk in with_choices)
    for index in range(3):
        deltas = [chunk.choices[0] for chunk in with_choices if chunk.choices[0].index == index]
        assert deltas[0].delta.role == "assistant"
        assert "".join(choice.delta.content or "" for choice in deltas) == "Hello from secondary"
        assert [choice.finish_reason for choice in deltas if choice.finish_reason] == ["stop"]
    assert {chunk.choices[0].index for chunk in with_choices} == {0, 1, 2}
    usage_chunks = [chunk for chunk in chunks if chunk.usage is not None]
    assert usage_chunks == [chunks[-1]] and chunks[-1].choices == []
    usage: Any = chunks[-1].usage
    assert (usage.prompt_tokens, usage.completion_tokens, usage.total_tokens) == (39, 15, 54)


def test_streamed_choices_assemble_in_the_official_client(gateway: GatewayThread) -> None:
    with gateway.openai.chat.completions.stream(
        model="b-one", messages=[{"role": "user", "content": "weather?"}], n=2, tools=[WEATHER_CHAT]
    ) as stream:
        completion = stream.get_final_completion()
    assert [choice.index for choice in completion.choices] == [0, 1]
    for choice in completion.choices:
        calls: Any = choice.message.tool_calls
        assert choice.finish_reason == "tool_calls" and len(calls) == 1
        assert calls[0].id == "toolu_1" and json.loads(calls[0].function.arguments) == TOOL_ARGUMENTS


def test_streamed_choices_end_once_without_usage_unless_asked(gateway: GatewayThread) -> None:
    answer = httpx.post(
        f"{gateway.url}/v1/chat/completions",
        json={"model": "b-one", "messages": [{"role": "user", "content": "hi"}], "n": 2, "stream": True},
    )
    frames = [line.removeprefix("data: ") for line in answer.text.splitlines() if line.startswith("data: ")]
    assert frames.count("[DONE]") == 1 and frames[-1] == "[DONE]"
    chunks = [json.loads(frame) for frame in frames[:-1]]
    assert all(chunk["choices"] and "usage" not in chunk for chunk in chunks)
    assert sorted(choice["index"] for chunk in chunks for choice in chunk["choices"] if choice["finish_reason"]) == [
        0,
        1,
    ]


def test_a_streamed_choice_refused_before_the_first_byte_fails_the_attempt(
    gateway: GatewayThread, secondary: FakeProvider
) -> None:
    secondary.reset("ok", "500")
    with pytest.raises(openai.APIStatusError) as raised:
        _streamed_choices(gateway, n=2)
    assert raised.value.status_code == 502
    assert len(secondary.received) == 2


def test_a_streamed_choice_broken_mid_way_ends_the_stream_with_an_error(
    gateway: GatewayThread, secondary: FakeProvider
) -> None:
    secondary.reset("ok", "break_stream", "ok")
    with pytest.raises(openai.APIError) as raised:
        _streamed_choices(gateway)
    assert "broke" in raised.value.message or "ended" in raised.value.message
    assert len(secondary.received) == 3


def test_a_stream_released_unread_leaves_its_pooled_connection_clean(
    gateway: GatewayThread, secondary: FakeProvider
) -> None:
    secondary.reset("ok", "500")  # the whole "ok" stream arrives, unread, before the attempt is given up
    with pytest.raises(openai.APIStatusError):
        _streamed_choices(gateway, n=2)
    chunks = _streamed_choices(gateway)  # on the pooled connections of the refused attempt
    starts = [chunk.choices[0].index for chunk in chunks if chunk.choices and chunk.choices[0].delta.role]
    assert sorted(starts) == [0, 1, 2]  # one start per choice: no other response's stream read as its own
    finishes = [chunk.choices[0].index for chunk in chunks if chunk.choices and chunk.choices[0].finish_reason]
    assert sorted(finishes) == [0, 1, 2]
