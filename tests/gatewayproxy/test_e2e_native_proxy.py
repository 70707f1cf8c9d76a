"""End to end native API-key proxy: only allowlisted paths, headers and query parameters reach the upstream,
the vault's credential is placed as `auth` says, the client's credential never leaves, and streams pass."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest
import yaml

from gatewayproxy.config.loader import ConfigError, validate_document
from tests.support.gateway.provider import FakeProvider
from tests.support.gateway.thread import GatewayFactory, GatewayThread

pytestmark = pytest.mark.e2e
BODY = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}


def native_document(upstream: str) -> dict:
    """Two providers on one upstream: `search` with a header credential, `chat` with a bearer one."""
    common = {"api": "rest", "base_url": f"{upstream}/base"}
    return {
        "vaults": [{"name": "files", "resolver": "static_file", "file": "vault.yaml"}],
        "destinations": {
            "search_api": {
                "kind": "native_api_key",
                "provider": "search",
                **common,
                "allowed_paths": ["/v1/embeddings"],
                "auth": {"header": "x-api-key"},
                "forward_headers": ["x-trace", "Authorization", "X-Api-Key"],
                "headers": {"x-fixed": "gateway", "x-trace": "overridden"},
                "allowed_query_params": ["q", "limit"],
                "credentials": {"vault": "files", "credential_id": "search"},
            },
            "chat_api": {
                "kind": "native_api_key",
                "provider": "chat",
                **common,
                "allowed_paths": ["/v1/chat/completions"],
                "auth": {"type": "bearer"},
                "credentials": {"vault": "files", "credential_id": "chat"},
            },
        },
        "routes": [],
    }


@pytest.fixture(scope="module")
def native_gateway(
    module_gateway_factory: GatewayFactory, tmp_path_factory: pytest.TempPathFactory, primary: FakeProvider
) -> GatewayThread:
    directory = tmp_path_factory.mktemp("native")
    (directory / "vault.yaml").write_text(yaml.safe_dump({"search": "sk-search", "chat": "sk-chat"}))
    return module_gateway_factory(native_document(primary.url), base_dir=directory)


def proxy(gateway: GatewayThread, path: str, **kwargs: object) -> httpx.Response:
    headers = {"authorization": "Bearer client-secret", **kwargs.pop("headers", {})}  # type: ignore[dict-item]
    return httpx.post(f"{gateway.url}/v1/proxy/{path}", json=BODY, headers=headers, **kwargs)  # type: ignore[arg-type]


def test_allowlisted_request_reaches_the_upstream_with_the_vault_credential(
    native_gateway: GatewayThread, primary: FakeProvider
) -> None:
    response = proxy(
        native_gateway,
        "search/v1/embeddings?q=cats&limit=2&api_base=evil&key=leak",
        headers={"x-trace": "t1", "x-secret": "s", "x-api-key": "client-key", "cookie": "c=1"},
    )
    assert response.status_code == 200 and response.json()["object"] == "list"
    [received] = primary.received
    assert received.path == "/base/v1/embeddings?q=cats&limit=2"
    assert received.headers["x-api-key"] == "sk-search"
    assert received.headers["x-fixed"] == "gateway" and received.headers["x-trace"] == "overridden"
    assert "x-secret" not in received.headers and "cookie" not in received.headers
    assert "authorization" not in received.headers
    assert "client-secret" not in str(received.headers) and "client-key" not in str(received.headers)
    assert received.body == BODY


def test_bearer_auth_and_streamed_responses_pass_through(native_gateway: GatewayThread, primary: FakeProvider) -> None:
    with httpx.stream(
        "POST",
        f"{native_gateway.url}/v1/proxy/chat/v1/chat/completions?q=1",
        json={**BODY, "stream": True},
        headers={"authorization": "Bearer client-secret"},
    ) as response:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        text = "".join(response.iter_text())
    assert text.count("data: ") >= 3 and text.rstrip().endswith("data: [DONE]")
    [received] = primary.received
    assert received.path == "/base/v1/chat/completions"
    assert received.headers["authorization"] == "Bearer sk-chat"


@pytest.mark.parametrize(
    "path",
    [
        "search/v1/chat/completions",
        "search/v1/embeddings/extra",
        "search/v1/../v1/x",
        "search/v1/%2e%2e/embeddings",
        "search",
        "search/",
    ],
)
def test_a_path_off_the_list_never_reaches_the_upstream(
    native_gateway: GatewayThread, primary: FakeProvider, path: str
) -> None:
    response = proxy(native_gateway, path)
    assert response.status_code == 404
    assert response.json()["error"]["code"] in ("path_not_allowed", "not_found")
    assert response.json()["error"]["type"] == "not_found_error"
    assert primary.received == []


def test_unknown_provider_and_wrong_method(native_gateway: GatewayThread, primary: FakeProvider) -> None:
    response = proxy(native_gateway, "nobody/v1/embeddings")
    assert response.status_code == 404 and response.json()["error"]["code"] == "no_route"
    response = httpx.get(f"{native_gateway.url}/v1/proxy/search/v1/embeddings")
    assert response.status_code == 405 and response.json()["error"]["code"] == "method_not_allowed"
    assert primary.received == []


def test_upstream_errors_pass_back_unretried(native_gateway: GatewayThread, primary: FakeProvider) -> None:
    primary.reset("500", "500")
    response = proxy(native_gateway, "search/v1/embeddings")
    assert response.status_code == 500 and response.json()["error"]["message"] == "scripted 500"
    assert len(primary.received) == 1


def test_boot_refuses_ambiguous_providers_and_bad_auth(tmp_path: Path) -> None:
    document = native_document("http://127.0.0.1:9")
    document["destinations"]["chat_api"]["provider"] = "search"
    document["destinations"]["search_api"]["auth"] = {"header": "x-api-key", "where": "query"}
    (tmp_path / "vault.yaml").write_text("{}")
    with pytest.raises(ConfigError) as raised:
        validate_document(document, base_dir=str(tmp_path))
    text = str(raised.value)
    assert "already serves 'search'" in text and "destinations.search_api.auth: unknown keys ['where']" in text
