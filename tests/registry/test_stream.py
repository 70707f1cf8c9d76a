"""The SSE stream against a live daphne: cursors, dialects, deltas, keep-alive, ending, and soak tests
with 50 streams that drop and resume while 5 writers append (also with Redis stopped mid-run)."""

from __future__ import annotations

import asyncio
import random
import threading
import time
from collections.abc import Callable

import httpx
import pytest
from channels.layers import channel_layers
from django.db import connection

from registry.sessions import log, notify, services
from registry.sessions.models import SessionEvent
from tests.support.live import live_registry, private_redis
from tests.support.sse import FAST, parse_frames, resuming_reader
from tests.support.tenants import make_tenant, open_session

pytestmark = pytest.mark.django_db(transaction=True)
TEXT = [{"type": "text", "text": "x"}]


@pytest.fixture
def setup():
    tenant = make_tenant("stream")
    return tenant, open_session(tenant.client)


def later(delay: float, action: Callable[[], object]) -> None:
    """Run `action` on another thread after `delay` seconds, closing that thread's database connection."""

    def run() -> None:
        try:
            action()
        finally:
            connection.close()

    threading.Timer(delay, run).start()


def emit(session_id: str, count: int, kind: str = "agent.message") -> None:
    for _ in range(count):
        log.emit(session_id=session_id, type=kind, body={"content": TEXT})


def read_until_terminated(
    url: str, headers: dict, params: dict | None = None, *, on_ping: Callable[[], object] | None = None
) -> tuple[httpx.Response, str]:
    """Read the stream to its terminal event; `on_ping` runs (once) when the first keepalive comment arrived."""
    with httpx.Client(timeout=30) as client, client.stream("GET", url, headers=headers, params=params) as response:
        text = ""
        for chunk in response.iter_text():
            text += chunk
            if on_ping is not None and ": ping" in text:
                on_ping()
                on_ping = None
            if "session.status_terminated" in text and text.endswith("\n\n"):
                break
        return response, text


def test_cursor_rules_headers_and_end(setup):
    tenant, session_id = setup
    emit(session_id, 3)
    with live_registry(**FAST) as url:
        stream_url = f"{url}/v1/sessions/{session_id}/events/stream"
        headers = {"x-api-key": tenant.api_key, "accept": "application/json"}
        # The live events come once the stream has idled long enough for a keepalive, whatever the machine's load.
        response, text = read_until_terminated(
            stream_url,
            {**headers, "Last-Event-ID": "2"},
            {"from_cursor": "1"},
            on_ping=lambda: emit_then_terminate(session_id, "agent.message"),
        )
        assert response.headers["content-type"] == "text/event-stream"
        assert response.headers["cache-control"] == "no-cache"
        assert response.headers["x-accel-buffering"] == "no"
        frames, comments = parse_frames(text)
        # Last-Event-ID wins over from_cursor; the cursor is inclusive; live events follow; the stream ends.
        assert [frame.id for frame in frames] == [2, 3, 4, 5]
        assert [frame.event for frame in frames][-1] == "session.status_terminated"
        assert all(frame.data["type"] == frame.event and frame.data["id"].startswith("sevt_") for frame in frames)
        assert all("seq" not in frame.data for frame in frames)
        assert any(comment.startswith(": ping") for comment in comments)


def _session(session_id):
    from registry.sessions.models import Session

    return Session.objects.get(pk=session_id)


def emit_then_terminate(session_id: str, *kinds: str) -> None:
    for kind in kinds:
        emit(session_id, 1, kind)
    services.session_archive(session=_session(session_id))


def test_without_cursor_only_new_events_and_native_dialect(setup):
    tenant, session_id = setup
    emit(session_id, 2)
    with live_registry(**FAST) as url:
        later(1.0, lambda: emit_then_terminate(session_id, "span.model_request_start", "agent.message"))
        _, text = read_until_terminated(
            f"{url}/v1/sessions/{session_id}/events/stream", {"x-api-key": tenant.api_key, "native-beta": "1"}
        )
        frames, _ = parse_frames(text)
        assert [(frame.id, frame.event) for frame in frames] == [
            (3, "span.model_request_start"),
            (4, "agent.message"),
            (5, "session.status_terminated"),
        ]
        assert frames[1].data["seq"] == 4


