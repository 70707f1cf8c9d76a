"""`environment_variable` credentials: the sandbox sees only a placeholder; its egress proxy puts the real
secret in (ending TLS with the deployment CA) on the way to the credential's hosts, and nowhere else.
Real bubblewrap sandboxes, real TLS servers on loopback with a test CA the proxy is told to trust."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from django.utils import timezone

from registry.runtime.secrets import session_injections
from registry.sandbox.backend import BwrapSandbox, SandboxSpec
from registry.sandbox.egress import NetworkPolicy
from registry.vaults import services as vault_services
from registry.vaults.models import VaultCredential
from tests.support.tls import Pki, Received, make_pki, recording_servers

SECRET = "sk-live-0123456789abcdef"


@pytest.fixture
def pki(tmp_path: Path) -> Pki:
    return make_pki(tmp_path)


@pytest.fixture
def serve() -> Iterator[Callable[[Path | None], tuple[int, list[Received]]]]:
    yield from recording_servers()


# -- sessions with credentials ------------------------------------------------------------------------
@pytest.fixture
def proxied(settings, pki: Pki) -> None:
    settings.REGISTRY_SANDBOX_EGRESS_ALLOW = "127.0.0.1"
    settings.REGISTRY_SANDBOX_EXTRA_CA_FILE = str(pki.ca_file)


def credential(vault, name: str = "API_KEY", value: str = SECRET, **auth: Any) -> VaultCredential:
    networking = auth.pop("networking", {"type": "unrestricted"})
    values = {"type": "environment_variable", "secret_name": name, "secret_value": value, "networking": networking}
    return vault_services.credential_create(vault=vault, values={"auth": {**values, **auth}})


def vault_of(tenant, name: str = "keys"):
    return vault_services.vault_create(workspace=tenant.workspace, values={"display_name": name})


def session_sandbox(backend, tenant, vault_ids: list[str], session_id: str) -> BwrapSandbox:
    env, injections = session_injections(session_id=session_id, workspace_id=tenant.workspace.id, vault_ids=vault_ids)
    spec = SandboxSpec(
        session_id=session_id, workspace_id=tenant.workspace.id, env=env, injections=injections, network=NetworkPolicy()
    )
    return backend.ensure(spec)


def placeholder_of(box: BwrapSandbox, name: str = "API_KEY") -> str:
    return box.run(f'printf %s "${name}"').output


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
    box.run(f"cat > test-ca.pem <<'EOF'\n{pki.ca_file.read_text()}EOF")

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
    ca_file = backend.root / "ca" / "ca.pem"
    assert ca_file.stat().st_mode & 0o777 == 0o600


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
        ("api.example.com",),
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
