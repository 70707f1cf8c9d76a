"""The webhooks API: endpoints in the reference client's shape (its own resource methods, pointed at /v1/webhooks,
parse every answer), the signing secret shown at creation and regeneration only, the update rules, the URL and
event-type refusals with their codes, the per-workspace limit, tenancy, lists, and the deliveries' debugging API."""

from __future__ import annotations

import logging
import uuid
from datetime import timedelta
from typing import Any

import anthropic
import httpx2
import pytest
from anthropic.resources.beta.organization.webhooks import Webhooks
from anthropic.types.beta.organization import (
    BetaDeletedOrganizationWebhookEndpoint,
    BetaNewOrganizationWebhookEndpoint,
    BetaOrganizationWebhookEndpoint,
    BetaOrganizationWebhookEndpointSigningSecret,
)
from django.db import connection
from django.utils import timezone
from standardwebhooks import Webhook

from registry.core.models import IdempotencyKey
from registry.webhooks import outbox
from registry.webhooks.models import WebhookAttempt, WebhookDelivery, WebhookEndpoint
from registry.webhooks.serializers import (
    NewWebhookEndpointSerializer,
    WebhookDeliveryDetailSerializer,
    WebhookDeliverySerializer,
    WebhookEndpointSerializer,
)
from registry.webhooks.services import MAX_ENDPOINTS_PER_WORKSPACE
from registry.webhooks.signing import signing_secret
from tests.support.api_errors import assert_error, assert_not_found
from tests.support.tenants import Tenant, make_tenant

NOT_ALLOWED = "webhook_event_type_not_allowed"
BAD = "invalid_request_error"
PUBLIC_URL = "https://93.184.215.14/hooks"  # a public address literal: no DNS needed
ENDPOINT_FIELDS = {
    "id",
    "created_at",
    "updated_at",
    "description",
    "disabled_reason",
    "enabled_events",
    "name",
    "state",
    "url",
}


def create(api: Any, **body: Any) -> Any:
    return api.post("/v1/webhooks", {"url": PUBLIC_URL, "enabled_events": ["agent.created"], **body}, format="json")


@pytest.fixture
def endpoint(api: Any) -> dict[str, Any]:
    response = create(api, name="ci", description="the CI receiver")
    assert response.status_code == 200, response.content
    return dict(response.json())


def path(endpoint: dict[str, Any], tail: str = "") -> str:
    return f"/v1/webhooks/{endpoint['id']}{tail}"


def assert_refused(response: Any, status: int, error_type: str, code: str, mentions: str | None = None) -> None:
    body = assert_error(response, status, error_type, mentions)
    assert body["error"]["details"] == {"error_code": code} and body["error"]["error_code"] == code


# -- the signing secret --------------------------------------------------------------------------------------------
def test_create_shows_the_secret_once_and_no_read_shows_it(api, endpoint, caplog):
    caplog.set_level(logging.DEBUG)
    secret = endpoint["signing_secret"]
    assert endpoint["id"].startswith("whep_")
    assert set(endpoint) == ENDPOINT_FIELDS | {"signing_secret"}
    assert endpoint["name"] == "ci" and endpoint["description"] == "the CI receiver" and endpoint["state"] == "enabled"
    assert endpoint["disabled_reason"] == "" and endpoint["enabled_events"] == ["agent.created"]
    assert secret.startswith("whsec_")
    signer = Webhook(secret)  # the Standard Webhooks form: whsec_ + base64 of the key
    now = timezone.now()
    headers = {
        "webhook-id": "msg_1",
        "webhook-timestamp": str(int(now.timestamp())),
        "webhook-signature": signer.sign("msg_1", now, '{"a":1}'),
    }
    assert signer.verify('{"a":1}', headers) == {"a": 1}

    stored = WebhookEndpoint.objects.get(pk=endpoint["id"])
    assert signing_secret(stored) == secret and secret not in stored.signing_secret_sealed
    reads = [
        api.get(path(endpoint)),
        api.get("/v1/webhooks"),
        api.post(path(endpoint), {"name": "renamed"}, format="json"),
        api.get(path(endpoint, "/deliveries")),
    ]
    for response in reads:
        assert response.status_code == 200
        assert "signing_secret" not in response.content.decode() and secret not in response.content.decode()
    assert set(reads[0].json()) == ENDPOINT_FIELDS
    assert secret not in caplog.text
    with connection.cursor() as cursor:
        cursor.execute("SELECT * FROM webhooks_webhookendpoint")
        assert secret not in str(cursor.fetchall())


