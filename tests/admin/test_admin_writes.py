"""Admin writes through Django's test client, page by page: each goes through the services the API uses (the
API's serializer validates it) or is refused; so for every model the admin cannot produce a row the API would
refuse. Tenancy fields are read-only once set, a revoked key stays revoked ('revoke' is a confirmed action with
a result message), archives and deletes take the apps' services, and empty metadata ({}) is a value."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from django.contrib.admin.models import CHANGE, LogEntry
from django.test import Client

from registry.agents.models import Agent
from registry.environments.models import Environment
from registry.extensions.models import Guardrail, ModelPrice
from registry.gitcreds.models import GitCredential
from registry.memory.models import MemoryStore
from registry.sessions.models import Session
from registry.skills.models import Skill
from registry.vaults.models import Vault, VaultCredential
from registry.workspaces.models import ApiKey, OidcMembership, StaffMembership, Workspace
from tests.support.admin_pages import SESSIONS, on, page
from tests.support.admin_staff import form_values, holdings, staff_client
from tests.support.tenants import Tenant
from tests.support.uploads import stored_objects

ENVIRONMENTS = "/admin/environments/environment/"
VAULTS = "/admin/vaults/vault/"
CREDENTIALS = "/admin/vaults/vaultcredential/"
STORES = "/admin/memory/memorystore/"
GIT_CREDENTIALS = "/admin/gitcreds/gitcredential/"
API_KEYS = "/admin/workspaces/apikey/"
WORKSPACES = "/admin/workspaces/workspace/"
READ_ONLY = (
    "/admin/agents/agent/",
    "/admin/agents/agentversion/",
    SESSIONS,
    "/admin/files/file/",
    "/admin/skills/skill/",
    "/admin/skills/skillversion/",
    "/admin/triggers/trigger/",
    API_KEYS,
    "/admin/workspaces/oidcmembership/",
)


@pytest.fixture
def uploads(settings, tmp_path: Path) -> Path:
    location = tmp_path / "uploads"
    settings.STORAGES = {
        **settings.STORAGES,
        "default": {"BACKEND": "django.core.files.storage.FileSystemStorage", "OPTIONS": {"location": location}},
    }
    return location


@pytest.fixture
def mine(tenant: Tenant, uploads: Path) -> dict[str, str]:
    return holdings(tenant)


@pytest.fixture
def admin_of_a(tenant: Tenant) -> Client:
    return staff_client("alice", {tenant.workspace: "admin"})


@pytest.fixture
def root(db: None) -> Client:
    return staff_client("root", superuser=True)


def save(client: Client, url: str, **changes: object) -> str:
    """Post the page's form back with `changes` (JSON fields as values); the page answered, as text."""
    data = form_values(client, url)
    data.update({key: json.dumps(value) if isinstance(value, dict | list) else value for key, value in changes.items()})
    response = client.post(url, data, follow=True)
    assert response.status_code == 200, url
    return response.content.decode()


def refused(html: str, *mentions: str) -> bool:
    """Whether the page refused the write naming `mentions`: the form again with its errors, or the message
    of a refusal the app's service raised."""
    return ("errornote" in html or "Not done: " in html) and all(mention in html for mention in mentions)


def act(client: Client, listing: str, action: str, pk: str) -> str:
    """An action in two steps: the confirmation page (which must list the object), then the confirmed post."""
    chosen = {"action": action, "_selected_action": [pk]}
    asked = client.post(listing, chosen)
    assert asked.status_code == 200 and 'name="confirmed" value="yes"' in asked.content.decode(), action
    return client.post(listing, {**chosen, "confirmed": "yes"}, follow=True).content.decode()


# -- environments: the defects found in Chromium ------------------------------------------------------------
def test_an_environment_the_api_would_refuse_is_not_added(admin_of_a, tenant):
    add = f"{ENVIRONMENTS}add/"
    html = save(admin_of_a, add, workspace=tenant.workspace.pk, name="bad", config={"type": "banana"})
    assert refused(html, "config")
    html = save(admin_of_a, add, workspace=tenant.workspace.pk, name="bad", scope="galaxy")
    assert refused(html, "scope")
    assert not Environment.objects.filter(name="bad").exists()


