"""Smoke: the registry answers with a key."""

import pytest


@pytest.mark.django_db
def test_healthz_needs_no_credential(client):
    assert client.get("/healthz").json() == {"status": "ok"}


def test_agents_list_empty(api):
    response = api.get("/v1/agents")
    assert response.status_code == 200
    assert response.json() == {"data": [], "next_page": None}
