"""Workspace staff in the admin, through Django's test client, like the API's tenancy tests: a member of
workspace A reaches nothing of B's, by list, change URL (history and delete pages too), autocomplete, action,
form choice or export (a session's transcript JSON); a hidden object's URL answers 403, 404 or the redirect to
the index, never the page. Roles decide what a member does; superusers see every workspace, with a workspace
filter on every list; staff without a membership see nothing; the gateway's config is for superusers only."""

from __future__ import annotations

import pytest
from django.contrib import admin
from django.contrib.auth.models import Permission, User
from django.test import Client

from registry.agents.models import Agent
from registry.core.admin import StaffScopedAdmin
from registry.environments.models import Environment
from registry.sessions.models import Session
from registry.workspaces.models import ApiKey
from tests.support.admin_pages import SESSIONS, on, page
from tests.support.admin_staff import holdings, staff_client
from tests.support.tenants import Tenant

ENVIRONMENTS = "/admin/environments/environment/"
API_KEYS = "/admin/workspaces/apikey/"
LISTS = (
    "/admin/workspaces/workspace/",
    API_KEYS,
    "/admin/workspaces/environmentkey/",
    "/admin/workspaces/oidcmembership/",
    "/admin/agents/agent/",
    "/admin/agents/agentversion/",
    ENVIRONMENTS,
    "/admin/vaults/vault/",
    "/admin/vaults/vaultcredential/",
    SESSIONS,
    "/admin/agent_sessions/workitem/",
    "/admin/memory/memorystore/",
    "/admin/gitcreds/gitcredential/",
    "/admin/files/file/",
    "/admin/skills/skill/",
    "/admin/skills/skillversion/",
    "/admin/triggers/trigger/",
    "/admin/deployments/deployment/",
    "/admin/deployments/deploymentrun/",
    "/admin/webhooks/webhookendpoint/",
    "/admin/webhooks/webhookdelivery/",
    "/admin/webhooks/webhookevent/",
)
# (app label, model, foreign key): autocomplete lists the target's page queryset, whatever the source page.
AUTOCOMPLETES = (
    ("agent_sessions", "session", "agent"),
    ("agent_sessions", "session", "environment"),
    ("agent_sessions", "session", "workspace"),
    ("vaults", "vaultcredential", "vault"),
    ("skills", "skillversion", "skill"),
    ("triggers", "trigger", "agent"),
)


@pytest.fixture
def estates(tenant: Tenant, other_tenant: Tenant, uploads: None) -> tuple[dict[str, str], dict[str, str]]:
    """One object of every kind in A (the tenant's workspace) and in B."""
    return holdings(tenant), holdings(other_tenant)


@pytest.fixture
def mine(estates: tuple[dict[str, str], dict[str, str]]) -> dict[str, str]:
    return estates[0]


@pytest.fixture
def theirs(estates: tuple[dict[str, str], dict[str, str]]) -> dict[str, str]:
    return estates[1]


@pytest.fixture
def member(tenant: Tenant) -> Client:
    """An admin of workspace A, and of nothing else."""
    return staff_client("alice", {tenant.workspace: "admin"})


def assert_hidden(client: Client, url: str, method: str = "get") -> None:
    response = getattr(client, method)(url)
    assert response.status_code in (302, 403, 404), url
    if response.status_code == 302:
        assert response["Location"] == "/admin/", url


def action(client: Client, listing: str, name: str, pk: str, **extra: str) -> None:
    client.post(listing, {"action": name, "_selected_action": [pk], **extra})


# -- a member of A sees and reaches nothing of B -------------------------------------------------------------
def test_every_registry_page_is_scoped_and_listed_here():
    registry = [
        (model, found) for model, found in admin.site._registry.items() if model.__module__.startswith("registry.")
    ]
    scoped = {model: found for model, found in registry if isinstance(found, StaffScopedAdmin)}
    assert len(scoped) == len(registry)
    per_workspace = [model for model, found in scoped.items() if found.workspace_path and not found.superusers_only]
    assert {f"/admin/{model._meta.app_label}/{model._meta.model_name}/" for model in per_workspace} == set(LISTS)


