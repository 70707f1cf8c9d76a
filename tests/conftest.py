"""Fixtures shared by the whole suite: workspaces with keys, and API clients bound to them."""

from __future__ import annotations

import pytest
from rest_framework.test import APIClient

from tests.support.tenants import Tenant, make_tenant


@pytest.fixture
def tenant(db: None) -> Tenant:
    return make_tenant("first")


@pytest.fixture
def other_tenant(db: None) -> Tenant:
    return make_tenant("second")


@pytest.fixture
def api(tenant: Tenant) -> APIClient:
    return tenant.client
