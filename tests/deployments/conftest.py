"""Fixtures of the deployment tests: a live registry, a workspace driven through the reference client, and a
deployment of an agent in an environment made through it."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anthropic
import pytest

from registry.deployments.models import Deployment
from registry.sessions.work import POLL_WAKEUPS
from tests.support.clients import registry_client
from tests.support.tenants import Tenant, make_tenant
from tests.support.webhook_delivery import every_event_delivered

__all__ = ["every_event_delivered"]

GO = [{"type": "user.message", "content": [{"type": "text", "text": "Write the daily report."}]}]
EVERY_MINUTE = {"type": "cron", "expression": "* * * * *", "timezone": "UTC"}


@pytest.fixture(scope="package", autouse=True)
def work_listener_closed(django_db_setup: None) -> Iterator[None]:
    """The live server's long polls share a LISTEN connection to the test database: closed before it is dropped."""
    yield
    POLL_WAKEUPS.stop()


@pytest.fixture
def uploads_dir(settings: Any, tmp_path: Path) -> Path:
    """The default storage pointed at a directory of this test, so uploads leave nothing behind."""
    location = tmp_path / "uploads"
    settings.STORAGES = {
        **settings.STORAGES,
        "default": {"BACKEND": "django.core.files.storage.FileSystemStorage", "OPTIONS": {"location": location}},
    }
    return location


@dataclass
class Workspace:
    """A workspace of the live registry: its tenant, the reference client on its key, an agent and an
    environment, and `deploy`, which creates a deployment of them (keyword arguments override the body)."""

    tenant: Tenant
    sdk: anthropic.Anthropic
    agent_id: str
    environment_id: str

    def deploy(self, **overrides: Any) -> Any:
        body: dict[str, Any] = {
            "name": "daily report",
            "agent": self.agent_id,
            "environment_id": self.environment_id,
            "initial_events": GO,
            **overrides,
        }
        return self.sdk.beta.deployments.create(**body)

    def row(self, deployment_id: str) -> Deployment:
        return Deployment.objects.get(pk=deployment_id)


@pytest.fixture
def make_workspace(live_server: Any) -> Callable[[str], Workspace]:
    def make(name: str = "deployments") -> Workspace:
        tenant = make_tenant(name)
        sdk = registry_client(live_server.url, tenant.api_key)
        agent = sdk.beta.agents.create(name="reporter", model="claude-sonnet-4-5")
        environment = sdk.beta.environments.create(name="sandbox")
        return Workspace(tenant=tenant, sdk=sdk, agent_id=agent.id, environment_id=environment.id)

    return make


@pytest.fixture
def workspace(make_workspace: Callable[[str], Workspace]) -> Workspace:
    return make_workspace("deployments")
