"""Vaults, credentials and git credentials: shapes, updates, tenancy, the reference client, and a
secret canary that must appear in no response, admin page, log line, error or database column."""

from __future__ import annotations

import logging
import uuid

import pytest
from django.contrib.auth.models import User
from django.db import connection

from registry.gitcreds.models import GitCredential
from registry.gitcreds.services import token_of
from registry.vaults.models import VaultCredential
from registry.vaults.services import secret_of
from tests.support.admin_pages import on
from tests.support.api_errors import assert_error, assert_not_found
from tests.support.clients import registry_client
from tests.support.tenants import make_tenant


@pytest.fixture
def vault(api):
    return api.post("/v1/vaults", {"display_name": "MCP keys", "metadata": {"team": "a"}}, format="json").json()


def credentials(vault):
    return f"/v1/vaults/{vault['id']}/credentials"


def test_vault_crud(api, vault):
    assert vault["id"].startswith("vlt_") and vault["type"] == "vault"
    updated = api.post(
        f"/v1/vaults/{vault['id']}", {"display_name": "Keys", "metadata": {"team": None}}, format="json"
    ).json()
    assert updated["display_name"] == "Keys" and updated["metadata"] == {}
    assert api.post(f"/v1/vaults/{vault['id']}/archive").json()["archived_at"]
    assert_error(
        api.post(
            credentials(vault),
            {"auth": {"type": "static_bearer", "token": "t", "mcp_server_url": "https://m.example.com"}},
            format="json",
        ),
        400,
        "invalid_request_error",
        "archived",
    )
    assert api.delete(f"/v1/vaults/{vault['id']}").json() == {"id": vault["id"], "type": "vault_deleted"}


def test_credential_types_never_echo_secrets(api, vault):
    bearer = api.post(
        credentials(vault),
        {
            "display_name": "docs",
            "auth": {"type": "static_bearer", "token": "tok-1", "mcp_server_url": "https://docs.example.com/mcp"},
        },
        format="json",
    ).json()
    assert bearer["id"].startswith("vcrd_") and bearer["type"] == "vault_credential"
    assert bearer["auth"] == {"type": "static_bearer", "mcp_server_url": "https://docs.example.com/mcp"}
    oauth = api.post(
        credentials(vault),
        {
            "auth": {
                "type": "mcp_oauth",
                "access_token": "acc-1",
                "mcp_server_url": "https://m.example.com",
                "expires_at": "2030-01-01T00:00:00Z",
                "refresh": {
                    "client_id": "cid",
                    "refresh_token": "ref-1",
                    "token_endpoint": "https://id.example.com/token",
                    "token_endpoint_auth": {"type": "client_secret_basic", "client_secret": "cs-1"},
                },
            }
        },
        format="json",
    ).json()
    assert oauth["auth"]["refresh"]["token_endpoint_auth"] == {"type": "client_secret_basic"}
    assert "refresh_token" not in oauth["auth"]["refresh"] and "access_token" not in oauth["auth"]
    env = api.post(
        credentials(vault),
        {
            "auth": {
                "type": "environment_variable",
                "secret_name": "API_TOKEN",
                "secret_value": "env-1",
                "networking": {"type": "limited", "allowed_hosts": ["api.example.com"]},
            }
        },
        format="json",
    ).json()
    assert env["auth"]["secret_name"] == "API_TOKEN" and "secret_value" not in env["auth"]
    stored = VaultCredential.objects.get(pk=oauth["id"])
    assert secret_of(stored, "access_token") == "acc-1"
    assert secret_of(stored, "refresh.token_endpoint_auth.client_secret") == "cs-1"
    listed = api.get(credentials(vault)).json()["data"]
    assert {item["id"] for item in listed} == {bearer["id"], oauth["id"], env["id"]}


def test_credential_update_rotates_and_keeps_type(api, vault):
    credential = api.post(
        credentials(vault),
        {"auth": {"type": "static_bearer", "token": "old", "mcp_server_url": "https://m.example.com"}},
        format="json",
    ).json()
    url = f"{credentials(vault)}/{credential['id']}"
    api.post(
        url,
        {"auth": {"type": "static_bearer", "token": "new", "mcp_server_url": "https://m.example.com"}},
        format="json",
    )
    assert secret_of(VaultCredential.objects.get(pk=credential["id"]), "token") == "new"
    assert_error(
        api.post(
            url,
            {
                "auth": {
                    "type": "environment_variable",
                    "secret_name": "X",
                    "secret_value": "y",
                    "networking": {"type": "unrestricted"},
                }
            },
            format="json",
        ),
        400,
        "invalid_request_error",
        "auth.type",
    )
    assert api.post(f"{url}/archive").json()["archived_at"]
    assert api.delete(url).json() == {"id": credential["id"], "type": "vault_credential_deleted"}


@pytest.mark.parametrize(
    ("auth", "field"),
    [
        ({"type": "static_bearer", "token": "", "mcp_server_url": "https://m"}, "token"),
        ({"type": "static_bearer", "token": 42, "mcp_server_url": "https://m"}, "token"),
        ({"type": "static_bearer", "token": "t", "mcp_server_url": "ftp://m"}, "mcp_server_url"),
        ({"type": "mcp_oauth", "mcp_server_url": "https://m"}, "access_token"),
        (
            {
                "type": "environment_variable",
                "secret_name": "1BAD",
                "secret_value": "v",
                "networking": {"type": "unrestricted"},
            },
            "secret_name",
        ),
        ({"type": "password"}, "type"),
    ],
)
def test_secrets_in_the_wrong_shape_are_400(api, vault, auth, field):
    assert_error(api.post(credentials(vault), {"auth": auth}, format="json"), 400, "invalid_request_error", field)
    assert VaultCredential.objects.count() == 0


