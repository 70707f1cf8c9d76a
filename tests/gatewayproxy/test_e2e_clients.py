"""End to end with the official clients: chat and messages, JSON and streams, both destination shapes."""

from __future__ import annotations

import json
from typing import Any

import anthropic
import openai
import pytest

from tests.support.gateway.documents import two_shapes
from tests.support.gateway.provider import TOOL_ARGUMENTS, FakeProvider
from tests.support.gateway.requests import chat_tool_turn
from tests.support.gateway.thread import GatewayFactory, GatewayThread

pytestmark = pytest.mark.e2e
HI: Any = [{"role": "user", "content": "hi"}]
WEATHER_TOOL_A: Any = {
    "type": "function",
    "function": {
        "name": "weather",
        "description": "Weather of a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
    },
}
WEATHER_TOOL_B: Any = {
    "name": "weather",
    "description": "Weather of a city",
    "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}},
}


@pytest.fixture(scope="module")
def gateway(
    module_gateway_factory: GatewayFactory, primary: FakeProvider, secondary: FakeProvider, provider_keys: None
) -> GatewayThread:
    """Models `a-*` go to a chat-shaped destination, `b-*` to a messages-shaped one."""
    shape_b = {"model_map": {"b-small": "provider-b-small-v1"}}
    return module_gateway_factory(two_shapes(primary.url, secondary.url, shape_b=shape_b))


def test_chat_to_chat_destination_json(gateway: GatewayThread, primary: FakeProvider) -> None:
    completion = gateway.openai.chat.completions.create(model="a-large", messages=[{"role": "user", "content": "hi"}])
    assert completion.choices[0].message.content == "Hello from primary"
    assert completion.usage is not None and completion.usage.prompt_tokens == 11
    sent = primary.received[0]
    assert sent.path == "/v1/chat/completions"
    assert sent.headers["authorization"] == "Bearer provider-a-key"


def chat_chunks(gateway: GatewayThread, model: str, **options: Any) -> list[Any]:
    """The chunks of a chat completion of `hi` streamed to the vendor-A client."""
    return list(gateway.openai.chat.completions.create(model=model, messages=HI, stream=True, **options))


def text_of(chunks: list[Any]) -> str:
    return "".join(chunk.choices[0].delta.content or "" for chunk in chunks if chunk.choices)


def test_chat_stream_hides_usage_the_client_did_not_ask_for(gateway: GatewayThread, primary: FakeProvider) -> None:
    chunks = chat_chunks(gateway, "a-large")
    assert text_of(chunks) == "Hello from primary"
    assert all(chunk.usage is None for chunk in chunks)
    assert primary.received[0].body["stream_options"] == {"include_usage": True}
    assert 'gateway_tokens_total{destination="shape_a",direction="input"}' in gateway.metrics_text


def test_chat_stream_keeps_usage_the_client_asked_for(gateway: GatewayThread) -> None:
    chunks = chat_chunks(gateway, "a-large", stream_options={"include_usage": True})
    assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens == 7


def test_messages_to_messages_destination_json(gateway: GatewayThread, secondary: FakeProvider) -> None:
    message = gateway.anthropic.messages.create(
        model="b-small", max_tokens=64, messages=[{"role": "user", "content": "hi"}]
    )
    assert message.content[0].type == "text" and message.content[0].text == "Hello from secondary"
    sent = secondary.received[0]
    assert sent.path == "/v1/messages"
    assert sent.headers["x-api-key"] == "provider-b-key"
    # The client's own API version goes upstream (a messages-shaped destination forwards it by default).
    assert sent.headers["anthropic-version"] == gateway.anthropic.default_headers["anthropic-version"]
    assert "authorization" not in sent.headers
    assert sent.body["model"] == "provider-b-small-v1"


def messages_stream(gateway: GatewayThread, model: str) -> tuple[str, Any]:
    """The text of a message to `hi` streamed to the vendor-B client, and the final message."""
    with gateway.anthropic.messages.stream(model=model, max_tokens=64, messages=HI) as stream:
        return "".join(stream.text_stream), stream.get_final_message()


def test_messages_stream_to_messages_destination(gateway: GatewayThread) -> None:
    text, final = messages_stream(gateway, "b-small")
    assert text == "Hello from secondary"
    assert final.usage.output_tokens == 5


