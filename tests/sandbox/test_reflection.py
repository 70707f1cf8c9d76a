"""Attacks that get a server to send a secret back: reflected, stored and read back under another name or
port, streamed a byte at a time, compressed, base64-encoded; and requests that name another host than the
one they go to. The sandbox must only ever see the placeholder, and a mismatched request goes nowhere.
Real sandboxes, real loopback servers (TLS with the test CA, and plain HTTP)."""

from __future__ import annotations

import base64
import re

import pytest

from fakes.pki import Pki
from registry.sandbox.backend import BwrapSandbox
from tests.support.recording_servers import ReflectingHandler, Serve
from tests.support.sandbox_network import (
    SECRET,
    credential,
    placeholder_of,
    refused,
    session_sandbox,
    tls_with_server_name,
    trust_test_ca,
    vault_of,
)

BEARER = '-H "Authorization: Bearer $API_KEY"'


@pytest.fixture
def box(backend, tenant, pki: Pki, proxied) -> BwrapSandbox:
    """A sandbox whose API_KEY goes to localhost (any port), with the test CA at hand for tunnels."""
    vault = vault_of(tenant)
    credential(vault, networking={"type": "limited", "allowed_hosts": ["localhost"]})
    sandbox = session_sandbox(backend, tenant, [vault.id], "sesn_reflect")
    trust_test_ca(sandbox, pki)
    return sandbox


@pytest.mark.parametrize("path", ["/echo", "/drip", "/gzip"])
@pytest.mark.parametrize("tls", [True, False], ids=["https", "http"])
def test_a_reflected_secret_comes_back_as_its_placeholder(box, pki, serve: Serve, tls, path):
    port, received = serve(pki.server_chain if tls else None, ReflectingHandler)
    placeholder = placeholder_of(box)
    scheme = "https" if tls else "http"
    compressed = "--compressed" if path == "/gzip" else ""
    output = box.run(f"curl -sS -i {compressed} {BEARER} {scheme}://localhost:{port}{path}").output
    assert received[0].headers["authorization"] == f"Bearer {SECRET}"  # it did go out
    assert SECRET not in output
    assert f"authorization: Bearer {placeholder}" in output  # the body (the proxy sends names in lower case)
    if path == "/echo":
        assert f"200 Echo Bearer {placeholder}" in output  # the status line
    if path != "/gzip":
        assert f"x-echo: Bearer {placeholder}" in output  # a header (a trailer when dripping)


def test_a_base64_reflection_does_not_carry_the_secret(box, pki, serve: Serve):
    port, _ = serve(pki.server_chain, ReflectingHandler)
    output = box.run(f"curl -sS {BEARER} https://localhost:{port}/base64").output
    assert SECRET not in output
    alphabet_only = re.sub("[^A-Za-z0-9+/]", "", output)
    for offset in range(4):  # decoded from every alignment, the secret is not there either
        text = alphabet_only[offset:]
        assert SECRET.encode() not in base64.b64decode(text[: len(text) - len(text) % 4])


def test_an_answer_in_a_coding_the_proxy_cannot_read_is_refused(box, pki, serve: Serve):
    port, _ = serve(pki.server_chain, ReflectingHandler)
    output = box.run(f"curl -sS -i {BEARER} https://localhost:{port}/brotli").output
    assert "HTTP/1.1 502 Bad Gateway" in output and "content-encoding br" in output
    assert SECRET not in output


def test_a_secret_stored_under_one_name_comes_back_as_its_placeholder_under_any_other(box, pki, serve: Serve):
    tls_port, _ = serve(pki.server_chain, ReflectingHandler)
    plain_port, _ = serve(None, ReflectingHandler)
    placeholder = placeholder_of(box)
    stored = box.run(f"curl -sS -o /dev/null -w '%{{http_code}}' -X POST {BEARER} https://localhost:{tls_port}/store/k")
    assert stored.output == "200"
    assert SECRET.encode() in ReflectingHandler.stored["/store/k"]
    read_backs = {
        "the same name": f"curl -sS https://localhost:{tls_port}/store/k",
        "another name and port, plain": f"curl -sS http://127.0.0.1:{plain_port}/store/k",
        "a CONNECT tunnel": f"curl -sS -p http://127.0.0.1:{plain_port}/store/k",
        "a SOCKS tunnel": f"curl -sS --socks5-hostname 127.0.0.1:3128 http://127.0.0.1:{plain_port}/store/k",
    }
    for way, command in read_backs.items():
        output = box.run(command).output
        assert SECRET not in output and f"Bearer {placeholder}" in output, way


def test_a_request_naming_another_host_on_an_intercepted_connection_goes_nowhere(box, pki, serve: Serve):
    port, received = serve(pki.server_chain)
    before = refused("host_mismatch")
    output = box.run(f'curl -sS -i -H "Host: attacker.example" {BEARER} https://localhost:{port}/').output
    assert "HTTP/1.1 403 Forbidden" in output and f"localhost:{port}, where this connection goes" in output
    assert received == [] and refused("host_mismatch") == before + 1


def test_a_plain_request_a_secret_may_go_with_must_name_its_host(box, serve: Serve):
    port, received = serve(None)
    output = box.run(f'curl -sS -i -H "Host: attacker.example" {BEARER} http://localhost:{port}/').output
    assert "HTTP/1.1 403 Forbidden" in output
    assert received == []


def test_an_intercepted_client_hello_naming_another_host_is_refused(box, pki, serve: Serve):
    port, received = serve(pki.server_chain)
    before = refused("sni_mismatch")
    ca_file = "/workspace/test-ca.pem"
    assert tls_with_server_name(box, "localhost", port, "attacker.example", ca_file)[1].startswith("refused")
    assert refused("sni_mismatch") == before + 1
    assert tls_with_server_name(box, "localhost", port, "localhost", ca_file)[1] == "HTTP/1.1 200 OK"
    assert len(received) == 1


def test_an_answer_without_a_body_keeps_its_length_and_is_redacted(box, pki, serve: Serve):
    port, _ = serve(pki.server_chain, ReflectingHandler)
    placeholder = placeholder_of(box)
    output = box.run(f"curl -sS -I --max-time 10 {BEARER} https://localhost:{port}/echo; echo exit=$?").output
    assert f"x-echo: Bearer {placeholder}" in output and "content-length: " in output
    assert SECRET not in output and output.endswith("exit=0\n")