def test_regenerating_replaces_the_secret_at_once(api, endpoint):
    response = api.post(path(endpoint, "/regenerate_signing_secret"))
    assert response.status_code == 200
    assert set(response.json()) == {"signing_secret"}
    fresh = response.json()["signing_secret"]
    assert fresh.startswith("whsec_") and fresh != endpoint["signing_secret"]
    Webhook(fresh)
    assert signing_secret(WebhookEndpoint.objects.get(pk=endpoint["id"])) == fresh
    assert fresh not in api.get(path(endpoint)).content.decode()


def test_an_idempotent_replay_gives_the_secret_again_but_stores_it_sealed(api):
    body = {"url": PUBLIC_URL, "enabled_events": ["agent.created"]}
    first = api.post("/v1/webhooks", body, format="json", HTTP_IDEMPOTENCY_KEY="create-1")
    replay = api.post("/v1/webhooks", body, format="json", HTTP_IDEMPOTENCY_KEY="create-1")
    assert replay["idempotent-replayed"] == "true"
    assert replay.json() == first.json() and WebhookEndpoint.objects.count() == 1
    secret = first.json()["signing_secret"]
    regenerated = api.post(path(first.json(), "/regenerate_signing_secret"), HTTP_IDEMPOTENCY_KEY="regen-1")
    again = api.post(path(first.json(), "/regenerate_signing_secret"), HTTP_IDEMPOTENCY_KEY="regen-1")
    assert again.json() == regenerated.json()
    stored = str(list(IdempotencyKey.objects.values_list("response_body", flat=True)))
    assert secret not in stored and regenerated.json()["signing_secret"] not in stored


# -- updates and deletes -------------------------------------------------------------------------------------------
def test_enabled_events_are_replaced_whole_and_an_empty_list_keeps_them(api, endpoint):
    events = ["session.created", "session.status_idled", "session.created"]
    updated = api.post(path(endpoint), {"enabled_events": events}, format="json").json()
    assert updated["enabled_events"] == ["session.created", "session.status_idled"]  # duplicates collapse
    kept = api.post(path(endpoint), {"enabled_events": [], "description": ""}, format="json").json()
    assert kept["enabled_events"] == ["session.created", "session.status_idled"] and kept["description"] == ""
    assert kept["name"] == "ci" and kept["url"] == PUBLIC_URL


def test_enabling_clears_the_reason_and_the_failure_run(api, endpoint):
    disabled = api.post(path(endpoint), {"state": "disabled"}, format="json").json()
    assert disabled["state"] == "disabled" and disabled["disabled_reason"] == ""
    WebhookEndpoint.objects.filter(pk=endpoint["id"]).update(
        disabled_reason="Deliveries failed for 3 days.",
        consecutive_failures=40,
        failing_since=timezone.now() - timedelta(days=3),
        retry_after=timezone.now() + timedelta(hours=1),
    )
    assert api.get(path(endpoint)).json()["disabled_reason"] == "Deliveries failed for 3 days."
    enabled = api.post(path(endpoint), {"state": "enabled"}, format="json").json()
    assert enabled["state"] == "enabled" and enabled["disabled_reason"] == ""
    stored = WebhookEndpoint.objects.get(pk=endpoint["id"])
    assert (stored.consecutive_failures, stored.failing_since, stored.retry_after) == (0, None, None)


