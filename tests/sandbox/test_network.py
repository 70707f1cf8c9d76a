"""The sandbox's network: nothing but the egress proxy, which enforces the environment's policy after
DNS resolution (loopback, private and metadata addresses refused unless an operator exception lifts
them; `limited` admits only its allowed hosts, package indexes and MCP hosts when asked, and binds each
tunnel's ClientHello and each plain request's Host to where it really goes). Plain requests go each to the
host they name; a protocol switch is carried where there is nothing to redact."""

from __future__ import annotations

import logging
import re
import socket
from collections.abc import Iterator

import pytest

from registry.sandbox.backend import SandboxSpec
from registry.sandbox.egress import REFUSED, NetworkPolicy
from registry.sandbox.refusals import REFUSAL_LOG
from tests.support.sandbox_network import (
    credential,
    refused,
    session_sandbox,
    tls_with_server_name,
    trust_test_ca,
    vault_of,
)
from tests.support.sites import upgrade_echo_site

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
    answer = unlisted.run(socks.format(url=host_server)).output
    assert "hello from the host" not in answer and "exit=0" not in answer
    assert refusals() == before + 1


def test_under_limited_a_client_hello_must_name_the_tunnels_host(backend, pki, serve, proxied):
    port, received = serve(pki.server_chain)
    before = refused("sni_mismatch")
    box = backend.ensure(
        SandboxSpec(session_id="sesn_sni", workspace_id="wsp", network=NetworkPolicy("limited", ("localhost",)))
    )
    ca_file = trust_test_ca(box, pki)
    other = tls_with_server_name(box, "localhost", port, "other.example", ca_file)
    assert other[0] == "HTTP/1.1 200 Connection established" and other[1].startswith("refused")
    assert refused("sni_mismatch") == before + 1
    assert tls_with_server_name(box, "localhost", port, "localhost", ca_file)[1] == "HTTP/1.1 200 OK"
    assert len(received) == 1


def test_under_limited_plain_http_must_name_its_host(backend, serve, proxied):
    port, received = serve(None)
    box = backend.ensure(
        SandboxSpec(session_id="sesn_host", workspace_id="wsp", network=NetworkPolicy("limited", ("localhost",)))
    )
    url = f"http://localhost:{port}/"
    for how in ("-p", ""):  # in a CONNECT tunnel, and as an absolute-form request
        assert "HTTP/1.1 403 Forbidden" in box.run(f'curl -sS -i {how} -H "Host: other.example" {url}').output
        assert box.run(f"curl -sS {how} {url}").output == "ok\n"
    assert len(received) == 2


def test_plain_requests_on_one_proxy_connection_each_go_to_the_host_they_name(backend, serve, proxied):
    first_port, first = serve(None)
    second_port, second = serve(None)
    box = backend.ensure(SandboxSpec(session_id="sesn_routes", workspace_id="wsp"))
    urls = f"http://127.0.0.1:{first_port}/one http://127.0.0.1:{second_port}/two http://127.0.0.1:{first_port}/three"
    output = box.run(f"curl -sS -v {urls} 2>&1").output
    assert "Re-using existing connection" in output  # one connection to the proxy carried all three
    assert [request.path for request in first] == ["/one", "/three"]
    assert [request.path for request in second] == ["/two"]


UPGRADE_CLIENT = r"""
import socket, sys
proxy = socket.create_connection(("127.0.0.1", 3128), timeout=20)
authority = "127.0.0.1:" + sys.argv[1]
upgrade = "Connection: Upgrade\r\nUpgrade: echo\r\n"
proxy.sendall(f"GET http://{authority}/ HTTP/1.1\r\nHost: {authority}\r\n{upgrade}\r\n".encode())
head = b""
while not head.endswith(b"\r\n\r\n"):
    head += proxy.recv(1)
print(head.split(b"\r\n")[0].decode())
if head.startswith(b"HTTP/1.1 101"):
    proxy.sendall(b"ping")
    print(proxy.recv(4).decode())
"""


@pytest.fixture
def upgrade_echo_port() -> Iterator[int]:
    yield from upgrade_echo_site()


