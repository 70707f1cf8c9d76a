"""`runwebhooks` end to end: real sender processes on the test database posting to loopback receivers that verify
every request with the reference client. What arrives, and what the sender records and counts."""

from __future__ import annotations

import itertools
import re
import signal

import orjson
import pytest
from django.utils import timezone

from fakes.waiting import wait_until
from registry.webhooks import outbox
from registry.webhooks.models import WebhookAttempt, WebhookDelivery, WebhookEndpoint
from tests.webhooks.conftest import delivery_of, dispatched, emit, status_of

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

TYPES = {
    "session.created": {},
    "session.thread_created": {"session_thread_id": "sthr_000001"},
    "vault_credential.refresh_failed": {"vault_id": "vlt_000001"},
    "deployment_run.succeeded": {},
    "agent.archived": {},
}


def data_class(event_type: str) -> str:
    """The reference client's class for a type's data: `session.thread_created` → `BetaWebhookSessionThread...`."""
    return "BetaWebhook" + "".join(part.capitalize() for part in re.split(r"[._]", event_type)) + "EventData"


def test_every_payload_verifies_with_the_reference_client_and_parses_to_its_typed_event(
    workspace, hook, start_sender, receivers
):
    receiver, endpoint = hook(events=tuple(TYPES))
    sender = start_sender()
    emitted = {
        outbox.emit(event_type, workspace_id=workspace.pk, object_id=f"obj_{index}", **extra).id: (event_type, index)
        for index, (event_type, extra) in enumerate(TYPES.items())
    }
    [unsubscribed] = emit(workspace, 1, "environment.created")

    wait_until(lambda: len(receiver.delivered()) == len(TYPES), what="every subscribed event")
    assert receiver.rejected == []
    assert sorted(receiver.ids()) == sorted(emitted)
    for arrival in receiver.arrivals:
        event_type, index = emitted[arrival.webhook_id]
        event = arrival.event
        assert (event.type, event.id) == ("event", arrival.webhook_id)
        assert type(event.data).__name__ == data_class(event_type)
        assert (event.data.type, event.data.id, event.data.workspace_id) == (event_type, f"obj_{index}", workspace.pk)
        for name, value in TYPES[event_type].items():
            assert getattr(event.data, name) == value
        assert arrival.body == orjson.dumps(orjson.loads(arrival.body))  # compact JSON
        assert arrival.headers["content-type"] == "application/json"
        assert arrival.headers["user-agent"].startswith("agent-registry-webhooks/")
        assert arrival.headers["host"] == f"127.0.0.1:{receiver.port}"
        assert abs(int(arrival.headers["webhook-timestamp"]) - arrival.at) < 5
    assert dispatched(unsubscribed) and not WebhookDelivery.objects.filter(event__id=unsubscribed).exists()

    attempts = WebhookAttempt.objects.filter(delivery__endpoint=endpoint)
    wait_until(lambda: attempts.count() == len(TYPES), what="the attempts recorded")
    assert all(a.succeeded and a.response_status == 200 and a.response_body == "ok" for a in attempts)
    assert all(a.latency_ms is not None and a.number == 1 and not a.manual for a in attempts)
    assert set(WebhookDelivery.objects.filter(endpoint=endpoint).values_list("status", flat=True)) == {"succeeded"}
    wait_until(lambda: sender.metric("registry_webhook_attempts_total", outcome="succeeded") == len(TYPES))
    assert sender.metric("registry_webhook_delivery_lag_seconds_count") == len(TYPES)
    assert sender.metric("registry_webhook_delivery_lag_seconds_bucket", le="1.0") == len(TYPES)
    assert sender.metric("registry_webhook_events_dispatched_total") == len(TYPES) + 1
    assert sender.metric("registry_webhook_queue_depth", kind="pending_deliveries") == 0
    assert sender.metric("registry_webhook_queue_depth", kind="undispatched_events") == 0
    assert sender.get("/readyz").status_code == 200


def test_a_retry_carries_the_same_webhook_id_and_the_retries_follow_the_schedule(workspace, hook, start_sender):
    receiver, endpoint = hook()
    receiver.answer(500, b"not now")
    schedule = (0.5, 1.0, 1.5)
    sender = start_sender(
        REGISTRY_WEBHOOK_RETRY_SCHEDULE=",".join(map(str, schedule)),
        REGISTRY_WEBHOOK_ENDPOINT_BACKOFF_SECONDS="0.01",
        REGISTRY_WEBHOOK_ENDPOINT_BACKOFF_MAX_SECONDS="0.02",
    )
    [event_id] = emit(workspace)

    delivery = wait_until(
        lambda: WebhookDelivery.objects.filter(event__id=event_id, status="failed").first(), what="the failure"
    )
    assert delivery.attempt_count == len(schedule) + 1 and delivery.completed_at is not None
    assert receiver.ids() == [event_id] * (len(schedule) + 1)  # the same webhook-id each time, all verified
    assert receiver.rejected == []
    times = [arrival.at for arrival in receiver.arrivals]
    for step, (before, after) in zip(schedule, itertools.pairwise(times), strict=True):
        assert step / 2 - 0.1 <= after - before <= step + 0.5, (step, after - before)
    attempts = list(delivery.attempts.order_by("number"))
    assert [a.number for a in attempts] == [1, 2, 3, 4]
    assert {(a.response_status, a.response_body, a.error, a.succeeded) for a in attempts} == {
        (500, "not now", "HTTP 500", False)
    }
    wait_until(lambda: sender.metric("registry_webhook_deliveries_failed_total") == 1, what="the failure's count")
    assert sender.metric("registry_webhook_attempts_total", outcome="http_status") == 4
    endpoint.refresh_from_db()
    assert endpoint.consecutive_failures == 4 and endpoint.state == "enabled"


