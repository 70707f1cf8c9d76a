"""A fake model provider on 127.0.0.1 speaking both shapes (JSON and SSE), with scripted failures and delays.

Each request takes the next behaviour from `script` (default `ok`): `ok`, `500`, `429`, `400`,
`delay:<seconds>`, `hang`, `break_stream` (start a stream, then drop the connection), `empty_stream`,
`big_stream` (the first chunk repeated BIG_STREAM_FRAMES times; `streamed_bytes` tells how far it got),
`401` / `403` (a refusal of the caller's key), `retry_after:<seconds>` (429 with that `retry-after`), `not_json` (200
with a body that is not JSON), `truncated` (200 whose body stops short of its content-length), `bad_frame` (a stream
whose first frame is not JSON), `stall_stream` (two frames, then nothing until the connection closes).
GET requests are answered from `documents` (path to JSON), e.g. a JWKS or a vault secret; DELETE removes the
document at its path (200 `{"id", "object": "response", "deleted": true}`, 404 when there is none).
A messages body with `stop_sequences` ends on the first of them (`stop_reason: stop_sequence`).
"""

from __future__ import annotations

import asyncio
import base64
import json
import struct
import time
import zlib
from collections import deque
from dataclasses import dataclass
from typing import Any

import h11

from tests.support.gateway.loop_server import LoopService

TOOL_ARGUMENTS = {"city": "Paris"}
# What a provider "thinks" when asked to (`thinking` in a messages body, `reasoning_effort` in a chat body).
THINKING, SIGNATURE = "Let me think.", "sig_1"
BIG_STREAM_FRAMES = 10000
BIG_STREAM_TEXT = "x" * 4000


@dataclass
class Received:
    """One request as the provider saw it."""

    method: str
    path: str
    headers: dict[str, str]
    body: Any
    raw_body: bytes = b""
    at: float = 0.0  # time.monotonic() when it arrived


def sse(data: Any, event: str | None = None) -> bytes:
    """One SSE frame."""
    payload = data if isinstance(data, str) else json.dumps(data)
    return (f"event: {event}\n" if event else "").encode() + f"data: {payload}\n\n".encode()


def _chat_json(body: dict, name: str) -> dict:
    message: dict[str, Any] = {"role": "assistant", "content": f"Hello from {name}"}
    finish = "stop"
    if body.get("tools"):
        tool = body["tools"][0]["function"]["name"]
        message = {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": tool, "arguments": json.dumps(TOOL_ARGUMENTS)},
                }
            ],
        }
        finish = "tool_calls"
    if body.get("reasoning_effort"):
        message["reasoning_content"] = THINKING
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "created": 1,
        "model": body.get("model"),
        "choices": [{"index": 0, "message": message, "finish_reason": finish, "logprobs": None}],
        "usage": {"prompt_tokens": 11, "completion_tokens": 7, "total_tokens": 18},
    }


def _chat_stream(body: dict, name: str) -> list[bytes]:
    def chunk(delta: dict, finish: str | None = None) -> bytes:
        return sse(
            {
                "id": "chatcmpl-1",
                "object": "chat.completion.chunk",
                "created": 1,
                "model": body.get("model"),
                "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
            }
        )

    frames = [chunk({"role": "assistant", "content": ""})]
    if body.get("reasoning_effort"):
        frames += [chunk({"reasoning_content": part}) for part in ("Let me ", "think.")]
    if body.get("tools"):
        tool = body["tools"][0]["function"]["name"]
        arguments = json.dumps(TOOL_ARGUMENTS)
        frames.append(
            chunk(
                {
                    "tool_calls": [
                        {"index": 0, "id": "call_1", "type": "function", "function": {"name": tool, "arguments": ""}}
                    ]
                }
            )
        )
        frames += [
            chunk({"tool_calls": [{"index": 0, "function": {"arguments": arguments[i : i + 5]}}]})
            for i in range(0, len(arguments), 5)
        ]
        frames.append(chunk({}, "tool_calls"))
    else:
        frames += [chunk({"content": word}) for word in ("Hello ", "from ", name)]
        frames.append(chunk({}, "stop"))
    if (body.get("stream_options") or {}).get("include_usage"):
        frames.append(
            sse(
                {
                    "id": "chatcmpl-1",
                    "object": "chat.completion.chunk",
                    "created": 1,
                    "model": body.get("model"),
                    "choices": [],
                    "usage": {"prompt_tokens": 11, "completion_tokens": 7, "total_tokens": 18},
                }
            )
        )
    return [*frames, sse("[DONE]")]


