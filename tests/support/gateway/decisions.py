"""Small JSON-over-HTTP servers on loopback that play decision backends (OPA, external processors) and a
model that classifies text, each answering through a function of (path, request document)."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from typing import Any

from fakes.http_server import LoopbackHttpServer, QuietHandler

HANG = "hang"
Answer = Callable[[str, Any], Any]


class JsonServer(LoopbackHttpServer):
    """Answers every POST with `answer(path, document)`: `(status, document)`, or `HANG` to hold the request
    until the server stops. Records what it received. Serving once `start()` is called."""

    def __init__(self, answer: Answer) -> None:
        super().__init__(JsonHandler)
        self.answer = answer
        self.received: list[tuple[str, Any, dict[str, str]]] = []
        self.stopping = threading.Event()

    def stop(self) -> None:
        """Release held requests and stop serving."""
        self.stopping.set()
        super().stop()


class JsonHandler(QuietHandler):
    """A `JsonServer`'s answers."""

    def do_POST(self) -> None:
        server: JsonServer = self.owner
        length = int(self.headers.get("content-length") or 0)
        document = json.loads(self.rfile.read(length) or b"null")
        server.received.append((self.path, document, {k.lower(): v for k, v in self.headers.items()}))
        outcome = server.answer(self.path, document)
        if outcome == HANG:
            server.stopping.wait(30)
            return
        status, body = outcome
        self.reply_json(status, body)


def classifier_completion(path: str, document: Any, blocked_words: tuple[str, ...]) -> tuple[int, Any]:
    """A chat model that answers the evaluator's verdict contract: a text with one of `blocked_words` is not
    allowed."""
    text = document["messages"][-1]["content"]
    verdict = {"allowed": not any(word in text for word in blocked_words), "reason": "mentions a forbidden topic"}
    message = {"role": "assistant", "content": "```json\n" + json.dumps(verdict) + "\n```"}
    return 200, {
        "id": "chatcmpl-judge",
        "object": "chat.completion",
        "created": 1,
        "model": document["model"],
        "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 5, "completion_tokens": 5, "total_tokens": 10},
    }
