"""Environment keys on the admin (issue 26): staff mint a key for a self_hosted environment of a workspace they
administer (the plaintext is shown once, in a message; the row keeps its digest), list them, and revoke them
by a confirmed action (refused on the key's next use); a key page is read-only."""

from __future__ import annotations

import re

import pytest
from django.test import Client
from rest_framework.test import APIClient

from registry.sessions.models import WorkItem
from registry.workspaces.models import EnvironmentKey
from registry.workspaces.services import digest_of
from tests.support.admin_pages import on, page
from tests.support.admin_staff import staff_client
from tests.support.tenants import Tenant

KEYS = "/admin/workspaces/environmentkey/"
WORK = "/admin/agent_sessions/workitem/"


def created(client: APIClient, path: str, body: dict) -> str:
    response = client.post(path, body, format="json")
    assert response.status_code == 200, response.content
    return str(response.json()["id"])


@pytest.fixture
def estate(tenant: Tenant, other_tenant: Tenant) -> dict[str, str]:
    api, other = tenant.client, other_tenant.client
    agent = created(api, "/v1/agents", {"name": "a", "model": "m"})
    self_hosted = created(api, "/v1/environments", {"name": "workers", "config": {"type": "self_hosted"}})
    body = {"agent": agent, "environment_id": self_hosted, "harness": {"type": "agent_sdk_harness", "mode": "separate"}}
    return {
        "self_hosted": self_hosted,
        "cloud": created(api, "/v1/environments", {"name": "cloud"}),
        "session": created(api, "/v1/sessions", body),
        "theirs": created(other, "/v1/environments", {"name": "theirs", "config": {"type": "self_hosted"}}),
    }


@pytest.fixture
def admin_of_a(tenant: Tenant) -> Client:
    return staff_client("alice", {tenant.workspace: "admin"})


def bearer(token: str) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")
    return client


def mint(client: Client, environment: str, name: str = "ci") -> str:
    html = client.post(f"{KEYS}add/", {"environment": environment, "name": name}, follow=True).content.decode()
    found = re.search(r"not shown again\): (sk-env-[A-Za-z0-9_-]+)", html)
    assert found is not None, html
    return found.group(1)


def test_staff_mint_a_key_shown_once_and_stored_as_a_digest(admin_of_a, estate, tenant):
    form = page(admin_of_a, f"{KEYS}add/")
    assert estate["self_hosted"] in form
    assert estate["cloud"] not in form and estate["theirs"] not in form  # self_hosted, of her workspaces only
    plaintext = mint(admin_of_a, estate["self_hosted"])
    key = EnvironmentKey.objects.get()
    assert key.digest == digest_of(plaintext) and key.environment_id == estate["self_hosted"]
    assert key.workspace_id == tenant.workspace.pk and key.name == "ci"
    listing = page(admin_of_a, KEYS)
    assert key.display_prefix in listing and plaintext not in listing
    assert plaintext not in page(admin_of_a, on(KEYS, key.pk))  # never shown again
    assert bearer(plaintext).get(f"/v1/sessions/{estate['session']}").status_code == 200


def test_the_form_refuses_a_cloud_or_foreign_environment(admin_of_a, estate):
    for environment in (estate["cloud"], estate["theirs"]):
        html = admin_of_a.post(f"{KEYS}add/", {"environment": environment, "name": "x"}).content.decode()
        assert "errornote" in html or "Select a valid choice" in html
    assert not EnvironmentKey.objects.exists()


def test_a_revoked_key_is_refused_at_once_and_stays_revoked(admin_of_a, estate):
    plaintext = mint(admin_of_a, estate["self_hosted"])
    key = EnvironmentKey.objects.get()
    chosen = {"action": "revoke", "_selected_action": [key.pk]}
    asked = admin_of_a.post(KEYS, chosen).content.decode()
    assert "Revoke these 1 environment key?" in asked and EnvironmentKey.objects.get().revoked_at is None
    done = admin_of_a.post(KEYS, {**chosen, "confirmed": "yes"}, follow=True).content.decode()
    assert "Revoked 1 environment key." in done
    assert bearer(plaintext).get(f"/v1/sessions/{estate['session']}").status_code == 401
    response = admin_of_a.post(on(KEYS, key.pk), {"name": "back"})
    assert response.status_code == 403  # a key page is read-only: nothing brings a key back
    assert EnvironmentKey.objects.get().revoked_at is not None


def test_a_viewer_cannot_mint_or_revoke(tenant, estate):
    viewer = staff_client("victor", {tenant.workspace: "viewer"})
    assert viewer.get(f"{KEYS}add/").status_code == 403
    admin = staff_client("alice", {tenant.workspace: "admin"})
    mint(admin, estate["self_hosted"])
    key = EnvironmentKey.objects.get()
    viewer.post(KEYS, {"action": "revoke", "_selected_action": [key.pk], "confirmed": "yes"})
    assert EnvironmentKey.objects.get().revoked_at is None


def test_work_items_are_listed_per_workspace_and_an_operator_stops_them(tenant, other_tenant, estate):
    other_agent = created(other_tenant.client, "/v1/agents", {"name": "a", "model": "m"})
    theirs = created(other_tenant.client, "/v1/sessions", {"agent": other_agent, "environment_id": estate["theirs"]})
    [item] = WorkItem.objects.filter(session_ref=estate["session"])
    [their_item] = WorkItem.objects.filter(session_ref=theirs)
    viewer = staff_client("victor", {tenant.workspace: "viewer"})
    listing = page(viewer, WORK)
    assert item.pk in listing and estate["session"] in listing and their_item.pk not in listing
    assert "Queued" in page(viewer, on(WORK, item.pk))
    chosen = {"action": "stop", "_selected_action": [item.pk], "confirmed": "yes"}
    viewer.post(WORK, chosen)
    assert WorkItem.objects.get(pk=item.pk).state == "queued"  # a viewer reads only

    operator = staff_client("olga", {tenant.workspace: "operator"})
    done = operator.post(WORK, chosen, follow=True).content.decode()
    assert "Stopped 1 work item." in done and WorkItem.objects.get(pk=item.pk).state == "stopped"
    operator.post(WORK, {**chosen, "_selected_action": [their_item.pk]})
    assert WorkItem.objects.get(pk=their_item.pk).state == "queued"  # another workspace's: out of reach