def _messages_json(body: dict, name: str) -> dict:
    content: list[dict] = [{"type": "text", "text": f"Hello from {name}"}]
    stop = "end_turn"
    if body.get("tools"):
        content = [{"type": "tool_use", "id": "toolu_1", "name": body["tools"][0]["name"], "input": TOOL_ARGUMENTS}]
        stop = "tool_use"
    if body.get("thinking"):
        content.insert(0, {"type": "thinking", "thinking": THINKING, "signature": SIGNATURE})
    stop_sequence = None
    if body.get("stop_sequences") and stop == "end_turn":
        stop, stop_sequence = "stop_sequence", body["stop_sequences"][0]
    return {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "model": body.get("model"),
        "content": content,
        "stop_reason": stop,
        "stop_sequence": stop_sequence,
        "usage": {"input_tokens": 13, "output_tokens": 5},
    }


def _messages_stream(body: dict, name: str) -> list[bytes]:
    message: dict[str, Any] = {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "model": body.get("model"),
        "content": [],
        "stop_reason": None,
        "stop_sequence": None,
        "usage": {"input_tokens": 13, "output_tokens": 1},
    }
    frames = [sse({"type": "message_start", "message": message}, "message_start")]
    if body.get("tools"):
        block = {"type": "tool_use", "id": "toolu_1", "name": body["tools"][0]["name"], "input": {}}
        arguments = json.dumps(TOOL_ARGUMENTS)
        deltas = [
            {"type": "input_json_delta", "partial_json": arguments[i : i + 5]} for i in range(0, len(arguments), 5)
        ]
        stop = "tool_use"
    else:
        block = {"type": "text", "text": ""}
        deltas = [{"type": "text_delta", "text": word} for word in ("Hello ", "from ", name)]
        stop = "stop_sequence" if body.get("stop_sequences") else "end_turn"
    index = 0
    if body.get("thinking"):
        thinking = [
            {"type": "thinking_delta", "thinking": "Let me "},
            {"type": "thinking_delta", "thinking": "think."},
            {"type": "signature_delta", "signature": SIGNATURE},
        ]
        frames.append(
            sse(
                {"type": "content_block_start", "index": 0, "content_block": {"type": "thinking", "thinking": ""}},
                "content_block_start",
            )
        )
        frames += [
            sse({"type": "content_block_delta", "index": 0, "delta": delta}, "content_block_delta")
            for delta in thinking
        ]
        frames.append(sse({"type": "content_block_stop", "index": 0}, "content_block_stop"))
        index = 1
    frames.append(sse({"type": "content_block_start", "index": index, "content_block": block}, "content_block_start"))
    frames += [
        sse({"type": "content_block_delta", "index": index, "delta": delta}, "content_block_delta") for delta in deltas
    ]
    frames.append(sse({"type": "content_block_stop", "index": index}, "content_block_stop"))
    frames.append(
        sse(
            {
                "type": "message_delta",
                "delta": {
                    "stop_reason": stop,
                    "stop_sequence": body["stop_sequences"][0] if stop == "stop_sequence" else None,
                },
                "usage": {"output_tokens": 5},
            },
            "message_delta",
        )
    )
    return [*frames, sse({"type": "message_stop"}, "message_stop")]


def _responses_json(body: dict, name: str) -> dict:
    return {
        "id": "resp_1",
        "object": "response",
        "status": "completed",
        "model": body.get("model"),
        "output": [
            {
                "type": "message",
                "id": "m1",
                "role": "assistant",
                "status": "completed",
                "content": [{"type": "output_text", "text": f"Hello from {name}", "annotations": []}],
            }
        ],
        "usage": {"input_tokens": 3, "output_tokens": 4, "total_tokens": 7},
    }


def _responses_stream(body: dict, name: str) -> list[bytes]:
    done = _responses_json(body, name)
    return [
        sse(
            {"type": "response.created", "response": {**done, "status": "in_progress"}, "sequence_number": 0},
            "response.created",
        ),
        sse(
            {
                "type": "response.output_text.delta",
                "delta": f"Hello from {name}",
                "item_id": "m1",
                "output_index": 0,
                "content_index": 0,
                "sequence_number": 1,
            },
            "response.output_text.delta",
        ),
        sse({"type": "response.completed", "response": done, "sequence_number": 2}, "response.completed"),
    ]


