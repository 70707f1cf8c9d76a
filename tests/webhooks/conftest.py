"""Fixtures of the webhook delivery tests: a workspace, endpoints made through the ORM with a sealed secret,
loopback receivers that verify with the reference client (tests/support/webhook_receivers.py), events written
through `outbox.emit`, and `runwebhooks` processes on the test database with short waits."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from fakes.waiting import wait_until
from registry.webhooks import outbox
from registry.webhooks.models import WebhookDelivery, WebhookEndpoint, WebhookEvent
from registry.webhooks.signing import new_signing_secret, sealed_signing_secret
from registry.workspaces import services
from registry.workspaces.models import Workspace
from tests.support.observability import Watched, started_line
from tests.support.processes import Process, child_environment
from tests.support.webhook_receivers import WebhookReceiver

# Short waits for the senders the tests start; a test overrides what it is about.
SENDER_SETTINGS = {
    "REGISTRY_WEBHOOK_POLL_SECONDS": "0.05",
    "REGISTRY_WEBHOOK_TIMEOUT_SECONDS": "3",
    "REGISTRY_WEBHOOK_LEASE_SECONDS": "8",
    "REGISTRY_WEBHOOK_RETRY_SCHEDULE": ",".join(["0.1"] * 60),
    "REGISTRY_WEBHOOK_ENDPOINT_BACKOFF_SECONDS": "0.2",
    "REGISTRY_WEBHOOK_ENDPOINT_BACKOFF_MAX_SECONDS": "0.4",
    "REGISTRY_WEBHOOK_DISABLE_AFTER_SECONDS": "3600",
}


@pytest.fixture(scope="package")
def sender_env(django_db_setup: None) -> dict[str, str]:
    """The senders' environment: the test database, JSON logs, a free health port; loopback receivers are an
    operator exception to the egress rules (127.0.0.1 only: other loopback addresses stay refused)."""
    return child_environment(
        "http://127.0.0.1:9",
        REGISTRY_EGRESS_ALLOW="127.0.0.1",
        REGISTRY_HEALTH_PORT="0",
        LOG_FORMAT="json",
        **SENDER_SETTINGS,
    )


@pytest.fixture
def start_sender(
    sender_env: dict[str, str], tmp_path: Path, transactional_db: None
) -> Iterator[Callable[..., Watched]]:
    """Start `manage.py runwebhooks` (keyword arguments: more environment variables) once it logged its start;
    whatever still runs is stopped at the end, before the database is flushed."""
    started: list[Process] = []

    def start(**environment: str) -> Watched:
        log = tmp_path / f"runwebhooks-{len(started)}.log"
        env = {**sender_env, **environment}
        started.append(Process([sys.executable, "manage.py", "runwebhooks"], env=env, log=log))
        line = wait_until(lambda: started_line(log), timeout=60, what="runwebhooks to start")
        return Watched(started[-1], line)

    yield start
    for process in started:
        process.stop()


@pytest.fixture
def workspace(transactional_db: None) -> Workspace:
    return services.workspace_create(name="hooks")[0]


@pytest.fixture
def receivers() -> Iterator[Callable[..., WebhookReceiver]]:
    """Start receivers (`WebhookReceiver` arguments); all are stopped at the end."""
    made: list[WebhookReceiver] = []

    def make(secret: str, **options: Any) -> WebhookReceiver:
        made.append(WebhookReceiver(secret, **options))
        return made[-1]

    yield make
    for receiver in made:
        receiver.stop()


def make_endpoint(
    workspace: Workspace, url: str, *, secret: str, events: tuple[str, ...] = ("session.created",)
) -> WebhookEndpoint:
    endpoint = WebhookEndpoint(workspace=workspace, url=url, enabled_events=list(events))
    endpoint.signing_secret_sealed = sealed_signing_secret(secret, endpoint_id=endpoint.pk)
    endpoint.save()
    return endpoint


@pytest.fixture
def hook(
    workspace: Workspace, receivers: Callable[..., WebhookReceiver]
) -> Callable[..., tuple[WebhookReceiver, WebhookEndpoint]]:
    """A receiver and an endpoint of `workspace` pointing at it, sharing a fresh secret (keyword arguments:
    `events`, and the receiver's `host`, `port`)."""

    def make(
        *, events: tuple[str, ...] = ("session.created",), **options: Any
    ) -> tuple[WebhookReceiver, WebhookEndpoint]:
        secret = new_signing_secret()
        receiver = receivers(secret, **options)
        return receiver, make_endpoint(workspace, receiver.url, secret=secret, events=events)

    return make


def emit(workspace: Workspace, count: int = 1, event_type: str = "session.created") -> list[str]:
    """`count` events of one type (each its own transaction); their ids, in order."""
    return [
        outbox.emit(event_type, workspace_id=workspace.pk, object_id=f"sesn_{index:06d}").id for index in range(count)
    ]


def delivery_of(endpoint: WebhookEndpoint, event_id: str) -> WebhookDelivery:
    return WebhookDelivery.objects.get(endpoint=endpoint, event__id=event_id)


def status_of(endpoint: WebhookEndpoint, event_id: str) -> str | None:
    """The status of the event's delivery to the endpoint; None while there is none (not dispatched yet)."""
    return (
        WebhookDelivery.objects.filter(endpoint=endpoint, event__id=event_id).values_list("status", flat=True).first()
    )


def dispatched(event_id: str) -> bool:
    return WebhookEvent.objects.filter(id=event_id, dispatched_at__isnull=False).exists()