def test_an_endpoint_failing_past_the_horizon_is_disabled_misses_what_happens_meanwhile_and_resumes_when_enabled(
    workspace, hook, start_sender
):
    receiver, endpoint = hook()
    receiver.answer(503)
    sender = start_sender(REGISTRY_WEBHOOK_DISABLE_AFTER_SECONDS="1.0")
    [before] = emit(workspace)

    wait_until(lambda: WebhookEndpoint.objects.get(pk=endpoint.pk).state == "disabled", what="the endpoint disabled")
    endpoint.refresh_from_db()
    assert re.fullmatch(
        r"Disabled after failing continuously since \S+ \(\d+ failed attempts in a row; last error: HTTP 503\)",
        endpoint.disabled_reason,
    )
    wait_until(lambda: sender.metric("registry_webhook_endpoint_disables_total") == 1, what="the disable counted")
    assert sender.metric("registry_webhook_endpoints_disabled") == 1
    first = delivery_of(endpoint, before)
    assert first.status == "pending" and first.next_attempt_at is not None
    assert first.next_attempt_at <= timezone.now()  # the backlog of a disabled endpoint is due at once
    [meanwhile] = emit(workspace)
    wait_until(lambda: dispatched(meanwhile), what="the event while disabled dispatched")

    receiver.answer(200)
    WebhookEndpoint.objects.filter(pk=endpoint.pk).update(state="enabled")
    wait_until(lambda: status_of(endpoint, before) == "succeeded", what="the delivery after re-enabling")
    assert before in receiver.delivered()
    assert not WebhookDelivery.objects.filter(event__id=meanwhile).exists()
    assert meanwhile not in receiver.ids()
    endpoint.refresh_from_db()
    assert endpoint.consecutive_failures == 0


def test_a_receiver_down_for_a_while_gets_every_event_in_order_once_it_is_back(workspace, hook, start_sender):
    receiver, endpoint = hook()
    receiver.down()
    start_sender(REGISTRY_WEBHOOK_ENDPOINT_CONCURRENCY="1")
    ids = emit(workspace, 12)

    wait_until(lambda: WebhookAttempt.objects.filter(error="connection refused").count() >= 5, what="refused attempts")
    probes = WebhookAttempt.objects.count()
    endpoint.refresh_from_db()
    assert endpoint.consecutive_failures >= 5 and endpoint.failing_since is not None
    receiver.up()

    wait_until(lambda: len(receiver.delivered()) == len(ids), timeout=30, what="every event after the outage")
    assert receiver.delivered() == ids  # none lost, none twice, in creation order
    settled = WebhookDelivery.objects.filter(endpoint=endpoint, status="succeeded")
    wait_until(lambda: settled.count() == len(ids), what="every delivery settled")
    endpoint.refresh_from_db()
    assert (endpoint.consecutive_failures, endpoint.failing_since, endpoint.retry_after) == (0, None, None)
    # While it was down one request at a time probed it, paced by the endpoint's backoff, not one per event.
    assert probes <= endpoint_probes_bound(WebhookAttempt.objects.filter(succeeded=False))


def endpoint_probes_bound(failures) -> int:
    """Probes a down endpoint may see: one per backoff step (0.1-0.4 s) over the outage, plus slack."""
    times = sorted(failures.values_list("started_at", flat=True))
    span = (times[-1] - times[0]).total_seconds()
    return int(span / 0.1) + 2


def test_sigterm_finishes_the_requests_in_flight_and_gives_back_the_rest(workspace, hook, start_sender):
    receiver, endpoint = hook()
    receiver.answer(200, delay=1.0)
    sender = start_sender(REGISTRY_WEBHOOK_ENDPOINT_CONCURRENCY="4")
    ids = emit(workspace, 20)
    wait_until(lambda: len(receiver.arrivals) >= 4, what="requests in flight")

    sender.process.signal(signal.SIGTERM)
    assert sender.process.popen.wait(timeout=15) == 0
    assert sender.log_lines()[-1]["message"].endswith("stopped")
    in_flight = receiver.ids()
    assert len(in_flight) == 4
    settled = WebhookDelivery.objects.filter(endpoint=endpoint, status="succeeded")
    assert sorted(settled.values_list("event__id", flat=True)) == sorted(in_flight)
    assert not WebhookDelivery.objects.filter(endpoint=endpoint).exclude(leased_by="").exists()  # given back

    receiver.answer(200)
    start_sender()
    wait_until(lambda: len(receiver.delivered()) == len(ids), what="the rest, by another sender")
    assert sorted(receiver.ids()) == sorted(ids)  # nothing twice
