"""The responses API through the official vendor-A client against a fake provider: creates on `cloud_vendor_c`
(the v1 path and the dated `api-version` path), streamed; stored responses read and deleted at `/v1/responses/{id}`
on `vendor_a` and `cloud_vendor_c`, routed by path; `background` refused before any call."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pytest

from tests.support.gateway.documents import KEYS_VAULT, fallback_route, keyed_destination
from tests.support.gateway.provider import FakeProvider
from tests.support.gateway.thread import GatewayFactory, GatewayThread, vault_keys

pytestmark = pytest.mark.e2e
STORED = {
    "id": "resp_1",
    "object": "response",
    "status": "completed",
    "model": "gpt-4o",
    "output": [],
    "usage": {"input_tokens": 3, "output_tokens": 4, "total_tokens": 7},
}


@pytest.fixture(scope="module")
def azure_keys() -> Iterator[None]:
    """Credentials `a` (vendor A) and `c` (cloud vendor C) of the `keys` env vault, for the module."""
    with vault_keys(a="provider-a-key", c="azure-key"):
        yield


@pytest.fixture(scope="module")
def gateway(module_gateway_factory: GatewayFactory, primary: FakeProvider, azure_keys: None) -> GatewayThread:
    """`az-*` creates and `x-target: azure` reads go to cloud vendor C's v1 API; `dated-*` creates and
    `x-target: dated` reads to its dated form; other reads to vendor A."""
    document = {
        "vaults": [KEYS_VAULT],
        "destinations": {
            "openai": keyed_destination("vendor_a", f"{primary.url}/v1", "a"),
            "azure": keyed_destination(
                "cloud_vendor_c", f"{primary.url}/openai/v1", "c", model_map={"az-4o": "dep-4o"}
            ),
            "azure_dated": keyed_destination("cloud_vendor_c", primary.url, "c", api_version="2025-04-01-preview"),
        },
        "routes": [
            fallback_route("az", {"model": "az-*"}, "azure"),
            fallback_route("dated", {"model": "dated-*"}, "azure_dated"),
            fallback_route("az_items", {"path": "/v1/responses/*", "header": {"x-target": "azure"}}, "azure"),
            fallback_route("dated_items", {"path": "/v1/responses/*", "header": {"x-target": "dated"}}, "azure_dated"),
            fallback_route("items", {"path": "/v1/responses/*"}, "openai"),
        ],
    }
    return module_gateway_factory(document)


def test_a_create_on_cloud_vendor_c_uses_the_v1_path(gateway: GatewayThread, primary: FakeProvider) -> None:
    response = gateway.openai.responses.create(model="az-4o", input="hi")
    received = primary.received[0]
    assert (received.method, received.path) == ("POST", "/openai/v1/responses")
    assert received.headers["api-key"] == "azure-key" and "authorization" not in received.headers
    assert received.body["model"] == "dep-4o"  # the deployment, as cloud vendor C's responses API takes it
    assert response.output_text == "Hello from primary"


def test_a_create_on_the_dated_form_carries_the_api_version(gateway: GatewayThread, primary: FakeProvider) -> None:
    gateway.openai.responses.create(model="dated-4o", input="hi")
    assert primary.received[0].path == "/openai/responses?api-version=2025-04-01-preview"


def test_a_streamed_create_on_cloud_vendor_c(gateway: GatewayThread, primary: FakeProvider) -> None:
    events = list(gateway.openai.responses.create(model="az-4o", input="hi", stream=True))
    assert primary.received[0].body["stream"] is True
    assert [event.type for event in events][-1] == "response.completed"
    assert "".join(getattr(event, "delta", "") for event in events) == "Hello from primary"


def test_background_is_refused_before_any_call(gateway: GatewayThread, primary: FakeProvider) -> None:
    with pytest.raises(openai.BadRequestError) as raised:
        gateway.openai.responses.create(model="az-4o", input="hi", background=True)
    error: Any = raised.value.body
    assert error["code"] == "unsupported_parameter" and error["param"] == "background"
    assert primary.received == []


@pytest.mark.parametrize(
    ("target", "path"),
    [
        ({}, "/v1/responses/resp_1"),
        ({"x-target": "azure"}, "/openai/v1/responses/resp_1"),
        ({"x-target": "dated"}, "/openai/responses/resp_1?api-version=2025-04-01-preview"),
    ],
)
def test_a_stored_response_is_read_and_deleted_through_its_route(
    gateway: GatewayThread, primary: FakeProvider, target: dict[str, str], path: str
) -> None:
    primary.documents[path] = STORED
    response = gateway.openai.responses.retrieve("resp_1", extra_headers=target)
    assert response.id == "resp_1" and response.status == "completed"
    gateway.openai.responses.delete("resp_1", extra_headers=target)
    assert [(received.method, received.path) for received in primary.received] == [("GET", path), ("DELETE", path)]
    credential = "api-key" if target else "authorization"
    assert all(credential in received.headers for received in primary.received)
    with pytest.raises(openai.NotFoundError):  # deleted: the provider's 404 passes back as sent
        gateway.openai.responses.retrieve("resp_1", extra_headers=target)


def test_a_read_keeps_the_query_and_costs_no_tokens(gateway: GatewayThread, primary: FakeProvider) -> None:
    before = gateway.metrics_text
    primary.documents["/v1/responses/resp_1?include%5B%5D=message.output_text.logprobs"] = STORED
    answer = httpx.get(f"{gateway.url}/v1/responses/resp_1", params={"include[]": "message.output_text.logprobs"})
    assert answer.status_code == 200 and answer.json()["id"] == "resp_1"
    tokens = [line for line in gateway.metrics_text.splitlines() if line.startswith("gateway_tokens_total{")]
    assert tokens == [line for line in before.splitlines() if line.startswith("gateway_tokens_total{")]


def test_a_streamed_read_is_refused(gateway: GatewayThread, primary: FakeProvider) -> None:
    answer = httpx.get(f"{gateway.url}/v1/responses/resp_1", params={"stream": "true"})
    assert answer.status_code == 400
    assert answer.json()["error"]["code"] == "unsupported_parameter" and answer.json()["error"]["param"] == "stream"
    assert primary.received == []


def test_other_methods_and_malformed_ids(gateway: GatewayThread, primary: FakeProvider) -> None:
    assert httpx.put(f"{gateway.url}/v1/responses/resp_1").status_code == 405
    assert httpx.get(f"{gateway.url}/v1/responses/a.b").status_code == 404
    assert primary.received == []
