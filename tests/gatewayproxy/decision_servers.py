"""Small JSON-over-HTTP servers on loopback that play decision backends (OPA, external processors) and a
model that classifies text, each answering through a function of (path, request document)."""

from __future__ import annotations

import contextlib
import json
import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

HANG = "hang"
Answer = Callable[[str, Any], Any]


class JsonServer:
    """Answers every POST with `answer(path, document)`: `(status, document)`, or `HANG` to hold the request
    until the server stops. Records what it received."""

    def __init__(self, answer: Answer) -> None:
        self.answer = answer
        self.received: list[tuple[str, Any, dict[str, str]]] = []
        self.stopping = threading.Event()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("content-length") or 0)
                document = json.loads(self.rfile.read(length) or b"null")
                server.received.append((self.path, document, {k.lower(): v for k, v in self.headers.items()}))
                outcome = server.answer(self.path, document)
                if outcome == HANG:
                    server.stopping.wait(30)
                    return
                status, body = outcome
                payload = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def log_message(self, format: str, *args: Any) -> None:
                """Quiet."""

        self.http = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.http.daemon_threads = True
        self.thread = threading.Thread(target=self.http.serve_forever, daemon=True)

    def start(self) -> JsonServer:
        """Serve in a background thread."""
        self.thread.start()
        return self

    def stop(self) -> None:
        """Release held requests and stop serving."""
        self.stopping.set()
        self.http.shutdown()
        self.http.server_close()

    @property
    def url(self) -> str:
        """The root URL."""
        return f"http://127.0.0.1:{self.http.server_address[1]}"


@contextlib.contextmanager
def serving(server: JsonServer) -> Iterator[JsonServer]:
    """`server` started for the duration of the block, stopped afterwards."""
    server.start()
    try:
        yield server
    finally:
        server.stop()


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
