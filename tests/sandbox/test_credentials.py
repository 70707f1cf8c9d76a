"""`environment_variable` credentials: the sandbox sees only a placeholder; its egress proxy puts the real
secret in (ending TLS with the deployment CA) on the way to the credential's hosts (and ports, where an
entry names one), only where its `injection_location` allows, and nowhere else; HTTP/1.0 upstreams are
relayed whole. Real bubblewrap sandboxes, real TLS servers on loopback with a test CA the proxy trusts."""

from __future__ import annotations

from dataclasses import replace

import pytest
from django.utils import timezone

from registry.runtime.secrets import session_injections
from registry.sandbox.interception import CA_FILE
from registry.vaults.models import VaultCredential
from tests.support.recording_servers import Http10ReflectingHandler
from tests.support.sandbox_network import (
    SECRET,
    credential,
    placeholder_of,
    session_sandbox,
    trust_test_ca,
    vault_of,
)


# -- tests ----------------------------------------------------------------------------------------------
def test_the_sandbox_sees_only_the_placeholder(backend, tenant):
    vault = vault_of(tenant)
    credential(vault)
    box = session_sandbox(backend, tenant, [vault.id], "sesn_env")
    output = box.run("env").output
    placeholder = placeholder_of(box)
    assert f"API_KEY={placeholder}" in output
    assert placeholder.startswith("regsec_")
    assert SECRET not in output
    assert SECRET not in repr(box.spec)
    search = f"grep -rsl -- {SECRET} /workspace /tmp /etc /run /proc/[0-9]*/environ /proc/[0-9]*/cmdline; echo done"
    assert box.run(search).output.strip() == "done"
    box.snapshot()
    assert SECRET.encode() not in b"".join(path.read_bytes() for path in box.workspace.rglob("*") if path.is_file())


def test_https_to_a_listed_host_carries_the_secret_and_to_others_the_placeholder(backend, tenant, pki, serve, proxied):
    port, received = serve(pki.server_chain)
    vault = vault_of(tenant)
    credential(vault, networking={"type": "limited", "allowed_hosts": ["localhost"]})
    box = session_sandbox(backend, tenant, [vault.id], "sesn_https")
    placeholder = placeholder_of(box)
    trust_test_ca(box, pki)

    listed = box.run(
        f'curl -sS -H "Authorization: Bearer $API_KEY" https://localhost:{port}/one https://localhost:{port}/two'
    )
    fetch = (
        "import os, urllib.request as r; "
        f"q = r.Request('https://localhost:{port}/three'); "
        "q.add_header('Authorization', 'Bearer ' + os.environ['API_KEY']); "
        "print(r.urlopen(q, timeout=20).read().decode())"
    )
    by_python = box.run(f'python3 -c "{fetch}"')
    unlisted = box.run(
        f'curl -sS --cacert test-ca.pem -H "Authorization: Bearer $API_KEY" https://127.0.0.1:{port}/four'
    )

    assert listed.output == "ok\nok\n" and by_python.output.strip() == "ok" and unlisted.output == "ok\n"
    by_path = {request.path: request for request in received}
    for path in ("/one", "/two", "/three"):
        assert by_path[path].headers["authorization"] == f"Bearer {SECRET}"
    assert by_path["/one"].peer_port == by_path["/two"].peer_port  # one kept-alive connection
    assert by_path["/four"].headers["authorization"] == f"Bearer {placeholder}"
    assert box.interception is not None
    assert (box.interception.ca.directory / CA_FILE).stat().st_mode & 0o777 == 0o600