def test_an_environment_added_here_is_the_apis(admin_of_a, tenant):
    html = save(admin_of_a, f"{ENVIRONMENTS}add/", workspace=tenant.workspace.pk, name="made here", metadata={})
    assert "was added successfully" in html
    made = tenant.client.get("/v1/environments").json()["data"]
    [environment] = [item for item in made if item["name"] == "made here"]
    assert environment["metadata"] == {} and environment["config"]["type"] == "cloud"  # the API's default
    agent = tenant.client.post("/v1/agents", {"name": "a", "model": "m"}, format="json").json()
    session = {"agent": agent["id"], "environment_id": environment["id"]}
    assert tenant.client.post("/v1/sessions", session, format="json").status_code == 200


def test_an_environment_change_is_validated_and_merged_as_the_apis(admin_of_a, tenant, mine, other_tenant):
    url = on(ENVIRONMENTS, mine[ENVIRONMENTS])
    tenant.client.post(f"/v1/environments/{mine[ENVIRONMENTS]}", {"metadata": {"a": "1", "b": "2"}}, format="json")
    assert refused(save(admin_of_a, url, config={"type": "banana"}), "config")
    assert refused(save(admin_of_a, url, scope="galaxy"), "scope")
    limited = {"type": "cloud", "networking": {"type": "limited"}, "packages": {"pip": ["requests"]}}
    assert refused(save(admin_of_a, url, config=limited), "allow_package_managers")
    assert Environment.objects.get(pk=mine[ENVIRONMENTS]).config["networking"]["type"] == "unrestricted"
    assert "was changed successfully" in save(admin_of_a, url, metadata={"b": "2"}, workspace=other_tenant.workspace.pk)
    served = tenant.client.get(f"/v1/environments/{mine[ENVIRONMENTS]}").json()
    assert served["metadata"] == {"b": "2"} and served["config"]["type"] == "cloud"
    assert Environment.objects.get(pk=mine[ENVIRONMENTS]).workspace_id == tenant.workspace.pk


# -- vaults, credentials, memory stores, git credentials ---------------------------------------------------
def test_a_vault_stays_in_its_workspace(admin_of_a, tenant, other_tenant, mine):
    url = on(VAULTS, mine[VAULTS])
    assert "workspace" not in form_values(admin_of_a, url)  # read-only once set
    save(admin_of_a, url, workspace=other_tenant.workspace.pk, display_name="moved?")
    vault = Vault.objects.get(pk=mine[VAULTS])
    assert vault.workspace_id == tenant.workspace.pk and vault.display_name == "moved?"
    assert other_tenant.client.get(f"/v1/vaults/{vault.pk}").status_code == 404
    assert refused(save(admin_of_a, url, display_name=""), "display_name")
    assert refused(save(admin_of_a, url, metadata={"n": 1}), "metadata")


def test_a_credential_with_empty_metadata_saves_and_archives(admin_of_a, mine, tenant):
    url = on(CREDENTIALS, mine[CREDENTIALS])
    assert "was changed successfully" in save(admin_of_a, url, display_name="renamed", metadata={})
    assert "archived_at" not in form_values(admin_of_a, url)
    assert "Archived 1 vault credential." in act(admin_of_a, CREDENTIALS, "archive", mine[CREDENTIALS])
    credential = VaultCredential.objects.get(pk=mine[CREDENTIALS])
    assert credential.display_name == "renamed" and credential.archived_at is not None
    assert LogEntry.objects.filter(object_id=credential.pk, action_flag=CHANGE, change_message="Archived").exists()


