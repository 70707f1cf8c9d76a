"""Provider fidelity, end to end with the official clients: each translated field as the fake provider received
it (JSON and streamed, both ways), refused fields and lenient drops, thinking and effort levels across shapes,
forwarded headers, the request id and the trace context upstream."""

from __future__ import annotations

import base64
import json
from typing import Any

import anthropic
import httpx
import openai
import pytest

from tests.support.gateway.documents import KEYS_VAULT, fallback_route, keyed_destination
from tests.support.gateway.provider import SIGNATURE, THINKING, TOOL_ARGUMENTS, FakeProvider
from tests.support.gateway.requests import chat_tool_turn
from tests.support.gateway.thread import GatewayFactory, GatewayThread

pytestmark = pytest.mark.e2e
PDF = base64.b64encode(b"%PDF-1.4 tiny").decode()
PNG = base64.b64encode(b"\x89PNG tiny").decode()
TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
HI: Any = [{"role": "user", "content": "hi"}]
CLIENT_SPAN = "00f067aa0ba902b7"


@pytest.fixture(scope="module")
def gateway(
    module_gateway_factory: GatewayFactory, primary: FakeProvider, secondary: FakeProvider, provider_keys: None
) -> GatewayThread:
    """`a-*`: chat-shaped; `b-*`: messages-shaped; `lenient-*`: messages-shaped on a lenient route; `fwd-*` and
    `none-*`: messages-shaped with replaced and empty `forward_headers`; `ahdr-*`: chat-shaped forwarding one."""
    b = keyed_destination("vendor_b", secondary.url, "b")
    document = {
        "vaults": [KEYS_VAULT],
        "destinations": {
            "shape_a": keyed_destination("vendor_a", f"{primary.url}/v1", "a"),
            "shape_a_fwd": keyed_destination("vendor_a", f"{primary.url}/v1", "a", forward_headers=["X-Team"]),
            "shape_b": b,
            "shape_b_fwd": {**b, "forward_headers": ["x-team", "anthropic-beta"]},
            "shape_b_none": {**b, "forward_headers": []},
        },
        "routes": [
            fallback_route("to_a", "a-*", "shape_a"),
            fallback_route("to_b", "b-*", "shape_b"),
            fallback_route("lenient", "lenient-*", "shape_b", translation="lenient"),
            fallback_route("lenient_a", "lenienta-*", "shape_a", translation="lenient"),
            fallback_route("fwd", "fwd-*", "shape_b_fwd"),
            fallback_route("none", "none-*", "shape_b_none"),
            fallback_route("ahdr", "ahdr-*", "shape_a_fwd"),
        ],
    }
    return module_gateway_factory(document)


@pytest.fixture(autouse=True)
def fresh(primary: FakeProvider, secondary: FakeProvider) -> None:
    primary.reset()
    secondary.reset()


# Chat client -> messages-shaped destination: what the provider received, field by field.


