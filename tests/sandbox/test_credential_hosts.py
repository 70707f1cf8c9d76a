"""A credential's `allowed_hosts` as the API takes them (the reference client's rule: a bare hostname, an IPv4
address or a `*.` wildcard, at most 16, plus our optional `:port`), and as its sandbox's proxy matches
them: a wildcard covers subdomains only, an entry with a port binds that port."""

from __future__ import annotations

import pytest

from registry.runtime.secrets import session_injections
from registry.vaults.models import VaultCredential
from tests.support.api_errors import assert_error


@pytest.fixture
def credentials_url(api) -> str:
    vault = api.post("/v1/vaults", {"display_name": "keys"}, format="json").json()
    return f"/v1/vaults/{vault['id']}/credentials"


def environment_variable(allowed_hosts: list[str]) -> dict[str, object]:
    return {
        "auth": {
            "type": "environment_variable",
            "secret_name": "API_KEY",
            "secret_value": "sk-value",
            "networking": {"type": "limited", "allowed_hosts": allowed_hosts},
        }
    }


@pytest.mark.parametrize(
    "entry",
    [
        "https://api.example.com",
        "api.example.com/v1",
        "::1",
        "[::1]:443",
        "",
        "api.example.com:0",
        "api.example.com:65536",
        "api.example.com:https",
        "*",
        "*.192.0.2.1",
        "192.0.2",
        "user@api.example.com",
        " api.example.com",
        "api_example.com",
    ],
)
def test_an_entry_that_is_not_a_host_is_400_naming_the_field(api, credentials_url, entry):
    response = api.post(credentials_url, environment_variable(["api.example.com", entry]), format="json")
    assert_error(response, 400, "invalid_request_error", "allowed_hosts")
    assert VaultCredential.objects.count() == 0


def test_more_than_16_entries_are_400(api, credentials_url):
    hosts = [f"h{index}.example.com" for index in range(17)]
    response = api.post(credentials_url, environment_variable(hosts), format="json")
    assert_error(response, 400, "invalid_request_error", "allowed_hosts")


def test_an_update_is_checked_the_same_way(api, credentials_url):
    created = api.post(credentials_url, environment_variable(["api.example.com"]), format="json").json()
    update = {"auth": {"type": "environment_variable", "networking": {"type": "limited", "allowed_hosts": ["a/b"]}}}
    assert_error(api.post(f"{credentials_url}/{created['id']}", update, format="json"), 400, "invalid_request_error")
    stored = VaultCredential.objects.get(pk=created["id"]).auth["networking"]["allowed_hosts"]
    assert stored == ["api.example.com"]


def test_hosts_wildcards_addresses_and_ports_reach_the_proxy_as_patterns(api, tenant, credentials_url):
    entries = ["API.example.com", "*.example.org", "192.0.2.1", "localhost:8443"]
    created = api.post(credentials_url, environment_variable(entries), format="json")
    assert created.status_code == 200, created.content
    vault_id = created.json()["vault_id"]
    _, [injection] = session_injections(session_id="sesn_h", workspace_id=tenant.workspace.id, vault_ids=[vault_id])
    assert injection.hosts == (
        ("api.example.com", None),
        ("*.example.org", None),
        ("192.0.2.1", None),
        ("localhost", 8443),
    )
    assert injection.covers("api.example.com", 443) and injection.covers("API.Example.com.", 8080)
    assert injection.covers("a.example.org", 443) and injection.covers("b.a.example.org", 443)
    assert not injection.covers("example.org", 443)  # a wildcard is for subdomains only
    assert injection.covers("localhost", 8443) and not injection.covers("localhost", 443)
    assert not injection.covers("192.0.2.2", 443)