@pytest.mark.parametrize("listing", LISTS)
def test_a_member_lists_only_her_workspace(member, mine, theirs, listing):
    html = page(member, listing)
    assert on(listing, mine[listing]) in html
    assert on(listing, theirs[listing]) not in html
    if "_" in theirs[listing]:  # a public id (the others are counters, found in any page)
        assert theirs[listing] not in html


@pytest.mark.parametrize("listing", LISTS)
def test_a_member_cannot_open_another_workspaces_object(member, mine, theirs, listing):
    page(member, on(listing, mine[listing]))
    for view in ("change", "history", "delete"):
        assert_hidden(member, on(listing, theirs[listing], view))
    assert_hidden(member, on(listing, theirs[listing], "delete"), method="post")


def test_hidden_objects_stay_whole(member, theirs):
    for listing in LISTS:
        member.post(on(listing, theirs[listing], "delete"), {"post": "yes"})
    assert Session.objects.filter(pk=theirs[SESSIONS]).exists()
    assert Environment.objects.filter(pk=theirs[ENVIRONMENTS]).exists()


@pytest.mark.parametrize(("app_label", "model_name", "field_name"), AUTOCOMPLETES)
def test_autocomplete_offers_only_her_workspace(
    member, tenant, other_tenant, estates, app_label, model_name, field_name
):
    query = {"app_label": app_label, "model_name": model_name, "field_name": field_name, "term": ""}
    response = member.get("/admin/autocomplete/", query)
    assert response.status_code == 200
    found = {result["id"] for result in response.json()["results"]}
    assert found and not found & set(estates[1].values()) and other_tenant.workspace.pk not in found


def test_actions_skip_another_workspaces_objects(member, theirs):
    action(member, SESSIONS, "archive", theirs[SESSIONS], confirmed="yes")
    action(member, ENVIRONMENTS, "archive", theirs[ENVIRONMENTS], confirmed="yes")
    action(member, ENVIRONMENTS, "delete_selected", theirs[ENVIRONMENTS], post="yes")
    action(member, API_KEYS, "revoke", theirs[API_KEYS], confirmed="yes")
    assert Session.objects.get(pk=theirs[SESSIONS]).archived_at is None
    assert Environment.objects.get(pk=theirs[ENVIRONMENTS]).archived_at is None
    assert ApiKey.objects.get(pk=theirs[API_KEYS]).revoked_at is None


def test_a_session_export_and_actions_of_another_workspace_are_hidden(member, theirs):
    assert_hidden(member, on(SESSIONS, theirs[SESSIONS], "transcript"))
    assert_hidden(member, on(SESSIONS, theirs[SESSIONS], "actions/archive"), method="post")
    assert Session.objects.get(pk=theirs[SESSIONS]).archived_at is None


def test_form_choices_offer_only_her_workspace(member, tenant, other_tenant):
    for add_page in (
        f"{ENVIRONMENTS}add/",
        "/admin/vaults/vault/add/",
        "/admin/memory/memorystore/add/",
        f"{API_KEYS}add/",
    ):
        html = page(member, add_page)
        assert f'value="{tenant.workspace.pk}"' in html and other_tenant.workspace.pk not in html, add_page
    response = member.post(f"{ENVIRONMENTS}add/", {"workspace": other_tenant.workspace.pk, "name": "sneaky"})
    assert response.status_code == 200 and "Select a valid choice" in response.content.decode()
    assert not Environment.objects.filter(name="sneaky").exists()


# -- roles -------------------------------------------------------------------------------------------------
def test_a_viewer_reads_and_does_nothing_else(tenant, mine):
    viewer = staff_client("victor", {tenant.workspace: "viewer"})
    environment = on(ENVIRONMENTS, mine[ENVIRONMENTS])
    html = page(viewer, environment)
    assert 'name="_save"' not in html  # a view-only page
    assert viewer.post(environment, {"name": "renamed"}).status_code == 403
    assert viewer.get(f"{ENVIRONMENTS}add/").status_code == 403
    assert 'value="archive"' not in page(viewer, SESSIONS)
    action(viewer, SESSIONS, "archive", mine[SESSIONS], confirmed="yes")
    assert Session.objects.get(pk=mine[SESSIONS]).archived_at is None
    assert Environment.objects.get(pk=mine[ENVIRONMENTS]).name == "box"


