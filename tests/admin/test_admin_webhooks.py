"""The webhook pages of the admin through Django's test client: endpoints, deliveries with their attempts and the
outbox's events render and are searchable; no page shows a signing secret, in clear or sealed; endpoints are
disabled and enabled, deliveries redelivered, by confirmed actions through the services; roles decide who may;
a member of one workspace reaches nothing of another's."""

from __future__ import annotations

import uuid
from datetime import timedelta
from typing import Any

import pytest
from django.test import Client
from django.utils import timezone

from registry.webhooks import outbox
from registry.webhooks.models import WebhookAttempt, WebhookDelivery, WebhookEndpoint, WebhookEvent
from tests.support.admin_pages import on, page
from tests.support.admin_staff import staff_client
from tests.support.tenants import Tenant

ENDPOINTS = "/admin/webhooks/webhookendpoint/"
DELIVERIES = "/admin/webhooks/webhookdelivery/"
EVENTS = "/admin/webhooks/webhookevent/"


def hooks_of(tenant: Tenant, name: str) -> dict[str, Any]:
    """Through the API: an endpoint of the tenant's workspace (its secret kept), and rows as the delivery process
    writes them: an event, its failed delivery to the endpoint and one attempt."""
    response = tenant.client.post(
        "/v1/webhooks",
        {"url": "https://93.184.215.14/hooks", "enabled_events": ["agent.created"], "name": name},
        format="json",
    )
    assert response.status_code == 200, response.content
    created = response.json()
    endpoint = WebhookEndpoint.objects.get(pk=created["id"])
    event = outbox.emit("agent.created", workspace_id=endpoint.workspace_id, object_id=f"agent_{uuid.uuid4().hex}")
    delivery = WebhookDelivery.objects.create(
        endpoint=endpoint, event=event, status="failed", attempt_count=1, completed_at=timezone.now()
    )
    WebhookAttempt.objects.create(
        delivery=delivery,
        number=1,
        started_at=timezone.now() - timedelta(seconds=5),
        latency_ms=120,
        response_status=502,
        response_body="upstream said no",
        succeeded=False,
    )
    return {"endpoint": endpoint, "secret": created["signing_secret"], "event": event, "delivery": delivery}


@pytest.fixture
def mine(tenant: Tenant) -> dict[str, Any]:
    return hooks_of(tenant, "mine")


@pytest.fixture
def theirs(other_tenant: Tenant) -> dict[str, Any]:
    return hooks_of(other_tenant, "theirs")


def pages_of(hooks: dict[str, Any]) -> list[str]:
    return [
        ENDPOINTS,
        on(ENDPOINTS, hooks["endpoint"].pk),
        DELIVERIES,
        on(DELIVERIES, hooks["delivery"].pk),
        EVENTS,
        on(EVENTS, hooks["event"].pk),
    ]


def act(client: Client, listing: str, action: str, pk: str) -> str:
    """An action in two steps: the confirmation page (which must list the object), then the confirmed post."""
    chosen = {"action": action, "_selected_action": [pk]}
    asked = client.post(listing, chosen)
    assert asked.status_code == 200 and 'name="confirmed" value="yes"' in asked.content.decode(), action
    return client.post(listing, {**chosen, "confirmed": "yes"}, follow=True).content.decode()


def test_the_pages_render_without_a_secret(console, mine):
    sealed = WebhookEndpoint.objects.get(pk=mine["endpoint"].pk).signing_secret_sealed
    for path in pages_of(mine):
        html = page(console, path)
        assert mine["secret"] not in html and sealed not in html and "signing_secret" not in html, path
    endpoint_page = page(console, on(ENDPOINTS, mine["endpoint"].pk))
    assert "https://93.184.215.14/hooks" in endpoint_page and "agent.created" in endpoint_page
    assert f"?endpoint__id__exact={mine['endpoint'].pk}" in endpoint_page  # the link to its deliveries
    delivery_page = page(console, on(DELIVERIES, mine["delivery"].pk))
    assert "upstream said no" in delivery_page and "502" in delivery_page and mine["event"].id in delivery_page
    assert mine["event"].id in page(console, on(EVENTS, mine["event"].pk))


def test_search_and_filters(console, mine):
    assert on(ENDPOINTS, mine["endpoint"].pk) in page(console, f"{ENDPOINTS}?q=mine")
    assert on(ENDPOINTS, mine["endpoint"].pk) not in page(console, f"{ENDPOINTS}?q=nothing-like-it")
    assert on(DELIVERIES, mine["delivery"].pk) in page(console, f"{DELIVERIES}?q={mine['event'].id}")
    assert on(DELIVERIES, mine["delivery"].pk) not in page(console, f"{DELIVERIES}?status__exact=pending")
    assert on(EVENTS, mine["event"].pk) in page(console, f"{EVENTS}?type__exact=agent.created")