def test_a_protocol_switch_is_carried_only_where_there_is_nothing_to_redact(
    backend, tenant, upgrade_echo_port, settings
):
    settings.REGISTRY_SANDBOX_EGRESS_ALLOW = "127.0.0.1"
    plain = backend.ensure(SandboxSpec(session_id="sesn_upgrade", workspace_id="wsp"))
    vault = vault_of(tenant)
    credential(vault, networking={"type": "limited", "allowed_hosts": ["api.example.com"]})
    with_secrets = session_sandbox(backend, tenant, [vault.id], "sesn_upgrade_secrets")
    for box in (plain, with_secrets):
        box.run(f"cat > upgrade.py <<'EOF'\n{UPGRADE_CLIENT}EOF")
    assert plain.run(f"python3 upgrade.py {upgrade_echo_port}").output == "HTTP/1.1 101 Switching Protocols\nping\n"
    assert with_secrets.run(f"python3 upgrade.py {upgrade_echo_port}").output == "HTTP/1.1 502 Bad Gateway\n"


# Inside the sandbox: one proxy request (`CONNECT <target>` or a plain `GET <target>`) and the whole answer.
RAW_PROXY_CLIENT = r"""
import socket, sys
method, target = sys.argv[1], sys.argv[2]
proxy = socket.create_connection(("127.0.0.1", 3128), timeout=20)
proxy.sendall(f"{method} {target} HTTP/1.1\r\nHost: {target}\r\n\r\n".encode())
answer = b""
while chunk := proxy.recv(65536):
    answer += chunk
sys.stdout.write(answer.decode())
"""
# Inside the sandbox: a SOCKS5 CONNECT to an IPv4 address or a name; prints the reply's code.
SOCKS_CLIENT = r"""
import ipaddress, socket, sys
proxy = socket.create_connection(("127.0.0.1", 3128), timeout=20)
proxy.sendall(bytes([5, 1, 0]))
assert proxy.recv(2) == bytes([5, 0])
try:
    destination = bytes([1]) + ipaddress.IPv4Address(sys.argv[1]).packed
except ValueError:
    destination = bytes([3, len(sys.argv[1])]) + sys.argv[1].encode()
proxy.sendall(bytes([5, 1, 0]) + destination + int(sys.argv[2]).to_bytes(2, "big"))
print(proxy.recv(10)[1])
"""
DOCUMENTATION = "refused: 203.0.113.80 is in a documentation range; REGISTRY_SANDBOX_EGRESS_ALLOW lifts it"


def raw_clients(backend, name: str, policy: NetworkPolicy | None = None):
    box = backend.ensure(SandboxSpec(session_id=f"sesn_{name}", workspace_id="wsp", network=policy or NetworkPolicy()))
    box.write_file("proxy_client.py", RAW_PROXY_CLIENT.encode())
    box.write_file("socks_client.py", SOCKS_CLIENT.encode())
    return box


def refusal_logs(caplog) -> list[str]:
    return [record.getMessage() for record in caplog.records if record.name == "registry.sandbox.refusals"]


def test_a_refusal_names_its_rule_and_address_in_the_status_line_the_header_and_the_body(backend, settings, caplog):
    """The incident: pip showed only `Tunnel connection failed: 403 Forbidden` for an index on a
    documentation-range address, and the registry logged nothing."""
    settings.REGISTRY_SANDBOX_EGRESS_ALLOW = ""
    caplog.set_level(logging.INFO, logger="registry.sandbox.refusals")
    box = raw_clients(backend, "explained")
    for method, target in (("CONNECT", "203.0.113.80:443"), ("GET", "http://203.0.113.80/simple/?token=hunter2")):
        answer = box.run(f"python3 proxy_client.py {method} '{target}'").output
        head, _, body = answer.partition("\r\n\r\n")
        status_line, *headers = head.split("\r\n")
        assert status_line == f"HTTP/1.1 403 Forbidden - sandbox egress {DOCUMENTATION}", method
        assert "x-sandbox-egress-refused: rule=documentation; host=203.0.113.80; address=203.0.113.80" in headers
        assert body == DOCUMENTATION + "\n"
    assert box.run("python3 socks_client.py 203.0.113.80 443").output == "2\n"  # not allowed by the ruleset
    pip = "python3 -m pip download --no-deps --no-cache-dir --retries 1 -d dl --index-url https://203.0.113.80/simple/"
    shown = box.run(f"{pip} six 2>&1", timeout_ms=60_000).output
    assert f"Tunnel connection failed: 403 Forbidden - sandbox egress {DOCUMENTATION}" in shown
    logged = refusal_logs(caplog)
    expected = "sandbox egress refused: session=sesn_explained host=203.0.113.80 port={} address=203.0.113.80"
    assert logged[:3] == [expected.format(port) + " rule=documentation" for port in (443, 80, 443)]
    assert not any("token" in line or "hunter2" in line or "/simple" in line for line in logged)