def test_body_injection_rewrites_the_body_and_its_length(backend, tenant, pki, serve, proxied):
    port, received = serve(pki.server_chain)
    vault = vault_of(tenant)
    credential(vault, injection_location={"body": True, "header": False})
    box = session_sandbox(backend, tenant, [vault.id], "sesn_body")
    placeholder = placeholder_of(box)
    url = f"https://localhost:{port}"
    chunked = f'curl -sS -H "X-Key: $API_KEY" -H "Transfer-Encoding: chunked" --data-binary "key=$API_KEY" {url}/a'
    fixed = f'curl -sS --data-binary "{{\\"key\\": \\"$API_KEY\\"}}" {url}/b'
    assert box.run(f"{chunked}; {fixed}").output == "ok\nok\n"
    by_path = {request.path: request for request in received}
    assert by_path["/a"].body == f"key={SECRET}".encode()
    assert by_path["/a"].headers["content-length"] == str(len(f"key={SECRET}"))
    assert by_path["/a"].headers["x-key"] == placeholder
    assert by_path["/b"].body == f'{{"key": "{SECRET}"}}'.encode()


def test_plain_http_to_a_listed_host_carries_the_secret(backend, tenant, serve, proxied):
    port, received = serve(None)
    vault = vault_of(tenant)
    credential(vault, networking={"type": "limited", "allowed_hosts": ["localhost"]})
    box = session_sandbox(backend, tenant, [vault.id], "sesn_plain")
    assert box.run(f'curl -sS -H "Authorization: Bearer $API_KEY" "http://localhost:{port}/p?q=1"').output == "ok\n"
    assert received[0].path == "/p?q=1"
    assert received[0].headers["authorization"] == f"Bearer {SECRET}"


def test_an_upstream_with_an_untrusted_certificate_is_refused(backend, tenant, pki, serve, proxied):
    port, received = serve(pki.rogue_chain)
    vault = vault_of(tenant)
    credential(vault, networking={"type": "limited", "allowed_hosts": ["localhost"]})
    box = session_sandbox(backend, tenant, [vault.id], "sesn_rogue")
    result = box.run(f'curl -sS -H "Authorization: Bearer $API_KEY" https://localhost:{port}/')
    assert "502" in result.output and result.exit_code != 0
    assert received == []


def test_session_injections_take_live_credentials_of_the_sessions_own_workspace(tenant, other_tenant):
    first, second, archived_vault = vault_of(tenant, "first"), vault_of(tenant, "second"), vault_of(tenant, "old")
    foreign = vault_of(other_tenant)
    credential(first, "API_KEY", "from-first", networking={"type": "limited", "allowed_hosts": ["API.example.com"]})
    credential(second, "API_KEY", "from-second")
    credential(second, "OTHER", "other-value", injection_location={"body": True})
    gone = credential(first, "GONE", "archived-value")
    VaultCredential.objects.filter(pk=gone.pk).update(archived_at=timezone.now())
    credential(archived_vault, "IN_OLD_VAULT", "old-value")
    archived_vault.archived_at = timezone.now()
    archived_vault.save()
    credential(foreign, "FOREIGN", "foreign-value")

    vault_ids = [first.id, second.id, archived_vault.id, foreign.id]
    env, injections = session_injections(session_id="sesn_a", workspace_id=tenant.workspace.id, vault_ids=vault_ids)

    assert set(env) == {"API_KEY", "OTHER"}
    by_placeholder = {injection.placeholder: injection for injection in injections}
    api_key, other = by_placeholder[env["API_KEY"]], by_placeholder[env["OTHER"]]
    assert (api_key.value, api_key.hosts, api_key.in_headers, api_key.in_body) == (
        "from-first",
        (("api.example.com", None),),
        True,
        False,
    )
    assert (other.value, other.hosts, other.in_body) == ("other-value", None, True)
    assert all(placeholder.startswith("regsec_") and "value" not in placeholder for placeholder in env.values())
    again, _ = session_injections(session_id="sesn_a", workspace_id=tenant.workspace.id, vault_ids=vault_ids)
    other_session, _ = session_injections(session_id="sesn_b", workspace_id=tenant.workspace.id, vault_ids=vault_ids)
    assert again == env  # stable for the session: a new shell keeps the placeholders the agent knows
    assert other_session["API_KEY"] != env["API_KEY"] and "from-first" not in env["API_KEY"]


