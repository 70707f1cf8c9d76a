"""Django admin for staff: pages render, a new API key is shown once, digests and secrets never."""

from __future__ import annotations

import re

import pytest
from django.contrib.auth.models import User

from registry.workspaces.models import ApiKey
from registry.workspaces.selectors import api_key_for_plaintext
from tests.support.admin_pages import on


@pytest.fixture
def staff_client(client, db):
    User.objects.create_superuser("staff", "staff@example.com", "pw")
    client.login(username="staff", password="pw")
    return client


def test_pages_render(staff_client, tenant):
    agent = tenant.client.post("/v1/agents", {"name": "a", "model": "m"}, format="json").json()
    environment = tenant.client.post("/v1/environments", {"name": "e"}, format="json").json()
    for path in (
        "/admin/",
        "/admin/workspaces/workspace/",
        on("/admin/workspaces/workspace/", tenant.workspace.id),
        "/admin/workspaces/apikey/",
        "/admin/agents/agent/",
        on("/admin/agents/agent/", agent["id"]),
        "/admin/environments/environment/",
        on("/admin/environments/environment/", environment["id"]),
        "/admin/workspaces/oidcmembership/",
    ):
        response = staff_client.get(path)
        assert response.status_code == 200, path
        page = response.content.decode()
        assert tenant.api_key not in page
        assert tenant.workspace.api_keys.get().digest not in page


def test_new_key_is_shown_once(staff_client, tenant):
    response = staff_client.post(
        "/admin/workspaces/apikey/add/", {"workspace": tenant.workspace.id, "name": "ci"}, follow=True
    )
    assert response.status_code == 200
    shown = re.findall(r"sk-reg-[A-Za-z0-9_-]{20,}", response.content.decode())  # prefixes are shorter
    assert len(set(shown)) == 1
    assert getattr(api_key_for_plaintext(shown[0]), "name", None) == "ci"
    listing = staff_client.get("/admin/workspaces/apikey/").content.decode()
    assert shown[0] not in listing
    assert ApiKey.objects.filter(workspace=tenant.workspace).count() == 2


def test_anonymous_is_sent_to_login(client, db):
    assert client.get("/admin/agents/agent/").status_code == 302