def test_deltas_only_for_requested_types(setup):
    tenant, session_id = setup
    reserved = "sevt_reservedpreviewid00000001"

    def produce():
        notify.publish_delta(
            session_id, "agent.message", {"type": "event_start", "event": {"id": reserved, "type": "agent.message"}}
        )
        notify.publish_delta(
            session_id,
            "agent.message",
            {
                "type": "event_delta",
                "event_id": reserved,
                "delta": {"type": "content_delta", "index": 0, "content": {"type": "text", "text": "he"}},
            },
        )
        notify.publish_delta(
            session_id, "agent.thinking", {"type": "event_start", "event": {"id": "sevt_t", "type": "agent.thinking"}}
        )
        log.emit(session_id=session_id, type="agent.message", body={"content": TEXT}, event_id=reserved)
        services.session_archive(session=_session(session_id))

    with live_registry(**FAST) as url:
        later(1.0, produce)
        _, text = read_until_terminated(
            f"{url}/v1/sessions/{session_id}/events/stream?event_deltas=agent.message", {"x-api-key": tenant.api_key}
        )
        frames, _ = parse_frames(text)
        assert [(frame.event, frame.id) for frame in frames][:3] == [
            ("event_start", None),
            ("event_delta", None),
            ("agent.message", 1),
        ]
        assert frames[0].data["event"]["id"] == frames[2].data["id"] == reserved
        assert "agent.thinking" not in text
        assert SessionEvent.objects.filter(type__startswith="event_").count() == 0  # never persisted


def test_refusals_are_json_errors(setup):
    tenant, session_id = setup
    other = make_tenant("other")
    with live_registry(**FAST) as url, httpx.Client(base_url=url, timeout=10) as client:
        path = f"/v1/sessions/{session_id}/events/stream"
        cases = [
            ({}, {}, 401, "authentication_error"),
            ({"x-api-key": "sk-reg-wrong"}, {}, 401, "authentication_error"),
            ({"x-api-key": other.api_key}, {}, 404, "not_found_error"),
            ({"x-api-key": tenant.api_key}, {"from_cursor": "x"}, 400, "invalid_request_error"),
            ({"x-api-key": tenant.api_key}, {"event_deltas": "agent.nope"}, 400, "invalid_request_error"),
        ]
        for headers, params, status, error_type in cases:
            response = client.get(path, headers=headers, params=params)
            assert response.status_code == status
            assert response.json()["error"]["type"] == error_type
            assert response.json()["request_id"] == response.headers["request-id"]
        assert (
            client.get("/v1/sessions/sesn_missing/events/stream", headers={"x-api-key": tenant.api_key}).status_code
            == 404
        )


# -- soak ---------------------------------------------------------------------------------------
READERS = 50


def run_soak(
    url: str, api_key: str, session_id: str, *, writers: int = 5, per_writer: int = 40, midway=None
) -> list[list[int]]:
    def write(index: int) -> None:
        rng = random.Random(index)
        for count in range(per_writer):
            log.emit(session_id=session_id, type="agent.message", body={"content": TEXT})
            time.sleep(rng.uniform(0.005, 0.03))
            if index == 0 and count == per_writer // 2 and midway:
                midway()
        connection.close()

    async def readers() -> list[list[int]]:
        stream_url = f"{url}/v1/sessions/{session_id}/events/stream"
        return await asyncio.gather(
            *(resuming_reader(stream_url, api_key, random.Random(seed), opened) for seed in range(READERS))
        )

    results: list[list[list[int]]] = []
    opened = threading.Semaphore(0)
    reader_thread = threading.Thread(target=lambda: results.append(asyncio.run(readers())))
    reader_thread.start()
    for _ in range(READERS):  # every stream is open before the writers start
        assert opened.acquire(timeout=60), "a stream did not open"
    threads = [threading.Thread(target=write, args=(index,)) for index in range(writers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    services.session_archive(session=_session(session_id))
    reader_thread.join(timeout=120)
    assert results, "readers did not finish"
    return results[0]


def assert_every_stream_got_the_log(session_id: str, streams: list[list[int]]) -> None:
    log = list(
        SessionEvent.objects.filter(session_id=session_id, seq__isnull=False)
        .order_by("seq")
        .values_list("seq", flat=True)
    )
    assert log == list(range(1, len(log) + 1))  # the log itself is gap-free
    assert len(streams) == 50
    for received in streams:
        assert received == log  # 0 lost, 0 duplicated, in order


def test_soak_fifty_resuming_streams_five_writers(setup):
    tenant, session_id = setup
    with live_registry(**FAST) as url:
        streams = run_soak(url, tenant.api_key, session_id)
    assert_every_stream_got_the_log(session_id, streams)


def test_soak_with_redis_stopped_mid_run(setup, settings):
    tenant, session_id = setup
    with private_redis() as redis:
        settings.CHANNEL_LAYERS = {
            "default": {"BACKEND": "channels_redis.core.RedisChannelLayer", "CONFIG": {"hosts": [redis.url]}}
        }
        channel_layers.backends.clear()
        with live_registry(REDIS_URL=redis.url, **FAST) as url:
            streams = run_soak(url, tenant.api_key, session_id, midway=redis.stop)
        assert redis.process is None  # Redis really was gone for the second half
    channel_layers.backends.clear()
    assert_every_stream_got_the_log(session_id, streams)