def test_a_new_spec_brings_its_secrets_to_the_proxy(backend, tenant, pki, serve, proxied):
    port, received = serve(pki.server_chain)
    vault = vault_of(tenant)
    credential(vault)
    box = session_sandbox(backend, tenant, [vault.id], "sesn_swap")
    env, injections = session_injections(
        session_id=box.spec.session_id, workspace_id=tenant.workspace.id, vault_ids=[vault.id]
    )
    with box.lock:  # as the backend swaps in a changed spec: the next command starts a new shell
        box.stop()
        box.spec = replace(box.spec, env=env, injections=injections)
    assert box.run(f'curl -sS -H "Authorization: Bearer $API_KEY" https://localhost:{port}/').output == "ok\n"
    assert received[0].headers["authorization"] == f"Bearer {SECRET}"


def test_a_host_entry_with_a_port_binds_the_secret_to_that_port(backend, tenant, pki, serve, proxied):
    bound_port, bound = serve(pki.server_chain)
    other_port, other = serve(pki.server_chain)
    vault = vault_of(tenant)
    credential(vault, networking={"type": "limited", "allowed_hosts": [f"localhost:{bound_port}"]})
    box = session_sandbox(backend, tenant, [vault.id], "sesn_port")
    placeholder = placeholder_of(box)
    ca_file = trust_test_ca(box, pki)
    header = '-H "Authorization: Bearer $API_KEY"'
    assert box.run(f"curl -sS {header} https://localhost:{bound_port}/").output == "ok\n"
    assert box.run(f"curl -sS --cacert {ca_file} {header} https://localhost:{other_port}/").output == "ok\n"
    assert bound[0].headers["authorization"] == f"Bearer {SECRET}"
    assert other[0].headers["authorization"] == f"Bearer {placeholder}"


@pytest.mark.parametrize(
    ("location", "in_header", "in_body"),
    [({"header": True}, True, False), ({"header": False, "body": True}, False, True)],
    ids=["header", "body"],
)
def test_a_secret_goes_only_where_its_injection_location_allows(
    backend, tenant, pki, serve, proxied, location, in_header, in_body
):
    port, received = serve(pki.server_chain)
    vault = vault_of(tenant)
    credential(vault, injection_location=location)
    box = session_sandbox(backend, tenant, [vault.id], f"sesn_location_{in_body}")
    placeholder = placeholder_of(box)
    url = f"https://localhost:{port}/p?key=$API_KEY"
    expect = '-H "Expect: 100-continue"'  # answered by the proxy, which may have to read the body first
    assert box.run(f'curl -sS {expect} -H "X-Key: $API_KEY" --data-binary "key=$API_KEY" "{url}"').output == "ok\n"
    [request] = received
    assert request.headers["x-key"] == (SECRET if in_header else placeholder)
    assert request.body == f"key={SECRET if in_body else placeholder}".encode()
    assert request.path == f"/p?key={placeholder}"  # never in the request target


@pytest.mark.parametrize("tls", [True, False], ids=["https", "http"])
@pytest.mark.parametrize("client_version", ["--http1.1", "--http1.0"])
def test_an_http10_upstream_is_relayed_to_the_end_of_its_body(
    backend, tenant, pki, serve, proxied, tls, client_version
):
    port, received = serve(pki.server_chain if tls else None, Http10ReflectingHandler)
    vault = vault_of(tenant)
    credential(vault, networking={"type": "limited", "allowed_hosts": ["localhost"]})
    box = session_sandbox(backend, tenant, [vault.id], "sesn_http10")
    box.run("python3 -c \"print('x' * 199_999 + 'END', end='')\" > body.txt")
    scheme = "https" if tls else "http"
    fetch = f"curl -sS {client_version} --data-binary @body.txt {scheme}://localhost:{port}/echo"
    output = box.run(f"{fetch} -o answer.txt -w '%{{http_code}} %{{size_download}} '; tail -c 3 answer.txt").output
    status, size, end = output.split()
    assert (status, end) == ("200", "END") and int(size) > 200_000
    assert len(received[0].body) == 200_002