def event_stream_message(payload: dict) -> bytes:
    """One frame of vendor D's binary event stream carrying a messages event as base64 `bytes`."""
    headers = b"".join(
        bytes([len(name)]) + name.encode() + b"\x07" + struct.pack(">H", len(value)) + value.encode()
        for name, value in ((":event-type", "chunk"), (":content-type", "application/json"), (":message-type", "event"))
    )
    body = json.dumps({"bytes": base64.b64encode(json.dumps(payload).encode()).decode()}).encode()
    prelude = struct.pack(">II", 16 + len(headers) + len(body), len(headers))
    message = prelude + struct.pack(">I", zlib.crc32(prelude)) + headers + body
    return message + struct.pack(">I", zlib.crc32(message))


def _vendor_d_stream(body: dict, name: str) -> list[bytes]:
    frames = _messages_stream(body, name)
    return [event_stream_message(json.loads(frame.split(b"data: ", 1)[1])) for frame in frames]


def answer(path: str, body: dict, name: str) -> tuple[int, Any, list[bytes] | None]:
    """Status, JSON document, and stream frames (when streaming) for a request."""
    stream = body.get("stream") is True
    if path.endswith("/invoke") or path.endswith(":rawPredict"):
        return 200, _messages_json(body, name), None
    if path.endswith(":streamRawPredict"):
        return 200, None, _messages_stream(body, name)
    if path.endswith("/invoke-with-response-stream"):
        return 200, None, _vendor_d_stream(body, name)
    if path.endswith("/chat/completions"):
        return 200, _chat_json(body, name), _chat_stream(body, name) if stream else None
    if path.endswith("/messages"):
        return 200, _messages_json(body, name), _messages_stream(body, name) if stream else None
    if path.endswith("/embeddings"):
        return (
            200,
            {
                "object": "list",
                "model": body.get("model"),
                "usage": {"prompt_tokens": 2, "total_tokens": 2},
                "data": [{"object": "embedding", "index": 0, "embedding": [0.1, 0.2]}],
            },
            None,
        )
    if path.endswith("/responses"):
        return 200, _responses_json(body, name), _responses_stream(body, name) if stream else None
    return 404, {"error": {"message": f"no such path {path}", "type": "not_found"}}, None


