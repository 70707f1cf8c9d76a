"""End to end for `vendor_e` against a fake service and a fake token endpoint on loopback: the vendor's own
generate-content family (JSON and SSE, tools, usage, `seed`, several candidates) and the partner family
(`claude-*`), embeddings through predict, with a service-account document from the vault (its JWT exchanged at
the fake `token_uri`) and with application default credentials (GOOGLE_APPLICATION_CREDENTIALS)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from tests.support.gateway.cloud import TOOL_INPUT, FakeGoogle
from tests.support.gateway.documents import credentials, file_vault, one_destination
from tests.support.gateway.thread import GatewayFactory, GatewayThread
from tests.support.serving import served

pytestmark = pytest.mark.e2e
HI: Any = [{"role": "user", "content": "hi"}]
VAULT_ACCOUNT, ADC_ACCOUNT = "gateway@proj-1.iam.gserviceaccount.com", "adc@proj-1.iam.gserviceaccount.com"
WEATHER: Any = [
    {
        "type": "function",
        "function": {"name": "weather", "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}},
    }
]


def _key_pair() -> tuple[str, bytes]:
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    private = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    ).decode()
    public = key.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    return private, public


@pytest.fixture(scope="module")
def keys() -> dict[str, tuple[str, bytes]]:
    return {VAULT_ACCOUNT: _key_pair(), ADC_ACCOUNT: _key_pair()}


@pytest.fixture
def google(keys: dict[str, tuple[str, bytes]]) -> Iterator[FakeGoogle]:
    yield from served(FakeGoogle({email: public for email, (_, public) in keys.items()}).start())


def _service_account(email: str, private_key: str, token_uri: str) -> dict[str, str]:
    return {
        "type": "service_account",
        "project_id": "proj-1",
        "private_key_id": "key-1",
        "private_key": private_key,
        "client_email": email,
        "client_id": "1234",
        "token_uri": token_uri,
    }


def _document(google: FakeGoogle, **destination: Any) -> dict[str, Any]:
    upstream = {
        "kind": "vendor_e",
        "project": "proj-1",
        "location": "us-central1",
        "base_url": f"{google.url}/v1",
        "model_map": {"sonnet": "claude-sonnet-4@20250514"},
        **destination,
    }
    return one_destination(upstream, name="vertex", vault=file_vault("vault.json"), match="*")


@pytest.fixture
def vaulted(
    gateway_factory: GatewayFactory, google: FakeGoogle, keys: dict[str, tuple[str, bytes]], tmp_path: Path
) -> GatewayThread:
    account = _service_account(VAULT_ACCOUNT, keys[VAULT_ACCOUNT][0], google.token_uri)
    (tmp_path / "vault.json").write_text(json.dumps({"gcp": account}))
    return gateway_factory(_document(google, credentials=credentials("files", "gcp")), base_dir=tmp_path)


def test_own_family_chat_json_with_seed_and_candidates(vaulted: GatewayThread, google: FakeGoogle) -> None:
    completion = vaulted.openai.chat.completions.create(
        model="gemini-2.5-flash",
        messages=[{"role": "system", "content": "Be brief."}, *HI],
        seed=7,
        n=2,
        max_tokens=64,
        temperature=0.3,
        stop=["END"],
    )
    assert [choice.message.content for choice in completion.choices] == ["Hello from gemini 0", "Hello from gemini 1"]
    assert [choice.index for choice in completion.choices] == [0, 1]
    assert completion.usage is not None
    assert completion.usage.prompt_tokens == 10 and completion.usage.completion_tokens == 10
    assert completion.usage.completion_tokens_details is not None
    assert completion.usage.completion_tokens_details.reasoning_tokens == 2
    sent = google.seen[-1]
    assert (
        sent.path
        == "/v1/projects/proj-1/locations/us-central1/publishers/google/models/gemini-2.5-flash:generateContent"
    )
    assert sent.body == {
        "contents": [{"role": "user", "parts": [{"text": "hi"}]}],
        "systemInstruction": {"parts": [{"text": "Be brief."}]},
        "generationConfig": {
            "temperature": 0.3,
            "seed": 7,
            "candidateCount": 2,
            "maxOutputTokens": 64,
            "stopSequences": ["END"],
        },
    }
    assert sent.headers["authorization"] == "Bearer ya29.fake-1"
    (grant,) = google.grants
    assert grant["grant_type"] == "urn:ietf:params:oauth:grant-type:jwt-bearer"


def test_own_family_tools_and_tool_results(vaulted: GatewayThread, google: FakeGoogle) -> None:
    completion = vaulted.openai.chat.completions.create(
        model="gemini-2.5-flash", messages=HI, tools=WEATHER, tool_choice="required"
    )
    choice = completion.choices[0]
    assert choice.finish_reason == "tool_calls" and choice.message.tool_calls is not None
    call = choice.message.tool_calls[0]
    assert call.type == "function"
    assert call.function.name == "weather" and json.loads(call.function.arguments) == TOOL_INPUT  # type: ignore[union-attr]
    sent = google.seen[-1].body
    assert sent["tools"] == [
        {"functionDeclarations": [{"name": "weather", "parametersJsonSchema": WEATHER[0]["function"]["parameters"]}]}
    ]
    assert sent["toolConfig"] == {"functionCallingConfig": {"mode": "ANY"}}
    follow_up: Any = [
        *HI,
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": call.id,
                    "type": "function",
                    "function": {"name": "weather", "arguments": call.function.arguments},
                }
            ],
        },  # type: ignore[union-attr]
        {"role": "tool", "tool_call_id": call.id, "content": "sunny"},
    ]
    vaulted.openai.chat.completions.create(model="gemini-2.5-flash", messages=follow_up)
    contents = google.seen[-1].body["contents"]
    assert contents[1] == {"role": "model", "parts": [{"functionCall": {"name": "weather", "args": TOOL_INPUT}}]}
    assert contents[2] == {
        "role": "user",
        "parts": [{"functionResponse": {"name": "weather", "response": {"content": "sunny"}}}],
    }


def test_own_family_streams_to_both_clients(vaulted: GatewayThread, google: FakeGoogle) -> None:
    chunks: list[Any] = list(
        vaulted.openai.chat.completions.create(
            model="gemini-2.5-flash", messages=HI, stream=True, stream_options={"include_usage": True}
        )
    )
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == "Hello from gemini"
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "stop"
    assert chunks[-1].usage.prompt_tokens == 10 and chunks[-1].usage.completion_tokens == 4
    assert google.seen[-1].path.endswith("/models/gemini-2.5-flash:streamGenerateContent?alt=sse")
    with vaulted.anthropic.messages.stream(model="gemini-2.5-flash", max_tokens=20, messages=HI) as stream:
        assert "".join(stream.text_stream) == "Hello from gemini"
        final = stream.get_final_message()
    assert final.usage.input_tokens == 10 and final.usage.output_tokens == 4
    tool_chunks: list[Any] = list(
        vaulted.openai.chat.completions.create(model="gemini-2.5-flash", messages=HI, tools=WEATHER, stream=True)
    )
    calls = [call for c in tool_chunks if c.choices for call in c.choices[0].delta.tool_calls or []]
    assert calls[0].function.name == "weather" and json.loads(calls[0].function.arguments) == TOOL_INPUT
    assert [c.choices[0].finish_reason for c in tool_chunks if c.choices][-1] == "tool_calls"
    assert len(google.grants) == 1  # one token, kept until near expiry


def test_messages_client_on_the_own_family(vaulted: GatewayThread) -> None:
    message = vaulted.anthropic.messages.create(model="gemini-2.5-flash", max_tokens=20, messages=HI)
    assert message.content[0].type == "text" and message.content[0].text == "Hello from gemini 0"
    assert message.usage.input_tokens == 10 and message.usage.output_tokens == 6


def test_partner_family_keeps_raw_predict(vaulted: GatewayThread, google: FakeGoogle) -> None:
    message = vaulted.anthropic.messages.create(model="sonnet", max_tokens=20, messages=HI)
    assert message.content[0].type == "text" and message.content[0].text == "Hello from the partner"
    sent = google.seen[-1]
    assert sent.path.endswith("/publishers/anthropic/models/claude-sonnet-4%4020250514:rawPredict")
    assert sent.body["anthropic_version"] == "vertex-2023-10-16"
    completion = vaulted.openai.chat.completions.create(model="sonnet", messages=HI)
    assert completion.choices[0].message.content == "Hello from the partner"


def test_embeddings_through_predict(vaulted: GatewayThread, google: FakeGoogle) -> None:
    embedded = vaulted.openai.embeddings.create(model="text-embedding-005", input=["one two", "three"], dimensions=3)
    assert [item.embedding for item in embedded.data] == [[0.125] * 3, [0.125] * 3]
    assert embedded.usage.prompt_tokens == 3
    sent = google.seen[-1]
    assert sent.path.endswith("/publishers/google/models/text-embedding-005:predict")
    assert sent.body == {
        "instances": [{"content": "one two"}, {"content": "three"}],
        "parameters": {"outputDimensionality": 3},
    }


def test_own_family_client_error_in_the_clients_envelope(vaulted: GatewayThread) -> None:
    with pytest.raises(openai.BadRequestError) as raised:
        vaulted.openai.chat.completions.create(model="gemini-2.5-flash", messages=HI, max_tokens=1)
    assert raised.value.body == {
        "message": "maxOutputTokens is too small",
        "type": "invalid_request_error",
        "code": "INVALID_ARGUMENT",
        "param": None,
    }


def test_application_default_credentials(
    gateway_factory: GatewayFactory,
    google: FakeGoogle,
    keys: dict[str, tuple[str, bytes]],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    adc = tmp_path / "adc.json"
    adc.write_text(json.dumps(_service_account(ADC_ACCOUNT, keys[ADC_ACCOUNT][0], google.token_uri)))
    monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(adc))
    (tmp_path / "vault.json").write_text("{}")
    running = gateway_factory(_document(google), base_dir=tmp_path)
    for _ in range(2):
        completion = running.openai.chat.completions.create(model="gemini-2.5-flash", messages=HI)
        assert completion.choices[0].message.content == "Hello from gemini 0"
    message = running.anthropic.messages.create(model="sonnet", max_tokens=20, messages=HI)
    assert message.content[0].type == "text" and message.content[0].text == "Hello from the partner"
    (grant,) = google.grants
    assert grant["grant_type"] == "urn:ietf:params:oauth:grant-type:jwt-bearer"
    assert {seen.headers["authorization"] for seen in google.seen if seen.path != "/token"} == {"Bearer ya29.fake-1"}
