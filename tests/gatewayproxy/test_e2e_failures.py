"""End to end under failure: fallback, retry, per-attempt timeout, load balancing, broken streams."""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

import anthropic
import httpx
import openai
import pytest

from tests.support.gateway.documents import destination, fallback_route, path_vault
from tests.support.gateway.provider import FakeProvider
from tests.support.gateway.thread import GatewayFactory, GatewayThread

pytestmark = pytest.mark.e2e
HI: Any = [{"role": "user", "content": "hi"}]
RETRY_5XX_429 = {"triggers": ["http_5xx", "429"], "max_attempts": 3}


def _route(name: str, model: str, strategy: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {"name": name, "match": {"model": model}, "strategy": strategy, **extra}


@pytest.fixture(scope="module")
def gateway(module_gateway_factory: GatewayFactory, primary: FakeProvider, secondary: FakeProvider) -> GatewayThread:
    vault = "static"
    destinations = {
        "first": destination("vendor_a_compatible", f"{primary.url}/v1", vault),
        "second": destination("vendor_b", secondary.url, vault),
    }
    routes = [
        fallback_route("fallback", "fb", "first", "second"),
        fallback_route(
            "retry",
            "rt",
            "first",
            strategy={"retry": {"triggers": ["http_5xx", "429"], "max_attempts": 3, "backoff_ms": 1}},
        ),
        fallback_route("no-retry", "nr", "first"),
        fallback_route("timeout", "to", "first", "second", strategy={"timeout_ms": 300}),
        fallback_route(
            "unsafe",
            "us",
            "first",
            "second",
            strategy={"retry": {"triggers": ["5xx"], "max_attempts": 3}},
            idempotency_safe=False,
        ),
        _route(
            "balanced",
            "lb",
            {
                "mode": "loadbalance",
                "targets": [{"destination": "first", "weight": 75}, {"destination": "second", "weight": 25}],
            },
        ),
        _route(
            "excluded",
            "lx",
            {
                "mode": "loadbalance",
                "targets": [{"destination": "first", "weight": 0}, {"destination": "second", "weight": 100}],
            },
        ),
        _route(
            "conditional",
            "cd-*",
            {
                "mode": "conditional",
                "conditions": [{"if": {"header.x-tier": "gold"}, "target": "second"}],
                "default": "first",
            },
        ),
        _route(
            "shaped",
            "sp",
            {
                "mode": "fallback",
                "targets": [
                    {
                        "destination": "first",
                        "default_params": {"temperature": 0.5, "seed": 1},
                        "override_params": {"max_tokens": 10},
                        "drop_params": ["user"],
                    }
                ],
            },
        ),
    ]
    return module_gateway_factory({"vaults": [path_vault(vault)], "destinations": destinations, "routes": routes})


def chat(gateway: GatewayThread, model: str, **extra: Any) -> Any:
    client = gateway.openai
    return client.chat.completions.create(model=model, messages=HI, **extra)  # type: ignore[arg-type]


def test_fallback_moves_to_the_next_target_on_5xx(
    gateway: GatewayThread, primary: FakeProvider, secondary: FakeProvider
) -> None:
    primary.reset("500")
    assert chat(gateway, "fb").choices[0].message.content == "Hello from secondary"
    assert len(primary.received) == 1 and len(secondary.received) == 1
    assert 'gateway_fallbacks_total{route="fallback"} 1.0' in gateway.metrics_text


@pytest.mark.parametrize(
    ("behaviour", "model"), [("429", "fb"), ("hang", "to")], ids=["fallback_on_429", "timeout_per_attempt"]
)
def test_the_next_target_answers(
    gateway: GatewayThread, primary: FakeProvider, secondary: FakeProvider, behaviour: str, model: str
) -> None:
    """A 429 falls back; so does an attempt cut by the route's per-attempt timeout."""
    primary.reset(behaviour)
    assert chat(gateway, model).choices[0].message.content == "Hello from secondary"


def test_client_errors_pass_back_without_fallback(
    gateway: GatewayThread, primary: FakeProvider, secondary: FakeProvider
) -> None:
    primary.reset("400")
    with pytest.raises(openai.BadRequestError) as raised:
        chat(gateway, "fb")
    assert raised.value.message.endswith("scripted 400")
    assert secondary.received == []


@pytest.mark.parametrize(
    ("behaviour", "model", "status", "code"),
    [("500", "fb", 502, "upstream_error"), ("hang", "to", 504, "upstream_timeout")],
    ids=["every_target_failing_maps_to_upstream_error", "timeout_of_the_last_target_is_504"],
)
def test_when_every_target_fails(
    gateway: GatewayThread,
    primary: FakeProvider,
    secondary: FakeProvider,
    behaviour: str,
    model: str,
    status: int,
    code: str,
) -> None:
    primary.reset(behaviour)
    secondary.reset(behaviour)
    with pytest.raises(openai.APIStatusError) as raised:
        chat(gateway, model)
    assert (raised.value.status_code, raised.value.code) == (status, code)


def test_final_429_is_upstream_rate_limited_with_retry_after(gateway: GatewayThread, primary: FakeProvider) -> None:
    primary.reset("429")
    response = httpx.post(f"{gateway.url}/v1/chat/completions", json={"model": "nr", "messages": HI})
    assert response.status_code == 429
    assert response.json()["error"]["code"] == "upstream_rate_limited"
    assert response.headers["retry-after"] == "1"


def test_retry_counts_every_call_and_stops_at_max_attempts(gateway: GatewayThread, primary: FakeProvider) -> None:
    primary.reset("500", "429")
    assert chat(gateway, "rt").choices[0].message.content == "Hello from primary"
    assert len(primary.received) == 3
    primary.reset("500", "500", "500", "ok")
    with pytest.raises(openai.InternalServerError):
        chat(gateway, "rt")
    assert len(primary.received) == 3


def test_without_triggers_a_target_gets_one_attempt(gateway: GatewayThread, primary: FakeProvider) -> None:
    primary.reset("500", "ok")
    with pytest.raises(openai.InternalServerError):
        chat(gateway, "nr")
    assert len(primary.received) == 1


def test_not_idempotency_safe_means_one_attempt_no_fallback(
    gateway: GatewayThread, primary: FakeProvider, secondary: FakeProvider
) -> None:
    primary.reset("500")
    with pytest.raises(openai.InternalServerError):
        chat(gateway, "us")
    assert len(primary.received) == 1 and secondary.received == []


def test_loadbalance_follows_weights(gateway: GatewayThread, primary: FakeProvider, secondary: FakeProvider) -> None:
    """400 draws at 75/25: the binomial standard deviation is under 9 requests, so 300 +/- 45 is > 5 sigma."""
    with httpx.Client(base_url=gateway.url) as client:
        served = Counter(
            client.post("/v1/chat/completions", json={"model": "lb", "messages": HI}).json()["choices"][0]["message"][
                "content"
            ]
            for _ in range(400)
        )
    assert abs(served["Hello from primary"] - 300) <= 45
    assert served["Hello from primary"] + served["Hello from secondary"] == 400


def test_loadbalance_weight_zero_excludes(gateway: GatewayThread, primary: FakeProvider) -> None:
    for _ in range(20):
        assert chat(gateway, "lx").choices[0].message.content == "Hello from secondary"
    assert primary.received == []


def test_conditional_routes_on_a_header(gateway: GatewayThread) -> None:
    assert chat(gateway, "cd-1", extra_headers={"x-tier": "gold"}).choices[0].message.content == "Hello from secondary"
    assert chat(gateway, "cd-1").choices[0].message.content == "Hello from primary"


def test_params_default_override_drop(gateway: GatewayThread, primary: FakeProvider) -> None:
    chat(gateway, "sp", temperature=0.9, max_tokens=99, user="u1")
    sent = primary.received[0].body
    assert sent["temperature"] == 0.9 and sent["seed"] == 1 and sent["max_tokens"] == 10 and "user" not in sent


def test_client_cannot_choose_the_upstream(gateway: GatewayThread, primary: FakeProvider) -> None:
    response = httpx.post(
        f"{gateway.url}/v1/chat/completions", json={"model": "fb", "messages": HI, "api_base": "http://evil.example"}
    )
    assert response.status_code == 400 and response.json()["error"]["code"] == "invalid_request"
    assert primary.received == []


def test_stream_failure_before_first_byte_falls_back(gateway: GatewayThread, primary: FakeProvider) -> None:
    primary.reset("empty_stream")
    chunks: list[Any] = list(chat(gateway, "fb", stream=True))
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == "Hello from secondary"


def test_chat_stream_broken_after_first_byte_ends_with_an_error(gateway: GatewayThread, primary: FakeProvider) -> None:
    primary.reset("break_stream")
    with pytest.raises(openai.APIError) as raised:
        list(chat(gateway, "nr", stream=True))
    assert "stream" in raised.value.message


def test_messages_stream_broken_after_first_byte_ends_with_an_error_event(
    gateway: GatewayThread, secondary: FakeProvider
) -> None:
    secondary.reset("break_stream")
    with httpx.stream(
        "POST", f"{gateway.url}/v1/messages", json={"model": "lx", "max_tokens": 5, "messages": HI, "stream": True}
    ) as response:
        body = response.read().decode()
    last = body.strip().split("\n\n")[-1]
    assert last.startswith("event: error\n")
    assert json.loads(last.split("data: ", 1)[1])["error"]["code"] == "upstream_error"
    client = gateway.anthropic
    secondary.reset("break_stream")
    with (
        pytest.raises(anthropic.APIStatusError),
        client.messages.stream(model="lx", max_tokens=5, messages=[{"role": "user", "content": "hi"}]) as stream,
    ):
        list(stream.text_stream)
