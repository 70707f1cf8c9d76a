"""HTTPS on the data and admin listeners: the official clients trusting a test CA, TLS 1.2+ with ALPN
http/1.1 and no compression, and a changed certificate served without a restart."""

from __future__ import annotations

import asyncio
import shutil
import socket
import ssl
import warnings
from pathlib import Path
from typing import Any

import httpx
import httpx2
import pytest
import uvloop

from fakes.pki import make_pki
from fakes.waiting import wait_until
from gatewayproxy.server.upstream import Origin, UpstreamPool
from tests.support.clients import vendor_a_client, vendor_b_client
from tests.support.gateway.documents import destination, fallback_route, path_vault
from tests.support.gateway.provider import FakeProvider
from tests.support.gateway.thread import GatewayFactory, GatewayThread

pytestmark = pytest.mark.e2e


def _document(provider: FakeProvider, chain: Path) -> dict[str, Any]:
    pair = {"cert": str(chain), "key": str(chain)}
    return {
        "server": {"tls": pair, "admin_tls": pair},
        "vaults": [path_vault("static")],
        "destinations": {
            "a": destination("vendor_a_compatible", f"{provider.url}/v1", "static"),
            "b": destination("vendor_b", provider.url, "static"),
        },
        "routes": [fallback_route("chat", "gpt", "a"), fallback_route("msg", "claude", "b")],
    }


@pytest.fixture
def served(gateway_factory: GatewayFactory, tmp_path: Path, primary: FakeProvider) -> tuple[GatewayThread, Path, Path]:
    pki = make_pki(tmp_path)
    chain = tmp_path / "listener.pem"
    shutil.copy(pki.server_chain, chain)
    return gateway_factory(_document(primary, chain)), pki.ca_file, chain


def _https(thread: GatewayThread, admin: bool = False) -> str:
    listener = thread.gateway.admin if admin else thread.gateway.data
    assert listener is not None
    return f"https://127.0.0.1:{listener.port}"


def test_the_official_clients_talk_https_to_both_listeners(served: tuple[GatewayThread, Path, Path]) -> None:
    thread, ca_file, _ = served
    context = ssl.create_default_context(cafile=str(ca_file))
    with httpx2.Client(verify=context) as http:
        vendor_a = vendor_a_client(_https(thread), "k", http_client=http)
        completion = vendor_a.chat.completions.create(model="gpt", messages=[{"role": "user", "content": "hi"}])
        assert completion.choices[0].message.content
        chunks = list(
            vendor_a.chat.completions.create(model="gpt", messages=[{"role": "user", "content": "hi"}], stream=True)
        )
        assert chunks
        vendor_b = vendor_b_client(_https(thread), "k", http_client=http)
        message = vendor_b.messages.create(model="claude", max_tokens=10, messages=[{"role": "user", "content": "hi"}])
        assert message.content
        assert http.get(f"{_https(thread, admin=True)}/healthz").status_code == 200
    with pytest.raises(httpx.ConnectError):
        httpx.get(f"{_https(thread)}/v1/models")  # the test CA is not trusted by default


def test_tls_is_1_2_or_later_with_alpn_http_1_1_and_no_compression(served: tuple[GatewayThread, Path, Path]) -> None:
    thread, ca_file, _ = served
    assert thread.gateway.data is not None
    port = thread.gateway.data.port
    context = ssl.create_default_context(cafile=str(ca_file))
    context.set_alpn_protocols(["h2", "http/1.1"])
    with (
        socket.create_connection(("127.0.0.1", port)) as raw,
        context.wrap_socket(raw, server_hostname="localhost") as tls,
    ):
        assert tls.selected_alpn_protocol() == "http/1.1"
        assert tls.compression() is None
        assert tls.version() in ("TLSv1.2", "TLSv1.3")
    old = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    old.load_verify_locations(cafile=str(ca_file))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # asking for TLS 1.1 on purpose
        old.minimum_version = ssl.TLSVersion.MINIMUM_SUPPORTED
        old.maximum_version = ssl.TLSVersion.TLSv1_1
    with socket.create_connection(("127.0.0.1", port)) as raw, pytest.raises(ssl.SSLError):
        old.wrap_socket(raw, server_hostname="localhost")


def test_a_changed_certificate_is_served_within_ten_seconds(
    served: tuple[GatewayThread, Path, Path], tmp_path: Path
) -> None:
    thread, old_ca, chain = served
    (tmp_path / "fresh").mkdir()
    fresh = make_pki(tmp_path / "fresh")
    trusts_fresh = ssl.create_default_context(cafile=str(fresh.ca_file))
    shutil.copy(fresh.server_chain, chain)

    def fresh_served() -> bool:
        try:
            return httpx.get(f"{_https(thread)}/v1/models", verify=trusts_fresh).status_code in (200, 401)
        except httpx.ConnectError:
            return False

    wait_until(fresh_served, timeout=10, what="the new certificate to be served")
    with pytest.raises(httpx.ConnectError):
        httpx.get(f"{_https(thread)}/v1/models", verify=ssl.create_default_context(cafile=str(old_ca)))


def test_requests_larger_than_one_tls_read_arrive_whole(
    served: tuple[GatewayThread, Path, Path], primary: FakeProvider
) -> None:
    """Decrypted bytes are handed over 64 KiB at a time through one shared buffer: a 300 KB prompt, twice on one
    keep-alive connection, reaches the provider intact."""
    thread, ca_file, _ = served
    primary.reset()
    prompts = ["a" * 300_000, "b" * 150_000]
    with httpx.Client(verify=ssl.create_default_context(cafile=str(ca_file))) as http:
        for prompt in prompts:
            body = {"model": "gpt", "messages": [{"role": "user", "content": prompt}]}
            assert http.post(f"{_https(thread)}/v1/chat/completions", json=body).status_code == 200
    sent = [received.body["messages"][0]["content"] for received in primary.received[-2:]]
    assert sent == prompts


def test_upstream_answers_larger_than_one_tls_read_arrive_whole(tmp_path: Path) -> None:
    """An HTTPS upstream's 200 KB answer, twice on one pooled connection, read through the shared buffer."""
    pki = make_pki(tmp_path)
    answer = bytes(range(256)) * 800

    async def exchange() -> list[bytes]:
        async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            for _ in range(2):
                await reader.readuntil(b"\r\n\r\n")
                writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: %d\r\n\r\n" % len(answer) + answer)
            writer.close()

        server_tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        server_tls.load_cert_chain(pki.server_chain)
        server = await asyncio.start_server(serve, "127.0.0.1", 0, ssl=server_tls)
        pool = UpstreamPool(ssl.create_default_context(cafile=str(pki.ca_file)))
        origin = Origin("https", "localhost", server.sockets[0].getsockname()[1], "")
        bodies = []
        for _ in range(2):
            response = await pool.request(origin, b"GET", b"/", [(b"host", origin.host_header)], b"")
            bodies.append(await response.read())
            response.release()
        pool.close()
        server.close()
        return bodies

    assert uvloop.run(exchange()) == [answer, answer]