def test_an_operator_acts_on_sessions_but_changes_no_configuration(tenant, mine):
    operator = staff_client("olga", {tenant.workspace: "operator"})
    assert 'value="archive"' in page(operator, SESSIONS)
    assert 'value="delete_selected"' not in page(operator, SESSIONS)
    assert 'value="archive"' not in page(operator, ENVIRONMENTS)
    action(operator, SESSIONS, "archive", mine[SESSIONS], confirmed="yes")
    assert Session.objects.get(pk=mine[SESSIONS]).status == Session.Status.TERMINATED
    assert operator.post(on(ENVIRONMENTS, mine[ENVIRONMENTS]), {"name": "renamed"}).status_code == 403
    assert_hidden(operator, on(SESSIONS, mine[SESSIONS], "delete"), method="post")
    assert Session.objects.filter(pk=mine[SESSIONS]).exists()


def test_roles_are_per_workspace(tenant, other_tenant, mine, theirs):
    mixed = staff_client("max", {tenant.workspace: "admin", other_tenant.workspace: "viewer"})
    page(mixed, on("/admin/agents/agent/", theirs["/admin/agents/agent/"]))  # B is readable
    for agent in (mine["/admin/agents/agent/"], theirs["/admin/agents/agent/"]):
        action(mixed, "/admin/agents/agent/", "archive", agent, confirmed="yes")
    assert Agent.objects.get(pk=mine["/admin/agents/agent/"]).archived_at is not None
    assert Agent.objects.get(pk=theirs["/admin/agents/agent/"]).archived_at is None  # a viewer there
    assert "By workspace" in page(mixed, SESSIONS)  # two workspaces: the filter helps


# -- superusers, staff without a membership, global config -------------------------------------------------
@pytest.mark.parametrize("listing", LISTS)
def test_a_superuser_sees_every_workspace_with_a_workspace_filter(db, mine, theirs, listing):
    root = staff_client("root", superuser=True)
    html = page(root, listing)
    assert on(listing, mine[listing]) in html and on(listing, theirs[listing]) in html
    if listing != "/admin/workspaces/workspace/":
        assert "By workspace" in html


def test_a_member_of_one_workspace_gets_no_workspace_filter(member, mine):
    assert "By workspace" not in page(member, SESSIONS)


def test_staff_without_a_membership_see_nothing(db, mine):
    stranger = staff_client("stranger")
    index = page(stranger, "/admin/")
    assert "/admin/agent_sessions/" not in index and "/admin/workspaces/" not in index
    for listing in LISTS:
        assert stranger.get(listing).status_code == 403, listing
    assert_hidden(stranger, on(SESSIONS, mine[SESSIONS]))
    assert_hidden(stranger, on(SESSIONS, mine[SESSIONS], "transcript"))


def test_the_gateways_config_is_for_superusers_only(member, db):
    for path in ("/admin/store/destination/", "/admin/store/route/", "/admin/store/configversion/"):
        assert member.get(path).status_code == 403, path
    assert "/admin/store/" not in page(member, "/admin/")
    root = staff_client("root", superuser=True)
    page(root, "/admin/store/destination/")


def test_members_are_managed_by_superusers(member, tenant):
    assert member.get("/admin/workspaces/staffmembership/").status_code == 403
    assert "staff_memberships" not in page(member, on("/admin/workspaces/workspace/", tenant.workspace.pk))
    root = staff_client("root", superuser=True)
    page(root, "/admin/workspaces/staffmembership/")
    assert "staff_memberships" in page(root, on("/admin/workspaces/workspace/", tenant.workspace.pk))


def test_users_and_groups_are_for_superusers_only_whatever_permissions_staff_hold(member, db):
    """A staff user allowed to change users could make anyone a superuser: these pages ignore such grants."""
    granted = User.objects.get(username="alice")
    granted.user_permissions.set(Permission.objects.filter(content_type__app_label="auth"))
    for path in ("/admin/auth/user/", "/admin/auth/group/", f"/admin/auth/user/{granted.pk}/change/"):
        assert member.get(path).status_code == 403, path
    posted = member.post(f"/admin/auth/user/{granted.pk}/change/", {"username": "alice", "is_superuser": "on"})
    assert posted.status_code == 403
    granted.refresh_from_db()
    assert not granted.is_superuser
    assert "/admin/auth/" not in page(member, "/admin/")
    root = staff_client("root", superuser=True)
    page(root, "/admin/auth/user/")