def test_bad_update_bodies_are_refused(api, endpoint):
    for body, mentions in (
        ({"state": "paused"}, "state"),
        ({"enabled_events": "agent.created"}, "enabled_events"),
        ({"name": None}, "name"),
        ({"url": 5}, "url"),
        ({"secret": "x"}, "secret"),
    ):
        assert_error(api.post(path(endpoint), body, format="json"), 400, "invalid_request_error", mentions)


def test_delete(api, endpoint):
    delivery = make_delivery(WebhookEndpoint.objects.get(pk=endpoint["id"]), "succeeded")
    assert api.delete(path(endpoint)).json() == {"id": endpoint["id"], "type": "webhook_endpoint_deleted"}
    assert_not_found(api, path(endpoint))
    assert not WebhookDelivery.objects.filter(pk=delivery.pk).exists()


def test_another_workspace_sees_none_of_it(api, endpoint, other_tenant):
    delivery = make_delivery(WebhookEndpoint.objects.get(pk=endpoint["id"]), "failed")
    other = other_tenant.client
    assert other.get("/v1/webhooks").json()["data"] == []
    assert_not_found(other, path(endpoint), path(endpoint, "/deliveries"), path(endpoint, f"/deliveries/{delivery.pk}"))
    for response in (
        other.post(path(endpoint), {"name": "mine now"}, format="json"),
        other.post(path(endpoint, "/regenerate_signing_secret")),
        other.post(path(endpoint, f"/deliveries/{delivery.pk}/redeliver")),
        other.delete(path(endpoint)),
    ):
        assert_error(response, 404, "not_found_error")
    assert api.get(path(endpoint)).json()["name"] == "ci"
    assert WebhookDelivery.objects.get(pk=delivery.pk).status == "failed"


def test_ids_of_another_kind_are_404(api, endpoint):
    assert_not_found(api, "/v1/webhooks/agent_x", "/v1/webhooks/whep_missing", path(endpoint, "/deliveries/whdl_nope"))
    assert_not_found(api, path(endpoint, "/deliveries/whep_x"))


# -- refusals ------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("events", "code", "mentions"),
    [
        (["agent.created", "external_key.failed"], NOT_ALLOWED, "enabled_events[1]: 'external_key.failed'"),
        (["user_profile.program_status_updated"], NOT_ALLOWED, "organization-level"),
        (["agent.exploded"], "webhook_event_type_unknown", "enabled_events[0]: 'agent.exploded'"),
    ],
)
def test_event_types_outside_the_workspace_catalog_are_refused(api, endpoint, events, code, mentions):
    assert_refused(create(api, enabled_events=events), 400, "invalid_request_error", code, mentions)
    assert_refused(api.post(path(endpoint), {"enabled_events": events}, format="json"), 400, BAD, code)
    assert WebhookEndpoint.objects.count() == 1
    assert api.get(path(endpoint)).json()["enabled_events"] == ["agent.created"]


def test_a_create_needs_a_url_and_an_event(api):
    assert_error(create(api, enabled_events=[]), 400, "invalid_request_error", "enabled_events")
    assert_error(api.post("/v1/webhooks", {"enabled_events": ["agent.created"]}, format="json"), 400, BAD, "url")
    assert_error(api.post("/v1/webhooks", {"url": PUBLIC_URL}, format="json"), 400, BAD, "enabled_events")
    assert WebhookEndpoint.objects.count() == 0


