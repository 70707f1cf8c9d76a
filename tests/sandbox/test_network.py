"""The sandbox's network: nothing but the egress proxy, which enforces the environment's policy after
DNS resolution (loopback, private and metadata addresses refused unless an operator exception lifts
them; `limited` admits only its allowed hosts, package indexes and MCP hosts when asked)."""

from __future__ import annotations

import socket

import pytest

from registry.sandbox.backend import SandboxSpec
from registry.sandbox.egress import REFUSED, NetworkPolicy

FETCH = (
    "python3 -c \"import urllib.request as r; print(r.urlopen('{url}', timeout=20).read().decode())\" 2>&1 | tail -1"
)


@pytest.fixture
def host_server(loopback_site) -> str:
    return loopback_site(lambda path: (b"hello from the host", "text/plain")) + "/"


def fetch(backend, name: str, policy: NetworkPolicy, url: str) -> str:
    box = backend.ensure(SandboxSpec(session_id=f"sesn_{name}", workspace_id="wsp", network=policy))
    return box.run(FETCH.format(url=url)).output.strip()


def refusals() -> float:
    return sum(
        sample.value for metric in REFUSED.collect() for sample in metric.samples if sample.name.endswith("_total")
    )


def test_loopback_is_refused_in_every_mode_without_an_exception(backend, host_server, settings):
    settings.REGISTRY_SANDBOX_EGRESS_ALLOW = ""
    before = refusals()
    assert "403" in fetch(backend, "unrestricted", NetworkPolicy("unrestricted"), host_server)
    assert "403" in fetch(backend, "limited", NetworkPolicy("limited", ("127.0.0.1",)), host_server)
    assert refusals() == before + 2


def test_an_exception_lifts_the_ban_but_limited_still_needs_the_host_listed(backend, host_server, settings):
    settings.REGISTRY_SANDBOX_EGRESS_ALLOW = "127.0.0.1"
    assert fetch(backend, "open", NetworkPolicy("unrestricted"), host_server) == "hello from the host"
    assert fetch(backend, "listed", NetworkPolicy("limited", ("127.0.0.1",)), host_server) == "hello from the host"
    assert "403" in fetch(backend, "unlisted", NetworkPolicy("limited", ("example.com",)), host_server)


def test_a_raw_socket_reaches_only_the_sandboxs_own_loopback(backend, host_server, settings):
    settings.REGISTRY_SANDBOX_EGRESS_ALLOW = "127.0.0.1"
    port = host_server.rsplit(":", 1)[1].strip("/")
    box = backend.ensure(SandboxSpec(session_id="sesn_raw", workspace_id="wsp"))
    probe = f"python3 -c \"import socket; socket.create_connection(('127.0.0.1', {port}), timeout=2)\" 2>&1 | tail -1"
    assert "Connection refused" in box.run(probe).output


@pytest.mark.parametrize("allowed", [True, False])
def test_package_indexes_only_when_allowed(backend, settings, allowed):
    # On this machine the package indexes may sit behind non-public addresses: list exactly those.
    addresses = {str(info[4][0]) for info in socket.getaddrinfo("pypi.org", 443, type=socket.SOCK_STREAM)}
    settings.REGISTRY_SANDBOX_EGRESS_ALLOW = ",".join(addresses)
    policy = NetworkPolicy("limited", allow_package_managers=allowed)
    box = backend.ensure(SandboxSpec(session_id=f"sesn_pip_{allowed}", workspace_id="wsp", network=policy))
    command = "python3 -m pip download --no-deps --no-cache-dir --disable-pip-version-check -q -d dl six==1.16.0"
    result = box.run(f"{command} >/dev/null 2>&1; ls dl", timeout_ms=60_000)
    assert ("six-1.16.0" in result.output) is allowed


def test_socks5_on_the_same_port_under_the_same_rules(backend, host_server, settings):
    settings.REGISTRY_SANDBOX_EGRESS_ALLOW = "127.0.0.1"
    before = refusals()
    socks = "curl -sS --noproxy '' --socks5-hostname 127.0.0.1:3128 {url}; echo \" exit=$?\""
    by_address = "curl -sS --noproxy '' --socks5 127.0.0.1:3128 {url}; echo \" exit=$?\""
    listed = backend.ensure(
        SandboxSpec(session_id="sesn_socks", workspace_id="wsp", network=NetworkPolicy("limited", ("127.0.0.1",)))
    )
    assert listed.run(socks.format(url=host_server)).output.strip() == "hello from the host exit=0"
    assert listed.run(by_address.format(url=host_server)).output.strip() == "hello from the host exit=0"
    unlisted = backend.ensure(
        SandboxSpec(session_id="sesn_socks_no", workspace_id="wsp", network=NetworkPolicy("limited", ("example.com",)))
    )
    refused = unlisted.run(socks.format(url=host_server)).output
    assert "hello from the host" not in refused and "exit=0" not in refused
    assert refusals() == before + 1
