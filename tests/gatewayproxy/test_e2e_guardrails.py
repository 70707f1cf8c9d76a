"""Payload guardrails end to end with the official clients: `pii_regex`, `ext_proc` and `llm_evaluator` on input
and output, plain and streamed, their failure modes, and the boot-time option checks."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anthropic
import httpx
import openai
import pytest

from gatewayproxy.config.loader import ConfigError, validate_document
from gatewayproxy.config.models import PluginInstance
from gatewayproxy.metrics import GatewayMetrics
from gatewayproxy.pipeline.stages import SharedParts
from gatewayproxy.plugins.decisions import BackendError
from gatewayproxy.plugins.guardrails import PiiRegex, PiiRegexOptions, Verdict, parse_verdict
from gatewayproxy.server.upstream import UpstreamPool
from gatewayproxy.state import build_state
from tests.support.gateway.decisions import HANG, JsonServer, classifier_completion
from tests.support.gateway.documents import destination, fallback_route, static_vault
from tests.support.gateway.provider import FakeProvider
from tests.support.gateway.thread import GatewayFactory, GatewayThread
from tests.support.serving import serving

pytestmark = pytest.mark.e2e
HI: Any = [{"role": "user", "content": "hi"}]
# Matches what the fake providers answer ("Hello from <name>").
SPEAKER: Any = {
    "name": "names",
    "kind": "pii_regex",
    "builtins": [],
    "phases": ["output"],
    "patterns": {"provider": "from (primary|secondary)"},
}


def document(
    primary: FakeProvider, secondary: FakeProvider, vault: dict[str, Any], guardrails: list[dict], judge_url: str
) -> dict[str, Any]:
    """Models `a-*` on a chat-shaped destination, `b-*` on a messages-shaped one, `judge` on a classifier."""
    return {
        "vaults": [vault],
        "destinations": {
            "shape_a": destination("vendor_a", f"{primary.url}/v1", "files", "provider"),
            "shape_b": destination("vendor_b", secondary.url, "files", "provider"),
            "judge": destination("vendor_a_compatible", f"{judge_url}/v1", "files", "provider"),
        },
        "routes": [
            fallback_route("judge", "judge", "judge"),
            fallback_route("to_a", "a-*", "shape_a"),
            fallback_route("to_b", "b-*", "shape_b"),
        ],
        "plugins": {"guardrails": guardrails},
    }


@pytest.fixture
def guarded(
    gateway_factory: GatewayFactory, primary: FakeProvider, secondary: FakeProvider, tmp_path: Path
) -> Callable[..., GatewayThread]:
    """Starts a gateway (for the test) with these guardrails (`judge_url=`: where model `judge` is answered)."""
    vault = static_vault(tmp_path, {"provider": "provider-secret"}, name="files")

    def start(guardrails: list[dict], judge_url: str = "http://127.0.0.1:9") -> GatewayThread:
        return gateway_factory(document(primary, secondary, vault, guardrails, judge_url))

    return start


def error_code(error: openai.APIError | anthropic.APIError) -> str:
    """The gateway's code in an official client's error (vendor A puts the error object in `body`)."""
    body: Any = error.body
    return str((body.get("error") or body).get("code") if isinstance(body, dict) else body)


def chat_stream_text(gateway: GatewayThread, model: str = "a-large") -> tuple[str, openai.APIError | None]:
    """The text a streaming chat client received, and the error that ended its stream (if any)."""
    text = ""
    try:
        chunks: Any = gateway.openai.chat.completions.create(model=model, messages=HI, stream=True)
        for chunk in chunks:
            text += "".join(choice.delta.content or "" for choice in chunk.choices)
    except openai.APIError as error:
        return text, error
    return text, None


def test_pii_regex_blocks_input_in_both_client_protocols(
    guarded: Callable[..., GatewayThread], primary: FakeProvider, secondary: FakeProvider
) -> None:
    guardrail = {"name": "pii", "kind": "pii_regex", "builtins": ["email", "us_ssn"], "phases": ["input"]}
    gateway = guarded([guardrail])
    with pytest.raises(openai.BadRequestError) as chat_refused:
        gateway.openai.chat.completions.create(
            model="a-large", messages=[{"role": "user", "content": "mail bob@example.com the plan"}]
        )
    with pytest.raises(anthropic.BadRequestError) as messages_refused:
        gateway.anthropic.messages.create(
            model="b-small",
            max_tokens=10,
            system="my SSN is 123-45-6789",
            messages=[{"role": "user", "content": "hi"}],
        )
    served = gateway.openai.chat.completions.create(model="a-large", messages=HI)
    assert error_code(chat_refused.value) == "guardrail_blocked_input"
    assert "email detected" in chat_refused.value.message and "bob@" not in chat_refused.value.message
    assert error_code(messages_refused.value) == "guardrail_blocked_input"
    assert served.choices[0].message.content == "Hello from primary"
    assert len(primary.received) == 1 and secondary.received == []


def test_pii_regex_redacts_input_before_it_leaves(
    guarded: Callable[..., GatewayThread], primary: FakeProvider, secondary: FakeProvider
) -> None:
    guardrail = {"name": "pii", "kind": "pii_regex", "action": "redact", "phases": ["input"]}
    gateway = guarded([guardrail])
    gateway.openai.chat.completions.create(
        model="a-large",
        messages=[
            {
                "role": "user",
                "content": [{"type": "text", "text": "card 4111 1111 1111 1111, not 4111 1111 1111 1112"}],
            }
        ],
    )
    gateway.anthropic.messages.create(
        model="b-small",
        max_tokens=10,
        system="reach me at +1 415-555-0100",
        messages=[{"role": "user", "content": "key sk-abcdefghijklmnop1234"}],
    )
    assert (
        primary.received[0].body["messages"][0]["content"][0]["text"]
        == "card [REDACTED:credit_card], not 4111 1111 1111 1112"
    )
    sent = secondary.received[0].body
    assert sent["system"] == "reach me at [REDACTED:phone]"
    assert sent["messages"][0]["content"] == "key [REDACTED:api_key]"


def test_pii_regex_blocks_a_plain_response(
    guarded: Callable[..., GatewayThread], primary: FakeProvider, secondary: FakeProvider
) -> None:
    guardrail = SPEAKER
    gateway = guarded([guardrail])
    with pytest.raises(openai.BadRequestError) as chat_blocked:
        gateway.openai.chat.completions.create(model="a-large", messages=HI)
    with pytest.raises(anthropic.BadRequestError) as messages_blocked:
        gateway.anthropic.messages.create(model="b-small", max_tokens=10, messages=HI)
    metrics = gateway.metrics_text
    assert error_code(chat_blocked.value) == "guardrail_blocked_output"
    assert error_code(messages_blocked.value) == "guardrail_blocked_output"
    assert 'gateway_guardrail_checks_total{guardrail="names",outcome="blocked",phase="output"} 2.0' in metrics


def test_pii_regex_ends_streams_with_an_error_event(
    guarded: Callable[..., GatewayThread], primary: FakeProvider, secondary: FakeProvider
) -> None:
    # The provider streams "Hello ", "from ", "<name>": the match spans deltas, and stops the stream before its end.
    guardrail = SPEAKER
    gateway = guarded([guardrail])
    chat_text, chat_error = chat_stream_text(gateway)
    messages_text = ""
    with (
        pytest.raises(anthropic.APIStatusError) as messages_error,
        gateway.anthropic.messages.stream(model="b-small", max_tokens=10, messages=HI) as stream,
    ):
        for text in stream.text_stream:
            messages_text += text
    assert chat_error is not None and error_code(chat_error) == "guardrail_blocked_output"
    assert "primary" not in chat_text
    assert error_code(messages_error.value) == "guardrail_blocked_output"
    assert "secondary" not in messages_text


def test_pii_regex_reads_each_streamed_choice_of_a_fan_out_whole(
    guarded: Callable[..., GatewayThread], secondary: FakeProvider
) -> None:
    # `n` streams towards a messages-shaped target run at once; the match still spans one choice's deltas.
    gateway = guarded([SPEAKER])
    text = ""
    with pytest.raises(openai.APIError) as blocked:
        for chunk in gateway.openai.chat.completions.create(model="b-small", messages=HI, n=3, stream=True):
            text += "".join(choice.delta.content or "" for choice in chunk.choices)
    assert error_code(blocked.value) == "guardrail_blocked_output"
    assert "secondary" not in text and len(secondary.received) == 3


def test_ext_proc_judges_input_and_streamed_output(
    guarded: Callable[..., GatewayThread], primary: FakeProvider, secondary: FakeProvider
) -> None:
    def processor(path: str, asked: Any) -> tuple[int, Any]:
        blocked = "forbidden" in asked["text"] or "secondary" in asked["text"]
        return 200, {"action": "block" if blocked else "allow", "reason": "not here"}

    with serving(JsonServer(processor).start()) as server:
        gateway = guarded(
            [{"name": "proc", "kind": "ext_proc", "url": f"{server.url}/check", "phases": ["input", "output"]}]
        )
        with pytest.raises(openai.BadRequestError) as refused:
            gateway.openai.chat.completions.create(
                model="a-large", messages=[{"role": "user", "content": "forbidden words"}]
            )
        chat_text, chat_error = chat_stream_text(gateway)
        b_text, b_error = chat_stream_text(gateway, "b-small")
    assert error_code(refused.value) == "guardrail_blocked_input" and "not here" in refused.value.message
    assert chat_error is None and chat_text == "Hello from primary"
    assert b_error is not None and error_code(b_error) == "guardrail_blocked_output" and "secondary" not in b_text
    phases = [asked["phase"] for _, asked, _ in server.received]
    assert phases[0] == "input" and "output" in phases
    first = server.received[0][1]
    assert first["principal"] == "anonymous" and first["route"] == "to_a" and first["model"] == "a-large"
    assert first["text"] == "forbidden words" and first["request_id"].startswith("req_")


@pytest.mark.parametrize("failure_mode", ["deny", "allow", "log_only"])
def test_a_hanging_processor_follows_failure_mode(
    failure_mode: str,
    primary: FakeProvider,
    secondary: FakeProvider,
    guarded: Callable[..., GatewayThread],
    caplog: pytest.LogCaptureFixture,
) -> None:
    guardrail = {
        "name": "slow",
        "kind": "ext_proc",
        "failure_mode": failure_mode,
        "timeout_ms": 200,
        "phases": ["input"],
    }
    with (
        serving(JsonServer(lambda path, asked: HANG).start()) as server,
        caplog.at_level(logging.WARNING, logger="gatewayproxy"),
    ):
        gateway = guarded([{**guardrail, "url": server.url}])
        started = time.monotonic()
        response = httpx.post(f"{gateway.url}/v1/chat/completions", json={"model": "a-large", "messages": HI})
        elapsed = time.monotonic() - started
        metrics = gateway.metrics_text
    assert elapsed < 2
    logged = [record.getMessage() for record in caplog.records if "guardrail slow" in record.getMessage()]
    if failure_mode == "deny":
        assert response.status_code == 400 and response.json()["error"]["code"] == "guardrail_blocked_input"
        assert primary.received == []
        return
    assert response.status_code == 200 and len(primary.received) == 1
    passed = f'gateway_guardrail_backend_failures_passed_total{{failure_mode="{failure_mode}",guardrail="slow"}} 1.0'
    assert passed in metrics
    assert bool(logged) is (failure_mode == "log_only")


def test_llm_evaluator_asks_a_model_through_the_gateways_routes(
    guarded: Callable[..., GatewayThread], primary: FakeProvider, secondary: FakeProvider
) -> None:
    judge = JsonServer(lambda path, asked: classifier_completion(path, asked, ("forbidden", "secondary"))).start()
    guardrail = {
        "name": "judge",
        "kind": "llm_evaluator",
        "model": "judge",
        "timeout_ms": 2000,
        "instructions": "Judge the text.",
    }
    with serving(judge):
        gateway = guarded([guardrail], judge.url)
        with pytest.raises(anthropic.BadRequestError) as refused:
            gateway.anthropic.messages.create(
                model="b-small", max_tokens=10, messages=[{"role": "user", "content": "a forbidden topic"}]
            )
        allowed = gateway.openai.chat.completions.create(model="a-large", messages=HI)
        stream_text, stream_error = chat_stream_text(gateway, "b-small")
    assert error_code(refused.value) == "guardrail_blocked_input"
    assert "mentions a forbidden topic" in refused.value.message
    assert allowed.choices[0].message.content == "Hello from primary"
    assert stream_error is not None and error_code(stream_error) == "guardrail_blocked_output"
    assert "secondary" not in stream_text
    path, asked, headers = judge.received[0]
    assert path == "/v1/chat/completions" and asked["model"] == "judge"
    assert asked["messages"][0] == {"role": "system", "content": "Judge the text."}
    assert "Phase: input" in asked["messages"][1]["content"]
    assert headers["authorization"] == "Bearer provider-secret"


@pytest.mark.parametrize(("failure_mode", "status"), [("deny", 400), ("allow", 200)])
def test_native_responses_are_not_inspected_and_follow_failure_mode(
    failure_mode: str,
    status: int,
    guarded: Callable[..., GatewayThread],
    primary: FakeProvider,
    secondary: FakeProvider,
) -> None:
    guardrail = {"name": "pii", "kind": "pii_regex", "failure_mode": failure_mode}
    gateway = guarded([guardrail])
    response = httpx.post(f"{gateway.url}/v1/responses", json={"model": "a-large", "input": "bob@example.com"})
    assert response.status_code == status
    if status == 400:
        assert response.json()["error"]["code"] == "guardrail_blocked_input"


@pytest.mark.parametrize(
    ("option", "problem"),
    [
        ({"action": "erase"}, "plugins.guardrails[0].action"),
        ({"paterns": {}}, "plugins.guardrails[0].paterns: unknown key"),
        ({"patterns": {"bad": "("}}, "pattern 'bad' is not a valid regular expression"),
        ({"builtins": []}, "give at least one of `builtins` and `patterns`"),
    ],
)
def test_bad_guardrail_options_fail_boot_naming_the_key(option: dict, problem: str) -> None:
    loaded = validate_document({"plugins": {"guardrails": [{"name": "pii", "kind": "pii_regex", **option}]}})
    with pytest.raises(ConfigError) as failed:
        build_state(loaded, UpstreamPool(), SharedParts(), GatewayMetrics())
    assert any(problem in line for line in failed.value.problems)


def test_without_guardrails_nothing_inspects_output() -> None:
    state = build_state(validate_document({}), UpstreamPool(), SharedParts(), GatewayMetrics())
    assert state.stages == [] and state.output_inspectors == []


@pytest.mark.parametrize(
    ("builtin", "text", "redacted"),
    [
        ("email", "write to a.b+c@mail.example.org today", "write to [X] today"),
        ("phone", "call (415) 555-0100 now", "call [X] now"),
        ("credit_card", "pay 4111-1111-1111-1111 or 1234 5678 9012 3456", "pay [X] or 1234 5678 9012 3456"),
        ("us_ssn", "ssn 078-05-1120, not 000-12-3456", "ssn [X], not 000-12-3456"),
        ("ipv4", "host 10.0.0.255 not 999.1.1.1", "host [X] not 999.1.1.1"),
        ("api_key", "use AKIAIOSFODNN7EXAMPLE here", "use [X] here"),
    ],
)
def test_builtin_patterns(builtin: str, text: str, redacted: str) -> None:
    options = PiiRegexOptions.model_validate({"builtins": [builtin], "action": "redact", "replacement": "[X]"})
    guardrail = PiiRegex(PluginInstance(name="pii", kind="pii_regex"), options)
    assert guardrail.redact(text) == redacted


@pytest.mark.parametrize(
    ("answer", "verdict"),
    [
        ('{"allowed": false, "reason": "violence"}', Verdict(False, "violence")),
        ('Sure: ```json\n{"allowed": true}\n```', Verdict(True, "")),
        ("BLOCK. It asks for malware.", Verdict(False, "It asks for malware.")),
        ("allow", Verdict(True, "")),
    ],
)
def test_evaluator_verdicts(answer: str, verdict: Verdict) -> None:
    assert parse_verdict(answer) == verdict


def test_an_answer_that_is_no_verdict_is_a_backend_failure() -> None:
    with pytest.raises(BackendError):
        parse_verdict("I am not sure.")