def test_a_memory_store_with_empty_metadata_is_added_and_saved(admin_of_a, tenant, mine):
    html = save(admin_of_a, f"{STORES}add/", workspace=tenant.workspace.pk, name="kept", metadata={})
    assert "was added successfully" in html
    [store] = [item for item in tenant.client.get("/v1/memory_stores").json()["data"] if item["name"] == "kept"]
    assert store["metadata"] == {}
    url = on(STORES, store["id"])
    assert "was changed successfully" in save(admin_of_a, url, description="notes", metadata={})
    assert refused(save(admin_of_a, url, name="bad\x07name"), "control characters")
    act(admin_of_a, STORES, "archive", store["id"])
    html = save(admin_of_a, url, description="after archive")  # the service refuses: a message, not a 500
    assert "Not done" in html and "archived" in html
    assert MemoryStore.objects.get(pk=store["id"]).description == "notes"


def test_a_git_credential_change_is_validated_and_none_is_added(admin_of_a, mine):
    url = on(GIT_CREDENTIALS, mine[GIT_CREDENTIALS])
    assert refused(save(admin_of_a, url, host="not a host!"), "host")
    assert GitCredential.objects.get(pk=mine[GIT_CREDENTIALS]).host == "github.com"
    assert admin_of_a.get(f"{GIT_CREDENTIALS}add/").status_code == 403  # tokens enter through the API


# -- keys and workspaces -------------------------------------------------------------------------------------
def test_a_revoked_key_stays_revoked(admin_of_a, tenant, mine):
    key = mine[API_KEYS]
    asked = admin_of_a.post(API_KEYS, {"action": "revoke", "_selected_action": [key]}).content.decode()
    assert "Revoke these 1 API key?" in asked and ApiKey.objects.get(pk=key).revoked_at is None  # asked first
    html = act(admin_of_a, API_KEYS, "revoke", key)
    assert "Revoked 1 API key." in html
    assert tenant.client.get("/v1/agents").status_code == 401
    response = admin_of_a.post(on(API_KEYS, key), {"revoked_at_0": "", "revoked_at_1": "", "name": "back"})
    assert response.status_code == 403  # a key page is read-only: nothing brings a key back
    assert ApiKey.objects.get(pk=key).revoked_at is not None
    assert tenant.client.get("/v1/agents").status_code == 401


def test_a_key_is_issued_through_the_service(admin_of_a, tenant):
    html = save(admin_of_a, f"{API_KEYS}add/", workspace=tenant.workspace.pk, name="ci")
    [plaintext] = re.findall(r"not shown again\): (sk-reg-[\w-]+)", html)
    response = Client().get("/v1/agents", headers={"x-api-key": plaintext})
    assert response.status_code == 200
    assert ApiKey.objects.get(name="ci").workspace_id == tenant.workspace.pk


def test_a_workspace_is_made_through_the_service_and_kept(root, admin_of_a, tenant):
    assert admin_of_a.get(f"{WORKSPACES}add/").status_code == 403
    html = save(root, f"{WORKSPACES}add/", name="made here")
    assert "was added successfully" in html and "sk-reg-" in html
    made = Workspace.objects.get(name="made here")
    assert ApiKey.objects.filter(workspace=made).count() == 1
    assert root.post(on(WORKSPACES, made.pk, "delete"), {"post": "yes"}).status_code == 403
    save(root, on(WORKSPACES, made.pk), name="renamed")
    assert Workspace.objects.get(pk=made.pk).name == "made here"  # read-only once given


def test_memberships_are_written_by_superusers_and_never_moved(root, admin_of_a, tenant, other_tenant, mine):
    assert admin_of_a.get("/admin/workspaces/oidcmembership/add/").status_code == 403
    taken = OidcMembership.objects.get(workspace=tenant.workspace).subject
    html = save(root, "/admin/workspaces/oidcmembership/add/", subject=taken, workspace=other_tenant.workspace.pk)
    assert refused(html, "already exists")
    assert OidcMembership.objects.get(subject=taken).workspace_id == tenant.workspace.pk
    user = StaffMembership.objects.get(workspace=tenant.workspace).user
    html = save(
        root, "/admin/workspaces/staffmembership/add/", user=user.pk, workspace=other_tenant.workspace.pk, role="god"
    )
    assert refused(html, "role")
    assert not StaffMembership.objects.filter(workspace=other_tenant.workspace).exists()


