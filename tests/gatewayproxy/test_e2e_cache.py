"""The response cache (`plugins.cache`) through a real gateway: hits, misses and bypasses, isolation between
tenants and `shared: true`, streamed hits replayed to both official SDKs, usage records of hits, only 2xx
answers kept, and `redis_exact` against the real Redis, a closed port and a server that never answers."""

from __future__ import annotations

import json
import socket
import threading
import uuid
from typing import Any

import httpx
import pytest
import redis

from fakes.waiting import wait_until
from gatewayproxy.http.sse import SseDecoder
from gatewayproxy.pipeline.cache import ChatAssembler, MessagesAssembler, chat_frames, messages_frames
from tests.support.gateway.documents import path_vault, two_shapes
from tests.support.gateway.provider import FakeProvider
from tests.support.gateway.sinks import HI, StdoutRecords
from tests.support.gateway.thread import GatewayFactory, GatewayThread
from tests.support.live import free_port

pytestmark = pytest.mark.e2e
REDIS_URL = "redis://127.0.0.1:6379/0"


def cache_document(chat: FakeProvider, messages: FakeProvider, cache: dict[str, Any], **plugins: Any) -> dict[str, Any]:
    """Models `a-*` to a chat-shaped destination, `b-*` to a messages-shaped one, callers' scope from
    `x-scope-team` / `x-scope-user`, and the cache plugin `cache`."""
    return two_shapes(
        chat.url,
        messages.url,
        vault=path_vault("keys"),
        identity={"scope_dims": ["team", "user"]},
        plugins={"cache": {"name": "answers", **cache}, **plugins},
        spend={"trusted_header_dims": ["team", "user"]},
    )


@pytest.fixture
def gateway(gateway_factory: GatewayFactory, primary: FakeProvider, secondary: FakeProvider) -> GatewayThread:
    return gateway_factory(cache_document(primary, secondary, {"kind": "memory_exact"}))


def chat(gateway: GatewayThread, content: str = "hi", **headers: str) -> httpx.Response:
    body = {"model": "a-large", "messages": [{"role": "user", "content": content}]}
    return httpx.post(f"{gateway.url}/v1/chat/completions", json=body, headers=headers)


def test_miss_then_hit(gateway: GatewayThread, primary: FakeProvider) -> None:
    first = chat(gateway)
    second = chat(gateway)
    assert (first.status_code, second.status_code) == (200, 200)
    assert (first.headers["x-gateway-cache"], second.headers["x-gateway-cache"]) == ("miss", "hit")
    assert second.json() == first.json()
    assert len(primary.received) == 1
    other = chat(gateway, "something else")
    assert other.headers["x-gateway-cache"] == "miss" and len(primary.received) == 2


def test_stream_flag_is_not_part_of_the_key(gateway: GatewayThread, primary: FakeProvider) -> None:
    body = {"model": "a-large", "messages": HI, "stream": True, "stream_options": {"include_usage": True}}
    with httpx.stream("POST", f"{gateway.url}/v1/chat/completions", json=body) as streamed:
        streamed.read()
    assert streamed.headers["x-gateway-cache"] == "miss"
    plain = chat(gateway)
    assert plain.headers["x-gateway-cache"] == "hit" and len(primary.received) == 1
    assert plain.json()["choices"][0]["message"]["content"] == "Hello from primary"
    assert plain.json()["usage"]["completion_tokens"] == 7


def test_no_cache_skips_the_lookup_but_stores(gateway: GatewayThread, primary: FakeProvider) -> None:
    assert chat(gateway).headers["x-gateway-cache"] == "miss"
    fresh = chat(gateway, **{"cache-control": "no-cache"})
    assert fresh.headers["x-gateway-cache"] == "bypass" and len(primary.received) == 2
    other = chat(gateway, "new question", **{"cache-control": "no-cache"})
    assert other.headers["x-gateway-cache"] == "bypass"
    assert chat(gateway, "new question").headers["x-gateway-cache"] == "hit" and len(primary.received) == 3


def test_no_store_neither_reads_nor_stores(gateway: GatewayThread, primary: FakeProvider) -> None:
    assert chat(gateway, "private", **{"cache-control": "no-store"}).headers["x-gateway-cache"] == "bypass"
    assert chat(gateway, "private").headers["x-gateway-cache"] == "miss"
    assert chat(gateway, "private", **{"cache-control": "no-store"}).headers["x-gateway-cache"] == "bypass"
    assert len(primary.received) == 3


def test_only_2xx_answers_are_kept(gateway: GatewayThread, primary: FakeProvider) -> None:
    primary.reset("400")
    refused = chat(gateway)
    assert refused.status_code == 400 and refused.headers["x-gateway-cache"] == "miss"
    served = chat(gateway)
    assert served.status_code == 200 and served.headers["x-gateway-cache"] == "miss"


