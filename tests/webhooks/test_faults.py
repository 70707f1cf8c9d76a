"""Senders under fault: one killed with requests in flight, two sharing the outbox, a receiver that is slow, and
the answers a request can get (a redirect, a timeout, a long body, a dropped connection), plus a manual redelivery."""

from __future__ import annotations

import time
from collections import Counter

import pytest

from fakes.waiting import wait_until
from registry.webhooks.config import PREFETCH_FACTOR
from registry.webhooks.models import WebhookAttempt, WebhookDelivery
from registry.webhooks.sender import RESPONSE_BODY_LIMIT
from registry.webhooks.services import webhook_delivery_redeliver
from tests.webhooks.conftest import delivery_of, emit, status_of

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]


def test_a_sender_killed_mid_batch_loses_nothing_and_repeats_only_what_was_in_flight(workspace, hook, start_sender):
    receiver, endpoint = hook()
    receiver.answer(hold=True)
    timing = {"REGISTRY_WEBHOOK_TIMEOUT_SECONDS": "5", "REGISTRY_WEBHOOK_LEASE_SECONDS": "9"}
    first = start_sender(REGISTRY_WEBHOOK_ENDPOINT_CONCURRENCY="4", **timing)
    ids = emit(workspace, 30)
    wait_until(lambda: len(receiver.arrivals) == 4, what="four requests held open")
    claimed = 4 * PREFETCH_FACTOR
    wait_until(lambda: WebhookDelivery.objects.exclude(leased_by="").count() == claimed, what="the lane claimed")

    first.process.kill()  # SIGKILL with 4 requests in flight and more claimed
    in_flight = set(receiver.ids())
    bodies = {arrival.webhook_id: arrival.body for arrival in receiver.arrivals}
    receiver.release()
    start_sender(**timing)

    wait_until(lambda: set(receiver.delivered()) == set(ids), timeout=40, what="every event, by the second sender")
    counts = Counter(receiver.ids())
    assert set(counts) == set(ids)  # nothing lost
    assert {webhook_id for webhook_id, count in counts.items() if count > 1} <= in_flight  # repeats: in flight only
    assert max(counts.values()) <= 2
    for arrival in receiver.arrivals:  # a repeat is the same message: same webhook-id, same body, still verified
        assert arrival.body == bodies.get(arrival.webhook_id, arrival.body)
    assert receiver.rejected == []
    settled = WebhookDelivery.objects.filter(endpoint=endpoint, status="succeeded")
    wait_until(lambda: settled.count() == len(ids), what="every delivery settled")


def test_two_senders_share_the_outbox_and_send_no_event_twice_to_an_endpoint(workspace, hook, start_sender):
    hooks = [hook() for _ in range(4)]
    # A generous timeout: a request answered late on a busy machine would be retried, and arrive twice by right.
    timing = {"REGISTRY_WEBHOOK_TIMEOUT_SECONDS": "20", "REGISTRY_WEBHOOK_LEASE_SECONDS": "30"}
    senders = [start_sender(REGISTRY_WEBHOOK_ENDPOINT_CONCURRENCY="4", **timing) for _ in range(2)]
    ids = emit(workspace, 300)

    def arrived() -> bool:
        return all(len(receiver.ids()) >= len(ids) for receiver, _ in hooks)

    wait_until(arrived, timeout=90, what="300 events at each receiver")
    time.sleep(0.5)  # anything sent twice would have arrived by now
    for receiver, endpoint in hooks:
        assert sorted(receiver.ids()) == sorted(ids), endpoint.pk  # each exactly once
        assert receiver.rejected == []
    counts = [sender.metric("registry_webhook_attempts_total", outcome="succeeded") or 0 for sender in senders]
    assert sum(counts) == 4 * len(ids)
    assert all(count > 0 for count in counts)  # both took part