@pytest.mark.parametrize(
    ("url", "code"),
    [
        ("https://127.0.0.1/hook", "webhook_url_not_allowed"),
        ("https://localhost:8443/hook", "webhook_url_not_allowed"),
        ("https://10.1.2.3/hook", "webhook_url_not_allowed"),
        ("https://169.254.169.254/latest/meta-data", "webhook_url_not_allowed"),
        ("https://[::1]/hook", "webhook_url_not_allowed"),
        ("https://no-such-host.invalid/hook", "webhook_url_not_allowed"),
        ("ftp://93.184.215.14/hook", "webhook_url_invalid"),
        ("/hook", "webhook_url_invalid"),
        ("https://user:pw@93.184.215.14/hook", "webhook_url_invalid"),
        ("https://93.184.215.14/" + "a" * 2048, "webhook_url_invalid"),
        ("https://93.184.215.14/a b", "webhook_url_invalid"),
        ("https://93.184.215.14:99999/", "webhook_url_invalid"),
        ("http://93.184.215.14/hook", "webhook_url_https_required"),
    ],
)
def test_urls_the_registry_will_not_call_are_refused_at_create_and_update(api, endpoint, url, code):
    assert_refused(create(api, url=url), 400, "invalid_request_error", code, "url")
    assert_refused(api.post(path(endpoint), {"url": url, "name": "x"}, format="json"), 400, BAD, code)
    assert WebhookEndpoint.objects.count() == 1
    assert api.get(path(endpoint)).json()["url"] == PUBLIC_URL and api.get(path(endpoint)).json()["name"] == "ci"


def test_a_refusal_does_not_say_what_the_address_is(api):
    message = assert_error(create(api, url="https://localhost/hook"), 400, "invalid_request_error")["error"]["message"]
    assert "127.0.0.1" not in message and "loopback" not in message


def test_http_and_private_hosts_only_where_the_operator_allows_them(api, settings):
    settings.REGISTRY_EGRESS_ALLOW = "127.0.0.1,localhost"
    for url in ("http://127.0.0.1:8080/hook", "http://localhost:9/hook", "https://127.0.0.1/hook"):
        response = create(api, url=url)
        assert response.status_code == 200, response.content
        assert response.json()["url"] == url
    assert_refused(create(api, url="http://93.184.215.14/hook"), 400, BAD, "webhook_url_https_required")
    assert_refused(create(api, url="http://10.0.0.1/hook"), 400, "invalid_request_error", "webhook_url_not_allowed")
    settings.REGISTRY_EGRESS_ALLOW = "127.0.0.1:8080"  # one port lifted: another is not
    assert create(api, url="http://127.0.0.1:8080/x").status_code == 200
    assert_refused(create(api, url="http://127.0.0.1:8081/x"), 400, "invalid_request_error", "webhook_url_not_allowed")


def test_at_most_32_endpoints_per_workspace(api, other_tenant):
    for index in range(MAX_ENDPOINTS_PER_WORKSPACE):
        assert create(api, name=f"e{index}").status_code == 200
    assert_refused(create(api), 400, "invalid_request_error", "webhook_endpoint_limit_exceeded", "at most 32")
    assert WebhookEndpoint.objects.count() == MAX_ENDPOINTS_PER_WORKSPACE
    assert create(other_tenant.client).status_code == 200  # per workspace
    last = api.get("/v1/webhooks", {"limit": 1}).json()["data"][0]
    api.delete(path(last))
    assert create(api).status_code == 200


# -- lists ---------------------------------------------------------------------------------------------------------
def ids(body: dict[str, Any]) -> list[str]:
    return [item["id"] for item in body["data"]]