def test_chat_client_on_messages_destination(gateway: GatewayThread, secondary: FakeProvider) -> None:
    completion = gateway.openai.chat.completions.create(
        model="b-small", messages=[{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"}]
    )
    assert completion.choices[0].message.content == "Hello from secondary"
    assert completion.choices[0].finish_reason == "stop"
    assert completion.usage is not None and completion.usage.prompt_tokens == 13
    sent = secondary.received[0].body
    assert sent["system"] == "be brief"
    assert sent["messages"] == [{"role": "user", "content": [{"type": "text", "text": "hi"}]}]
    assert sent["max_tokens"] == 4096


def test_messages_client_on_chat_destination(gateway: GatewayThread, primary: FakeProvider) -> None:
    message = gateway.anthropic.messages.create(
        model="a-large", max_tokens=64, system="be brief", messages=[{"role": "user", "content": "hi"}]
    )
    assert message.content[0].type == "text" and message.content[0].text == "Hello from primary"
    assert message.stop_reason == "end_turn"
    assert message.usage.input_tokens == 11
    assert primary.received[0].body["messages"][0] == {"role": "system", "content": "be brief"}


def test_chat_stream_from_messages_destination(gateway: GatewayThread) -> None:
    chunks = chat_chunks(gateway, "b-small", stream_options={"include_usage": True})
    assert text_of(chunks) == "Hello from secondary"
    finishes = [chunk.choices[0].finish_reason for chunk in chunks if chunk.choices and chunk.choices[0].finish_reason]
    assert finishes == ["stop"]
    assert chunks[-1].usage is not None and chunks[-1].usage.prompt_tokens == 13


def test_messages_stream_from_chat_destination(gateway: GatewayThread) -> None:
    text, final = messages_stream(gateway, "a-large")
    assert text == "Hello from primary"
    assert final.stop_reason == "end_turn"
    assert final.usage.output_tokens == 7


@pytest.mark.parametrize("model", ["a-large", "b-small"])
def test_tool_call_from_chat_client(gateway: GatewayThread, model: str) -> None:
    completion = gateway.openai.chat.completions.create(
        model=model, messages=[{"role": "user", "content": "weather in Paris?"}], tools=[WEATHER_TOOL_A]
    )
    call: Any = completion.choices[0].message.tool_calls[0]  # type: ignore[index]
    assert completion.choices[0].finish_reason == "tool_calls"
    assert call.function.name == "weather" and json.loads(call.function.arguments) == TOOL_ARGUMENTS


@pytest.mark.parametrize("model", ["a-large", "b-small"])
def test_tool_call_stream_from_chat_client(gateway: GatewayThread, model: str) -> None:
    chunks: list[Any] = list(
        gateway.openai.chat.completions.create(
            model=model, messages=[{"role": "user", "content": "weather?"}], tools=[WEATHER_TOOL_A], stream=True
        )
    )
    calls = [call for chunk in chunks if chunk.choices for call in chunk.choices[0].delta.tool_calls or []]
    assert calls[0].function is not None and calls[0].function.name == "weather"
    arguments = "".join(call.function.arguments or "" for call in calls if call.function)
    assert json.loads(arguments) == TOOL_ARGUMENTS
    assert chunks[-1].choices[0].finish_reason == "tool_calls"


@pytest.mark.parametrize("model", ["a-large", "b-small"])
def test_tool_use_from_messages_client(gateway: GatewayThread, model: str) -> None:
    message = gateway.anthropic.messages.create(
        model=model, max_tokens=64, messages=[{"role": "user", "content": "weather?"}], tools=[WEATHER_TOOL_B]
    )
    block = message.content[0]
    assert message.stop_reason == "tool_use"
    assert block.type == "tool_use" and block.name == "weather" and block.input == TOOL_ARGUMENTS


@pytest.mark.parametrize("model", ["a-large", "b-small"])
def test_tool_use_stream_from_messages_client(gateway: GatewayThread, model: str) -> None:
    with gateway.anthropic.messages.stream(
        model=model, max_tokens=64, messages=[{"role": "user", "content": "weather?"}], tools=[WEATHER_TOOL_B]
    ) as stream:
        final = stream.get_final_message()
    block = final.content[0]
    assert final.stop_reason == "tool_use"
    assert block.type == "tool_use" and block.input == TOOL_ARGUMENTS


def test_tool_results_translate_to_messages_shape(gateway: GatewayThread, secondary: FakeProvider) -> None:
    gateway.openai.chat.completions.create(
        model="b-small",
        messages=[
            {"role": "user", "content": "weather?"},
            *chat_tool_turn("call_9", "weather", '{"city": "Oslo"}', "cold"),
        ],
    )
    messages = secondary.received[0].body["messages"]
    assert messages[1] == {
        "role": "assistant",
        "content": [{"type": "tool_use", "id": "call_9", "name": "weather", "input": {"city": "Oslo"}}],
    }
    assert messages[2] == {
        "role": "user",
        "content": [{"type": "tool_result", "tool_use_id": "call_9", "content": "cold"}],
    }


def test_embeddings(gateway: GatewayThread, primary: FakeProvider) -> None:
    result = gateway.openai.embeddings.create(model="a-embed", input="hello")
    assert result.data[0].embedding == [0.1, 0.2]
    assert primary.received[0].path == "/v1/embeddings"


def test_embeddings_need_a_chat_shaped_destination(gateway: GatewayThread) -> None:
    with pytest.raises(openai.NotFoundError) as raised:
        gateway.openai.embeddings.create(model="b-embed", input="hello")
    assert raised.value.code == "no_route"


def test_responses_json_and_stream(gateway: GatewayThread, primary: FakeProvider) -> None:
    client = gateway.openai
    response = client.responses.create(model="a-large", input="hi")
    assert response.output_text == "Hello from primary"
    events = [event.type for event in client.responses.create(model="a-large", input="hi", stream=True)]
    assert events[-1] == "response.completed"
    assert primary.received[0].path == "/v1/responses"


def test_responses_refuse_a_messages_destination(gateway: GatewayThread) -> None:
    with pytest.raises(openai.NotFoundError) as raised:
        gateway.openai.responses.create(model="b-small", input="hi")
    assert raised.value.code == "no_route"


def test_models_lists_concrete_models(gateway: GatewayThread) -> None:
    assert [model.id for model in gateway.openai.models.list()] == ["b-small"]


def test_unknown_model_is_no_route_in_each_protocol(gateway: GatewayThread) -> None:
    with pytest.raises(openai.NotFoundError) as from_a:
        gateway.openai.chat.completions.create(model="zzz", messages=[{"role": "user", "content": "hi"}])
    assert from_a.value.code == "no_route"
    with pytest.raises(anthropic.NotFoundError) as from_b:
        gateway.anthropic.messages.create(model="zzz", max_tokens=5, messages=[{"role": "user", "content": "hi"}])
    assert from_b.value.body["error"]["code"] == "no_route"  # type: ignore[index]
    assert from_b.value.body["type"] == "error"  # type: ignore[index]
