"""Turns of the default harness end to end: text, previews, custom tools, MCP tools and confirmations."""

from __future__ import annotations

import socket
import threading
from types import SimpleNamespace
from typing import Any

import httpx
import jwt
import pytest

from fakes import model as replies
from fakes.waiting import wait_until
from tests.support.runtime.sessions import MODEL, WEATHER_TOOL, of_type, shop_agent, stop_reasons, text_of, transcript

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]


def test_text_turn(model, open_session):
    model.add(replies.thinking_then_text("Let me think.", "Hello there!"))
    chat = open_session(system="Be brief.")
    sent = chat.say("hi")
    events = chat.wait_idle()

    assert [event["type"] for event in events] == [
        "user.message",
        "session.status_running",
        "agent.thinking",
        "agent.message",
        "session.status_idle",
    ]
    assert events[0]["id"] == sent and events[0]["processed_at"]
    assert of_type(events, "agent.message")[0]["content"] == [{"type": "text", "text": "Hello there!"}]
    assert stop_reasons(events) == ["end_turn"]

    request = model.requests[0]
    token = request.headers["authorization"].removeprefix("Bearer ")
    keys = jwt.PyJWKSet.from_dict(httpx.get(f"{str(chat.sdk.base_url).rstrip('/')}/.well-known/jwks.json").json())
    key = keys[jwt.get_unverified_header(token)["kid"]]
    claims = jwt.decode(token, key=key, algorithms=["ES256"], audience="ai-gateway", issuer="agent-registry")
    assert claims["session"] == chat.session_id and claims["workspace"].startswith("wsp_")
    assert claims["exp"] - claims["iat"] == 300
    assert request.body["model"] == MODEL and request.body["stream"] is True
    # Prompt-cache breakpoints: the system prompt, and the end of the transcript prefix.
    breakpoint_ = {"type": "ephemeral"}
    assert request.body["system"] == [{"type": "text", "text": "Be brief.", "cache_control": breakpoint_}]
    assert request.body["messages"] == [
        {"role": "user", "content": [{"type": "text", "text": "hi", "cache_control": breakpoint_}]}
    ]
    assert "tools" not in request.body

    session = chat.session()
    assert session["status"] == "idle" and session["stop_reason"] == {"type": "end_turn"}
    assert session["usage"]["input_tokens"] == 11 and session["usage"]["output_tokens"] == 7
    assert session["usage"]["cache_read_input_tokens"] == 2
    assert session["usage"]["cache_creation"]["ephemeral_5m_input_tokens"] == 3
    assert session["stats"]["active_seconds"] > 0


def test_model_request_spans_are_native_only(model, open_session):
    model.add(replies.text("ok"))
    chat = open_session()
    chat.say("hi")
    native = chat.wait_idle(native=True)
    start, end = of_type(native, "span.model_request_start"), of_type(native, "span.model_request_end")
    assert len(start) == len(end) == 1 and end[0]["model_request_start_id"] == start[0]["id"]
    assert end[0]["model_usage"]["output_tokens"] == 7 and end[0]["is_error"] is False
    assert all(event["seq"] for event in native)
    assert not [event for event in chat.events() if event["type"].startswith("span.")]


def test_deltas_preview_the_message_with_its_final_id(model, open_session):
    answer = "The quick brown fox jumps over the lazy dog."
    model.add(replies.text(answer, delay=0.5, chunks=6, chunk_delay=0.02))
    chat = open_session()
    frames: list[Any] = []
    with chat.sdk.beta.sessions.events.stream(chat.session_id, event_deltas=["agent.message"]) as stream:
        chat.say("tell me")
        for frame in stream:
            frames.append(frame)
            if frame.type == "session.status_idle":
                break

    kinds = [frame.type for frame in frames]
    start = next(frame for frame in frames if frame.type == "event_start")
    deltas = [frame for frame in frames if frame.type == "event_delta"]
    message = next(frame for frame in frames if frame.type == "agent.message")
    assert start.event.type == "agent.message" and start.event.id == message.id
    assert len(deltas) == 6 and all(delta.event_id == message.id for delta in deltas)
    assert "".join(delta.delta.content.text for delta in deltas) == answer == message.content[0].text
    assert kinds.index("event_start") < kinds.index("event_delta") < kinds.index("agent.message")
    assert "event_start" not in [event["type"] for event in chat.events()]  # previews are never stored


