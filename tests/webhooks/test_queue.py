"""The delivery queue's rules, called in-process on the test database: who gets a delivery, what a claim takes,
how attempts move deliveries and endpoints on (retries, failure, backoff, disabling, recovery), and pruning."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest
from django.db import connections
from django.utils import timezone

from registry.webhooks import deliveries
from registry.webhooks.config import PREFETCH_FACTOR, DeliveryConfig, parse_schedule
from registry.webhooks.deliveries import Claim
from registry.webhooks.models import WebhookAttempt, WebhookDelivery, WebhookEndpoint, WebhookEvent
from registry.webhooks.sender import SendResult
from registry.workspaces import services
from tests.webhooks.conftest import emit, make_endpoint

pytestmark = pytest.mark.django_db

SECRET = "whsec_" + "A" * 43 + "="
CONFIG = DeliveryConfig(
    timeout_seconds=10,
    retry_schedule=(30, 120, 600),
    endpoint_backoff_seconds=1,
    endpoint_backoff_max_seconds=300,
    disable_after_seconds=86400,
    lease_seconds=60,
    poll_seconds=0.2,
    endpoint_concurrency=2,
    concurrency=64,
    retention_days=30,
)


@pytest.fixture(autouse=True, params=["postgresql", "portable"])
def queries(request, monkeypatch) -> str:
    """Each rule holds for the PostgreSQL statements and for the ORM queries other databases get (SQLite), run
    here on PostgreSQL by making the connection say it is something else."""
    if request.param == "portable":
        monkeypatch.setattr(connections["default"], "vendor", "portable")
    return str(request.param)


@pytest.fixture
def workspace():
    return services.workspace_create(name="rules")[0]


def endpoint(workspace, *events: str, url: str = "http://127.0.0.1:9/hook") -> WebhookEndpoint:
    return make_endpoint(workspace, url, secret=SECRET, events=events or ("session.created",))


def result(ok: bool, *, at: datetime | None = None, error: str = "HTTP 500") -> SendResult:
    return SendResult(
        started_at=at or timezone.now(),
        latency_ms=5,
        status=200 if ok else 500,
        body="ok" if ok else "no",
        error="" if ok else error,
        outcome="succeeded" if ok else "http_status",
    )


def take(held=None, blocked=(), room=1000, config=CONFIG) -> list[Claim]:
    return deliveries.claim(owner="me", config=config, held=held or {}, blocked=blocked, room=room)


# -- dispatch --------------------------------------------------------------------------------------------------
def test_dispatch_fans_out_to_enabled_subscribed_endpoints_that_existed_before_the_event(workspace):
    other_workspace = services.workspace_create(name="other")[0]
    subscribed = endpoint(workspace, "session.created", "agent.created")
    other_type = endpoint(workspace, "agent.created")
    disabled = endpoint(workspace, "session.created")
    WebhookEndpoint.objects.filter(pk=disabled.pk).update(state="disabled")
    elsewhere = endpoint(other_workspace, "session.created")
    [early] = emit(workspace)
    late = endpoint(workspace, "session.created")  # created after `early`
    [later] = emit(workspace)
    [agent] = emit(workspace, 1, "agent.created")

    assert deliveries.dispatch() == deliveries.Dispatched(events=3, deliveries=5)
    pairs = set(WebhookDelivery.objects.values_list("endpoint_id", "event__id"))
    assert pairs == {
        (subscribed.pk, early),
        (subscribed.pk, later),
        (late.pk, later),
        (subscribed.pk, agent),
        (other_type.pk, agent),
    }
    assert not {disabled.pk, elsewhere.pk} & {endpoint_id for endpoint_id, _ in pairs}
    assert not WebhookEvent.objects.filter(dispatched_at__isnull=True).exists()
    assert deliveries.dispatch() == deliveries.Dispatched(0, 0)
    assert WebhookDelivery.objects.filter(status="pending", next_attempt_at__isnull=False).count() == 5


# -- claims ----------------------------------------------------------------------------------------------------
def test_a_claim_takes_each_endpoints_oldest_first_within_its_room_and_leases_them(workspace):
    first, second = endpoint(workspace), endpoint(workspace)
    ids = emit(workspace, 10)
    deliveries.dispatch()

    claims = take(held={second.pk: 3})
    per_endpoint = CONFIG.endpoint_concurrency * PREFETCH_FACTOR
    mine = [claim.webhook_id for claim in claims if claim.endpoint_id == first.pk]
    assert mine == ids[:per_endpoint]  # oldest first, in event order
    assert [claim.webhook_id for claim in claims if claim.endpoint_id == second.pk] == ids[: per_endpoint - 3]
    assert all(claim.number == 1 and not claim.manual and not claim.failing for claim in claims)
    assert claims[0].secret == SECRET
    assert claims[0].body.startswith(b'{"type":"event","id":"' + claims[0].webhook_id.encode())
    leased = WebhookDelivery.objects.filter(leased_by="me", lease_until__gt=timezone.now())
    assert leased.count() == len(claims)

    again = take()  # the leased ones are not taken twice
    assert not {claim.delivery_id for claim in again} & {claim.delivery_id for claim in claims}
    assert [claim.webhook_id for claim in again if claim.endpoint_id == first.pk] == ids[
        per_endpoint : 2 * per_endpoint
    ]


def test_a_claim_skips_blocked_backing_off_and_disabled_endpoints_and_takes_one_of_a_failing_one(workspace):
    blocked, backing_off, disabled, failing = (endpoint(workspace) for _ in range(4))
    emit(workspace, 3)
    deliveries.dispatch()
    WebhookEndpoint.objects.filter(pk=backing_off.pk).update(
        consecutive_failures=1, retry_after=timezone.now() + timedelta(minutes=1)
    )
    WebhookEndpoint.objects.filter(pk=disabled.pk).update(state="disabled")
    WebhookEndpoint.objects.filter(pk=failing.pk).update(consecutive_failures=4, retry_after=timezone.now())

    claims = take(blocked={blocked.pk})
    assert {claim.endpoint_id for claim in claims} == {failing.pk}
    assert len(claims) == 1 and claims[0].failing
    assert {claim.endpoint_id for claim in take(held={failing.pk: 1})} == {blocked.pk}  # unblocked: its turn


def test_an_expired_lease_is_claimed_again_with_the_same_attempt_number(workspace):
    endpoint(workspace)
    emit(workspace)
    deliveries.dispatch()
    [claim] = take()
    WebhookDelivery.objects.update(lease_until=timezone.now() - timedelta(seconds=1))
    [again] = deliveries.claim(owner="other", config=CONFIG, held={}, blocked=(), room=10)
    assert (again.delivery_id, again.webhook_id, again.number) == (claim.delivery_id, claim.webhook_id, 1)
    assert deliveries.release([claim.delivery_id], owner="me") == 0  # no longer mine
    assert deliveries.release([claim.delivery_id], owner="other") == 1
    assert WebhookDelivery.objects.get().leased_by == ""


# -- settling --------------------------------------------------------------------------------------------------
def test_failures_follow_the_schedule_then_the_delivery_fails(workspace):
    hook = endpoint(workspace)
    emit(workspace)
    deliveries.dispatch()
    for number, step in enumerate([*CONFIG.retry_schedule, None], start=1):
        WebhookEndpoint.objects.update(retry_after=None)
        WebhookDelivery.objects.update(next_attempt_at=timezone.now())
        [claim] = take()
        assert claim.number == number
        before = timezone.now()
        settled = deliveries.settle([(claim, result(False))], owner="me", config=CONFIG)
        delivery = WebhookDelivery.objects.get()
        assert delivery.attempt_count == number and delivery.leased_by == ""
        if step is None:
            assert delivery.status == "failed" and delivery.completed_at is not None
            assert settled.failed_deliveries == 1
        else:
            assert delivery.status == "pending"
            assert delivery.next_attempt_at is not None
            wait = (delivery.next_attempt_at - before).total_seconds()
            assert step / 2 - 1 <= wait <= step + 1
    attempts = list(WebhookAttempt.objects.order_by("number").values_list("number", "error", "response_status"))
    assert attempts == [(n, "HTTP 500", 500) for n in range(1, CONFIG.attempts + 1)]
    hook.refresh_from_db()
    assert hook.consecutive_failures == CONFIG.attempts and hook.retry_after is not None


def test_the_endpoint_backs_off_is_disabled_after_the_horizon_and_its_backlog_is_due_at_once(workspace):
    hook = endpoint(workspace)
    emit(workspace, 3)
    deliveries.dispatch()
    [first, *_] = take(held={})
    long_ago = timezone.now() - timedelta(seconds=CONFIG.disable_after_seconds - 60)
    deliveries.settle([(first, result(False, at=long_ago))], owner="me", config=CONFIG)
    hook.refresh_from_db()
    assert (hook.state, hook.consecutive_failures, hook.failing_since) == ("enabled", 1, long_ago)
    assert hook.retry_after is not None
    assert 0 < (hook.retry_after - timezone.now()).total_seconds() <= 1
    WebhookDelivery.objects.update(lease_until=None, leased_by="")
    WebhookEndpoint.objects.update(
        retry_after=None, failing_since=timezone.now() - timedelta(seconds=CONFIG.disable_after_seconds + 1)
    )
    [probe] = take()
    assert probe.failing and probe.webhook_id != first.webhook_id  # the oldest one due (the first is not)
    settled = deliveries.settle([(probe, result(False, error="timeout"))], owner="me", config=CONFIG)
    hook.refresh_from_db()
    assert settled.disabled == [hook.pk]
    assert hook.state == "disabled" and hook.failing_since is None and hook.retry_after is None
    assert hook.disabled_reason.startswith("Disabled after failing continuously since ")
    assert "2 failed attempts in a row; last error: timeout" in hook.disabled_reason
    assert not WebhookDelivery.objects.filter(next_attempt_at__gt=timezone.now()).exists()  # all due at once
    assert take() == []  # disabled


def test_a_success_after_an_outage_brings_the_backlog_forward_but_not_after_one_failure(workspace):
    hook = endpoint(workspace)
    emit(workspace, 4)
    deliveries.dispatch()
    claims = take()
    failed, blip_success, *rest = claims
    deliveries.settle([(failed, result(False)), (blip_success, result(True))], owner="me", config=CONFIG)
    hook.refresh_from_db()
    assert hook.consecutive_failures == 0 and hook.failing_since is None
    waiting = WebhookDelivery.objects.get(pk=failed.delivery_id)
    assert waiting.next_attempt_at is not None
    assert waiting.next_attempt_at > timezone.now() + timedelta(seconds=10)  # its own schedule stands

    outage_start = timezone.now() - timedelta(minutes=5)
    WebhookEndpoint.objects.update(consecutive_failures=7, failing_since=outage_start)
    settled = deliveries.settle([(rest[0], result(True))], owner="me", config=CONFIG)
    assert settled.recovered == [hook.pk]
    waiting.refresh_from_db()
    assert waiting.next_attempt_at is not None and waiting.next_attempt_at <= timezone.now()
    succeeded = WebhookDelivery.objects.get(pk=rest[0].delivery_id)
    assert (succeeded.status, succeeded.attempt_count, succeeded.lease_until) == ("succeeded", 1, None)


def test_a_settle_leaves_a_delivery_another_sender_took_over(workspace):
    endpoint(workspace)
    emit(workspace)
    deliveries.dispatch()
    [claim] = take()
    WebhookDelivery.objects.update(leased_by="other")
    deliveries.settle([(claim, result(True))], owner="me", config=CONFIG)
    delivery = WebhookDelivery.objects.get()
    assert (delivery.status, delivery.leased_by) == ("pending", "other")
    assert WebhookAttempt.objects.get().succeeded  # the attempt happened all the same


def test_a_manual_redelivery_is_marked_on_its_attempt(workspace):
    endpoint(workspace)
    emit(workspace)
    deliveries.dispatch()
    [claim] = take()
    deliveries.settle([(claim, result(True))], owner="me", config=CONFIG)
    WebhookDelivery.objects.update(
        status="pending", next_attempt_at=timezone.now(), completed_at=None, redelivery_requested=True
    )
    [again] = take()
    assert (again.number, again.manual, again.webhook_id) == (2, True, claim.webhook_id)
    deliveries.settle([(again, result(True))], owner="me", config=CONFIG)
    assert list(WebhookAttempt.objects.order_by("number").values_list("manual", flat=True)) == [False, True]
    assert not WebhookDelivery.objects.get().redelivery_requested


# -- housekeeping ----------------------------------------------------------------------------------------------
def test_prune_removes_old_finished_deliveries_and_events_only(workspace):
    endpoint(workspace)
    old_done, old_pending, recent = emit(workspace, 3)
    deliveries.dispatch()
    claims = {claim.webhook_id: claim for claim in take()}
    deliveries.settle([(claims[old_done], result(True)), (claims[recent], result(True))], owner="me", config=CONFIG)
    long_ago = timezone.now() - timedelta(days=31)
    WebhookEvent.objects.filter(id__in=[old_done, old_pending]).update(created_at=long_ago)
    WebhookDelivery.objects.filter(event__id=old_done).update(completed_at=long_ago)

    assert deliveries.prune(retention_days=30) == deliveries.Pruned(deliveries=1, events=1)
    assert set(WebhookEvent.objects.values_list("id", flat=True)) == {old_pending, recent}
    assert WebhookAttempt.objects.count() == 1


def test_the_schedule_and_backoff_are_jittered_within_their_steps():
    assert parse_schedule("30, 120,600") == (30.0, 120.0, 600.0)
    with pytest.raises(ValueError):
        parse_schedule("30,soon")
    for _ in range(200):
        assert 15 <= (CONFIG.retry_delay(1) or 0) <= 30
        assert 300 <= (CONFIG.retry_delay(3) or 0) <= 600
        assert 0.5 <= CONFIG.endpoint_backoff(1) <= 1
        assert 150 <= CONFIG.endpoint_backoff(40) <= 300
    assert CONFIG.retry_delay(4) is None
    with pytest.raises(ValueError, match="LEASE_SECONDS"):
        DeliveryConfig(**{**CONFIG.__dict__, "lease_seconds": 12}).check()


def test_an_endpoint_whose_secret_cannot_be_unsealed_is_claimed_with_none(workspace):
    hook = endpoint(workspace)
    WebhookEndpoint.objects.filter(pk=hook.pk).update(signing_secret_sealed="k1:bm90IHNlYWxlZA==")
    emit(workspace)
    deliveries.dispatch()
    [claim] = take()
    assert claim.secret == ""  # the sender records "the endpoint's signing secret could not be read"
