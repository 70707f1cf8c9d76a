"""One trace per turn, end to end: the client's `traceparent` on `POST /v1/sessions/{id}/events` reaches the
registry's request span, the runtime's `session.turn`, its tool and model calls, and the model server.
The registry (daphne) and the worker export to a fake OTLP collector; the fake model stands in for the gateway.
"""

from __future__ import annotations

from typing import Any

import anthropic

from fakes import model as replies
from fakes.model import FakeModel
from fakes.waiting import wait_until
from tests.support.mcp_servers import ShopMcpServer
from tests.support.otlp_collector import FakeCollector, ReceivedSpan
from tests.support.runtime.sessions import MODEL, shop_agent

CLIENT_TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
CLIENT_SPAN = "00f067aa0ba902b7"
SERVER, CLIENT = 2, 3  # OTLP span kinds


def by_name(spans: list[ReceivedSpan], name: str) -> list[ReceivedSpan]:
    return [span for span in spans if span.name == name]


def test_the_clients_trace_runs_through_the_turn_to_the_model(
    model: FakeModel, sdk: anthropic.Anthropic, collector: FakeCollector, shop: ShopMcpServer
) -> None:
    model.add(replies.tool_call("lookup_order", {"order_id": "A1"}), replies.text("A1 has shipped."))
    agent = sdk.beta.agents.create(name="traced", model=MODEL, **shop_agent(shop))
    environment = sdk.beta.environments.create(name="env")
    session = sdk.beta.sessions.create(agent=agent.id, environment_id=environment.id)
    message: Any = {"type": "user.message", "content": [{"type": "text", "text": "where is A1?"}]}
    sdk.beta.sessions.events.send(
        session.id, events=[message], extra_headers={"traceparent": f"00-{CLIENT_TRACE}-{CLIENT_SPAN}-01"}
    )

    def whole_turn() -> list[ReceivedSpan] | None:
        spans = collector.in_trace(CLIENT_TRACE)
        return spans if by_name(spans, "session.turn") and len(by_name(spans, "model.call")) == 2 else None

    spans = wait_until(whole_turn, what="the turn's spans at the collector")
    [request] = by_name(spans, "POST /v1/sessions/{id}/events")
    [turn] = by_name(spans, "session.turn")
    [tool] = by_name(spans, "tool.lookup_order")
    calls = by_name(spans, "model.call")

    assert (request.service, request.kind, request.parent_span_id) == ("registry-api", SERVER, CLIENT_SPAN)
    assert request.attributes["http.route"] == "/v1/sessions/{id}/events"
    assert request.attributes["http.response.status_code"] == 200
    assert (turn.service, turn.parent_span_id) == ("registry-runtime", request.span_id)
    assert turn.attributes == {"session.id": session.id, "registry.stop_reason": "end_turn"}
    assert (tool.service, tool.parent_span_id) == ("registry-runtime", turn.span_id)
    for call in calls:
        assert (call.service, call.kind, call.parent_span_id) == ("registry-runtime", CLIENT, turn.span_id)
        assert call.attributes["gen_ai.request.model"] == MODEL
    # What the gateway would continue: the trace id, with the model call's span as the parent.
    sent = [recorded.headers["traceparent"] for recorded in model.requests]
    assert sent == [f"00-{CLIENT_TRACE}-{call.span_id}-01" for call in calls]

    listed = sdk.beta.sessions.events.with_raw_response.list(session.id, extra_headers={"native-beta": "1"})
    assert "traceparent" not in listed.http_response.text


def test_a_request_without_traceparent_starts_a_trace_the_turn_continues(
    model: FakeModel, sdk: anthropic.Anthropic, collector: FakeCollector
) -> None:
    model.add(replies.text("Hello."))
    agent = sdk.beta.agents.create(name="traced", model=MODEL)
    environment = sdk.beta.environments.create(name="env")
    session = sdk.beta.sessions.create(agent=agent.id, environment_id=environment.id)
    message: Any = {"type": "user.message", "content": [{"type": "text", "text": "hi"}]}
    sdk.beta.sessions.events.send(session.id, events=[message])

    wait_until(lambda: len(model.requests) == 1, what="the model call")
    trace_id, parent = model.requests[0].headers["traceparent"].split("-")[1:3]

    def turn_exported() -> list[ReceivedSpan] | None:
        spans = collector.in_trace(trace_id)
        return spans if by_name(spans, "session.turn") else None

    spans = wait_until(turn_exported, what="the turn's span at the collector")
    [request] = by_name(spans, "POST /v1/sessions/{id}/events")
    [turn] = by_name(spans, "session.turn")
    [call] = by_name(spans, "model.call")
    assert request.parent_span_id == ""  # a new trace, rooted at the registry
    assert (turn.parent_span_id, call.parent_span_id, call.span_id) == (request.span_id, turn.span_id, parent)