def test_tenants_do_not_share_answers(gateway: GatewayThread, primary: FakeProvider) -> None:
    red = {"x-scope-team": "red", "x-scope-user": "ann"}
    assert chat(gateway, **red).headers["x-gateway-cache"] == "miss"
    assert chat(gateway, **red).headers["x-gateway-cache"] == "hit"
    assert chat(gateway, **{"x-scope-team": "blue", "x-scope-user": "ann"}).headers["x-gateway-cache"] == "miss"
    assert chat(gateway, **{"x-scope-team": "red", "x-scope-user": "bob"}).headers["x-gateway-cache"] == "miss"
    assert chat(gateway).headers["x-gateway-cache"] == "miss"
    assert len(primary.received) == 4


def test_shared_cache_serves_every_tenant(
    gateway_factory: GatewayFactory, primary: FakeProvider, secondary: FakeProvider
) -> None:
    document = cache_document(primary, secondary, {"kind": "memory_exact", "shared": True})
    running = gateway_factory(document)
    assert chat(running, **{"x-scope-team": "red"}).headers["x-gateway-cache"] == "miss"
    assert chat(running, **{"x-scope-team": "blue"}).headers["x-gateway-cache"] == "hit"
    assert len(primary.received) == 1


def test_streamed_hit_replayed_to_the_vendor_a_sdk(gateway: GatewayThread, primary: FakeProvider) -> None:
    client = gateway.openai
    whole = client.with_raw_response.chat.completions.create(model="a-large", messages=HI)  # type: ignore[arg-type]
    assert whole.headers["x-gateway-cache"] == "miss"
    text = whole.parse().choices[0].message.content
    stream = client.with_raw_response.chat.completions.create(  # type: ignore[call-overload]
        model="a-large",
        messages=HI,  # type: ignore[arg-type]
        stream=True,
        stream_options={"include_usage": True},
    )
    assert stream.headers["x-gateway-cache"] == "hit"
    chunks = list(stream.parse())
    assert "".join(chunk.choices[0].delta.content or "" for chunk in chunks if chunk.choices) == text
    assert [chunk.choices[0].finish_reason for chunk in chunks if chunk.choices][-1] == "stop"
    assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens == 7
    assert len(primary.received) == 1


def test_streamed_hit_replayed_to_the_vendor_b_sdk(gateway: GatewayThread, secondary: FakeProvider) -> None:
    client = gateway.anthropic
    raw = client.messages.with_raw_response.create(model="b-small", max_tokens=64, messages=HI)  # type: ignore[arg-type]
    assert raw.headers["x-gateway-cache"] == "miss"
    whole = raw.parse()
    with client.messages.stream(model="b-small", max_tokens=64, messages=HI) as stream:  # type: ignore[arg-type]
        text = "".join(stream.text_stream)
        final = stream.get_final_message()
    assert text == whole.content[0].text  # type: ignore[union-attr]
    assert final.stop_reason == whole.stop_reason and final.usage.output_tokens == whole.usage.output_tokens
    assert len(secondary.received) == 1
    # A streamed answer is kept too, and serves a plain request.
    body = {"model": "b-small", "max_tokens": 64, "messages": [{"role": "user", "content": "streamed first"}]}
    with httpx.stream("POST", f"{gateway.url}/v1/messages", json={**body, "stream": True}) as streamed:
        streamed.read()
    assert streamed.headers["x-gateway-cache"] == "miss"
    plain = httpx.post(f"{gateway.url}/v1/messages", json=body)
    assert plain.headers["x-gateway-cache"] == "hit" and plain.json()["content"][0]["text"] == whole.content[0].text  # type: ignore[union-attr]
    assert len(secondary.received) == 2


def test_translated_answers_are_cached_per_client_protocol(gateway: GatewayThread, secondary: FakeProvider) -> None:
    body = {"model": "b-small", "messages": HI}
    first = httpx.post(f"{gateway.url}/v1/chat/completions", json=body)
    second = httpx.post(f"{gateway.url}/v1/chat/completions", json=body)
    assert (first.headers["x-gateway-cache"], second.headers["x-gateway-cache"]) == ("miss", "hit")
    assert second.json()["object"] == "chat.completion" and len(secondary.received) == 1


def test_hit_usage_record(
    gateway_factory: GatewayFactory, primary: FakeProvider, secondary: FakeProvider, capsys: pytest.CaptureFixture[str]
) -> None:
    sinks = [{"name": "out", "kind": "stdout", "flush_interval_ms": 0}]
    document = cache_document(primary, secondary, {"kind": "memory_exact"}, usage_sinks=sinks)
    document["destinations"]["shape_a"]["pricing"] = {"input_per_1m": 1.0, "output_per_1m": 2.0}
    running = gateway_factory(document)
    records = StdoutRecords(capsys)
    miss = records.of(chat(running).headers["x-request-id"])
    hit = records.of(chat(running).headers["x-request-id"])
    assert miss["cache_hit"] is False and miss["cost_usd"] > 0 and miss["input_tokens"] == 11
    assert hit["cache_hit"] is True and hit["cost_usd"] == 0
    assert (hit["status"], hit["route"], hit["input_tokens"], hit["output_tokens"]) == (200, "to_a", 0, 0)


def test_unconfigured_cache_adds_no_header(
    gateway_factory: GatewayFactory, primary: FakeProvider, secondary: FakeProvider
) -> None:
    document = cache_document(primary, secondary, {"kind": "memory_exact"})
    document["plugins"] = {}
    running = gateway_factory(document)
    assert "x-gateway-cache" not in chat(running).headers