# -- read-only pages, archives and deletes through the services ---------------------------------------------
@pytest.mark.parametrize("listing", READ_ONLY)
def test_read_only_pages_change_nothing(admin_of_a, mine, listing):
    url = on(listing, mine[listing])
    assert 'name="_save"' not in page(admin_of_a, url)
    assert admin_of_a.post(url, {"name": "changed", "archived_at_0": "", "title": "changed"}).status_code == 403


def test_an_agent_is_archived_through_the_service(admin_of_a, tenant, mine):
    agent = mine["/admin/agents/agent/"]
    assert "Archived 1 agent." in act(admin_of_a, "/admin/agents/agent/", "archive", agent)
    assert tenant.client.get(f"/v1/agents/{agent}").json()["archived_at"] is not None
    assert admin_of_a.post(on("/admin/agents/agent/", agent, "delete"), {"post": "yes"}).status_code == 403
    assert Agent.objects.filter(pk=agent).exists()  # the API deletes no agent either


def test_a_session_is_archived_and_deleted_through_the_services(admin_of_a, tenant, mine):
    session = mine[SESSIONS]
    assert "Archived 1 session." in act(admin_of_a, SESSIONS, "archive", session)
    assert tenant.client.get(f"/v1/sessions/{session}").json()["status"] == "terminated"
    response = admin_of_a.post(on(SESSIONS, session, "delete"), {"post": "yes"})
    assert response.status_code == 302 and not Session.objects.filter(pk=session).exists()
    assert tenant.client.get(f"/v1/sessions/{session}").status_code == 404


def test_deletes_take_the_apis_services(admin_of_a, tenant, mine, uploads, django_capture_on_commit_callbacks):
    assert stored_objects(uploads)
    for listing in ("/admin/files/file/", "/admin/skills/skill/", STORES, VAULTS):
        with django_capture_on_commit_callbacks(execute=True):  # bytes go once the deletion commits
            response = admin_of_a.post(on(listing, mine[listing], "delete"), {"post": "yes"})
        assert response.status_code == 302, listing
    assert stored_objects(uploads) == []  # the bytes of the file and of the skill's bundle went too
    assert not Skill.objects.filter(pk=mine["/admin/skills/skill/"]).exists()
    assert not VaultCredential.objects.filter(pk=mine[CREDENTIALS]).exists()
    assert tenant.client.get(f"/v1/memory_stores/{mine[STORES]}").status_code == 404


def test_an_environment_in_use_is_not_deleted(admin_of_a, mine):
    html = admin_of_a.post(on(ENVIRONMENTS, mine[ENVIRONMENTS], "delete"), {"post": "yes"}).content.decode()
    assert "protected" in html and Environment.objects.filter(pk=mine[ENVIRONMENTS]).exists()


# -- organization-wide rows ------------------------------------------------------------------------------------
def test_guardrails_and_prices_are_validated_as_the_apis(root, admin_of_a):
    assert admin_of_a.get("/admin/extensions/guardrail/").status_code == 403
    html = save(root, "/admin/extensions/guardrail/add/", name="g", type="banana", config={})
    assert refused(html, "type")
    html = save(root, "/admin/extensions/guardrail/add/", name="g", type="pii_regex", config={"patterns": ["("]})
    assert refused(html, "not a regex")
    html = save(root, "/admin/extensions/guardrail/add/", name="g", type="pii_regex", config={"patterns": ["\\d+"]})
    assert "was added successfully" in html and Guardrail.objects.get(name="g").phases  # the type's phases
    add_price = "/admin/extensions/modelprice/add/"
    html = save(root, add_price, provider="vendor_b", model="m", input_per_1m="-1", output_per_1m="1")
    assert refused(html, "input_per_1m") and not ModelPrice.objects.exists()