def test_chat_fields_arrive_as_messages_fields(gateway: GatewayThread, secondary: FakeProvider) -> None:
    gateway.openai.chat.completions.create(  # type: ignore[call-overload]
        model="b-one",
        messages=[
            {
                "role": "system",
                "content": [{"type": "text", "text": "Be brief.", "cache_control": {"type": "ephemeral"}}],
            },  # type: ignore[typeddict-unknown-key]
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "Read these."},
                    {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{PNG}"}},
                    {"type": "image_url", "image_url": {"url": "https://example.com/cat.png"}},
                    {"type": "file", "file": {"filename": "a.pdf", "file_data": f"data:application/pdf;base64,{PDF}"}},
                ],
            },
            *chat_tool_turn("call_1", "weather", '{"city":"Oslo"}', "cold"),
        ],
        max_completion_tokens=100,
        temperature=0.2,
        top_p=0.9,
        stop=["END"],
        user="u-1",
        tools=[{"type": "function", "function": {"name": "weather", "parameters": {"type": "object"}}}],
        tool_choice={"type": "function", "function": {"name": "weather"}},
        parallel_tool_calls=False,
    )
    sent = secondary.received[0].body
    assert sent["system"] == [{"type": "text", "text": "Be brief.", "cache_control": {"type": "ephemeral"}}]
    user = sent["messages"][0]["content"]
    assert user[0] == {"type": "text", "text": "Read these."}
    assert user[1] == {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": PNG}}
    assert user[2] == {"type": "image", "source": {"type": "url", "url": "https://example.com/cat.png"}}
    assert user[3] == {
        "type": "document",
        "source": {"type": "base64", "media_type": "application/pdf", "data": PDF},
        "title": "a.pdf",
    }
    assert sent["messages"][1] == {
        "role": "assistant",
        "content": [{"type": "tool_use", "id": "call_1", "name": "weather", "input": {"city": "Oslo"}}],
    }
    assert sent["messages"][2]["content"] == [{"type": "tool_result", "tool_use_id": "call_1", "content": "cold"}]
    assert sent["max_tokens"] == 100 and sent["temperature"] == 0.2 and sent["top_p"] == 0.9
    assert sent["stop_sequences"] == ["END"] and sent["metadata"] == {"user_id": "u-1"}
    assert sent["tool_choice"] == {"type": "tool", "name": "weather", "disable_parallel_tool_use": True}


@pytest.mark.parametrize(("choice", "expected"), [("none", "none"), ("required", "any"), ("auto", "auto")])
def test_tool_choice_modes_towards_messages(
    gateway: GatewayThread, secondary: FakeProvider, choice: str, expected: str
) -> None:
    gateway.openai.chat.completions.create(  # type: ignore[call-overload]
        model="b-one",
        messages=[{"role": "user", "content": "hi"}],
        tools=[{"type": "function", "function": {"name": "weather", "parameters": {"type": "object"}}}],
        tool_choice=choice,  # type: ignore[arg-type]
    )
    assert secondary.received[0].body["tool_choice"] == {"type": expected}


def test_response_format_is_emulated_by_a_forced_tool(gateway: GatewayThread, secondary: FakeProvider) -> None:
    schema = {"type": "object", "properties": {"city": {"type": "string"}}}
    response_format: Any = {"type": "json_schema", "json_schema": {"name": "place", "schema": schema}}
    completion = gateway.openai.chat.completions.create(
        model="b-one", messages=[{"role": "user", "content": "where?"}], response_format=response_format
    )
    sent = secondary.received[0].body
    assert sent["tools"][-1]["input_schema"] == schema
    assert sent["tool_choice"] == {"type": "tool", "name": sent["tools"][-1]["name"]}
    assert json.loads(completion.choices[0].message.content or "") == TOOL_ARGUMENTS
    assert completion.choices[0].finish_reason == "stop" and not completion.choices[0].message.tool_calls
    streamed = gateway.openai.chat.completions.create(
        model="b-one", messages=[{"role": "user", "content": "where?"}], response_format=response_format, stream=True
    )
    chunks = list(streamed)
    text = "".join(chunk.choices[0].delta.content or "" for chunk in chunks if chunk.choices)
    assert json.loads(text) == TOOL_ARGUMENTS


def test_reasoning_effort_becomes_a_thinking_budget_and_thinking_comes_back(
    gateway: GatewayThread, secondary: FakeProvider
) -> None:
    completion = gateway.openai.chat.completions.create(
        model="b-one", messages=[{"role": "user", "content": "think"}], reasoning_effort="medium", max_tokens=100
    )
    sent = secondary.received[0].body
    assert sent["thinking"] == {"type": "enabled", "budget_tokens": 4096}
    assert sent["max_tokens"] > 4096  # the budget is inside max_tokens on a messages-shaped target
    message: Any = completion.choices[0].message
    assert message.reasoning_content == THINKING
    assert message.thinking_blocks == [{"type": "thinking", "thinking": THINKING, "signature": SIGNATURE}]
    assert message.content == "Hello from secondary"


def test_thinking_streams_to_a_chat_client_as_deltas(gateway: GatewayThread) -> None:
    chunks: list[Any] = list(
        gateway.openai.chat.completions.create(
            model="b-one", messages=[{"role": "user", "content": "think"}], reasoning_effort="high", stream=True
        )
    )
    deltas = [chunk.choices[0].delta for chunk in chunks if chunk.choices]
    reasoning = "".join(getattr(delta, "reasoning_content", None) or "" for delta in deltas)
    blocks = [block for delta in deltas for block in (getattr(delta, "thinking_blocks", None) or [])]
    assert reasoning == THINKING
    assert blocks == [{"type": "thinking", "thinking": THINKING, "signature": SIGNATURE}]
    assert "".join(delta.content or "" for delta in deltas) == "Hello from secondary"


def test_signed_thinking_goes_back_upstream_on_the_next_turn(gateway: GatewayThread, secondary: FakeProvider) -> None:
    assistant: Any = {
        "role": "assistant",
        "content": "ok",
        "thinking_blocks": [{"type": "thinking", "thinking": THINKING, "signature": SIGNATURE}],
    }
    gateway.openai.chat.completions.create(
        model="b-one", messages=[{"role": "user", "content": "a"}, assistant, {"role": "user", "content": "b"}]
    )
    assert secondary.received[0].body["messages"][1]["content"][0] == {
        "type": "thinking",
        "thinking": THINKING,
        "signature": SIGNATURE,
    }


# Messages client -> chat-shaped destination.


def test_messages_fields_arrive_as_chat_fields(gateway: GatewayThread, primary: FakeProvider) -> None:
    gateway.anthropic.messages.create(
        model="a-one",
        max_tokens=64,
        system=[{"type": "text", "text": "Be brief.", "cache_control": {"type": "ephemeral"}}],
        messages=[
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "Read."},
                    {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": PNG}},
                    {"type": "document", "source": {"type": "base64", "media_type": "application/pdf", "data": PDF}},
                ],
            },
            {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "weather", "input": {}}]},
            {
                "role": "user",
                "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "no such city", "is_error": True}],
            },
        ],
        extra_body={"temperature": 0.3},  # this client version no longer takes it as an argument
        stop_sequences=["END"],
        metadata={"user_id": "u-2"},
        tools=[{"name": "weather", "input_schema": {"type": "object"}}],
        tool_choice={"type": "any", "disable_parallel_tool_use": True},
        thinking={"type": "enabled", "budget_tokens": 2000},
    )
    sent = primary.received[0].body
    assert sent["messages"][0] == {"role": "system", "content": "Be brief."}
    parts = sent["messages"][1]["content"]
    assert parts[1] == {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{PNG}"}}
    assert parts[2] == {
        "type": "file",
        "file": {"filename": "document", "file_data": f"data:application/pdf;base64,{PDF}"},
    }
    assert sent["messages"][3] == {"role": "tool", "tool_call_id": "t1", "content": "Error: no such city"}
    assert sent["temperature"] == 0.3 and sent["stop"] == ["END"] and sent["user"] == "u-2"
    assert sent["tool_choice"] == "required" and sent["parallel_tool_calls"] is False
    assert sent["reasoning_effort"] == "low"


def test_reasoning_streams_to_a_messages_client_as_thinking(gateway: GatewayThread) -> None:
    with gateway.anthropic.messages.stream(
        model="a-one",
        max_tokens=64,
        messages=[{"role": "user", "content": "think"}],
        thinking={"type": "enabled", "budget_tokens": 20000},
    ) as stream:
        events = list(stream)
        message = stream.get_final_message()
    assert any(event.type == "thinking" for event in events)
    assert message.content[0].type == "thinking" and message.content[0].thinking == THINKING
    assert message.content[1].type == "text" and message.content[1].text == "Hello from primary"


def test_reasoning_returns_to_a_messages_client_as_a_thinking_block(gateway: GatewayThread) -> None:
    message = gateway.anthropic.messages.create(
        model="a-one",
        max_tokens=64,
        messages=[{"role": "user", "content": "think"}],
        thinking={"type": "enabled", "budget_tokens": 20000},
    )
    assert message.content[0].type == "thinking" and message.content[0].thinking == THINKING


# Effort levels, both ways.


@pytest.mark.parametrize("level", ["low", "medium", "high", "xhigh", "max"])
def test_output_config_effort_becomes_reasoning_effort(
    gateway: GatewayThread, primary: FakeProvider, level: Any
) -> None:
    message = gateway.anthropic.messages.create(
        model="a-one", max_tokens=64, messages=[{"role": "user", "content": "think"}], output_config={"effort": level}
    )
    assert primary.received[0].body["reasoning_effort"] == level
    assert "output_config" not in primary.received[0].body
    assert message.content[0].type == "thinking" and message.content[0].thinking == THINKING


def test_output_config_effort_wins_over_the_thinking_budget_streamed(
    gateway: GatewayThread, primary: FakeProvider
) -> None:
    with gateway.anthropic.messages.stream(
        model="a-one",
        max_tokens=64,
        messages=[{"role": "user", "content": "think"}],
        thinking={"type": "enabled", "budget_tokens": 1024},  # alone it would be `low`
        output_config={"effort": "high"},
    ) as stream:
        message = stream.get_final_message()
    assert primary.received[0].body["reasoning_effort"] == "high"
    assert message.content[1].type == "text" and message.content[1].text == "Hello from primary"


@pytest.mark.parametrize(
    ("effort", "level"),
    [("minimal", "low"), ("low", "low"), ("medium", "medium"), ("high", "high"), ("xhigh", "xhigh"), ("max", "max")],
)
def test_reasoning_effort_becomes_output_config_effort(
    gateway: GatewayThread, secondary: FakeProvider, effort: Any, level: str
) -> None:
    completion = gateway.openai.chat.completions.create(
        model="b-one", messages=[{"role": "user", "content": "think"}], reasoning_effort=effort
    )
    sent = secondary.received[0].body
    assert sent["output_config"] == {"effort": level}
    assert sent["thinking"]["type"] == "enabled" and sent["max_tokens"] > sent["thinking"]["budget_tokens"]
    assert completion.choices[0].message.content == "Hello from secondary"


def test_reasoning_effort_none_asks_a_messages_target_for_nothing(
    gateway: GatewayThread, secondary: FakeProvider
) -> None:
    gateway.openai.chat.completions.create(
        model="b-one", messages=[{"role": "user", "content": "hi"}], reasoning_effort="none"
    )
    sent = secondary.received[0].body
    assert "output_config" not in sent and "thinking" not in sent


def test_an_effort_level_without_a_counterpart_is_refused_both_ways(
    gateway: GatewayThread, primary: FakeProvider, secondary: FakeProvider
) -> None:
    messages = httpx.post(
        f"{gateway.url}/v1/messages",
        json={"model": "a-one", "max_tokens": 8, "messages": HI, "output_config": {"effort": "ultra"}},
    )
    assert messages.status_code == 400
    error = messages.json()["error"]
    assert error["code"] == "unsupported_parameter" and "`output_config.effort`" in error["message"]
    assert "'ultra'" in error["message"]
    chat = httpx.post(
        f"{gateway.url}/v1/chat/completions", json={"model": "b-one", "messages": HI, "reasoning_effort": "ultra"}
    )
    assert chat.status_code == 400
    assert chat.json()["error"]["code"] == "unsupported_parameter"
    assert chat.json()["error"]["param"] == "reasoning_effort" and "'ultra'" in chat.json()["error"]["message"]
    assert primary.received == [] and secondary.received == []


def test_other_output_config_fields_are_refused_by_path(gateway: GatewayThread, primary: FakeProvider) -> None:
    schema = {"type": "object", "properties": {"city": {"type": "string"}}}
    answer = httpx.post(
        f"{gateway.url}/v1/messages",
        json={
            "model": "a-one",
            "max_tokens": 8,
            "messages": HI,
            "output_config": {"effort": "low", "format": {"type": "json_schema", "schema": schema}},
        },
    )
    assert answer.status_code == 400 and "`output_config.format`" in answer.json()["error"]["message"]
    assert primary.received == []


def test_a_lenient_route_drops_an_effort_level_without_a_counterpart(
    gateway: GatewayThread, primary: FakeProvider
) -> None:
    answer = httpx.post(
        f"{gateway.url}/v1/messages",
        json={"model": "lenienta-one", "max_tokens": 8, "messages": HI, "output_config": {"effort": "ultra"}},
    )
    assert answer.status_code == 200
    assert answer.headers["x-gateway-dropped-params"] == "output_config.effort"
    assert "reasoning_effort" not in primary.received[0].body


# Refused and dropped.


@pytest.mark.parametrize(
    ("extra", "param"),
    [
        ({"seed": 1}, "seed"),
        ({"logprobs": True}, "logprobs"),
        ({"frequency_penalty": 0.5}, "frequency_penalty"),
        ({"presence_penalty": 0.5}, "presence_penalty"),
        ({"logit_bias": {"1": 2}}, "logit_bias"),
    ],
)
def test_a_field_a_messages_target_cannot_carry_is_refused_before_any_call(
    gateway: GatewayThread, secondary: FakeProvider, extra: dict[str, Any], param: str
) -> None:
    with pytest.raises(openai.BadRequestError) as raised:
        gateway.openai.chat.completions.create(model="b-one", messages=[{"role": "user", "content": "hi"}], **extra)
    error: Any = raised.value.body
    assert raised.value.status_code == 400 and error["code"] == "unsupported_parameter"
    assert error["param"] == param and param in error["message"]
    assert secondary.received == []


def test_an_audio_part_is_refused_naming_its_place(gateway: GatewayThread, secondary: FakeProvider) -> None:
    audio: Any = {"type": "input_audio", "input_audio": {"data": "AAAA", "format": "wav"}}
    with pytest.raises(openai.BadRequestError) as raised:
        gateway.openai.chat.completions.create(model="b-one", messages=[{"role": "user", "content": [audio]}])
    error: Any = raised.value.body
    assert error["code"] == "unsupported_parameter" and error["param"] == "messages[0].content[0]"
    assert error["message"].startswith("`messages[0].content[0]` (an input_audio part) cannot be carried")
    assert secondary.received == []


def test_a_lenient_route_drops_an_audio_part_and_keeps_the_rest(
    gateway: GatewayThread, secondary: FakeProvider
) -> None:
    audio: Any = {"type": "input_audio", "input_audio": {"data": "AAAA", "format": "wav"}}
    text: Any = {"type": "text", "text": "and this"}
    raw = gateway.openai.chat.completions.with_raw_response.create(
        model="lenient-one", messages=[{"role": "user", "content": [audio, text]}]
    )
    assert raw.headers["x-gateway-dropped-params"] == "input_audio"
    assert secondary.received[0].body["messages"] == [{"role": "user", "content": [text]}]


def test_top_k_is_refused_towards_a_chat_target(gateway: GatewayThread, primary: FakeProvider) -> None:
    with pytest.raises(anthropic.BadRequestError) as raised:
        gateway.anthropic.messages.create(
            model="a-one", max_tokens=8, messages=[{"role": "user", "content": "hi"}], extra_body={"top_k": 5}
        )
    error: Any = raised.value.body
    assert raised.value.status_code == 400
    assert error["error"]["code"] == "unsupported_parameter" and "top_k" in error["error"]["message"]
    assert primary.received == []


def test_a_url_document_is_refused_towards_a_chat_target(gateway: GatewayThread, primary: FakeProvider) -> None:
    text: Any = {"type": "text", "text": "read this"}
    document: Any = {"type": "document", "source": {"type": "url", "url": "https://example.com/a.pdf"}}
    with pytest.raises(anthropic.BadRequestError) as raised:
        gateway.anthropic.messages.create(
            model="a-one", max_tokens=8, messages=[{"role": "user", "content": [text, document]}]
        )
    error: Any = raised.value.body
    assert error["error"]["code"] == "unsupported_parameter"
    assert error["error"]["message"].startswith(
        "`messages[0].content[1].source` (a document block with a url source) cannot be carried"
    )
    assert primary.received == []


def test_a_lenient_route_drops_and_says_so(gateway: GatewayThread, secondary: FakeProvider) -> None:
    raw = gateway.openai.chat.completions.with_raw_response.create(
        model="lenient-one", messages=[{"role": "user", "content": "hi"}], seed=1, presence_penalty=0.1
    )
    assert set(raw.headers["x-gateway-dropped-params"].split(",")) == {"seed", "presence_penalty"}
    sent = secondary.received[0].body
    assert "seed" not in sent and "presence_penalty" not in sent
    streamed = gateway.openai.chat.completions.with_raw_response.create(
        model="lenient-one", messages=[{"role": "user", "content": "hi"}], seed=1, stream=True
    )
    assert streamed.headers["x-gateway-dropped-params"] == "seed"
    list(streamed.parse())
    clean = gateway.openai.chat.completions.with_raw_response.create(
        model="lenient-one", messages=[{"role": "user", "content": "hi"}]
    )
    assert "x-gateway-dropped-params" not in clean.headers


def test_a_lenient_route_drops_top_k_towards_chat(gateway: GatewayThread, primary: FakeProvider) -> None:
    raw = gateway.anthropic.messages.with_raw_response.create(
        model="lenienta-one", max_tokens=8, messages=[{"role": "user", "content": "hi"}], extra_body={"top_k": 3}
    )
    assert raw.headers["x-gateway-dropped-params"] == "top_k" and "top_k" not in primary.received[0].body


def test_strict_and_same_shape_routes_never_send_the_dropped_header(
    gateway: GatewayThread, primary: FakeProvider
) -> None:
    raw = gateway.openai.chat.completions.with_raw_response.create(
        model="a-one", messages=[{"role": "user", "content": "hi"}], seed=1
    )
    assert "x-gateway-dropped-params" not in raw.headers
    assert primary.received[0].body["seed"] == 1  # same shape: carried as sent


# Headers upstream.


def _post_messages(gateway: GatewayThread, model: str, headers: dict[str, str]) -> httpx.Response:
    body = {"model": model, "max_tokens": 8, "messages": [{"role": "user", "content": "hi"}]}
    return httpx.post(f"{gateway.url}/v1/messages", json=body, headers=headers)


def test_messages_targets_forward_beta_and_version_headers_by_default(
    gateway: GatewayThread, secondary: FakeProvider
) -> None:
    headers = {"anthropic-beta": "files-api-2025-04-14", "anthropic-version": "2023-06-01", "x-team": "blue"}
    answer = _post_messages(gateway, "b-one", headers)
    assert answer.status_code == 200
    sent = secondary.received[0].headers
    assert sent["anthropic-beta"] == "files-api-2025-04-14" and sent["anthropic-version"] == "2023-06-01"
    assert "x-team" not in sent


def test_forward_headers_replaces_the_default(gateway: GatewayThread, secondary: FakeProvider) -> None:
    headers = {"anthropic-beta": "b1", "anthropic-version": "2099-01-01", "x-team": "blue"}
    _post_messages(gateway, "fwd-one", headers)
    sent = secondary.received[0].headers
    assert sent["x-team"] == "blue" and sent["anthropic-beta"] == "b1"
    assert sent["anthropic-version"] == "2023-06-01"  # not forwarded: the adapter's own version stays


def test_an_empty_forward_headers_forwards_none(gateway: GatewayThread, secondary: FakeProvider) -> None:
    _post_messages(gateway, "none-one", {"anthropic-beta": "b1", "anthropic-version": "2099-01-01"})
    sent = secondary.received[0].headers
    assert "anthropic-beta" not in sent and sent["anthropic-version"] == "2023-06-01"


def test_chat_targets_forward_configured_headers(gateway: GatewayThread, primary: FakeProvider) -> None:
    body = {"model": "ahdr-one", "messages": [{"role": "user", "content": "hi"}]}
    httpx.post(f"{gateway.url}/v1/chat/completions", json=body, headers={"x-team": "red", "x-other": "no"})
    sent = primary.received[0].headers
    assert sent["x-team"] == "red" and "x-other" not in sent


@pytest.mark.parametrize("model", ["a-one", "b-one"])
def test_request_id_and_trace_context_go_upstream(
    gateway: GatewayThread, primary: FakeProvider, secondary: FakeProvider, model: str
) -> None:
    traced = httpx.post(
        f"{gateway.url}/v1/chat/completions",
        json={"model": model, "messages": [{"role": "user", "content": "hi"}]},
        headers={"traceparent": f"00-{TRACE_ID}-{CLIENT_SPAN}-01"},
    )
    untraced = httpx.post(
        f"{gateway.url}/v1/chat/completions", json={"model": model, "messages": [{"role": "user", "content": "hi"}]}
    )
    provider = primary if model.startswith("a") else secondary
    first, second = (received.headers for received in provider.received)
    assert first["x-request-id"] == traced.headers["x-request-id"]
    version, trace_id, span_id, flags = first["traceparent"].split("-")
    assert (version, trace_id, flags) == ("00", TRACE_ID, "01") and span_id != CLIENT_SPAN and len(span_id) == 16
    assert second["x-request-id"] == untraced.headers["x-request-id"] != first["x-request-id"]
    assert len(second["traceparent"].split("-")[1]) == 32  # a new trace when the client sent none
