"""A scripted fake model: vendor-B `POST /v1/messages` on loopback, answering JSON or SSE (the runtime tests' and
benchmark's model).

Each request takes the next scripted `Reply` (text, thinking, tool calls, HTTP errors, dropped
connections, delays); every request is recorded so tests can assert what the runtime sent.
"""

from __future__ import annotations

import json
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from fakes.http_server import LoopbackHttpServer, QuietHandler

EMPTY_BLOCKS: dict[str, dict[str, Any]] = {
    "text": {"text": ""},
    "thinking": {"thinking": ""},
    "tool_use": {"input": {}},
}
USAGE = {"input_tokens": 11, "output_tokens": 7, "cache_read_input_tokens": 2, "cache_creation_input_tokens": 3}


@dataclass
class Reply:
    """One scripted answer; `blocks` are vendor-B content blocks (tool_use blocks get ids here)."""

    blocks: list[dict[str, Any]] = field(default_factory=list)
    status: int = 200
    disconnect: bool = False
    delay: float = 0.0  # before the first byte
    chunks: int = 1  # text is streamed in this many fragments
    chunk_delay: float = 0.0
    cut_by_max_tokens: bool = False  # the last tool call's JSON input stops halfway, as at max_tokens
    retry_after: str | None = None  # the `retry-after` header of an error answer
    refusal: dict[str, Any] | None = None  # the model refuses: `stop_details` of a `refusal` stop

    @property
    def stop_reason(self) -> str:
        if self.refusal is not None:
            return "refusal"
        if self.cut_by_max_tokens:
            return "max_tokens"
        return "tool_use" if any(block["type"] == "tool_use" for block in self.blocks) else "end_turn"


def text(*parts: str, **options: Any) -> Reply:
    return Reply(blocks=[{"type": "text", "text": part} for part in parts], **options)


def thinking_then_text(thought: str, answer: str) -> Reply:
    return Reply(blocks=[{"type": "thinking", "thinking": thought}, {"type": "text", "text": answer}])


def tool_call(name: str, arguments: dict[str, Any], *, preface: str | None = None) -> Reply:
    blocks = [{"type": "text", "text": preface}] if preface else []
    return Reply(blocks=[*blocks, {"type": "tool_use", "name": name, "input": arguments}])


def verdict(value: str, explanation: str) -> Reply:
    """A grader's answer, wrapped in prose as models tend to do."""
    return text(f"Here is my grade:\n```json\n{json.dumps({'verdict': value, 'explanation': explanation})}\n```")


def failure(status: int, retry_after: str | None = None) -> Reply:
    return Reply(status=status, retry_after=retry_after)


def cut_tool_call(name: str, arguments: dict[str, Any]) -> Reply:
    return Reply(blocks=[{"type": "tool_use", "name": name, "input": arguments}], cut_by_max_tokens=True)


def dropped() -> Reply:
    return Reply(disconnect=True)


@dataclass(frozen=True)
class Recorded:
    """A request as the fake model received it, and when (monotonic clock)."""

    headers: dict[str, str]
    body: dict[str, Any]
    at: float = field(default_factory=time.monotonic)


def sse(name: str, payload: dict[str, Any]) -> bytes:
    return f"event: {name}\ndata: {json.dumps({'type': name, **payload})}\n\n".encode()


