"""Errors under the admin are HTML pages in its look (403, 404 for unknown pages and hidden objects, 500 with no
traceback, 413), while every API path keeps its JSON envelope; the admin shows no dead "View site" link.

This module doubles as a URLconf for the server-error tests: the project's routes and handlers, plus a view that
crashes under the admin and one under the API."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User
from django.core.exceptions import PermissionDenied
from django.test import Client, override_settings
from django.urls import include, path

from registry.sessions.models import Session
from settings import urls as project_urls
from tests.support.admin_pages import SESSIONS, on
from tests.support.admin_staff import staff_client
from tests.support.admin_turns import STAFF_PASSWORD, Turn
from tests.support.api_errors import assert_error
from tests.support.tenants import Tenant, open_session

SECRET = "sk-CRASH-CANARY-secret"


def crash(request):
    raise RuntimeError(f"boom with {SECRET}")


def refuse(request):
    raise PermissionDenied(SECRET)


urlpatterns = [
    path("admin/crash/", crash),
    path("v1/crash", crash),
    path("v1/forbidden", refuse),
    path("", include(project_urls)),
]
handler500 = project_urls.handler500
handler403 = project_urls.handler403


def assert_admin_page(response, status: int, title: str) -> str:
    """An HTML page in the admin's look with this status and title, naming the request id."""
    assert response.status_code == status, response.content
    assert response["content-type"].startswith("text/html")
    html = response.content.decode()
    assert f'data-status="{status}"' in html and title in html
    assert 'id="header"' in html and "admin/css/base.css" in html
    assert response["request-id"] in html
    return html


@pytest.fixture
def viewer(tenant: Tenant) -> Client:
    return staff_client("viewer", {tenant.workspace: "viewer"})


def test_an_unknown_admin_page_is_the_html_404(console):
    html = assert_admin_page(console.get("/admin/no/such/page/"), 404, "Page not found")
    assert "Welcome," in html and "/admin/logout/" in html


def test_an_action_on_another_workspaces_session_is_the_html_404(viewer, other_tenant):
    foreign = open_session(other_tenant.client)
    response = viewer.post(on(SESSIONS, foreign, "actions/archive"))
    assert_admin_page(response, 404, "Page not found")
    assert Session.objects.get(pk=foreign).archived_at is None


def test_a_viewer_acting_on_a_session_gets_the_html_403(viewer, turn: Turn):
    response = viewer.post(on(SESSIONS, turn.session_id, "actions/archive"))
    assert_admin_page(response, 403, "Permission denied")
    assert Session.objects.get(pk=turn.session_id).archived_at is None


@pytest.mark.django_db
def test_staff_without_a_workspace_get_the_html_403_on_a_page():
    User.objects.create_user("nobody", password=STAFF_PASSWORD, is_staff=True)
    client = Client()
    client.login(username="nobody", password=STAFF_PASSWORD)
    assert_admin_page(client.get(SESSIONS), 403, "Permission denied")


def test_a_body_over_the_limit_under_the_admin_is_the_html_413(console, settings):
    settings.REGISTRY_MAX_BODY_BYTES = settings.REGISTRY_MAX_UPLOAD_BYTES = 100
    response = console.post("/admin/agents/agent/add/", {"name": "x" * 500})
    html = assert_admin_page(response, 413, "Request too large")
    assert "exceeds the limit of 100 bytes" in html


@pytest.mark.django_db
@override_settings(ROOT_URLCONF=__name__)
def test_a_crash_under_the_admin_is_the_html_500_without_a_traceback(console):
    console.raise_request_exception = False
    html = assert_admin_page(console.get("/admin/crash/"), 500, "Server error")
    for leak in (SECRET, "RuntimeError", "Traceback", "boom"):
        assert leak not in html


@pytest.mark.django_db
@override_settings(ROOT_URLCONF=__name__)
def test_a_crash_under_the_api_stays_the_json_envelope(client):
    client.raise_request_exception = False
    body = assert_error(client.get("/v1/crash"), 500, "api_error")
    assert SECRET not in str(body)


@pytest.mark.parametrize("path", ["/nope", "/v1/no-such-family", "/admin-not-quite/"])
def test_api_paths_keep_the_json_404_for_a_logged_in_staff_member(console, path):
    assert_error(console.get(path), 404, "not_found_error")


def test_a_missing_api_object_stays_the_json_404(api):
    assert_error(api.get("/v1/agents/agent_doesnotexist000000000000"), 404, "not_found_error")


@pytest.mark.django_db
@override_settings(ROOT_URLCONF=__name__)
def test_a_refusal_outside_drf_under_the_api_stays_the_json_403(console):
    assert_error(console.get("/v1/forbidden"), 403, "permission_error")


def test_no_view_site_link(console):
    html = console.get("/admin/").content.decode()
    assert "View site" not in html and "Change password" in html