class FakeProvider(LoopService):
    """The provider server, run on its own loop in a daemon thread."""

    def __init__(self, name: str = "fake") -> None:
        super().__init__()
        self.name = name
        self.script: deque[str] = deque()
        self.received: list[Received] = []
        self.documents: dict[str, Any] = {}
        self.streamed_bytes = 0
        self.big_stream_frames = BIG_STREAM_FRAMES
        self.port = 0

    def start(self) -> FakeProvider:
        """Bind a free port and serve."""
        self.port = self._runner.serve(self._connection)
        return self

    def reset(self, *script: str) -> None:
        """Forget received requests and documents, and set the behaviours of the next requests."""
        self.received.clear()
        self.documents.clear()
        self.script = deque(script)

    async def _connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        connection = h11.Connection(h11.SERVER)
        try:
            while await self._one_request(connection, reader, writer):
                connection.start_next_cycle()
        except (ConnectionError, h11.ProtocolError, asyncio.CancelledError):
            pass
        finally:
            writer.close()

    async def _read_request(self, connection: h11.Connection, reader: asyncio.StreamReader) -> Received | None:
        head: h11.Request | None = None
        body = b""
        while True:
            event = connection.next_event()
            if event is h11.NEED_DATA:
                data = await reader.read(65536)
                connection.receive_data(data)
                if not data and head is None:
                    return None
                continue
            if isinstance(event, h11.ConnectionClosed):
                return None
            if isinstance(event, h11.Request):
                head = event
            elif isinstance(event, h11.Data):
                body += event.data
            elif isinstance(event, h11.EndOfMessage):
                assert head is not None
                headers = {name.decode(): value.decode() for name, value in head.headers}
                parsed = json.loads(body) if body else None
                return Received(head.method.decode(), head.target.decode(), headers, parsed, body, time.monotonic())

    async def _one_request(
        self, connection: h11.Connection, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> bool:
        received = await self._read_request(connection, reader)
        if received is None:
            return False
        self.received.append(received)
        if received.method == "DELETE":
            gone = self.documents.pop(received.path, None)
            if gone is None:
                return await self._send_json(connection, writer, 404, {"error": {"message": "no such response"}})
            deleted = {"id": gone.get("id"), "object": "response", "deleted": True}
            return await self._send_json(connection, writer, 200, deleted)
        if received.method == "GET":
            document = self.documents.get(received.path)
            return await self._send_json(connection, writer, 200 if document is not None else 404, document or {})
        behaviour = self.script.popleft() if self.script else "ok"
        if behaviour.startswith("delay:"):
            await asyncio.sleep(float(behaviour.removeprefix("delay:")))
            behaviour = "ok"
        if behaviour == "hang":
            await asyncio.sleep(3600)
        if behaviour.startswith("retry_after:"):
            document = {"error": {"message": "scripted 429", "type": "rate_limit_error"}}
            extra = [("retry-after", behaviour.removeprefix("retry_after:"))]
            return await self._send_json(connection, writer, 429, document, extra)
        if behaviour in ("not_json", "truncated"):
            return await self._send_broken(writer, behaviour)
        if behaviour in ("500", "429", "400", "401", "403"):
            status = int(behaviour)
            return await self._send_json(
                connection, writer, status, {"error": {"message": f"scripted {status}", "type": "scripted"}}
            )
        status, document, frames = answer(received.path.split("?")[0], received.body or {}, self.name)
        if frames is None:
            return await self._send_json(connection, writer, status, document)
        return await self._send_stream(connection, writer, frames, behaviour)

    @staticmethod
    async def _send_broken(writer: asyncio.StreamWriter, behaviour: str) -> bool:
        """A 200 that is no JSON document: an HTML page, or a body cut short of its content-length."""
        if behaviour == "not_json":
            body = b"<html>upstream proxy error</html>"
            writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: text/html\r\ncontent-length: %d\r\n\r\n" % len(body) + body)
            await writer.drain()
            return False
        writer.write(b'HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 500\r\n\r\n{"id": "cut')
        await writer.drain()
        writer.transport.abort()
        return False

    @staticmethod
    async def _send_json(
        connection: h11.Connection,
        writer: asyncio.StreamWriter,
        status: int,
        document: Any,
        extra: list[tuple[str, str]] | None = None,
    ) -> bool:
        body = json.dumps(document).encode()
        headers = [("content-type", "application/json"), ("content-length", str(len(body))), *(extra or [])]
        writer.write(connection.send(h11.Response(status_code=status, headers=headers)) or b"")
        writer.write(connection.send(h11.Data(data=body)) or b"")
        writer.write(connection.send(h11.EndOfMessage()) or b"")
        await writer.drain()
        return True

    async def _send_stream(
        self, connection: h11.Connection, writer: asyncio.StreamWriter, frames: list[bytes], behaviour: str
    ) -> bool:
        writer.write(
            connection.send(h11.Response(status_code=200, headers=[("content-type", "text/event-stream")])) or b""
        )
        if behaviour == "empty_stream":
            writer.write(connection.send(h11.EndOfMessage()) or b"")
            await writer.drain()
            return True
        if behaviour == "big_stream":
            big = frames[0].replace(b'"content": ""', f'"content": "{BIG_STREAM_TEXT}"'.encode())
            frames = [big] * self.big_stream_frames + frames[-1:]
        if behaviour == "bad_frame":
            frames = [b"data: {not json\n\n", *frames]
        self.streamed_bytes = 0
        for index, frame in enumerate(frames):
            if behaviour == "stall_stream" and index == 2:
                await writer.drain()
                await asyncio.sleep(3600)  # until the gateway closes the connection (the task is cancelled)
            if behaviour == "break_stream" and index == 2:
                await writer.drain()
                writer.transport.abort()
                return False
            writer.write(connection.send(h11.Data(data=frame)) or b"")
            await writer.drain()
            self.streamed_bytes += len(frame)
        writer.write(connection.send(h11.EndOfMessage()) or b"")
        await writer.drain()
        return True