def test_lists_page_by_after_id_before_id_and_next_page(api):
    created = [create(api, name=f"e{index}").json()["id"] for index in range(5)]
    newest_first = created[::-1]
    first = api.get("/v1/webhooks", {"limit": 2}).json()
    assert ids(first) == newest_first[:2] and first["has_more"] is True
    assert (first["first_id"], first["last_id"]) == (newest_first[0], newest_first[1])
    second = api.get("/v1/webhooks", {"limit": 2, "after_id": first["last_id"]}).json()
    assert ids(second) == newest_first[2:4] and second["has_more"] is True
    third = api.get("/v1/webhooks", {"limit": 2, "page": second["next_page"]}).json()
    assert ids(third) == newest_first[4:] and third["has_more"] is False and third["next_page"] is None
    ascending = api.get("/v1/webhooks", {"order": "asc", "limit": "0"}).json()
    assert ids(ascending) == created and ascending["has_more"] is False
    before = api.get("/v1/webhooks", {"before_id": newest_first[3], "limit": 2}).json()
    assert ids(before) == newest_first[:2] and before["has_more"] is True and before["next_page"] is None
    assert ids(api.get("/v1/webhooks", {"before_id": newest_first[0]}).json()) == []
    assert api.get("/v1/webhooks", {"limit": 0}).json()["has_more"] is False
    assert len(api.get("/v1/webhooks", {"limit": "00"}).json()["data"]) == 5


@pytest.mark.parametrize(
    ("query", "mentions"),
    [
        ({"limit": "101"}, "limit"),
        ({"limit": "-1"}, "limit"),
        ({"limit": "x"}, "limit"),
        ({"limit": "\u0661"}, "limit"),  # a digit, but not an ASCII one
        ({"order": "sideways"}, "order"),
        ({"after_id": "whep_unknown"}, "after_id"),
        ({"before_id": "whep_unknown"}, "before_id"),
        ({"page": "garbage!"}, "page"),
        ({"after_id": "whep_a", "before_id": "whep_b"}, "after_id"),
    ],
)
def test_bad_list_queries_are_400(api, endpoint, query, mentions):
    assert_error(api.get("/v1/webhooks", query), 400, "invalid_request_error", mentions)


def test_another_workspaces_id_is_no_cursor(api, endpoint, other_tenant):
    assert_error(other_tenant.client.get("/v1/webhooks", {"after_id": endpoint["id"]}), 400, "invalid_request_error")


# -- deliveries ----------------------------------------------------------------------------------------------------
def make_delivery(endpoint: WebhookEndpoint, status: str, attempts: int = 0, **fields: Any) -> WebhookDelivery:
    """An event in the outbox and its delivery to `endpoint`, with `attempts` failed-then-last tries."""
    event = outbox.emit("agent.created", workspace_id=endpoint.workspace_id, object_id=f"agent_{uuid.uuid4().hex}")
    delivery = WebhookDelivery.objects.create(
        endpoint=endpoint, event=event, status=status, attempt_count=attempts, **fields
    )
    started = timezone.now() - timedelta(minutes=attempts)
    for number in range(1, attempts + 1):
        last = number == attempts
        WebhookAttempt.objects.create(
            delivery=delivery,
            number=number,
            manual=False,
            started_at=started + timedelta(minutes=number),
            latency_ms=number * 10,
            response_status=200 if last and status == "succeeded" else 503,
            response_body="ok" if last and status == "succeeded" else "unavailable",
            error="",
            succeeded=last and status == "succeeded",
        )
    return delivery


@pytest.fixture
def deliveries(endpoint: dict[str, Any]) -> list[WebhookDelivery]:
    row = WebhookEndpoint.objects.get(pk=endpoint["id"])
    return [
        make_delivery(row, "succeeded", attempts=2, completed_at=timezone.now()),
        make_delivery(row, "failed", attempts=3, completed_at=timezone.now()),
        make_delivery(row, "pending", next_attempt_at=timezone.now()),
    ]