def fragments(value: str, count: int) -> list[str]:
    size = max(1, -(-len(value) // max(1, count)))
    return [value[start : start + size] for start in range(0, len(value), size)] or [""]


class FakeModel(LoopbackHttpServer):
    """The server and its script (serving once made); `reset` between tests also cuts short any reply still
    waiting."""

    def __init__(self) -> None:
        super().__init__(ModelHandler, name="fake-model")
        self.script: deque[Reply] = deque()
        self.requests: list[Recorded] = []
        self.in_flight = self.most_in_flight = 0
        self.lock = threading.Lock()
        self.aborted = threading.Event()
        self.start()

    def add(self, *replies: Reply) -> None:
        with self.lock:
            self.script.extend(replies)

    def reset(self) -> None:
        self.aborted.set()
        with self.lock:
            self.script.clear()
            self.requests.clear()
            self.most_in_flight = 0
        time.sleep(0.05)
        self.aborted.clear()

    def take(self, recorded: Recorded) -> Reply | None:
        with self.lock:
            self.requests.append(recorded)
            self.in_flight += 1
            self.most_in_flight = max(self.most_in_flight, self.in_flight)
            return self.script.popleft() if self.script else None

    def done(self) -> None:
        with self.lock:
            self.in_flight -= 1

    def stop(self) -> None:
        self.aborted.set()
        super().stop()


class ModelHandler(QuietHandler):
    """Answers one request from the script: an error, a dropped connection, JSON or SSE."""

    @property
    def fake(self) -> FakeModel:
        fake: FakeModel = self.owner
        return fake

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers.get("content-length", 0))) or b"{}")
        reply = self.fake.take(Recorded(headers={k.lower(): v for k, v in self.headers.items()}, body=body))
        try:
            if reply is None:
                error = {"type": "invalid_request_error", "message": "unscripted"}
                self.reply_json(400, {"type": "error", "error": error})
            elif not (reply.delay and self.fake.aborted.wait(reply.delay)):
                self.answer(reply, body)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the worker went away mid-reply (a killed worker, an interrupt)
        finally:
            self.fake.done()

    def answer(self, reply: Reply, body: dict[str, Any]) -> None:
        if reply.disconnect:
            self.close_connection = True
        elif reply.status >= 400:
            headers = {"retry-after": reply.retry_after} if reply.retry_after else {}
            error = {"type": "error", "error": {"type": "api_error", "message": "scripted"}}
            self.reply_json(reply.status, error, headers)
        elif body.get("stream"):
            self.stream(reply, body)
        else:
            self.reply_json(200, self.message(reply, body))

    def message(self, reply: Reply, body: dict[str, Any]) -> dict[str, Any]:
        content = [
            {**block, "id": f"toolu_{index}"} if block["type"] == "tool_use" else block
            for index, block in enumerate(reply.blocks)
        ]
        return {
            "id": "msg_fake",
            "type": "message",
            "role": "assistant",
            "model": body.get("model"),
            "content": content,
            "stop_reason": reply.stop_reason,
            "stop_details": reply.refusal,
            "usage": USAGE,
        }

    def stream(self, reply: Reply, body: dict[str, Any]) -> None:
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.end_headers()
        start = {**self.message(reply, body), "content": [], "stop_reason": None, "stop_details": None}
        start["usage"] = {**USAGE, "output_tokens": 0}
        self.write(sse("message_start", {"message": start}))
        for index, block in enumerate(self.message(reply, body)["content"]):
            if not self.stream_block(index, block, reply):
                return
        delta = {"stop_reason": reply.stop_reason, "stop_details": reply.refusal}
        self.write(sse("message_delta", {"delta": delta, "usage": USAGE}))
        self.write(sse("message_stop", {}))

    def stream_block(self, index: int, block: dict[str, Any], reply: Reply) -> bool:
        """One content block's start, deltas and stop; False once the test aborted the reply."""
        empty = EMPTY_BLOCKS[block["type"]]
        self.write(sse("content_block_start", {"index": index, "content_block": {**block, **empty}}))
        for delta in self.deltas(block, reply):
            self.write(sse("content_block_delta", {"index": index, "delta": delta}))
            if reply.chunk_delay and self.fake.aborted.wait(reply.chunk_delay):
                return False
        self.write(sse("content_block_stop", {"index": index}))
        return True

    def deltas(self, block: dict[str, Any], reply: Reply) -> list[dict[str, Any]]:
        if block["type"] == "text":
            return [{"type": "text_delta", "text": part} for part in fragments(block["text"], reply.chunks)]
        if block["type"] == "thinking":
            return [
                {"type": "thinking_delta", "thinking": block["thinking"]},
                {"type": "signature_delta", "signature": "sig"},
            ]
        raw = json.dumps(block["input"])
        parts = fragments(raw, 2)
        if reply.cut_by_max_tokens:
            parts = parts[:1]
        return [{"type": "input_json_delta", "partial_json": part} for part in parts]

    def write(self, data: bytes) -> None:
        self.wfile.write(data)
        self.wfile.flush()