def test_git_credentials(api):
    created = api.post(
        "/v1/git-creds", {"host": "GitHub.com", "token": "ghp_x", "display_name": "ci"}, format="json"
    ).json()
    assert created["id"].startswith("gitcred_") and created["host"] == "github.com"
    assert created["username"] == "x-access-token" and "token" not in created
    api.post(f"/v1/git-creds/{created['id']}", {"token": "ghp_y"}, format="json")
    assert token_of(GitCredential.objects.get(pk=created["id"])) == "ghp_y"
    assert_error(
        api.post("/v1/git-creds", {"host": "not a host", "token": "t"}, format="json"),
        400,
        "invalid_request_error",
        "host",
    )
    assert_error(
        api.post("/v1/git-creds", {"host": "github.com", "token": "has space"}, format="json"),
        400,
        "invalid_request_error",
        "token",
    )
    assert [item["id"] for item in api.get("/v1/git-creds").json()["data"]] == [created["id"]]
    assert api.delete(f"/v1/git-creds/{created['id']}").json()["type"] == "git_credential_deleted"


def test_other_workspace_sees_nothing(api, vault, other_tenant):
    credential = api.post(
        credentials(vault),
        {"auth": {"type": "static_bearer", "token": "t", "mcp_server_url": "https://m.example.com"}},
        format="json",
    ).json()
    git = api.post("/v1/git-creds", {"host": "github.com", "token": "t"}, format="json").json()
    other = other_tenant.client
    paths = (
        f"/v1/vaults/{vault['id']}",
        credentials(vault),
        f"{credentials(vault)}/{credential['id']}",
        f"/v1/git-creds/{git['id']}",
    )
    assert_not_found(other, *paths)
    for path in paths:
        assert_error(
            other.delete(path),
            404 if not path.endswith("/credentials") else 405,
            "not_found_error" if not path.endswith("/credentials") else "invalid_request_error",
        )
    assert other.get("/v1/vaults").json()["data"] == [] and other.get("/v1/git-creds").json()["data"] == []


def test_secret_canary(api, vault, client, caplog):
    canary = f"canary-{uuid.uuid4().hex}"
    caplog.set_level(logging.DEBUG)
    responses = [
        api.post(
            credentials(vault),
            {"auth": {"type": "static_bearer", "token": canary, "mcp_server_url": "https://m.example.com"}},
            format="json",
        ),
        api.post("/v1/git-creds", {"host": "github.com", "token": canary}, format="json"),
        # errors that carry the canary in a bad request must not echo it
        api.post(
            credentials(vault),
            {"auth": {"type": "static_bearer", "token": canary, "mcp_server_url": "bad"}},
            format="json",
        ),
        api.post("/v1/git-creds", {"host": "bad host", "token": canary}, format="json"),
    ]
    credential_id = responses[0].json()["id"]
    git_id = responses[1].json()["id"]
    responses += [
        api.get(credentials(vault)),
        api.get(f"{credentials(vault)}/{credential_id}"),
        api.get("/v1/git-creds"),
        api.get(f"/v1/git-creds/{git_id}"),
    ]
    User.objects.create_superuser("staff", "s@example.com", "pw")
    client.login(username="staff", password="pw")
    responses += [
        client.get(on("/admin/vaults/vaultcredential/", credential_id)),
        client.get(on("/admin/gitcreds/gitcredential/", git_id)),
        client.get("/admin/vaults/vaultcredential/"),
        client.get("/admin/gitcreds/gitcredential/"),
    ]
    statuses = [response.status_code for response in responses]
    assert set(statuses) <= {200, 400}, statuses
    for response in responses:
        assert canary not in response.content.decode()
    assert canary not in caplog.text
    with connection.cursor() as cursor:
        for table in ("vaults_vaultcredential", "gitcreds_gitcredential"):
            cursor.execute(f"SELECT * FROM {table}")
            assert canary not in str(cursor.fetchall())
    assert secret_of(VaultCredential.objects.get(pk=credential_id), "token") == canary


@pytest.mark.django_db(transaction=True)
def test_reference_client(live_server):
    tenant = make_tenant("sdk")
    sdk = registry_client(live_server.url, tenant.api_key)
    vault = sdk.beta.vaults.create(display_name="keys", metadata={"k": "v"})
    assert vault.id.startswith("vlt_")
    credential = sdk.beta.vaults.credentials.create(
        vault.id,
        auth={"type": "static_bearer", "token": "tok", "mcp_server_url": "https://mcp.example.com"},
        display_name="docs",
    )
    assert credential.auth.type == "static_bearer" and credential.display_name == "docs"
    assert sdk.beta.vaults.credentials.retrieve(credential.id, vault_id=vault.id).id == credential.id
    assert [item.id for item in sdk.beta.vaults.credentials.list(vault.id)] == [credential.id]
    updated = sdk.beta.vaults.update(vault.id, display_name="renamed")
    assert updated.display_name == "renamed"
    assert [item.id for item in sdk.beta.vaults.list()] == [vault.id]
    sdk.beta.vaults.credentials.delete(credential.id, vault_id=vault.id)
    assert sdk.beta.vaults.archive(vault.id).archived_at is not None
