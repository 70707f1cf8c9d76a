"""End to end, the gateway's answers to failing upstreams: outlier ejection and panic routing, `retry-after` in
the retry backoff, malformed answers and refusals of the gateway's own key (502 and fallback), vault outages,
and the accounting of streams that end early."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from fakes.waiting import wait_until
from tests.support.gateway.documents import destination, fallback_route, path_vault
from tests.support.gateway.provider import FakeProvider
from tests.support.gateway.sinks import StdoutRecords
from tests.support.gateway.thread import GatewayFactory, GatewayThread
from tests.support.live import free_port

pytestmark = pytest.mark.e2e
HI: Any = [{"role": "user", "content": "hi"}]
VAULT = "static"
LONG = {"consecutive_failures": 5, "ejection_ms": 60000}


def _destination(provider: FakeProvider, vault: str = VAULT, **extra: Any) -> dict[str, Any]:
    return destination("vendor_a_compatible", f"{provider.url}/v1", vault, **extra)


def _route(model: str, *destinations: str, **strategy: Any) -> dict[str, Any]:
    """The route `model` of the model of that name."""
    return fallback_route(model, model, *destinations, strategy=strategy)


@pytest.fixture(scope="module")
def gateway(module_gateway_factory: GatewayFactory, primary: FakeProvider, secondary: FakeProvider) -> GatewayThread:
    document = {
        "server": {"request_timeout_ms": 5000},
        "vaults": [
            path_vault(VAULT),
            {"name": "down", "resolver": "http", "url_template": f"http://127.0.0.1:{free_port()}/{{credential_id}}"},
        ],
        "destinations": {
            "first": _destination(primary, outlier_detection=LONG),
            "second": {"kind": "vendor_b", "base_url": secondary.url, "credentials": {"vault": VAULT}},
            "flaky": _destination(primary, outlier_detection={"consecutive_failures": 1, "ejection_ms": 300}),
            "p1": _destination(primary, outlier_detection={"consecutive_failures": 1, "ejection_ms": 60000}),
            "p2": _destination(secondary, outlier_detection={"consecutive_failures": 1, "ejection_ms": 60000}),
            "counted": _destination(primary, outlier_detection={"consecutive_failures": 2, "ejection_ms": 60000}),
            "cutting": _destination(primary, outlier_detection=LONG),
            "plain": _destination(primary),
            "vaulted": _destination(primary, vault="down"),
        },
        "routes": [
            _route("ej", "first", "second"),
            _route("ex", "flaky", "second"),
            _route("pa", "p1", "p2"),
            _route("ct", "counted"),
            _route("cu", "cutting", "second"),
            _route("mf", "plain", "second"),
            _route("sg", "plain"),
            _route("ra", "plain", retry={"triggers": ["429"], "max_attempts": 2, "backoff_ms": 1}),
            _route("va", "vaulted"),
            _route("vf", "vaulted", "second"),
        ],
    }
    return module_gateway_factory(document)


def chat(gateway: GatewayThread, model: str, **extra: Any) -> httpx.Response:
    return httpx.post(f"{gateway.url}/v1/chat/completions", json={"model": model, "messages": HI, **extra})


def outlier_of(gateway: GatewayThread, name: str) -> dict[str, Any]:
    listing = httpx.get(f"{gateway.admin_url}/admin/v1/destinations").json()["data"]
    found: dict[str, Any] = next(row for row in listing if row["name"] == name)["outlier"]
    return found


def code_of(response: httpx.Response) -> str:
    code: str = response.json()["error"]["code"]
    return code


def test_five_failures_eject_a_destination_which_then_sees_no_traffic(
    gateway: GatewayThread, primary: FakeProvider, secondary: FakeProvider
) -> None:
    primary.reset("500", "500", "500", "500", "500")
    for _ in range(5):
        answered = chat(gateway, "ej")
        assert answered.status_code == 200 and "secondary" in answered.text
    assert len(primary.received) == 5
    assert outlier_of(gateway, "first")["ejected"] is True
    primary.reset()
    for _ in range(3):
        assert chat(gateway, "ej").status_code == 200
    assert primary.received == [] and len(secondary.received) == 8
    outlier = outlier_of(gateway, "first")
    assert outlier["ejections"] == 1 and outlier["ejected_until"] > time.time() + 50
    assert 'gateway_destination_ejected{destination="first"} 1.0' in gateway.metrics_text
    assert outlier_of(gateway, "second") == {"ejected": False, "ejected_until": None, "ejections": 0}


def test_streams_cut_mid_way_five_times_eject_the_destination(
    gateway: GatewayThread, primary: FakeProvider, secondary: FakeProvider
) -> None:
    primary.reset(*["break_stream"] * 5)
    for cut in range(5):
        assert outlier_of(gateway, "cutting")["ejected"] is False, f"ejected after {cut} cut streams"
        with httpx.stream(
            "POST", f"{gateway.url}/v1/chat/completions", json={"model": "cu", "messages": HI, "stream": True}
        ) as response:
            text = response.read().decode()
        assert response.status_code == 200 and "upstream_error" in text  # the cut reached the client as an event
    wait_until(lambda: outlier_of(gateway, "cutting")["ejected"], what="the destination ejected")
    assert outlier_of(gateway, "cutting")["ejections"] == 1
    primary.reset()
    before = len(secondary.received)
    assert "secondary" in chat(gateway, "cu").text  # no longer tried: the fallback answers
    assert len(primary.received) == 0 and len(secondary.received) == before + 1


def test_an_ejected_destination_returns_once_ejection_ms_passed(gateway: GatewayThread, primary: FakeProvider) -> None:
    primary.reset("500")
    ejected_at = time.monotonic()
    assert chat(gateway, "ex").status_code == 200
    assert len(primary.received) == 1 and outlier_of(gateway, "flaky")["ejected"] is True
    assert chat(gateway, "ex").status_code == 200 and len(primary.received) == 1

    def back() -> bool:
        return chat(gateway, "ex").status_code == 200 and len(primary.received) == 2

    wait_until(back, what="the ejected destination to be tried again")
    assert time.monotonic() - ejected_at >= 0.3
    assert outlier_of(gateway, "flaky") == {"ejected": False, "ejected_until": None, "ejections": 0}
    assert 'gateway_destination_ejected{destination="flaky"} 0.0' in gateway.metrics_text


def test_when_every_target_is_ejected_the_one_ejected_longest_ago_is_tried(
    gateway: GatewayThread, primary: FakeProvider, secondary: FakeProvider
) -> None:
    primary.reset("500")
    secondary.reset("500")
    failed = chat(gateway, "pa")
    assert failed.status_code == 502 and code_of(failed) == "upstream_error"
    assert outlier_of(gateway, "p1")["ejected"] and outlier_of(gateway, "p2")["ejected"]
    primary.reset()
    secondary.reset()
    answered = chat(gateway, "pa")
    assert answered.status_code == 200 and "primary" in answered.text
    assert len(primary.received) == 1 and secondary.received == []
    assert outlier_of(gateway, "p1")["ejected"] is False  # the panic-routed success ended its ejection


def test_client_errors_and_rate_limits_do_not_count_toward_ejection(
    gateway: GatewayThread, primary: FakeProvider
) -> None:
    primary.reset("400", "429", "400", "429")
    for _ in range(4):
        assert chat(gateway, "ct").status_code in (400, 429)
    assert outlier_of(gateway, "counted")["ejected"] is False
    primary.reset("500", "400", "500")  # a non-failure between two failures breaks the run
    for _ in range(3):
        chat(gateway, "ct")
    assert outlier_of(gateway, "counted")["ejected"] is False
    primary.reset("500", "500")
    chat(gateway, "ct")
    chat(gateway, "ct")
    assert outlier_of(gateway, "counted")["ejected"] is True


def test_retry_waits_at_least_the_upstream_retry_after(gateway: GatewayThread, primary: FakeProvider) -> None:
    primary.reset("retry_after:1")
    answered = chat(gateway, "ra")
    assert answered.status_code == 200 and len(primary.received) == 2
    assert primary.received[1].at - primary.received[0].at >= 1.0


def test_a_retry_after_beyond_the_deadline_is_not_waited_for(gateway: GatewayThread, primary: FakeProvider) -> None:
    primary.reset("retry_after:30")
    started = time.monotonic()
    refused = chat(gateway, "ra")
    assert refused.status_code == 429 and code_of(refused) == "upstream_rate_limited"
    assert time.monotonic() - started < 3 and len(primary.received) == 1


def fails_alone_and_falls_back(
    gateway: GatewayThread, primary: FakeProvider, behaviour: str, code: str, **extra: Any
) -> None:
    """With `primary` answering as `behaviour`, its route alone (`sg`) is a 502 `code`, and a route with a fallback
    (`mf`) is answered by the secondary."""
    primary.reset(behaviour)
    alone = chat(gateway, "sg", **extra)
    assert alone.status_code == 502 and code_of(alone) == code
    primary.reset(behaviour)
    answered = chat(gateway, "mf", **extra)
    assert answered.status_code == 200 and "secondary" in answered.text


@pytest.mark.parametrize("behaviour", ["not_json", "truncated"])
def test_a_malformed_answer_is_502_and_falls_back(
    gateway: GatewayThread, primary: FakeProvider, behaviour: str
) -> None:
    fails_alone_and_falls_back(gateway, primary, behaviour, "upstream_error")


def test_a_malformed_event_stream_frame_is_502_and_falls_back(gateway: GatewayThread, primary: FakeProvider) -> None:
    fails_alone_and_falls_back(gateway, primary, "bad_frame", "upstream_error", stream=True)


@pytest.mark.parametrize("status", ["401", "403"])
def test_a_refusal_of_the_gateway_key_is_502_upstream_auth_failed_and_falls_back(
    gateway: GatewayThread, primary: FakeProvider, status: str
) -> None:
    def failures() -> float:
        for line in gateway.metrics_text.splitlines():
            if line.startswith('gateway_upstream_auth_failures_total{destination="plain"}'):
                return float(line.split()[-1])
        return 0.0

    before = failures()
    fails_alone_and_falls_back(gateway, primary, status, "upstream_auth_failed")
    assert failures() == before + 2


def test_an_http_vault_outage_is_502_vault_unavailable_and_falls_back(gateway: GatewayThread) -> None:
    down = chat(gateway, "va")
    assert down.status_code == 502 and code_of(down) == "vault_unavailable"
    answered = chat(gateway, "vf")
    assert answered.status_code == 200 and "secondary" in answered.text


# Streams that end early.

TPM = 100_000


@pytest.fixture
def metered(gateway_factory: GatewayFactory, tmp_path: Path, primary: FakeProvider) -> GatewayThread:
    spend = {"headers": {"enabled": True}, "admission": {"default_max_output_tokens": 1000}}
    return gateway_factory(metered_document(primary, rate_limits=[{"name": "all", "tpm": TPM}], spend=spend))


def settled(
    capsys: pytest.CaptureFixture[str], request_id: str, *, status: int, partial: bool = True
) -> dict[str, Any]:
    """The stdout usage record of a streamed request, checked to be settled with `status` (and, when `partial`, on
    the tokens that did flow)."""
    record = StdoutRecords(capsys).of(request_id)
    assert (record["streamed"], record["partial"], record["status"]) == (True, partial, status)
    if partial:
        assert record["output_tokens"] > 0 and record["input_tokens"] > 0
    return record


def metered_document(provider: FakeProvider, **sections: Any) -> dict[str, Any]:
    """Model `st` on `provider`, its usage records printed by the `stdout` sink; plus `sections`."""
    return {
        "vaults": [path_vault(VAULT)],
        "destinations": {"plain": _destination(provider)},
        "routes": [_route("st", "plain")],
        "plugins": {"usage_sinks": [{"name": "out", "kind": "stdout", "flush_interval_ms": 0}]},
        **sections,
    }


STREAM_BODY = {"model": "st", "messages": HI, "stream": True, "max_tokens": 1000}


def _charged_tokens(metered: GatewayThread, estimate: int, record: dict[str, Any]) -> None:
    """The next request sees the partial stream's tokens charged against `tpm`, not its estimate."""
    after = httpx.post(f"{metered.url}/v1/chat/completions", json={**STREAM_BODY, "stream": False})
    remaining = int(after.headers["x-ratelimit-remaining-tokens"])
    charged = record["input_tokens"] + record["output_tokens"]
    assert TPM - charged - estimate <= remaining <= TPM - charged - estimate + 200  # plus refill meanwhile