def test_nothing_is_added_or_edited_here(console, mine):
    assert console.get(f"{ENDPOINTS}add/").status_code == 403
    assert console.get(f"{DELIVERIES}add/").status_code == 403
    html = page(console, on(ENDPOINTS, mine["endpoint"].pk))
    assert 'name="url"' not in html and 'name="_save"' not in html


def test_disable_and_enable_go_through_the_service(console, mine):
    endpoint = mine["endpoint"]
    assert "Disabled 1 webhook endpoint." in act(console, ENDPOINTS, "disable", endpoint.pk)
    assert WebhookEndpoint.objects.get(pk=endpoint.pk).state == "disabled"
    WebhookEndpoint.objects.filter(pk=endpoint.pk).update(
        disabled_reason="Failing for 3 days.", consecutive_failures=9, retry_after=timezone.now() + timedelta(hours=1)
    )
    assert "Enabled 1 webhook endpoint." in act(console, ENDPOINTS, "enable", endpoint.pk)
    stored = WebhookEndpoint.objects.get(pk=endpoint.pk)
    assert (stored.state, stored.disabled_reason, stored.consecutive_failures, stored.retry_after) == (
        "enabled",
        "",
        0,
        None,
    )


def test_redelivery_by_action_and_its_refusal(console, mine):
    delivery = mine["delivery"]
    assert "Redelivered 1 webhook delivery." in act(console, DELIVERIES, "redeliver", delivery.pk)
    assert WebhookDelivery.objects.get(pk=delivery.pk).status == "pending"
    WebhookDelivery.objects.filter(pk=delivery.pk).update(status="failed")
    act(console, ENDPOINTS, "disable", mine["endpoint"].pk)
    html = act(console, DELIVERIES, "redeliver", delivery.pk)
    assert "Not done:" in html and "disabled" in html
    assert WebhookDelivery.objects.get(pk=delivery.pk).status == "failed"


def test_deleting_an_endpoint_takes_its_deliveries(console, mine):
    response = console.post(on(ENDPOINTS, mine["endpoint"].pk, "delete"), {"post": "yes"})
    assert response.status_code == 302
    assert not WebhookEndpoint.objects.filter(pk=mine["endpoint"].pk).exists()
    assert not WebhookDelivery.objects.filter(pk=mine["delivery"].pk).exists()
    assert WebhookEvent.objects.filter(pk=mine["event"].pk).exists()  # the outbox keeps its record


def test_a_member_reaches_only_her_workspace(tenant, mine, theirs):
    member = staff_client("alice", {tenant.workspace: "admin"})
    for listing, key in ((ENDPOINTS, "endpoint"), (DELIVERIES, "delivery"), (EVENTS, "event")):
        html = page(member, listing)
        assert on(listing, mine[key].pk) in html and on(listing, theirs[key].pk) not in html
        page(member, on(listing, mine[key].pk))
        for view in ("change", "history", "delete"):
            response = member.get(on(listing, theirs[key].pk, view))
            assert response.status_code in (302, 403, 404), (listing, view)
            assert response.status_code != 302 or response["Location"] == "/admin/"
    member.post(ENDPOINTS, {"action": "disable", "_selected_action": [theirs["endpoint"].pk], "confirmed": "yes"})
    member.post(on(ENDPOINTS, theirs["endpoint"].pk, "delete"), {"post": "yes"})
    assert WebhookEndpoint.objects.get(pk=theirs["endpoint"].pk).state == "enabled"


def test_a_viewer_reads_but_does_not_act(tenant, mine):
    viewer = staff_client("victor", {tenant.workspace: "viewer"})
    page(viewer, on(ENDPOINTS, mine["endpoint"].pk))
    page(viewer, on(DELIVERIES, mine["delivery"].pk))
    viewer.post(ENDPOINTS, {"action": "disable", "_selected_action": [mine["endpoint"].pk], "confirmed": "yes"})
    viewer.post(DELIVERIES, {"action": "redeliver", "_selected_action": [mine["delivery"].pk], "confirmed": "yes"})
    assert WebhookEndpoint.objects.get(pk=mine["endpoint"].pk).state == "enabled"
    assert WebhookDelivery.objects.get(pk=mine["delivery"].pk).status == "failed"
    operator = staff_client("olga", {tenant.workspace: "operator"})
    assert "Redelivered 1 webhook delivery." in act(operator, DELIVERIES, "redeliver", mine["delivery"].pk)
