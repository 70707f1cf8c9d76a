"""End to end for the cloud adapters against the fake provider: vendor D (SigV4, binary event stream),
vendor E (project/location paths, OAuth bearer), cloud vendor C (deployment form, `api-key`)."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials

from tests.support.gateway.documents import destination, fallback_route, file_vault
from tests.support.gateway.provider import FakeProvider
from tests.support.gateway.thread import GatewayFactory, GatewayThread

pytestmark = pytest.mark.e2e
HI: Any = [{"role": "user", "content": "hi"}]
ACCESS_KEY, SECRET_KEY = "AKIDEXAMPLE", "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY"


@pytest.fixture(scope="module")
def gateway(
    module_gateway_factory: GatewayFactory, primary: FakeProvider, tmp_path_factory: pytest.TempPathFactory
) -> GatewayThread:
    directory = tmp_path_factory.mktemp("cloud")
    (directory / "vault.json").write_text(
        json.dumps(
            {
                "aws": {"scheme": "aws_sigv4", "access_key_id": ACCESS_KEY, "secret_access_key": SECRET_KEY},
                "gcp": {"scheme": "bearer", "token": "ya29.token"},
                "azure": "azure-key",
            }
        )
    )
    destinations = {
        "bedrock": destination(
            "vendor_d", primary.url, "files", "aws", region="us-west-2", model_map={"claude": "anthropic.claude-v2:1"}
        ),
        "vertex": destination(
            "vendor_e",
            f"{primary.url}/v1",
            "files",
            "gcp",
            project="proj-1",
            location="europe-west1",
            model_map={"vx-sonnet": "claude-sonnet-4@20250514"},  # `claude-*`: the partner family
        ),
        "azure": destination(
            "cloud_vendor_c", primary.url, "files", "azure", deployment="dep-4o", api_version="2024-10-21"
        ),
    }
    routes = [
        fallback_route("d", "claude", "bedrock"),
        fallback_route("e", "vx-*", "vertex"),
        fallback_route("c", "az-*", "azure"),
    ]
    document = {"vaults": [file_vault("vault.json")], "destinations": destinations, "routes": routes}
    return module_gateway_factory(document, base_dir=directory)


def test_vendor_d_request_is_sigv4_signed(gateway: GatewayThread, primary: FakeProvider) -> None:
    message = gateway.anthropic.messages.create(model="claude", max_tokens=10, messages=HI)
    assert message.content[0].type == "text" and message.content[0].text == "Hello from primary"
    sent = primary.received[0]
    assert sent.path == "/model/anthropic.claude-v2%3A1/invoke"
    assert sent.body["anthropic_version"] == "bedrock-2023-05-31" and "model" not in sent.body
    match = re.fullmatch(
        r"AWS4-HMAC-SHA256 Credential=(\S+), SignedHeaders=(\S+), Signature=(\w+)", sent.headers["authorization"]
    )
    assert match is not None
    assert match.group(1).startswith(ACCESS_KEY + "/") and match.group(1).endswith("/us-west-2/bedrock/aws4_request")
    signed = match.group(2).split(";")
    request = AWSRequest(
        method="POST",
        url=f"{primary.url}{sent.path}",
        data=sent.raw_body,
        headers={name: sent.headers[name] for name in signed},
    )
    request.context["timestamp"] = sent.headers["x-amz-date"]
    auth = SigV4Auth(Credentials(ACCESS_KEY, SECRET_KEY), "bedrock", "us-west-2")
    expected = auth.signature(auth.string_to_sign(request, auth.canonical_request(request)), request)
    assert match.group(3) == expected


def test_vendor_d_binary_stream_reaches_both_client_shapes(gateway: GatewayThread, primary: FakeProvider) -> None:
    with gateway.anthropic.messages.stream(model="claude", max_tokens=10, messages=HI) as stream:
        assert "".join(stream.text_stream) == "Hello from primary"
    assert primary.received[0].path.endswith("/invoke-with-response-stream")
    chunks: list[Any] = list(gateway.openai.chat.completions.create(model="claude", messages=HI, stream=True))  # type: ignore[arg-type]
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == "Hello from primary"


def test_vendor_e_paths_and_bearer(gateway: GatewayThread, primary: FakeProvider) -> None:
    message = gateway.anthropic.messages.create(model="vx-sonnet", max_tokens=10, messages=HI)
    assert message.content[0].type == "text"
    with gateway.anthropic.messages.stream(model="vx-sonnet", max_tokens=10, messages=HI) as stream:
        assert "".join(stream.text_stream) == "Hello from primary"
    first, second = primary.received
    assert first.path == (
        "/v1/projects/proj-1/locations/europe-west1/publishers/anthropic/models/claude-sonnet-4%4020250514:rawPredict"
    )
    assert second.path.endswith(":streamRawPredict") and second.body["stream"] is True
    assert first.headers["authorization"] == "Bearer ya29.token"
    assert first.body["anthropic_version"] == "vertex-2023-10-16" and "model" not in first.body


def test_cloud_vendor_c_deployment_form(gateway: GatewayThread, primary: FakeProvider) -> None:
    client = gateway.openai
    assert client.chat.completions.create(model="az-4o", messages=HI).choices[0].message.content  # type: ignore[arg-type]
    sent = primary.received[0]
    assert sent.path == "/openai/deployments/dep-4o/chat/completions?api-version=2024-10-21"
    assert sent.headers["api-key"] == "azure-key" and "authorization" not in sent.headers
