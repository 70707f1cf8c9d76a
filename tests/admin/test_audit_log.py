"""The admin's audit page: staff actions (who, what object, what action, when, the change message), newest
first, filterable by user, action and kind of object, read-only, and scoped: a member of workspace A never sees
an entry of B's objects; superusers see every entry; staff of no workspace do not reach the page."""

from __future__ import annotations

import pytest
from django.contrib.admin.models import CHANGE, LogEntry
from django.contrib.auth.models import User
from django.contrib.contenttypes.models import ContentType
from django.test import Client

from registry.sessions.models import Session
from registry.workspaces.models import ApiKey
from tests.support.admin_pages import SESSIONS, on, page
from tests.support.admin_staff import staff_client
from tests.support.tenants import Tenant, open_session

AUDIT = "/admin/admin/logentry/"
ARCHIVED = "Archived the session: it is terminated."


def archive(client: Client, session_id: str) -> None:
    response = client.post(on(SESSIONS, session_id, "actions/archive"))
    assert response.status_code == 302, response.content


def revoke(client: Client, api_key: ApiKey) -> None:
    body = {"action": "revoke", "_selected_action": [api_key.pk], "confirmed": "yes"}
    assert client.post("/admin/workspaces/apikey/", body).status_code == 302


@pytest.fixture
def sessions(tenant: Tenant, other_tenant: Tenant) -> dict[str, str]:
    """A session archived by A's operator, then one of B's archived by B's operator, then B's key revoked by
    a superuser."""
    made = {"a": open_session(tenant.client), "b": open_session(other_tenant.client)}
    archive(staff_client("operator-a", {tenant.workspace: "operator"}), made["a"])
    archive(staff_client("operator-b", {other_tenant.workspace: "operator"}), made["b"])
    revoke(staff_client("root", superuser=True), ApiKey.objects.get(workspace=other_tenant.workspace))
    return made


@pytest.fixture
def viewer_a(tenant: Tenant) -> Client:
    return staff_client("viewer-a", {tenant.workspace: "viewer"})


def test_a_member_sees_who_did_what_to_which_object_and_when_in_their_workspace(viewer_a, sessions):
    html = page(viewer_a, AUDIT)
    entry = LogEntry.objects.get(object_id=sessions["a"])
    for shown in ("operator-a", "Change", "session", sessions["a"], ARCHIVED, "Audit log"):
        assert shown in html
    assert on(SESSIONS, sessions["a"]) in html and str(entry.action_time.year) in html


def test_a_member_never_sees_another_workspaces_entries(viewer_a, sessions):
    html = page(viewer_a, AUDIT)
    assert sessions["b"] not in html and "operator-b" not in html and "root" not in html and "Revoked" not in html
    assert 'id="result_list"' not in page(viewer_a, f"{AUDIT}?q={sessions['b']}")
    assert 'id="result_list"' in page(viewer_a, f"{AUDIT}?q={sessions['a']}")
    hidden = LogEntry.objects.get(object_id=sessions["b"])
    response = viewer_a.get(on(AUDIT, hidden.pk))
    assert response.status_code == 302 and sessions["b"] not in response.content.decode()


def test_the_user_filter_offers_only_the_users_of_entries_the_member_sees(viewer_a, sessions):
    html = page(viewer_a, AUDIT)
    operator_b = User.objects.get(username="operator-b")
    assert f"user__id__exact={operator_b.pk}" not in html


def test_superusers_see_every_entry_newest_first_and_filter_them(sessions):
    root = staff_client("auditor", superuser=True)
    html = page(root, AUDIT)
    assert html.index("Revoked") < html.index(sessions["b"]) < html.index(sessions["a"])
    operator_b = User.objects.get(username="operator-b")
    by_user = page(root, f"{AUDIT}?user__id__exact={operator_b.pk}")
    assert sessions["b"] in by_user and sessions["a"] not in by_user and "Revoked" not in by_user
    api_keys = ContentType.objects.get_for_model(ApiKey)
    by_kind = page(root, f"{AUDIT}?content_type__id__exact={api_keys.pk}&action_flag__exact={CHANGE}")
    assert "Revoked" in by_kind and sessions["a"] not in by_kind and sessions["b"] not in by_kind


def test_the_audit_log_is_read_only(viewer_a, sessions):
    entry = LogEntry.objects.get(object_id=sessions["a"])
    assert viewer_a.get(f"{AUDIT}add/").status_code == 403
    assert viewer_a.get(on(AUDIT, entry.pk, "delete")).status_code == 403
    detail = page(viewer_a, on(AUDIT, entry.pk))
    assert ARCHIVED in detail and 'name="_save"' not in detail
    viewer_a.post(on(AUDIT, entry.pk), {"change_message": "forged"})
    assert LogEntry.objects.get(pk=entry.pk).get_change_message() == ARCHIVED
    assert Session.objects.get(pk=sessions["a"]).archived_at is not None


@pytest.mark.django_db
def test_staff_of_no_workspace_do_not_reach_the_audit_log():
    assert staff_client("nobody").get(AUDIT).status_code == 403


@pytest.mark.parametrize("role", ["viewer", "operator", "admin"])
def test_every_role_reads_the_audit_log_of_its_workspace(tenant, sessions, role):
    html = page(staff_client(f"{role}-of-a", {tenant.workspace: role}), AUDIT)
    assert sessions["a"] in html and sessions["b"] not in html


def test_a_path_into_the_admin_in_a_message_is_a_link_and_the_rest_is_escaped(tenant):
    root = staff_client("auditor", superuser=True)
    history = "/admin/store/configrevision/entry/destinations/primary/#revision-3"
    message = f"Changed body <script>x</script>. Revision 3: {history}"
    LogEntry.objects.log_actions(
        User.objects.get(username="auditor").pk, [tenant.workspace], CHANGE, change_message=message
    )
    html = page(root, AUDIT)
    assert f'<a href="{history}">{history}</a>' in html
    assert "<script>x</script>" not in html and "&lt;script&gt;x&lt;/script&gt;" in html
