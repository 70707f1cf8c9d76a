"""A fake model whose plan is in the user's message: vendor-B `POST /v1/messages` on loopback for any number of
sessions at once (the environment-worker tests' and benchmark's model).

The last user text is a JSON list of tool calls, `[[name, input], ...]`. The model makes them one at a time, in
order (the number of tool results after that text says which is next), then answers `done` followed by the text
of every result it was shown; an entry that is itself a list of calls, `[[name, input], [name, input]]`, is made
in one answer, so a test can read what the tools returned from the session's last message.
`slow:<seconds>:<text>` is answered `echo: <text>` after that many seconds; any other text `echo: <text>`.
Every request is recorded.
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
from collections.abc import Iterator
from typing import Any

from fakes import model as fake_model
from fakes.http_server import LoopbackHttpServer

DONE = "done"
SLOW = "slow:"


Call = tuple[str, dict[str, Any]]


def plan(*calls: Call | list[Call]) -> str:
    """The user text asking for these tool calls (a list of calls: made together, in one answer)."""
    return json.dumps([[list(call) for call in step] if isinstance(step, list) else list(step) for step in calls])


def _texts(content: Any) -> list[str]:
    if isinstance(content, str):
        return [content]
    return [block.get("text", "") for block in content or [] if block.get("type") == "text"]


def last_text(messages: list[dict[str, Any]]) -> str:
    """The text of the last user message that has some."""
    for message in reversed(messages):
        if message.get("role") == "user" and (said := "".join(_texts(message.get("content")))):
            return said
    return ""


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
        if said.startswith(SLOW):
            seconds, _, text = said.removeprefix(SLOW).partition(":")
            return fake_model.text(f"echo: {text}", delay=float(seconds))
        try:
            calls = json.loads(said)
        except ValueError:
            return fake_model.text(f"echo: {said}")
        made = 0
        for step in calls:  # a step is one call, or a list of calls made together (one answer, several blocks)
            together = step if isinstance(step[0], list) else [step]
            if len(results) <= made:
                blocks = [{"type": "tool_use", "name": name, "input": arguments} for name, arguments in together]
                return fake_model.Reply(blocks=blocks)
            made += len(together)
        return fake_model.text("\n".join([DONE, *results]))
    return fake_model.text("echo: ")


class PlanModel(LoopbackHttpServer):
    """The server (serving once made); `requests` records each request's body."""

    def __init__(self) -> None:
        super().__init__(PlanHandler, name="plan-model")
        self.requests: list[dict[str, Any]] = []
        self.arrivals: list[tuple[float, str]] = []
        self.answering = self.peak = 0
        self.lock = threading.Lock()
        self.aborted = threading.Event()
        self.start()

    def record(self, body: dict[str, Any]) -> None:
        with self.lock:
            self.requests.append(body)
            self.arrivals.append((time.monotonic(), last_text(body.get("messages") or [])))

    @contextlib.contextmanager
    def in_flight(self) -> Iterator[None]:
        """Counts the request as being answered; `peak` is the most at once."""
        with self.lock:
            self.answering += 1
            self.peak = max(self.peak, self.answering)
        try:
            yield
        finally:
            with self.lock:
                self.answering -= 1

    def arrived(self, text: str) -> list[float]:
        """When each request whose last user text was `text` arrived (monotonic seconds)."""
        with self.lock:
            return [at for at, said in self.arrivals if said == text]


class PlanHandler(fake_model.ModelHandler):
    """The scripted fake model's rendering (JSON and SSE), with the reply computed from the request."""

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers.get("content-length", 0))) or b"{}")
        model: PlanModel = self.owner
        model.record(body)
        reply = next_reply(body.get("messages") or [])
        with model.in_flight():
            if reply.delay and model.aborted.wait(reply.delay):
                return
            with contextlib.suppress(BrokenPipeError, ConnectionResetError):  # the caller went away (a killed worker)
                self.answer(reply, body)
