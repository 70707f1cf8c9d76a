"""Fixtures of the registry tests: a real OIDC provider on loopback, and the registry pointed at it."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from registry.sessions.work import POLL_WAKEUPS
from tests.support.oidc_provider import REGISTRY_CLIENT_ID, RunningProvider
from tests.support.serving import refusing_url

__all__ = ["refusing_url"]


@pytest.fixture(scope="package", autouse=True)
def work_listener_closed(django_db_setup: None) -> Iterator[None]:
    """The long polls of the live server share a LISTEN connection to the test database: closed before the
    database is dropped."""
    yield
    POLL_WAKEUPS.stop()


@pytest.fixture(scope="session")
def oidc_provider() -> Iterator[RunningProvider]:
    """One provider for the session: generating its RSA key is the slow part."""
    running = RunningProvider()
    yield running
    running.stop()


@pytest.fixture
def oidc(oidc_provider: RunningProvider, settings: Any) -> RunningProvider:
    """The registry configured from the provider's discovery document (restored after the test)."""
    document = oidc_provider.discovery()
    settings.OIDC_OP_AUTHORIZATION_ENDPOINT = document["authorization_endpoint"]
    settings.OIDC_OP_TOKEN_ENDPOINT = document["token_endpoint"]
    settings.OIDC_OP_USER_ENDPOINT = document["userinfo_endpoint"]
    settings.OIDC_OP_JWKS_ENDPOINT = document["jwks_uri"]
    settings.OIDC_RP_CLIENT_ID = REGISTRY_CLIENT_ID
    settings.OIDC_RP_CLIENT_SECRET = oidc_provider.register_client(REGISTRY_CLIENT_ID).client_secret
    return oidc_provider


@pytest.fixture
def uploads_dir(settings, tmp_path: Path) -> Path:
    """The default storage pointed at a directory of this test, so tests leave nothing behind."""
    location = tmp_path / "uploads"
    settings.STORAGES = {
        **settings.STORAGES,
        "default": {"BACKEND": "django.core.files.storage.FileSystemStorage", "OPTIONS": {"location": location}},
    }
    return location
