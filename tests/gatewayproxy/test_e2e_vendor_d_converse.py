"""End to end for `vendor_d` against a fake runtime that recomputes every SigV4 signature with botocore's signer:
the conversation API (JSON and binary event streams) for non-vendor-B models, invoke for vendor B's, the `api`
override, embedding models, and credentials from the vault or from botocore's chain (environment variables, a
profile file, a web-identity token exchanged at a fake STS endpoint)."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import anthropic
import openai
import pytest

from tests.support.gateway.cloud import TOOL_INPUT, FakeAws
from tests.support.gateway.documents import credentials, file_vault, one_destination
from tests.support.gateway.thread import GatewayFactory, GatewayThread
from tests.support.serving import served

pytestmark = pytest.mark.e2e
HI: Any = [{"role": "user", "content": "hi"}]
VAULT_KEY, VAULT_SECRET = "AKIDVAULT", "vault-secret-key"
ENV_KEY, ENV_SECRET = "AKIDENVIRONMENT", "environment-secret-key"
PROFILE_KEY, PROFILE_SECRET = "AKIDPROFILE", "profile-secret-key"
WEATHER: Any = [
    {
        "type": "function",
        "function": {
            "name": "weather",
            "description": "Weather",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
        },
    }
]
AWS_VARIABLES = (
    "AWS_ACCESS_KEY_ID",
    "AWS_SECRET_ACCESS_KEY",
    "AWS_SESSION_TOKEN",
    "AWS_PROFILE",
    "AWS_DEFAULT_PROFILE",
    "AWS_ROLE_ARN",
    "AWS_WEB_IDENTITY_TOKEN_FILE",
    "AWS_ROLE_SESSION_NAME",
    "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI",
    "AWS_CONTAINER_CREDENTIALS_FULL_URI",
)


@pytest.fixture
def aws() -> Iterator[FakeAws]:
    yield from served(FakeAws({VAULT_KEY: VAULT_SECRET, ENV_KEY: ENV_SECRET, PROFILE_KEY: PROFILE_SECRET}).start())


@pytest.fixture
def clean_aws_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> pytest.MonkeyPatch:
    """No ambient AWS configuration: only what a test sets (and no instance metadata lookups)."""
    for name in AWS_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "absent-config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "absent-credentials"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    return monkeypatch


MODEL_MAP = {
    "nova": "amazon.nova-pro-v1:0",
    "claude": "us.anthropic.claude-sonnet-4-20250514-v1:0",
    "titan": "amazon.titan-embed-text-v2:0",
    "cohere": "cohere.embed-english-v3",
}
VAULTED = {"credentials": credentials("files", "aws")}


@pytest.fixture
def bedrock(gateway_factory: GatewayFactory, tmp_path: Path, aws: FakeAws) -> Callable[..., GatewayThread]:
    """Starts a gateway (for the test) whose one route goes to vendor D at `aws` (more destination fields as
    keyword arguments); the `files` vault holds the access key with `secret`."""

    def start(secret: str = VAULT_SECRET, **fields: Any) -> GatewayThread:
        vault = {"aws": {"scheme": "aws_sigv4", "access_key_id": VAULT_KEY, "secret_access_key": secret}}
        (tmp_path / "vault.json").write_text(json.dumps(vault))
        upstream = {"kind": "vendor_d", "region": "eu-west-1", "base_url": aws.url, "model_map": MODEL_MAP, **fields}
        document = one_destination(upstream, name="bedrock", vault=file_vault("vault.json"), match="*")
        return gateway_factory(document, base_dir=tmp_path)

    return start


@pytest.fixture
def vaulted(bedrock: Callable[..., GatewayThread]) -> GatewayThread:
    return bedrock(**VAULTED)


def test_converse_json_through_both_clients(
    bedrock: Callable[..., GatewayThread], vaulted: GatewayThread, aws: FakeAws
) -> None:
    message = vaulted.anthropic.messages.create(
        model="nova", max_tokens=50, system="Be brief.", messages=HI, stop_sequences=["END"]
    )
    assert message.content[0].type == "text" and message.content[0].text == "Hello from converse"
    assert message.usage.input_tokens == 12 and message.usage.output_tokens == 5
    assert message.usage.cache_read_input_tokens == 2
    sent = aws.seen[0]
    assert sent.path == "/model/amazon.nova-pro-v1%3A0/converse"
    assert sent.body == {
        "messages": [{"role": "user", "content": [{"text": "hi"}]}],
        "system": [{"text": "Be brief."}],
        "inferenceConfig": {"maxTokens": 50, "stopSequences": ["END"]},
    }
    assert aws.signed[0] == {"access_key": VAULT_KEY, "region": "eu-west-1", "service": "bedrock", "token": ""}
    completion = vaulted.openai.chat.completions.create(model="nova", messages=HI, max_tokens=20)
    assert completion.choices[0].message.content == "Hello from converse"
    assert completion.choices[0].finish_reason == "stop"
    assert (
        completion.usage is not None
        and completion.usage.prompt_tokens == 14
        and completion.usage.completion_tokens == 5
    )


def test_converse_images_tools_and_error_results(vaulted: GatewayThread, aws: FakeAws) -> None:
    png = "iVBORw0KGgo="
    messages: Any = [
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "weather?"},
                {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": png}},
            ],
        },
        {
            "role": "assistant",
            "content": [{"type": "tool_use", "id": "tooluse_0", "name": "weather", "input": {"city": "Oslo"}}],
        },
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "tooluse_0", "content": "station down", "is_error": True}
            ],
        },
    ]
    tools: Any = [{"name": "weather", "description": "Weather", "input_schema": {"type": "object"}}]
    message = vaulted.anthropic.messages.create(
        model="nova", max_tokens=50, messages=messages, tools=tools, tool_choice={"type": "any"}
    )
    assert message.stop_reason == "tool_use"
    block = message.content[0]
    assert (
        block.type == "tool_use" and block.name == "weather" and block.input == TOOL_INPUT and block.id == "tooluse_1"
    )
    sent = aws.seen[0].body
    assert sent["messages"][0]["content"][1] == {"image": {"format": "png", "source": {"bytes": png}}}
    assert sent["messages"][1]["content"][0] == {
        "toolUse": {"toolUseId": "tooluse_0", "name": "weather", "input": {"city": "Oslo"}}
    }
    assert sent["messages"][2]["content"][0] == {
        "toolResult": {"toolUseId": "tooluse_0", "content": [{"text": "station down"}], "status": "error"}
    }
    assert sent["toolConfig"] == {
        "tools": [
            {"toolSpec": {"name": "weather", "description": "Weather", "inputSchema": {"json": {"type": "object"}}}}
        ],
        "toolChoice": {"any": {}},
    }
    completion = vaulted.openai.chat.completions.create(model="nova", messages=HI, tools=WEATHER)
    call = completion.choices[0].message.tool_calls
    assert completion.choices[0].finish_reason == "tool_calls" and call is not None
    assert call[0].function.name == "weather" and json.loads(call[0].function.arguments) == TOOL_INPUT  # type: ignore[union-attr]


def test_converse_stream_with_event_stream_framing(vaulted: GatewayThread, aws: FakeAws) -> None:
    with vaulted.anthropic.messages.stream(model="nova", max_tokens=20, messages=HI) as stream:
        assert "".join(stream.text_stream) == "Hello from converse"
        final = stream.get_final_message()
    assert final.stop_reason == "end_turn" and final.usage.output_tokens == 5 and final.usage.input_tokens == 12
    assert aws.seen[0].path == "/model/amazon.nova-pro-v1%3A0/converse-stream"
    assert aws.seen[0].headers["accept"] == "application/vnd.amazon.eventstream"
    chunks: list[Any] = list(
        vaulted.openai.chat.completions.create(
            model="nova", messages=HI, stream=True, stream_options={"include_usage": True}
        )
    )
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == "Hello from converse"
    assert chunks[-1].usage.prompt_tokens == 12 and chunks[-1].usage.completion_tokens == 5
    tool_chunks: list[Any] = list(
        vaulted.openai.chat.completions.create(model="nova", messages=HI, tools=WEATHER, stream=True)
    )
    arguments = "".join(
        call.function.arguments or "" for c in tool_chunks if c.choices for call in c.choices[0].delta.tool_calls or []
    )
    assert json.loads(arguments) == TOOL_INPUT
    assert [c.choices[0].finish_reason for c in tool_chunks if c.choices][-1] == "tool_calls"
    assert len(aws.signed) == 3


def test_vendor_b_family_keeps_invoke_and_api_overrides(
    bedrock: Callable[..., GatewayThread], aws: FakeAws, tmp_path: Path
) -> None:
    running = bedrock(**VAULTED)
    message = running.anthropic.messages.create(model="claude", max_tokens=10, messages=HI)
    assert message.content[0].type == "text" and message.content[0].text == "Hello from invoke"
    assert aws.seen[-1].path == "/model/us.anthropic.claude-sonnet-4-20250514-v1%3A0/invoke"
    assert aws.seen[-1].body["anthropic_version"] == "bedrock-2023-05-31"
    forced = bedrock(api="converse", **VAULTED)
    message = forced.anthropic.messages.create(model="claude", max_tokens=10, messages=HI)
    assert message.content[0].type == "text" and message.content[0].text == "Hello from converse"
    assert aws.seen[-1].path.endswith("/converse")


def test_converse_client_error_in_the_clients_envelope(vaulted: GatewayThread) -> None:
    with pytest.raises(anthropic.BadRequestError) as raised:
        vaulted.anthropic.messages.create(model="nova", max_tokens=1, messages=HI)
    assert raised.value.body == {
        "type": "error",
        "error": {"type": "invalid_request_error", "message": "maxTokens is too small"},
    }


def test_embedding_models(vaulted: GatewayThread, aws: FakeAws) -> None:
    titan = vaulted.openai.embeddings.create(model="titan", input="one two three", dimensions=4)
    assert titan.data[0].embedding == [3.0] * 4 and titan.usage.prompt_tokens == 3
    assert aws.seen[0].path == "/model/amazon.titan-embed-text-v2%3A0/invoke"
    assert aws.seen[0].body == {"inputText": "one two three", "dimensions": 4}
    cohere = vaulted.openai.embeddings.create(model="cohere", input=["a", "b"])
    assert [item.embedding for item in cohere.data] == [[0.25] * 3, [0.25] * 3]
    assert aws.seen[1].body == {"texts": ["a", "b"], "input_type": "search_document", "embedding_types": ["float"]}


def test_a_list_of_inputs_to_a_one_text_model_is_one_call_per_text(vaulted: GatewayThread, aws: FakeAws) -> None:
    texts = ["slow", "two words", "slow three words", "four words right here"]  # the first answers last
    answer = vaulted.openai.embeddings.create(model="titan", input=texts)
    assert [item.index for item in answer.data] == [0, 1, 2, 3]
    assert [item.embedding for item in answer.data] == [[1.0] * 4, [2.0] * 4, [3.0] * 4, [4.0] * 4]
    assert answer.usage.prompt_tokens == answer.usage.total_tokens == 10
    assert answer.model == "titan"
    assert sorted(seen.body["inputText"] for seen in aws.seen) == sorted(texts)
    assert {seen.path for seen in aws.seen} == {"/model/amazon.titan-embed-text-v2%3A0/invoke"}
    assert aws.most_embeddings_at_once >= 2  # sent at once, not one after the other


def test_one_text_calls_are_bounded(vaulted: GatewayThread, aws: FakeAws) -> None:
    texts = [f"slow text {number}" for number in range(20)]
    answer = vaulted.openai.embeddings.create(model="titan", input=texts)
    assert len(answer.data) == 20 and len(aws.seen) == 20
    assert 2 <= aws.most_embeddings_at_once <= 16


def test_one_failed_text_fails_the_embeddings_request_with_its_error(vaulted: GatewayThread, aws: FakeAws) -> None:
    with pytest.raises(openai.BadRequestError) as raised:
        vaulted.openai.embeddings.create(model="titan", input=["slow fine", " ", "also fine"])
    assert raised.value.status_code == 400 and "inputText must not be empty" in raised.value.message


def test_credential_chain_environment_variables(
    bedrock: Callable[..., GatewayThread], aws: FakeAws, tmp_path: Path, clean_aws_environment: pytest.MonkeyPatch
) -> None:
    clean_aws_environment.setenv("AWS_ACCESS_KEY_ID", ENV_KEY)
    clean_aws_environment.setenv("AWS_SECRET_ACCESS_KEY", ENV_SECRET)
    clean_aws_environment.setenv("AWS_SESSION_TOKEN", "environment-session")
    running = bedrock()
    message = running.anthropic.messages.create(model="nova", max_tokens=10, messages=HI)
    assert message.content[0].type == "text"
    assert aws.signed == [
        {"access_key": ENV_KEY, "region": "eu-west-1", "service": "bedrock", "token": "environment-session"}
    ]


def test_credential_chain_profile_file(
    bedrock: Callable[..., GatewayThread], aws: FakeAws, tmp_path: Path, clean_aws_environment: pytest.MonkeyPatch
) -> None:
    (tmp_path / "credentials").write_text(
        f"[default]\naws_access_key_id = AKIDWRONG\naws_secret_access_key = wrong\n\n"
        f"[gateway]\naws_access_key_id = {PROFILE_KEY}\naws_secret_access_key = {PROFILE_SECRET}\n"
    )
    clean_aws_environment.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "credentials"))
    running = bedrock(profile="gateway")
    running.anthropic.messages.create(model="nova", max_tokens=10, messages=HI)
    with running.anthropic.messages.stream(model="nova", max_tokens=10, messages=HI) as stream:
        assert "".join(stream.text_stream) == "Hello from converse"
    assert [signed["access_key"] for signed in aws.signed] == [PROFILE_KEY, PROFILE_KEY]


def test_credential_chain_web_identity_at_a_fake_sts(
    bedrock: Callable[..., GatewayThread], aws: FakeAws, tmp_path: Path, clean_aws_environment: pytest.MonkeyPatch
) -> None:
    (tmp_path / "web-token").write_text("web-identity-token")
    clean_aws_environment.setenv("AWS_ROLE_ARN", "arn:aws:iam::123456789012:role/gateway")
    clean_aws_environment.setenv("AWS_WEB_IDENTITY_TOKEN_FILE", str(tmp_path / "web-token"))
    clean_aws_environment.setenv("AWS_ROLE_SESSION_NAME", "gateway-test")
    clean_aws_environment.setenv("AWS_ENDPOINT_URL_STS", aws.url)
    running = bedrock()
    for _ in range(3):
        completion = running.openai.chat.completions.create(model="nova", messages=HI)
        assert completion.choices[0].message.content == "Hello from converse"
    (call,) = aws.sts_calls  # assumed once, kept until near expiry
    assert call["RoleArn"] == ["arn:aws:iam::123456789012:role/gateway"] and call["RoleSessionName"] == ["gateway-test"]
    assert (
        aws.signed
        == [{"access_key": "ASIASTS1", "region": "eu-west-1", "service": "bedrock", "token": "sts-session-1"}] * 3
    )


def test_a_wrong_signature_is_refused_by_the_fake(
    bedrock: Callable[..., GatewayThread], aws: FakeAws, tmp_path: Path
) -> None:
    running = bedrock("not-the-secret", **VAULTED)
    with pytest.raises(anthropic.APIStatusError) as raised:
        running.anthropic.messages.create(model="nova", max_tokens=10, messages=HI)
    assert raised.value.status_code == 502
    assert aws.signed == []