def test_deliveries_list_newest_first_with_the_last_attempt(api, endpoint, deliveries):
    body = api.get(path(endpoint, "/deliveries")).json()
    assert ids(body) == [delivery.pk for delivery in deliveries[::-1]] and body["has_more"] is False
    pending, failed, succeeded = body["data"]
    assert set(succeeded) == {
        "id",
        "type",
        "event_id",
        "event_type",
        "status",
        "attempt_count",
        "next_attempt_at",
        "created_at",
        "completed_at",
        "last_attempt",
    }
    assert succeeded["type"] == "webhook_delivery" and succeeded["event_type"] == "agent.created"
    assert succeeded["event_id"] == deliveries[0].event.id and succeeded["event_id"].startswith("wevt_")
    assert succeeded["last_attempt"] == {"response_status": 200, "latency_ms": 20, "error": ""}
    assert failed["last_attempt"] == {"response_status": 503, "latency_ms": 30, "error": ""}
    assert failed["attempt_count"] == 3 and failed["completed_at"] is not None
    assert pending["last_attempt"] is None and pending["next_attempt_at"] is not None
    only_failed = api.get(path(endpoint, "/deliveries"), {"status": "failed"}).json()
    assert ids(only_failed) == [deliveries[1].pk]
    paged = api.get(path(endpoint, "/deliveries"), {"limit": 1, "order": "asc"}).json()
    assert ids(paged) == [deliveries[0].pk] and paged["has_more"] is True
    assert ids(api.get(path(endpoint, "/deliveries"), {"after_id": paged["last_id"], "order": "asc"}).json()) == [
        deliveries[1].pk,
        deliveries[2].pk,
    ]
    assert_error(api.get(path(endpoint, "/deliveries"), {"status": "lost"}), 400, "invalid_request_error", "status")


def test_a_delivery_in_detail_lists_its_attempts(api, endpoint, deliveries):
    failed = deliveries[1]
    body = api.get(path(endpoint, f"/deliveries/{failed.pk}")).json()
    assert body["id"] == failed.pk and body["status"] == "failed"
    assert [attempt["number"] for attempt in body["attempts"]] == [1, 2, 3]
    assert set(body["attempts"][0]) == {
        "id",
        "number",
        "manual",
        "started_at",
        "latency_ms",
        "response_status",
        "response_body",
        "error",
        "succeeded",
    }
    assert body["attempts"][2]["response_body"] == "unavailable" and body["attempts"][2]["succeeded"] is False
    other = WebhookEndpoint.objects.get(pk=create(api).json()["id"])
    assert_not_found(api, f"/v1/webhooks/{other.pk}/deliveries/{failed.pk}")  # a delivery of another endpoint


def test_redelivery_puts_a_delivery_back_in_the_queue(api, endpoint, deliveries):
    failed = deliveries[1]
    WebhookDelivery.objects.filter(pk=failed.pk).update(
        lease_until=timezone.now() + timedelta(minutes=1), leased_by="worker-1"
    )
    before = timezone.now()
    body = api.post(path(endpoint, f"/deliveries/{failed.pk}/redeliver")).json()
    assert body["status"] == "pending" and body["completed_at"] is None and len(body["attempts"]) == 3
    stored = WebhookDelivery.objects.get(pk=failed.pk)
    assert stored.status == "pending" and stored.completed_at is None
    assert stored.next_attempt_at is not None and stored.next_attempt_at >= before
    assert (stored.lease_until, stored.leased_by, stored.redelivery_requested) == (None, "", True)
    assert api.post(path(endpoint, f"/deliveries/{deliveries[0].pk}/redeliver")).json()["status"] == "pending"


def test_no_redelivery_to_a_disabled_endpoint(api, endpoint, deliveries):
    api.post(path(endpoint), {"state": "disabled"}, format="json")
    response = api.post(path(endpoint, f"/deliveries/{deliveries[1].pk}/redeliver"))
    assert_refused(response, 409, "conflict_error", "webhook_endpoint_disabled", "disabled")
    assert WebhookDelivery.objects.get(pk=deliveries[1].pk).status == "failed"


