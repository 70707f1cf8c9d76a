"""The runtime tests' sessions (also used by the observability and tracing tests): the shared `runsessions`
workers, agent definitions, readings of the event log, and a session driven through the reference client."""

from __future__ import annotations

import signal
from collections.abc import Callable
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any, cast

import anthropic
from django.utils import timezone

from fakes import model as replies
from fakes.waiting import wait_until
from registry.extensions.models import ModelPrice
from tests.support.processes import Process

MODEL = "claude-test-model"
WEATHER_TOOL = {
    "type": "custom",
    "name": "get_weather",
    "description": "The weather in a city.",
    "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
}


@dataclass
class WorkerPool:
    """The shared `runsessions` workers; a test may pause them (SIGSTOP) to stage a takeover."""

    processes: list[Process]

    def pause(self) -> None:
        for process in self.processes:
            process.signal(signal.SIGSTOP)

    def resume(self) -> None:
        for process in self.processes:
            process.signal(signal.SIGCONT)

    def stop(self) -> None:
        self.resume()
        for process in self.processes:
            process.stop()


def shop_agent(shop: Any, policy: str = "always_allow", configs: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    toolset: dict[str, Any] = {
        "type": "mcp_toolset",
        "mcp_server_name": "shop",
        "default_config": {"permission_policy": {"type": policy}},
    }
    if configs:
        toolset["configs"] = configs
    return {"tools": [toolset], "mcp_servers": [{"type": "url", "name": "shop", "url": shop.url}]}


def transcript(body: dict[str, Any]) -> list[dict[str, Any]]:
    """A model request's messages without prompt-cache breakpoints (tested once, in the text turn)."""
    return [
        {
            **message,
            "content": [{k: v for k, v in block.items() if k != "cache_control"} for block in message["content"]],
        }
        for message in body["messages"]
    ]


def text_of(event: dict[str, Any]) -> str:
    return "".join(block.get("text", "") for block in event.get("content") or [])


def stop_reasons(events: list[dict[str, Any]]) -> list[str]:
    return [event["stop_reason"]["type"] for event in events if event["type"] == "session.status_idle"]


def of_type(events: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [event for event in events if event["type"] == kind]


@dataclass
class Conversation:
    """One session of the live registry, driven and read through the reference client."""

    sdk: anthropic.Anthropic
    session_id: str
    processes: list[Process] = field(default_factory=list)

    def send(self, *events: dict[str, Any], native: bool = False) -> list[str]:
        headers = {"native-beta": "1"} if native else None
        sent = self.sdk.beta.sessions.events.send(
            self.session_id,
            events=cast(Any, list(events)),
            extra_headers=headers,
        )
        return [item.id for item in sent.data or []]

    def say(self, words: str) -> str:
        return self.send({"type": "user.message", "content": [{"type": "text", "text": words}]})[0]

    def events(self, *, native: bool = False) -> list[dict[str, Any]]:
        headers = {"native-beta": "1"} if native else None
        listed = self.sdk.beta.sessions.events.list(self.session_id, limit=100, extra_headers=headers)
        return [event.model_dump(mode="json", exclude_none=True, warnings=False) for event in listed]

    def session(self) -> dict[str, Any]:
        return self.sdk.beta.sessions.retrieve(self.session_id).model_dump(mode="json", warnings=False)

    def wait_for(
        self, done: Callable[[list[dict[str, Any]]], bool], *, timeout: float = 20, native: bool = False
    ) -> list[dict[str, Any]]:
        """Poll the event list until `done` holds; on timeout fail with the log and the workers' output."""
        events: list[dict[str, Any]] = []

        def reached() -> bool:
            events[:] = self.events(native=native)
            return done(events)

        try:
            wait_until(reached, timeout=timeout, interval=0.1, what="the session's events")
        except AssertionError:
            logs = "\n".join(process.log_tail() for process in self.processes)
            raise AssertionError(f"timed out; events: {[e['type'] for e in events]}\n{logs}") from None
        return events

    def wait_idle(self, count: int = 1, **options: Any) -> list[dict[str, Any]]:
        """The events once the session went idle `count` times."""
        return self.wait_for(lambda events: len(stop_reasons(events)) >= count, **options)


def grading_in_flight(model: Any, open_session: Callable[..., Conversation], grader_delay: float) -> Conversation:
    """A session that defined an outcome, whose turn is done and whose grader's call is now in flight."""
    slow_verdict = replies.verdict("satisfied", "Fine.")
    slow_verdict.delay = grader_delay
    model.add(replies.text("draft"), slow_verdict)
    chat = open_session()
    chat.send({"type": "user.define_outcome", "description": "x", "rubric": {"type": "text", "content": "y"}})
    wait_until(lambda: len(model.requests) == 2, what="the grader's call")
    return chat


def price_per_million(model: str, usd: int) -> None:
    """List the vendor-B `model` at `usd` per million input and output tokens, from now on (a budget needs it)."""
    ModelPrice.objects.create(
        provider="vendor_b",
        model=model,
        input_per_1m=Decimal(usd),
        output_per_1m=Decimal(usd),
        effective_from=timezone.now(),
    )
