"""Sans-IO tests of shape translation: requests, responses and streams, event by event, both ways."""

from __future__ import annotations

import json
from typing import Any

import orjson

from gatewayproxy.adapters import translate
from gatewayproxy.adapters.streams import (
    ChatPassthrough,
    ChatToMessages,
    MessagesPassthrough,
    MessagesToChat,
    ResponsesPassthrough,
    StreamTranslator,
)
from gatewayproxy.context import Usage
from gatewayproxy.http.sse import SseDecoder, SseEvent

PNG = "iVBORw0KGgo="


def frames_of(translator: StreamTranslator, events: list[SseEvent]) -> list[SseEvent]:
    """Feed events, finish, and decode what the client would receive."""
    raw = b"".join(frame for event in events for frame in translator.feed(event)) + b"".join(translator.finish())
    return SseDecoder().feed(raw)


def payloads(events: list[SseEvent]) -> list[Any]:
    return [json.loads(event.data) if event.data != "[DONE]" else "[DONE]" for event in events]


def test_chat_request_to_messages() -> None:
    converted = translate.chat_to_messages_request(
        {
            "model": "m",
            "temperature": 0.1,
            "stop": "END",
            "user": "u1",
            "max_completion_tokens": 50,
            "messages": [
                {"role": "system", "content": "rule one"},
                {"role": "developer", "content": [{"type": "text", "text": "rule two"}]},
                {
                    "role": "user",
                    "content": [
                        {"type": "text", "text": "look"},
                        {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{PNG}"}},
                        {"type": "image_url", "image_url": {"url": "https://x/y.png"}},
                    ],
                },
                {
                    "role": "assistant",
                    "content": "calling",
                    "tool_calls": [
                        {"id": "c1", "type": "function", "function": {"name": "f", "arguments": '{"a": 1}'}}
                    ],
                },
                {"role": "tool", "tool_call_id": "c1", "content": "r1"},
                {"role": "user", "content": "thanks"},
            ],
            "tools": [
                {"type": "function", "function": {"name": "f", "description": "d", "parameters": {"type": "object"}}}
            ],
            "tool_choice": {"type": "function", "function": {"name": "f"}},
            "parallel_tool_calls": False,
        },
        4096,
    )
    assert converted["system"] == "rule one\n\nrule two"
    assert converted["max_tokens"] == 50 and converted["stop_sequences"] == ["END"]
    assert converted["metadata"] == {"user_id": "u1"}
    user, assistant, results = converted["messages"]
    assert user["content"][1] == {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": PNG}}
    assert user["content"][2] == {"type": "image", "source": {"type": "url", "url": "https://x/y.png"}}
    assert assistant["content"] == [
        {"type": "text", "text": "calling"},
        {"type": "tool_use", "id": "c1", "name": "f", "input": {"a": 1}},
    ]
    assert results["content"] == [
        {"type": "tool_result", "tool_use_id": "c1", "content": "r1"},
        {"type": "text", "text": "thanks"},
    ]
    assert converted["tools"] == [{"name": "f", "description": "d", "input_schema": {"type": "object"}}]
    assert converted["tool_choice"] == {"type": "tool", "name": "f", "disable_parallel_tool_use": True}


def test_chat_tool_choice_words() -> None:
    tools = [{"type": "function", "function": {"name": "f"}}]
    for choice, expected in (("required", "any"), ("auto", "auto"), ("none", "none")):
        converted = translate.chat_to_messages_request(
            {"model": "m", "messages": [], "tools": tools, "tool_choice": choice}, 10
        )
        assert converted["tool_choice"] == {"type": expected}


def test_messages_request_to_chat() -> None:
    converted = translate.messages_to_chat_request(
        {
            "model": "m",
            "max_tokens": 20,
            "system": [{"type": "text", "text": "sys"}],
            "stop_sequences": ["X"],
            "metadata": {"user_id": "u"},
            "tool_choice": {"type": "any", "disable_parallel_tool_use": True},
            "tools": [{"name": "f", "description": "d", "input_schema": {"type": "object"}}],
            "messages": [
                {
                    "role": "user",
                    "content": [
                        {"type": "text", "text": "hi"},
                        {"type": "image", "source": {"type": "base64", "media_type": "image/jpeg", "data": PNG}},
                    ],
                },
                {
                    "role": "assistant",
                    "content": [
                        {"type": "thinking", "thinking": "hm"},
                        {"type": "text", "text": "ok"},
                        {"type": "tool_use", "id": "t1", "name": "f", "input": {"q": 2}},
                    ],
                },
                {
                    "role": "user",
                    "content": [
                        {"type": "tool_result", "tool_use_id": "t1", "content": [{"type": "text", "text": "done"}]},
                        {"type": "text", "text": "next"},
                    ],
                },
            ],
        }
    )
    assert converted["messages"][0] == {"role": "system", "content": "sys"}
    assert converted["messages"][1]["content"][1] == {
        "type": "image_url",
        "image_url": {"url": f"data:image/jpeg;base64,{PNG}"},
    }
    assert converted["messages"][2] == {
        "role": "assistant",
        "content": "ok",
        "tool_calls": [{"id": "t1", "type": "function", "function": {"name": "f", "arguments": '{"q": 2}'}}],
    }
    assert converted["messages"][3] == {"role": "tool", "tool_call_id": "t1", "content": "done"}
    assert converted["messages"][4] == {"role": "user", "content": [{"type": "text", "text": "next"}]}
    assert converted["tool_choice"] == "required" and converted["parallel_tool_calls"] is False
    assert converted["stop"] == ["X"] and converted["user"] == "u" and converted["max_tokens"] == 20


def test_messages_response_to_chat() -> None:
    chat = translate.messages_to_chat_response(
        {
            "id": "msg_1",
            "model": "m",
            "stop_reason": "tool_use",
            "content": [{"type": "text", "text": "let me"}, {"type": "tool_use", "id": "t", "name": "f", "input": {}}],
            "usage": {"input_tokens": 10, "output_tokens": 3, "cache_read_input_tokens": 5},
        }
    )
    choice = chat["choices"][0]
    assert choice["finish_reason"] == "tool_calls" and choice["message"]["content"] == "let me"
    assert choice["message"]["tool_calls"][0]["function"] == {"name": "f", "arguments": "{}"}
    assert chat["usage"] == {
        "prompt_tokens": 15,
        "completion_tokens": 3,
        "total_tokens": 18,
        "prompt_tokens_details": {"cached_tokens": 5},
    }


def test_chat_response_to_messages() -> None:
    for finish, stop in (
        ("stop", "end_turn"),
        ("length", "max_tokens"),
        ("tool_calls", "tool_use"),
        ("content_filter", "refusal"),
    ):
        message = translate.chat_to_messages_response(
            {
                "id": "c",
                "model": "m",
                "choices": [{"message": {"role": "assistant", "content": "x"}, "finish_reason": finish}],
                "usage": {"prompt_tokens": 9, "completion_tokens": 2, "prompt_tokens_details": {"cached_tokens": 4}},
            }
        )
        assert message["stop_reason"] == stop
    assert message["usage"] == {"input_tokens": 5, "output_tokens": 2, "cache_read_input_tokens": 4}
    assert message["content"] == [{"type": "text", "text": "x"}]


def chat_chunk(delta: dict, finish: str | None = None, **extra: Any) -> SseEvent:
    return SseEvent(
        "",
        orjson.dumps(
            {"id": "c1", "model": "m", "choices": [{"index": 0, "delta": delta, "finish_reason": finish}], **extra}
        ).decode(),
    )


def messages_event(kind: str, **body: Any) -> SseEvent:
    return SseEvent(kind, orjson.dumps({"type": kind, **body}).decode())


USAGE_CHUNK = SseEvent("", '{"id":"c1","choices":[],"usage":{"prompt_tokens":4,"completion_tokens":2}}')
MESSAGES_TEXT_STREAM = [
    messages_event("message_start", message={"id": "msg_1", "model": "m", "usage": {"input_tokens": 7}}),
    messages_event("content_block_start", index=0, content_block={"type": "text", "text": ""}),
    messages_event("content_block_delta", index=0, delta={"type": "text_delta", "text": "Hi"}),
    messages_event("content_block_stop", index=0),
    messages_event(
        "content_block_start", index=1, content_block={"type": "tool_use", "id": "t1", "name": "f", "input": {}}
    ),
    messages_event("content_block_delta", index=1, delta={"type": "input_json_delta", "partial_json": '{"a"'}),
    messages_event("content_block_delta", index=1, delta={"type": "input_json_delta", "partial_json": ":1}"}),
    messages_event("content_block_stop", index=1),
    messages_event("message_delta", delta={"stop_reason": "tool_use"}, usage={"output_tokens": 3}),
    messages_event("message_stop"),
]


def test_chat_passthrough_strips_usage_it_added() -> None:
    translator = ChatPassthrough(client_wants_usage=False)
    out = payloads(
        frames_of(
            translator, [chat_chunk({"content": "a"}), chat_chunk({}, "stop"), USAGE_CHUNK, SseEvent("", "[DONE]")]
        )
    )
    assert out[-1] == "[DONE]" and len(out) == 3
    assert translator.usage == Usage(input_tokens=4, output_tokens=2)
    keeps = ChatPassthrough(client_wants_usage=True)
    assert len(frames_of(keeps, [USAGE_CHUNK, SseEvent("", "[DONE]")])) == 2


def test_chat_passthrough_counts_relayed_text_whether_deferred_or_folded() -> None:
    """Content frames relayed untouched are counted on demand, and folded once they hold enough bytes."""
    translator = ChatPassthrough(client_wants_usage=False)
    translator.DEFERRED_BYTES = 1000
    texts = [f"word{index} " for index in range(40)]  # about 4 KB of frames: folds several times
    frames_of(translator, [chat_chunk({"content": text}) for text in texts])
    assert 0 < len(translator._deferred) < 40
    assert translator.text_chars == sum(map(len, texts))
    assert translator._deferred == []
    inspected = ChatPassthrough(client_wants_usage=False)
    inspected.collect_text = True
    frames_of(inspected, [chat_chunk({"content": text}) for text in texts])
    assert inspected.take_text() == "".join(texts) and inspected.text_chars == sum(map(len, texts))


def test_truncated_chat_stream_ends_with_an_error_chunk() -> None:
    out = payloads(frames_of(ChatPassthrough(False), [chat_chunk({"content": "a"})]))
    assert out[-1]["error"]["code"] == "upstream_error"


def test_messages_stream_to_chat_chunks() -> None:
    translator = MessagesToChat(client_wants_usage=True, model="m")
    out = payloads(frames_of(translator, MESSAGES_TEXT_STREAM))
    deltas = [chunk["choices"][0]["delta"] for chunk in out[:-2]]
    assert deltas[0] == {"role": "assistant", "content": ""} and deltas[1] == {"content": "Hi"}
    assert deltas[2]["tool_calls"][0] == {
        "index": 0,
        "id": "t1",
        "type": "function",
        "function": {"name": "f", "arguments": ""},
    }
    arguments = "".join(d["tool_calls"][0]["function"]["arguments"] for d in deltas[2:] if "tool_calls" in d)
    assert json.loads(arguments) == {"a": 1}
    assert out[-3]["choices"][0]["finish_reason"] == "tool_calls"
    assert out[-2]["usage"] == {
        "prompt_tokens": 7,
        "completion_tokens": 3,
        "total_tokens": 10,
        "prompt_tokens_details": {"cached_tokens": 0},
    }
    assert out[-1] == "[DONE]"
    assert translator.usage == Usage(input_tokens=7, output_tokens=3)


def test_messages_error_event_becomes_a_chat_error() -> None:
    out = payloads(
        frames_of(
            MessagesToChat(False, "m"),
            [MESSAGES_TEXT_STREAM[0], messages_event("error", error={"type": "overloaded_error", "message": "busy"})],
        )
    )
    assert out[-1]["error"]["message"] == "busy"


def test_chat_stream_to_messages_events() -> None:
    translator = ChatToMessages(model="m")
    events = frames_of(
        translator,
        [
            chat_chunk({"role": "assistant", "content": ""}),
            chat_chunk({"content": "Hi"}),
            chat_chunk(
                {
                    "tool_calls": [
                        {"index": 0, "id": "c9", "type": "function", "function": {"name": "f", "arguments": '{"a"'}}
                    ]
                }
            ),
            chat_chunk({"tool_calls": [{"index": 0, "function": {"arguments": ":1}"}}]}),
            chat_chunk({}, "tool_calls"),
            USAGE_CHUNK,
            SseEvent("", "[DONE]"),
        ],
    )
    kinds = [event.event for event in events]
    assert kinds == [
        "message_start",
        "content_block_start",
        "content_block_delta",
        "content_block_stop",
        "content_block_start",
        "content_block_delta",
        "content_block_delta",
        "content_block_stop",
        "message_delta",
        "message_stop",
    ]
    bodies = payloads(events)
    assert bodies[4]["content_block"] == {"type": "tool_use", "id": "c9", "name": "f", "input": {}}
    assert "".join(b["delta"]["partial_json"] for b in bodies[5:7]) == '{"a":1}'
    assert bodies[8]["delta"]["stop_reason"] == "tool_use"
    assert bodies[8]["usage"] == {"output_tokens": 2, "input_tokens": 4}
    assert translator.usage == Usage(input_tokens=4, output_tokens=2)


def test_truncated_messages_stream_ends_with_an_error_event() -> None:
    for translator in (MessagesPassthrough(), ChatToMessages("m")):
        events = frames_of(
            translator,
            [chat_chunk({"content": "a"})] if isinstance(translator, ChatToMessages) else MESSAGES_TEXT_STREAM[:3],
        )
        assert events[-1].event == "error"
        assert json.loads(events[-1].data)["error"]["code"] == "upstream_error"


def test_messages_passthrough_accounts_usage() -> None:
    translator = MessagesPassthrough()
    events = frames_of(translator, MESSAGES_TEXT_STREAM)
    assert [event.event for event in events] == [event.event for event in MESSAGES_TEXT_STREAM]
    assert translator.usage == Usage(input_tokens=7, output_tokens=3)


def test_responses_passthrough() -> None:
    translator = ResponsesPassthrough()
    completed = SseEvent(
        "response.completed", '{"type":"response.completed","response":{"usage":{"input_tokens":2,"output_tokens":5}}}'
    )
    assert frames_of(translator, [completed])[0].event == "response.completed"
    assert translator.usage == Usage(input_tokens=2, output_tokens=5)
    broken = frames_of(ResponsesPassthrough(), [SseEvent("response.created", '{"type":"response.created"}')])
    assert broken[-1].event == "error" and json.loads(broken[-1].data)["code"] == "upstream_error"
