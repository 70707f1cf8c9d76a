"""A minimal, fast fake provider for the benchmark: raw asyncio, keep-alive, canned chat-completions answers
(JSON, or an SSE stream of 20 chunks when the body asks for `"stream":true`)."""

from __future__ import annotations

import asyncio
import json
import sys

import uvloop

COMPLETION = json.dumps(
    {
        "id": "chatcmpl-bench",
        "object": "chat.completion",
        "created": 1,
        "model": "bench-model",
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": "Hello from the benchmark provider."},
                "finish_reason": "stop",
                "logprobs": None,
            }
        ],
        "usage": {"prompt_tokens": 12, "completion_tokens": 8, "total_tokens": 20},
    }
).encode()
JSON_RESPONSE = (
    b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: "
    + str(len(COMPLETION)).encode()
    + b"\r\n\r\n"
    + COMPLETION
)
STREAM_CHUNKS = 20


def _chunk(delta: dict, finish: str | None = None) -> bytes:
    body = json.dumps(
        {
            "id": "chatcmpl-bench",
            "object": "chat.completion.chunk",
            "created": 1,
            "model": "bench-model",
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
        }
    )
    frame = f"data: {body}\n\n".encode()
    return f"{len(frame):x}\r\n".encode() + frame + b"\r\n"


def stream_response() -> list[bytes]:
    """The head and the 20 chunk frames, plus usage, [DONE] and the chunked terminator."""
    head = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"
    chunks = [_chunk({"content": f"token{index} "}) for index in range(STREAM_CHUNKS - 1)]
    chunks.append(_chunk({}, "stop"))
    usage = json.dumps(
        {
            "id": "chatcmpl-bench",
            "object": "chat.completion.chunk",
            "created": 1,
            "choices": [],
            "model": "bench-model",
            "usage": {"prompt_tokens": 12, "completion_tokens": 20, "total_tokens": 32},
        }
    )
    usage_frame = f"data: {usage}\n\n".encode()
    done = b"data: [DONE]\n\n"
    tail = (
        f"{len(usage_frame):x}\r\n".encode()
        + usage_frame
        + b"\r\n"
        + f"{len(done):x}\r\n".encode()
        + done
        + b"\r\n0\r\n\r\n"
    )
    return [head, *chunks, tail]


STREAM = stream_response()


class ProviderProtocol(asyncio.Protocol):
    """Answers each complete request on the connection in order."""

    def __init__(self) -> None:
        self.buffer = b""
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        while True:
            end = self.buffer.find(b"\r\n\r\n")
            if end < 0:
                return
            head = self.buffer[:end].lower()
            start = head.find(b"content-length:")
            length = (
                int(head[start + 15 : head.find(b"\r\n", start) if head.find(b"\r\n", start) > 0 else None])
                if start >= 0
                else 0
            )
            if len(self.buffer) < end + 4 + length:
                return
            body = self.buffer[end + 4 : end + 4 + length]
            self.buffer = self.buffer[end + 4 + length :]
            self.answer(body)

    def answer(self, body: bytes) -> None:
        assert self.transport is not None
        if b'"stream":true' in body.replace(b" ", b""):
            self.transport.write(b"".join(STREAM))
        else:
            self.transport.write(JSON_RESPONSE)


async def serve(port: int) -> None:
    """Serve forever on 127.0.0.1:port."""
    server = await asyncio.get_running_loop().create_server(ProviderProtocol, "127.0.0.1", port, backlog=1024)
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    uvloop.run(serve(int(sys.argv[1])))