def test_a_slow_receiver_does_not_delay_another_endpoint(workspace, hook, start_sender):
    slow, _ = hook()
    fast, _ = hook()
    slow.answer(200, delay=4.0)
    start_sender(REGISTRY_WEBHOOK_TIMEOUT_SECONDS="6", REGISTRY_WEBHOOK_LEASE_SECONDS="12")
    emit(workspace, 3)  # warm both connection pools
    wait_until(lambda: len(fast.delivered()) == 3 and len(slow.arrivals) >= 3, what="the first events")

    started = time.time()
    ids = emit(workspace, 20)
    wait_until(lambda: len(fast.delivered()) == 23, timeout=10, what="the fast endpoint's events")
    assert time.time() - started < 2.0  # while the slow one holds its 8 requests for 4 s each
    assert set(ids) <= set(fast.delivered())
    assert len(slow.delivered()) <= 3


def test_a_redirect_is_not_followed(workspace, hook, receivers, start_sender):
    elsewhere, _ = hook(events=("agent.created",))
    receiver, endpoint = hook()
    receiver.answer(302, b"", headers=(("location", elsewhere.url),))
    start_sender()
    [event_id] = emit(workspace)

    attempt = wait_until(lambda: WebhookAttempt.objects.filter(delivery__endpoint=endpoint).first())
    assert (attempt.response_status, attempt.error, attempt.succeeded) == (302, "redirect not followed", False)
    assert elsewhere.arrivals == [] and receiver.ids()[:1] == [event_id]


def test_a_timeout_is_recorded_as_one(workspace, hook, start_sender):
    receiver, endpoint = hook()
    receiver.answer(200, delay=3.0)
    start_sender(REGISTRY_WEBHOOK_TIMEOUT_SECONDS="1", REGISTRY_WEBHOOK_LEASE_SECONDS="6")
    emit(workspace)

    attempt = wait_until(lambda: WebhookAttempt.objects.filter(delivery__endpoint=endpoint).first(), what="a try")
    assert (attempt.error, attempt.response_status, attempt.succeeded) == ("timeout", None, False)
    assert 950 <= attempt.latency_ms <= 2500


def test_a_long_response_body_is_kept_truncated(workspace, hook, start_sender):
    receiver, endpoint = hook()
    receiver.answer(200, "é".encode() * 6000)
    start_sender()
    emit(workspace)

    attempt = wait_until(lambda: WebhookAttempt.objects.filter(delivery__endpoint=endpoint).first(), what="a try")
    assert attempt.succeeded and attempt.response_status == 200
    assert len(attempt.response_body.encode()) <= RESPONSE_BODY_LIMIT + 3
    assert attempt.response_body.startswith("é" * 1000)


def test_a_dropped_connection_is_a_failure(workspace, hook, start_sender):
    receiver, endpoint = hook()
    receiver.answer(close=True)
    start_sender()
    emit(workspace)

    attempt = wait_until(lambda: WebhookAttempt.objects.filter(delivery__endpoint=endpoint).first(), what="a try")
    assert attempt.error.startswith("connection closed") and not attempt.succeeded


def test_a_manual_redelivery_of_a_succeeded_delivery_sends_the_same_message_again(workspace, hook, start_sender):
    receiver, endpoint = hook()
    start_sender()
    [event_id] = emit(workspace)
    wait_until(lambda: status_of(endpoint, event_id) == "succeeded", what="the first delivery")

    webhook_delivery_redeliver(delivery=delivery_of(endpoint, event_id))  # what POST .../redeliver does
    wait_until(lambda: status_of(endpoint, event_id) == "succeeded", what="the redelivery")
    assert receiver.ids() == [event_id, event_id]
    assert receiver.arrivals[0].body == receiver.arrivals[1].body
    delivery = delivery_of(endpoint, event_id)
    assert delivery.attempt_count == 2 and not delivery.redelivery_requested
    assert list(delivery.attempts.order_by("number").values_list("number", "manual")) == [(1, False), (2, True)]
