"""Fixtures shared by the whole suite: workspaces with keys, and API clients bound to them."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from rest_framework.test import APIClient

from registry.workspaces import services
from registry.workspaces.models import Workspace


@dataclass(frozen=True)
class Tenant:
    """A workspace, its plaintext API key, and an API client that sends that key."""

    workspace: Workspace
    api_key: str
    client: APIClient


def make_tenant(name: str) -> Tenant:
    workspace, issued = services.workspace_create(name=name)
    client = APIClient()
    client.credentials(HTTP_X_API_KEY=issued.plaintext)
    return Tenant(workspace=workspace, api_key=issued.plaintext, client=client)


@pytest.fixture
def tenant(db: None) -> Tenant:
    return make_tenant("first")


@pytest.fixture
def other_tenant(db: None) -> Tenant:
    return make_tenant("second")


@pytest.fixture
def api(tenant: Tenant) -> APIClient:
    return tenant.client
