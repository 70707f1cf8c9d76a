"""Every webhook event a test wrote, delivered by the real sender and verified as a client would.

`every_event_delivered` is an autouse fixture for the packages whose changes emit events (the event tests,
the deployments): after the test, each workspace that wrote events gets an endpoint subscribed to every type
(made through the ORM, dated before the first event so the dispatcher fans them out to it), then one pass of
the sender's own parts (`deliveries.dispatch`, `claim`, `sender.Sender`, `settle`) posts them to a loopback
receiver that verifies each with the reference client's `webhooks.unwrap`. The pass runs in the test's
thread and connection, so it sees what a `db` test wrote. `DELIVERED_TYPES` gathers the types delivered in
the session, for `tests/webhooks_events`' check that every type this registry emits was delivered.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
from django.db.models import Max

from registry.core.egress import runtime_rules
from registry.webhooks import deliveries
from registry.webhooks.config import DeliveryConfig
from registry.webhooks.deliveries import Claim
from registry.webhooks.event_types import WORKSPACE_EVENT_TYPES
from registry.webhooks.models import WebhookDelivery, WebhookEndpoint, WebhookEvent
from registry.webhooks.sender import Message, Sender, SendResult
from registry.webhooks.signing import new_signing_secret, sealed_signing_secret
from tests.support.webhook_receivers import WebhookReceiver

OWNER = "test-delivery-pass"


def catch_all_endpoint(workspace_id: str, url: str, secret: str, *, since: Any) -> WebhookEndpoint:
    """An endpoint of the workspace for every type, dated `since` (before the events it should receive)."""
    endpoint = WebhookEndpoint(workspace_id=workspace_id, url=url, enabled_events=list(WORKSPACE_EVENT_TYPES))
    endpoint.signing_secret_sealed = sealed_signing_secret(secret, endpoint_id=endpoint.pk)
    endpoint.save()
    WebhookEndpoint.objects.filter(pk=endpoint.pk).update(created_at=since)
    return endpoint


async def _send(claims: list[Claim], config: DeliveryConfig) -> list[SendResult]:
    sender = Sender(timeout=config.timeout_seconds, rules=runtime_rules)
    try:
        messages = [Message(c.url, c.webhook_id, c.body, c.secret, owner=c.endpoint_id) for c in claims]
        return list(await asyncio.gather(*(sender.send(message) for message in messages)))
    finally:
        sender.close()


def deliver_pending() -> int:
    """Dispatch every event, then send every due delivery once and record the attempts; how many were sent."""
    config = DeliveryConfig.from_settings()
    while deliveries.dispatch().events:
        pass
    sent = 0
    while claims := deliveries.claim(owner=OWNER, config=config, held={}, blocked=(), room=10_000):
        deliveries.settle(
            list(zip(claims, asyncio.run(_send(claims, config)), strict=True)), owner=OWNER, config=config
        )
        sent += len(claims)
    return sent


def verify_delivered(events: list[WebhookEvent]) -> None:
    """Deliver `events` (already written) to a receiver per workspace and check each arrived verified, typed."""
    secret = new_signing_secret()
    receiver = WebhookReceiver(secret)
    try:
        since = min(event.created_at for event in events) - timedelta(seconds=1)
        for workspace_id in {event.workspace_id for event in events}:
            catch_all_endpoint(workspace_id, receiver.url, secret, since=since)
        assert deliver_pending() == len(events)
        arrived = {arrival.webhook_id: arrival for arrival in receiver.arrivals}
        assert receiver.rejected == []
        for event in events:
            arrival = arrived[event.id]
            assert arrival.event.data.type == event.type
            assert type(arrival.event.data).__name__.startswith("BetaWebhook")
        assert not WebhookDelivery.objects.filter(event__in=events).exclude(status="succeeded").exists()
    finally:
        receiver.stop()


@pytest.fixture(autouse=True)
def every_event_delivered(request: pytest.FixtureRequest, settings: Any) -> Iterator[None]:
    """After a test that wrote webhook events, each is delivered and verified (see the module)."""
    databases = [name for name in ("transactional_db", "db") if name in request.fixturenames]
    if not databases:
        yield  # a test without the database writes no event
        return
    request.getfixturevalue(databases[0])  # set up before this fixture reads the outbox
    before = WebhookEvent.objects.aggregate(last=Max("seq"))["last"] or 0
    yield
    settings.REGISTRY_EGRESS_ALLOW = "127.0.0.1"
    events = list(WebhookEvent.objects.filter(seq__gt=before).order_by("seq"))
    if events:
        verify_delivered(events)