def test_a_stream_cut_by_the_upstream_is_settled_as_partial_502(
    metered: GatewayThread, primary: FakeProvider, capsys: pytest.CaptureFixture[str]
) -> None:
    primary.reset("break_stream")
    with httpx.stream("POST", f"{metered.url}/v1/chat/completions", json=STREAM_BODY) as response:
        text = response.read().decode()
    assert response.status_code == 200 and "upstream_error" in text
    estimate = TPM - int(response.headers["x-ratelimit-remaining-tokens"])
    record = settled(capsys, response.headers["x-request-id"], status=502)
    _charged_tokens(metered, estimate, record)


def test_a_stream_the_client_abandons_is_settled_as_partial_499(
    metered: GatewayThread, primary: FakeProvider, capsys: pytest.CaptureFixture[str]
) -> None:
    primary.reset("stall_stream")
    with httpx.stream("POST", f"{metered.url}/v1/chat/completions", json=STREAM_BODY) as response:
        lines = response.iter_lines()
        assert next(line for line in lines if "Hello" in line)
        estimate = TPM - int(response.headers["x-ratelimit-remaining-tokens"])
        request_id = response.headers["x-request-id"]
    record = settled(capsys, request_id, status=499)
    _charged_tokens(metered, estimate, record)


def test_a_complete_stream_is_not_partial(
    metered: GatewayThread, primary: FakeProvider, capsys: pytest.CaptureFixture[str]
) -> None:
    with httpx.stream("POST", f"{metered.url}/v1/chat/completions", json=STREAM_BODY) as response:
        response.read()
    settled(capsys, response.headers["x-request-id"], status=200, partial=False)


def test_a_stream_that_goes_idle_is_settled_as_partial_504(
    gateway_factory: GatewayFactory, primary: FakeProvider, capsys: pytest.CaptureFixture[str]
) -> None:
    running = gateway_factory(metered_document(primary, server={"stream_idle_timeout_ms": 300}))
    primary.reset("stall_stream")
    with httpx.stream("POST", f"{running.url}/v1/chat/completions", json=STREAM_BODY) as response:
        text = response.read().decode()
    assert "upstream_timeout" in text
    settled(capsys, response.headers["x-request-id"], status=504)