# -- the reference client ------------------------------------------------------------------------------------------
def reference_client(url: str, tenant: Tenant) -> anthropic.Anthropic:
    """The reference client with its organization webhooks resource sent to our workspace path /v1/webhooks."""

    def to_workspace_path(request: httpx2.Request) -> None:
        request.url = request.url.copy_with(
            path=request.url.path.replace("/v1/organizations/webhooks", "/v1/webhooks", 1)
        )

    return anthropic.Anthropic(
        base_url=url,
        api_key=None,
        auth_token=None,
        default_headers={"x-api-key": tenant.api_key},
        http_client=httpx2.Client(event_hooks={"request": [to_workspace_path]}),
        max_retries=0,
    )


def test_the_reference_client_drives_the_whole_resource(live_server):
    with reference_client(live_server.url, make_tenant("sdk")) as client:
        drive(client.beta.organization.webhooks)


def drive(webhooks: Webhooks) -> None:
    """Every method of the reference client's resource, each answer parsed into its type."""
    created = webhooks.create(url=PUBLIC_URL, enabled_events=["session.created"], name="sdk")  # type: ignore[list-item]
    assert isinstance(created, BetaNewOrganizationWebhookEndpoint)
    assert set(created.to_dict()) == set(BetaNewOrganizationWebhookEndpoint.model_fields)
    assert created.signing_secret.startswith("whsec_") and created.description == "" and created.state == "enabled"
    Webhook(created.signing_secret)

    read = webhooks.retrieve(created.id)
    assert isinstance(read, BetaOrganizationWebhookEndpoint)
    assert set(read.to_dict()) == set(BetaOrganizationWebhookEndpoint.model_fields)
    assert read.created_at == created.created_at and read.enabled_events == ["session.created"]

    updated = webhooks.update(created.id, state="disabled", description="paused for the release")
    assert isinstance(updated, BetaOrganizationWebhookEndpoint)
    assert updated.state == "disabled" and updated.description == "paused for the release"

    more = [webhooks.create(url=PUBLIC_URL, enabled_events=["agent.created"]).id for _ in range(4)]  # type: ignore[list-item]
    walked = [item.id for item in webhooks.list(limit=2)]  # SyncPage follows `after_id` across three pages
    assert walked == [*more[::-1], created.id]
    first_page = webhooks.list(limit=2, order="asc")
    assert [item.id for item in first_page.data] == [created.id, more[0]] and first_page.has_more is True

    regenerated = webhooks.regenerate_signing_secret(created.id)
    assert isinstance(regenerated, BetaOrganizationWebhookEndpointSigningSecret)
    assert regenerated.signing_secret != created.signing_secret

    with pytest.raises(anthropic.BadRequestError) as refused:
        webhooks.create(url=PUBLIC_URL, enabled_events=["external_key.failed"])
    assert refused.value.error_code == "webhook_event_type_not_allowed"

    deleted = webhooks.delete(created.id)
    assert isinstance(deleted, BetaDeletedOrganizationWebhookEndpoint)
    assert (deleted.id, deleted.type) == (created.id, "webhook_endpoint_deleted")
    with pytest.raises(anthropic.NotFoundError):
        webhooks.retrieve(created.id)


# -- the response objects ------------------------------------------------------------------------------------------
def test_each_object_renders_exactly_its_declared_fields(api, endpoint, deliveries):
    from registry.webhooks import selectors

    row = WebhookEndpoint.objects.get(pk=endpoint["id"])
    cases: list[tuple[Any, Any, dict[str, Any]]] = [
        (WebhookEndpointSerializer, row, {}),
        (NewWebhookEndpointSerializer, row, {"signing_secret": "whsec_x"}),
        (WebhookDeliverySerializer, selectors.endpoint_deliveries(endpoint=row).first(), {}),
        (WebhookDeliveryDetailSerializer, selectors.endpoint_delivery(endpoint=row, delivery_id=deliveries[1].pk), {}),
    ]
    for serializer, instance, options in cases:
        rendered = serializer.render(instance, **options)
        assert sorted(rendered) == sorted(serializer().fields), serializer
        assert serializer(instance, context=options).data == rendered