def test_message_sent_during_a_turn_applies_at_the_next_boundary(model, open_session):
    model.add(replies.text("first answer", chunks=10, chunk_delay=0.1), replies.text("second answer"))
    chat = open_session()
    chat.say("one")
    wait_until(lambda: len(model.requests) == 1, what="the first model call")
    chat.say("two")
    events = chat.wait_idle(2)

    assert [text_of(event) for event in events if event["type"] in ("user.message", "agent.message")] == [
        "one",
        "first answer",
        "two",
        "second answer",
    ]
    assert stop_reasons(events) == ["end_turn", "end_turn"]
    assert transcript(model.requests[1].body) == [
        {"role": "user", "content": [{"type": "text", "text": "one"}]},
        {"role": "assistant", "content": [{"type": "text", "text": "first answer"}]},
        {"role": "user", "content": [{"type": "text", "text": "two"}]},
    ]


def test_custom_tool_cycle(model, open_session):
    model.add(replies.tool_call("get_weather", {"city": "Paris"}, preface="Checking."), replies.text("It rains."))
    chat = open_session(tools=[WEATHER_TOOL])
    chat.say("weather in Paris?")
    events = chat.wait_idle()

    call = of_type(events, "agent.custom_tool_use")[0]
    assert call["name"] == "get_weather" and call["input"] == {"city": "Paris"}
    idle = of_type(events, "session.status_idle")[0]
    assert idle["stop_reason"] == {"type": "requires_action", "event_ids": [call["id"]]}
    assert chat.session()["status"] == "idle"
    assert model.requests[0].body["tools"] == [
        {"name": "get_weather", "description": "The weather in a city.", "input_schema": WEATHER_TOOL["input_schema"]}
    ]

    result = [{"type": "text", "text": "station offline"}]
    chat.send(
        {"type": "user.custom_tool_result", "custom_tool_use_id": call["id"], "content": result, "is_error": True}
    )
    events = chat.wait_idle(2)
    assert stop_reasons(events) == ["requires_action", "end_turn"]
    assert text_of(of_type(events, "agent.message")[-1]) == "It rains."
    assert transcript(model.requests[1].body)[1:] == [
        {
            "role": "assistant",
            "content": [
                {"type": "text", "text": "Checking."},
                {"type": "tool_use", "id": call["id"], "name": "get_weather", "input": {"city": "Paris"}},
            ],
        },
        {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": call["id"], "is_error": True, "content": result}],
        },
    ]


def test_mcp_tool_cycle(model, open_session, shop):
    model.add(replies.tool_call("lookup_order", {"order_id": "A1"}), replies.text("Order A1 has shipped."))
    chat = open_session(**shop_agent(shop))
    chat.say("where is A1?")
    events = chat.wait_idle()

    use, result = of_type(events, "agent.mcp_tool_use")[0], of_type(events, "agent.mcp_tool_result")[0]
    assert use["name"] == "lookup_order" and use["input"] == {"order_id": "A1"}
    assert use["mcp_server_name"] == "shop" and use["evaluated_permission"] == "allow"
    assert result["mcp_tool_use_id"] == use["id"] and result["is_error"] is False
    assert result["content"] == [{"type": "text", "text": "order A1: shipped"}]
    assert shop.calls == [("lookup_order", {"order_id": "A1"})]
    assert stop_reasons(events) == ["end_turn"]
    offered = {tool["name"]: tool for tool in model.requests[0].body["tools"]}
    assert set(offered) == {"lookup_order", "cancel_order"}
    assert offered["lookup_order"]["input_schema"]["required"] == ["order_id"]
    assert transcript(model.requests[1].body)[-1]["content"] == [
        {"type": "tool_result", "tool_use_id": use["id"], "is_error": False, "content": result["content"]}
    ]


def test_mcp_calls_authenticate_with_the_sessions_vault(model, open_session, shop, sdk):
    vault = sdk.beta.vaults.create(display_name="shop keys")
    sdk.beta.vaults.credentials.create(
        vault.id, auth={"type": "static_bearer", "token": "shop-secret-token", "mcp_server_url": shop.url}
    )
    shop.authorizations.clear()
    model.add(replies.tool_call("lookup_order", {"order_id": "B2"}), replies.text("B2 shipped."))
    chat = open_session(vault_ids=[vault.id], **shop_agent(shop))
    chat.say("where is B2?")
    events = chat.wait_idle()

    assert of_type(events, "agent.mcp_tool_result")[0]["is_error"] is False
    assert shop.authorizations and set(shop.authorizations) == {"Bearer shop-secret-token"}
    assert "shop-secret-token" not in str(events)  # the model and the client never see it
    assert all("shop-secret-token" not in str(request.body) for request in model.requests)


