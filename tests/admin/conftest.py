"""Fixtures of the admin console tests: a staff user, and a session with one finished turn in its log."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User

from tests.support.admin_turns import STAFF_PASSWORD, Turn, create_finished_turn
from tests.support.tenants import Tenant


@pytest.fixture
def staff(db: None) -> User:
    return User.objects.create_superuser("staff", "staff@example.com", STAFF_PASSWORD)


@pytest.fixture
def turn(tenant: Tenant) -> Turn:
    return create_finished_turn(tenant)