def test_a_flood_of_refusals_is_counted_but_logged_only_up_to_the_bound(backend, settings, caplog):
    settings.REGISTRY_SANDBOX_EGRESS_ALLOW = ""
    caplog.set_level(logging.INFO, logger="registry.sandbox.refusals")
    before = REFUSED.labels(reason="address")._value.get()
    box = raw_clients(backend, "flood")
    loop = "for i in $(seq 200); do curl -s -o /dev/null -x socks5h://127.0.0.1:3128 http://203.0.113.80/; done"
    box.run(loop, timeout_ms=120_000)
    assert REFUSED.labels(reason="address")._value.get() - before == 200
    logged = [line for line in refusal_logs(caplog) if "session=sesn_flood" in line]
    assert len(logged) == REFUSAL_LOG.limit
    assert logged[-1].endswith("(this session's further refusals in the next 60 s are counted, not logged)")


def test_a_named_host_is_refused_with_its_address_and_a_host_outside_the_policy_with_what_admits_it(
    backend, host_server, settings, caplog
):
    settings.REGISTRY_SANDBOX_EGRESS_ALLOW = ""
    caplog.set_level(logging.INFO, logger="registry.sandbox.refusals")
    port = host_server.rsplit(":", 1)[1].strip("/")
    box = raw_clients(backend, "named")
    answer = box.run(f"curl -sS -i http://localhost:{port}/").output
    assert re.search(
        r"^HTTP/1.1 403 Forbidden - sandbox egress refused: (127.0.0.1|::1) \(localhost\) is a loopback", answer
    )
    assert re.search(r"x-sandbox-egress-refused: rule=loopback; host=localhost; address=(127.0.0.1|::1)\r\n", answer)
    assert answer.endswith("is a loopback address; REGISTRY_SANDBOX_EGRESS_ALLOW lifts it\n")
    limited = raw_clients(backend, "policy", NetworkPolicy("limited", ("example.com",)))
    answer = limited.run("python3 proxy_client.py CONNECT pypi.org:443").output
    refusal = "refused: pypi.org is not among the hosts this environment allows; "
    admitting = "networking.allow_package_managers admits it (a package index)"
    assert answer.startswith(f"HTTP/1.1 403 Forbidden - sandbox egress {refusal}{admitting}\r\n")
    assert "x-sandbox-egress-refused: rule=not_allowed; host=pypi.org\r\n" in answer
    assert (
        "x-sandbox-egress-refused: rule=not_allowed; host=elsewhere.example\r\n"
        in limited.run("python3 proxy_client.py CONNECT elsewhere.example:443").output
    )
    assert limited.run("python3 socks_client.py 127.0.0.1 443").output == "2\n"
    assert refusal_logs(caplog)[-3:] == [
        "sandbox egress refused: session=sesn_policy host=pypi.org port=443 address=- rule=not_allowed",
        "sandbox egress refused: session=sesn_policy host=elsewhere.example port=443 address=- rule=not_allowed",
        "sandbox egress refused: session=sesn_policy host=127.0.0.1 port=443 address=- rule=not_allowed",
    ]


def test_a_host_that_does_not_resolve_is_a_502_and_socks_host_unreachable(backend):
    box = raw_clients(backend, "unresolvable")
    answer = box.run("python3 proxy_client.py CONNECT nowhere.invalid:443").output
    assert answer.startswith("HTTP/1.1 502 Bad Gateway - sandbox egress refused: nowhere.invalid could not be resolved")
    assert "x-sandbox-egress-refused: rule=unresolvable; host=nowhere.invalid\r\n" in answer
    assert box.run("python3 socks_client.py nowhere.invalid 443").output == "4\n"  # host unreachable