def test_failing_mcp_tool_reports_an_error_result(model, open_session, shop):
    model.add(replies.tool_call("cancel_order", {"order_id": "A1"}), replies.text("Could not cancel."))
    chat = open_session(**shop_agent(shop))
    chat.say("cancel A1")
    events = chat.wait_idle()
    result = of_type(events, "agent.mcp_tool_result")[0]
    assert result["is_error"] is True and shop.calls == [("cancel_order", {"order_id": "A1"})]
    assert stop_reasons(events) == ["end_turn"]


@pytest.mark.parametrize("answer", ["allow", "deny"])
def test_always_ask_pauses_until_confirmed(model, open_session, shop, answer):
    model.add(replies.tool_call("lookup_order", {"order_id": "B2"}), replies.text("Done."))
    ask = [{"name": "lookup_order", "permission_policy": {"type": "always_ask"}}]
    chat = open_session(**shop_agent(shop, configs=ask))
    chat.say("where is B2?")
    events = chat.wait_idle()

    use = of_type(events, "agent.mcp_tool_use")[0]
    assert use["evaluated_permission"] == "ask"
    assert of_type(events, "session.status_idle")[0]["stop_reason"] == {
        "type": "requires_action",
        "event_ids": [use["id"]],
    }
    assert shop.calls == [] and len(model.requests) == 1

    confirmation = {"type": "user.tool_confirmation", "tool_use_id": use["id"], "result": answer}
    if answer == "deny":
        confirmation["deny_message"] = "not today"
    chat.send(confirmation)
    events = chat.wait_idle(2)

    result = of_type(events, "agent.mcp_tool_result")[0]
    assert result["mcp_tool_use_id"] == use["id"] and stop_reasons(events) == ["requires_action", "end_turn"]
    if answer == "allow":
        assert shop.calls == [("lookup_order", {"order_id": "B2"})] and result["is_error"] is False
    else:
        assert shop.calls == [] and result["is_error"] is True
        assert result["content"] == [{"type": "text", "text": "not today"}]
    assert model.requests[1].body["messages"][-1]["content"][0]["is_error"] is (answer == "deny")


def test_toolset_default_asks_and_built_in_tools_are_offered_beside_mcp_tools(model, open_session, shop):
    model.add(replies.tool_call("lookup_order", {"order_id": "C3"}))
    agent = shop_agent(shop, policy="always_ask")
    agent["tools"].append({"type": "agent_toolset_20260401"})
    chat = open_session(**agent)
    chat.say("where is C3?")
    events = chat.wait_idle()
    assert of_type(events, "agent.mcp_tool_use")[0]["evaluated_permission"] == "ask"
    offered = {tool["name"] for tool in model.requests[0].body["tools"]}
    builtin = {"bash", "read", "write", "edit", "glob", "grep", "web_fetch"}  # web_search: no search URL here
    assert offered == {"lookup_order", "cancel_order", *builtin}


def test_two_workers_share_sessions(model, open_session):
    model.add(*[replies.text("answer", delay=0.5) for _ in range(4)])
    chats = [open_session() for _ in range(4)]
    threads = [threading.Thread(target=chat.say, args=("go",)) for chat in chats]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for chat in chats:
        assert stop_reasons(chat.wait_idle()) == ["end_turn"]
    assert len(model.requests) == 4 and model.most_in_flight == 4  # a worker runs many sessions at once


def test_an_empty_answer_ends_the_turn(model, open_session):
    model.add(replies.Reply(blocks=[]))
    chat = open_session()
    chat.say("say nothing")
    events = chat.wait_idle()
    assert stop_reasons(events) == ["end_turn"] and of_type(events, "agent.message") == []
    assert len(model.requests) == 1


def test_unreachable_mcp_server_is_reported_and_the_turn_goes_on(model, open_session):
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as bound:  # bound, never listening: refused
        bound.bind(("127.0.0.1", 0))
        host, port = bound.getsockname()
        model.add(replies.text("No tools today."))
        chat = open_session(**shop_agent(SimpleNamespace(url=f"http://{host}:{port}/mcp")))
        chat.say("where is my order?")
        events = chat.wait_idle(timeout=40)
    error = of_type(events, "session.error")[0]["error"]
    assert error["type"] == "mcp_connection_failed_error" and error["mcp_server_name"] == "shop"
    assert text_of(of_type(events, "agent.message")[0]) == "No tools today." and stop_reasons(events) == ["end_turn"]
    assert "tools" not in model.requests[0].body
