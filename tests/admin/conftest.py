"""Fixtures of the admin console tests: a staff user and the test client logged in as it, a session with one
finished turn in its log, the default storage in a test directory, Chromium driven by Selenium for the browser
tests, and for those that run turns the runtime tests' processes (the scripted model, the shop MCP server,
daphne; tests/support/runtime/fixtures.py)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from django.contrib.auth.hashers import PBKDF2PasswordHasher
from django.contrib.auth.models import User
from django.test import Client
from selenium import webdriver

from tests.support.admin_turns import STAFF_PASSWORD, Turn, create_finished_turn
from tests.support.browser import chromium
from tests.support.runtime.fixtures import child_env, fake_model, model, registry, shop, shop_server
from tests.support.tenants import Tenant

__all__ = ["child_env", "fake_model", "model", "registry", "shop", "shop_server"]


@pytest.fixture
def staff(db: None) -> User:
    return User.objects.create_superuser("staff", "staff@example.com", STAFF_PASSWORD)


@pytest.fixture
def live_staff(staff: User) -> User:
    """The staff user with a password hash that daphne's settings (not the tests' fast MD5) can check."""
    hasher = PBKDF2PasswordHasher()
    staff.password = hasher.encode(STAFF_PASSWORD, hasher.salt())
    staff.save(update_fields=["password"])
    return staff


@pytest.fixture
def console(client: Client, staff: User) -> Client:
    client.login(username="staff", password=STAFF_PASSWORD)
    return client


@pytest.fixture
def uploads(settings, tmp_path: Path) -> None:
    """The default storage (files, skill bundles) in a test directory."""
    settings.STORAGES = {
        **settings.STORAGES,
        "default": {"BACKEND": "django.core.files.storage.FileSystemStorage", "OPTIONS": {"location": tmp_path}},
    }


@pytest.fixture
def browser() -> Iterator[webdriver.Chrome]:
    driver = chromium()
    yield driver
    driver.quit()


@pytest.fixture
def turn(tenant: Tenant) -> Turn:
    return create_finished_turn(tenant)