def test_memory_entries_are_bounded(
    gateway_factory: GatewayFactory, primary: FakeProvider, secondary: FakeProvider
) -> None:
    document = cache_document(primary, secondary, {"kind": "memory_exact", "max_entries": 1})
    running = gateway_factory(document)
    chat(running, "one")
    chat(running, "two")
    assert chat(running, "one").headers["x-gateway-cache"] == "miss"
    assert chat(running, "one").headers["x-gateway-cache"] == "hit"


def test_bad_option_fails_naming_it(
    gateway_factory: GatewayFactory, primary: FakeProvider, secondary: FakeProvider
) -> None:
    document = cache_document(primary, secondary, {"kind": "memory_exact", "max_entires": 5})
    with pytest.raises(Exception, match=r"plugins\.cache\.max_entires"):
        gateway_factory(document)


# redis_exact


def redis_cache(url: str, **options: Any) -> dict[str, Any]:
    return {"kind": "redis_exact", "url": url, "key_prefix": f"gw:cache-test:{uuid.uuid4().hex}:", **options}


def test_redis_exact_is_shared_between_replicas(
    gateway_factory: GatewayFactory, primary: FakeProvider, secondary: FakeProvider
) -> None:
    cache = redis_cache(REDIS_URL)
    replicas = [gateway_factory(cache_document(primary, secondary, cache)) for _ in range(2)]
    assert chat(replicas[0]).headers["x-gateway-cache"] == "miss"
    # The entry is written off the request path: wait for it to be in Redis.
    client = redis.Redis.from_url(REDIS_URL)
    wait_until(lambda: client.keys(cache["key_prefix"] + "*"), what="the cache entry in redis")
    assert chat(replicas[1]).headers["x-gateway-cache"] == "hit"
    assert len(primary.received) == 1
    keys = client.keys(cache["key_prefix"] + "*")
    assert len(keys) == 1 and 0 < client.ttl(keys[0]) <= 300
    client.delete(*keys)
    client.close()


def test_redis_down_is_a_miss(gateway_factory: GatewayFactory, primary: FakeProvider, secondary: FakeProvider) -> None:
    running = gateway_factory(cache_document(primary, secondary, redis_cache(f"redis://127.0.0.1:{free_port()}")))
    for _ in range(3):
        response = chat(running)
        assert response.status_code == 200 and response.headers["x-gateway-cache"] == "miss"
    assert len(primary.received) == 3


class SilentServer:
    """A TCP server on loopback that accepts connections and never answers."""

    def __init__(self) -> None:
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.connections: list[socket.socket] = []
        self.thread = threading.Thread(target=self._accept, daemon=True)

    def _accept(self) -> None:
        while True:
            try:
                connection, _ = self.listener.accept()
            except OSError:
                return
            self.connections.append(connection)

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.listener.getsockname()[1]}"

    def __enter__(self) -> SilentServer:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.listener.close()
        for connection in self.connections:
            connection.close()


def test_redis_slow_past_timeout_is_a_miss(
    gateway_factory: GatewayFactory, primary: FakeProvider, secondary: FakeProvider
) -> None:
    with SilentServer() as silent:
        running = gateway_factory(cache_document(primary, secondary, redis_cache(silent.url, timeout_ms=50)))
        for _ in range(3):
            response = chat(running)
            assert response.status_code == 200 and response.headers["x-gateway-cache"] == "miss"
            assert response.elapsed.total_seconds() < 2
        assert len(primary.received) == 3 and silent.connections
        running.stop()  # before the silent server closes its connections


# The replay and assembly of streams, without sockets.


def _assembled(frames: list[bytes], assembler: ChatAssembler | MessagesAssembler) -> Any:
    decoder = SseDecoder()
    for event in decoder.feed(b"".join(frames)):
        assembler.feed(event.data)
    return assembler.document(None)


def test_chat_replay_round_trips_tool_calls() -> None:
    call = {"id": "call_1", "type": "function", "function": {"name": "f", "arguments": json.dumps({"x": 1})}}
    document = {
        "id": "c1",
        "object": "chat.completion",
        "created": 5,
        "model": "m",
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": None, "tool_calls": [call]},
                "finish_reason": "tool_calls",
            }
        ],
        "usage": {"prompt_tokens": 1, "completion_tokens": 2, "total_tokens": 3},
    }
    assert _assembled(chat_frames(document, wants_usage=True), ChatAssembler()) == document


def test_messages_replay_round_trips_blocks() -> None:
    document = {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "model": "m",
        "content": [
            {"type": "thinking", "thinking": "hmm", "signature": "sig"},
            {"type": "text", "text": "hello"},
            {"type": "tool_use", "id": "tu_1", "name": "f", "input": {"x": [1, 2]}},
        ],
        "stop_reason": "tool_use",
        "stop_sequence": None,
        "usage": {"input_tokens": 3, "output_tokens": 4},
    }
    assert _assembled(messages_frames(document), MessagesAssembler()) == document
