"""A fake model whose plan is in the user's message: vendor-B `POST /v1/messages` on loopback for any number of
sessions at once (the environment-worker tests' and benchmark's model).

The last user text is a JSON list of tool calls, `[[name, input], ...]`. The model makes them one at a time, in
order (the number of tool results after that text says which is next), then answers `done` followed by the text
of every result it was shown, so a test can read what the tools returned from the session's last message.
Any other text is answered `echo: <text>`. Every request is recorded.
"""

from __future__ import annotations

import contextlib
import json
import threading
from typing import Any

from fakes import model as fake_model
from fakes.http_server import LoopbackHttpServer

DONE = "done"


def plan(*calls: tuple[str, dict[str, Any]]) -> str:
    """The user text asking for these tool calls."""
    return json.dumps([[name, arguments] for name, arguments in calls])


def _texts(content: Any) -> list[str]:
    if isinstance(content, str):
        return [content]
    return [block.get("text", "") for block in content or [] if block.get("type") == "text"]


def next_reply(messages: list[dict[str, Any]]) -> fake_model.Reply:
    """The reply the plan in `messages` asks for next."""
    results: list[str] = []
    for message in reversed(messages):
        blocks = message.get("content")
        if message.get("role") != "user" or not isinstance(blocks, list):
            continue
        said = "".join(_texts(blocks))
        if not said:  # only results (a message with text too is new input after results to older calls)
            answered = [block for block in blocks if block.get("type") == "tool_result"]
            results[:0] = ["".join(_texts(block.get("content"))) for block in answered]
            continue
        try:
            calls = json.loads(said)
        except ValueError:
            return fake_model.text(f"echo: {said}")
        if len(results) < len(calls):
            name, arguments = calls[len(results)]
            return fake_model.tool_call(name, arguments)
        return fake_model.text("\n".join([DONE, *results]))
    return fake_model.text("echo: ")


class PlanModel(LoopbackHttpServer):
    """The server (serving once made); `requests` records each request's body."""

    def __init__(self) -> None:
        super().__init__(PlanHandler, name="plan-model")
        self.requests: list[dict[str, Any]] = []
        self.lock = threading.Lock()
        self.aborted = threading.Event()
        self.start()

    def record(self, body: dict[str, Any]) -> None:
        with self.lock:
            self.requests.append(body)


class PlanHandler(fake_model.ModelHandler):
    """The scripted fake model's rendering (JSON and SSE), with the reply computed from the request."""

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers.get("content-length", 0))) or b"{}")
        model: PlanModel = self.owner
        model.record(body)
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):  # the caller went away (a killed worker)
            self.answer(next_reply(body.get("messages") or []), body)
