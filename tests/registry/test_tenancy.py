"""Tenancy: a second workspace can neither read, list, update, archive nor delete the first's resources."""

from __future__ import annotations

import pytest

from tests.support.api_errors import assert_error

RESOURCES = {
    "agents": {"name": "mine", "model": "m"},
    "environments": {"name": "mine"},
}
# (method, path suffix, body) for every operation on one resource.
OPERATIONS = [
    ("get", "", None),
    ("post", "", {"name": "stolen"}),
    ("post", "/archive", None),
    ("delete", "", None),
    ("get", "/versions", None),
]


@pytest.fixture
def owned(tenant):
    return {
        family: tenant.client.post(f"/v1/{family}", body, format="json").json() for family, body in RESOURCES.items()
    }


@pytest.mark.parametrize("family", sorted(RESOURCES))
@pytest.mark.parametrize(("method", "suffix", "body"), OPERATIONS)
def test_other_workspace_sees_404(owned, other_tenant, tenant, family, method, suffix, body):
    resource = owned[family]
    path = f"/v1/{family}/{resource['id']}{suffix}"
    response = getattr(other_tenant.client, method)(path, body, format="json")
    if response.status_code == 405:  # the operation does not exist for this family at all
        assert tenant.client.generic(method.upper(), path).status_code == 405
        return
    assert_error(response, 404, "not_found_error")
    after = tenant.client.get(f"/v1/{family}/{resource['id']}").json()
    assert after == resource


@pytest.mark.parametrize("family", sorted(RESOURCES))
def test_other_workspace_lists_nothing(owned, other_tenant, family):
    for params in ({}, {"include_archived": "true"}, {"order": "asc", "limit": 100}):
        assert other_tenant.client.get(f"/v1/{family}", params).json()["data"] == []


def test_cursor_of_one_workspace_reveals_nothing_to_another(tenant, other_tenant):
    for index in range(3):
        tenant.client.post("/v1/agents", {"name": f"a{index}", "model": "m"}, format="json")
    cursor = tenant.client.get("/v1/agents", {"limit": 1}).json()["next_page"]
    assert other_tenant.client.get("/v1/agents", {"page": cursor}).json()["data"] == []


def test_old_version_of_other_workspace_agent_is_404(owned, other_tenant):
    assert_error(other_tenant.client.get(f"/v1/agents/{owned['agents']['id']}", {"version": 1}), 404, "not_found_error")
