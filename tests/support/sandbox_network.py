"""Real sandboxes behind their egress proxy, for the proxy's tests: sessions with `environment_variable`
credentials (vaults and credentials made through the services), the proxy's refusals, the test CA trusted
inside, and a TLS client run inside that asks for a server name of its choosing. (The PKI, the loopback
servers and the proxy's settings are fixtures in tests/sandbox/conftest.py.)"""

from __future__ import annotations

from typing import Any

from prometheus_client import REGISTRY

from fakes.pki import Pki
from registry.runtime.secrets import session_injections
from registry.sandbox.backend import BwrapBackend, BwrapSandbox, SandboxSpec
from registry.sandbox.egress import NetworkPolicy
from registry.vaults import services as vault_services
from registry.vaults.models import Vault, VaultCredential
from tests.support.tenants import Tenant

SECRET = "sk-live-0123456789abcdef"


def credential(vault: Vault, name: str = "API_KEY", value: str = SECRET, **auth: Any) -> VaultCredential:
    networking = auth.pop("networking", {"type": "unrestricted"})
    values = {"type": "environment_variable", "secret_name": name, "secret_value": value, "networking": networking}
    return vault_services.credential_create(vault=vault, values={"auth": {**values, **auth}})


def vault_of(tenant: Tenant, name: str = "keys") -> Vault:
    return vault_services.vault_create(workspace=tenant.workspace, values={"display_name": name})


def session_sandbox(
    backend: BwrapBackend, tenant: Tenant, vault_ids: list[str], session_id: str, network: NetworkPolicy | None = None
) -> BwrapSandbox:
    env, injections = session_injections(session_id=session_id, workspace_id=tenant.workspace.id, vault_ids=vault_ids)
    spec = SandboxSpec(
        session_id=session_id,
        workspace_id=tenant.workspace.id,
        env=env,
        injections=injections,
        network=network or NetworkPolicy(),
    )
    return backend.ensure(spec)


def refused(reason: str) -> float:
    """How many times the egress proxy refused for this reason, so far."""
    return REGISTRY.get_sample_value("registry_sandbox_egress_refused_total", {"reason": reason}) or 0.0


def placeholder_of(box: BwrapSandbox, name: str = "API_KEY") -> str:
    return box.run(f'printf %s "${name}"').output


def trust_test_ca(box: BwrapSandbox, pki: Pki) -> str:
    """Puts the test CA in the workspace (for TLS the proxy does not end); its path inside."""
    box.run(f"cat > test-ca.pem <<'EOF'\n{pki.ca_file.read_text()}EOF")
    return "/workspace/test-ca.pem"


# Inside the sandbox: CONNECT host:port, then TLS asking for another server name, then one GET. Prints the
# CONNECT answer's status line and the GET's, or `refused: <error>` when the TLS connection is cut.
TLS_CLIENT_SOURCE = r"""
import socket, ssl, sys
host, port, server_name, ca_file = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
tunnel = socket.create_connection(("127.0.0.1", 3128), timeout=20)
tunnel.sendall(f"CONNECT {host}:{port} HTTP/1.1\r\nHost: {host}:{port}\r\n\r\n".encode())
head = b""
while not head.endswith(b"\r\n\r\n"):
    head += tunnel.recv(1)
print(head.split(b"\r\n")[0].decode())
context = ssl.create_default_context()
context.load_verify_locations(ca_file)
context.check_hostname = False  # the server name is the proxy's to check here
try:
    secured = context.wrap_socket(tunnel, server_hostname=server_name)
    secured.sendall(f"GET / HTTP/1.1\r\nHost: {host}:{port}\r\nConnection: close\r\n\r\n".encode())
    print(secured.recv(4096).decode().split("\r\n")[0])
except OSError as error:
    print("refused:", type(error).__name__)
"""


def tls_with_server_name(box: BwrapSandbox, host: str, port: int, server_name: str, ca_file: str) -> list[str]:
    """Status lines (CONNECT, then GET or a refusal) of a TLS connection through the proxy to host:port
    whose ClientHello names `server_name`."""
    box.run(f"cat > tls_client.py <<'EOF'\n{TLS_CLIENT_SOURCE}EOF")
    return box.run(f"python3 tls_client.py {host} {port} {server_name} {ca_file}").output.splitlines()
