"""The delivery queue in the database: fan events out into deliveries, claim due deliveries under a lease, settle
attempts (retry schedule, endpoint backoff, disabling), let claims go, prune old rows.

Every function is one short transaction, safe to run from several senders at once: claims take rows with
`SELECT ... FOR UPDATE SKIP LOCKED` and then lease them (`lease_until`, `leased_by`); a settle or a release
touches only deliveries still leased to the caller, so a sender that lost its lease (it was killed, or too slow)
never overwrites the sender that took over.
"""

from __future__ import annotations

import logging
import random
from collections import defaultdict
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from functools import lru_cache
from typing import Any

import orjson
from django.db import connection, transaction
from django.db.backends.utils import CursorWrapper
from django.db.models import Exists, F, OuterRef, Q, QuerySet
from django.utils import timezone

from registry.core.ids import new_id
from registry.core.secrets import unseal
from registry.webhooks.config import DISPATCH_BATCH, ENDPOINTS_PER_PASS, PREFETCH_FACTOR, DeliveryConfig
from registry.webhooks.models import WebhookAttempt, WebhookDelivery, WebhookEndpoint, WebhookEvent
from registry.webhooks.outbox import payload
from registry.webhooks.sender import SendResult
from registry.webhooks.signing import seal_context

logger = logging.getLogger(__name__)

PENDING = WebhookDelivery.Status.PENDING
ENABLED = WebhookEndpoint.State.ENABLED
DISABLED = WebhookEndpoint.State.DISABLED
REASON_LIMIT = 512
DELIVERY_ID_PREFIX = "whdl"
ATTEMPT_ID_PREFIX = "what"


# -- dispatch --------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Dispatched:
    events: int
    deliveries: int


def dispatch(*, limit: int = DISPATCH_BATCH) -> Dispatched:
    """Fan the oldest undispatched events out: one delivery per endpoint of the event's workspace that is enabled,
    subscribes to the event's type and existed when the event happened; then mark the events dispatched.

    An endpoint disabled at this moment gets nothing, so what happens while it is disabled is never delivered.
    """
    with transaction.atomic():
        with connection.cursor() as cursor:
            relax(cursor)
        events = list(
            WebhookEvent.objects.select_for_update(skip_locked=True)
            .filter(dispatched_at__isnull=True)
            .order_by("seq")
            .values_list("seq", "workspace_id", "type", "created_at")[:limit]
        )
        if not events:
            return Dispatched(0, 0)
        subscribers: dict[str, list[tuple[str, frozenset[str], datetime]]] = defaultdict(list)
        endpoints = WebhookEndpoint.objects.filter(
            workspace_id__in={workspace_id for _, workspace_id, _, _ in events}, state=ENABLED
        ).values_list("pk", "workspace_id", "enabled_events", "created_at")
        for endpoint_id, workspace_id, enabled_events, created_at in endpoints:
            subscribers[workspace_id].append((endpoint_id, frozenset(enabled_events or ()), created_at))
        pairs = [
            (endpoint_id, seq)
            for seq, workspace_id, event_type, event_created_at in events
            for endpoint_id, types, created_at in subscribers.get(workspace_id, ())
            if event_type in types and created_at <= event_created_at
        ]
        now = timezone.now()
        insert_deliveries(pairs, now)
        WebhookEvent.objects.filter(seq__in=[seq for seq, _, _, _ in events]).update(dispatched_at=now)
    return Dispatched(len(events), len(pairs))


INSERT_DELIVERIES = f"""
INSERT INTO {WebhookDelivery._meta.db_table}
    (id, endpoint_id, event_id, status, attempt_count, next_attempt_at, created_at, leased_by, redelivery_requested)
SELECT id, endpoint_id, event_id, 'pending', 0, %(now)s, %(now)s, '', false
FROM unnest(%(ids)s::text[], %(endpoints)s::text[], %(events)s::bigint[]) AS new(id, endpoint_id, event_id)
ON CONFLICT (endpoint_id, event_id) DO NOTHING
"""


def insert_deliveries(pairs: list[tuple[str, int]], now: datetime) -> None:
    """New pending deliveries, due now, for (endpoint, event seq) pairs; a pair that exists is left alone. On
    PostgreSQL one statement over arrays (a fan-out is thousands of rows: model instances cost more than the
    insert); elsewhere `bulk_create`."""
    if not pairs:
        return
    if connection.vendor != "postgresql":
        WebhookDelivery.objects.bulk_create(
            [
                WebhookDelivery(endpoint_id=endpoint_id, event_id=seq, next_attempt_at=now, created_at=now)
                for endpoint_id, seq in pairs
            ],
            batch_size=1000,
            ignore_conflicts=True,
        )
        return
    parameters: dict[str, Any] = {
        "now": now,
        "ids": [new_id(DELIVERY_ID_PREFIX) for _ in pairs],
        "endpoints": [endpoint_id for endpoint_id, _ in pairs],
        "events": [seq for _, seq in pairs],
    }
    with connection.cursor() as cursor:
        cursor.execute(INSERT_DELIVERIES, parameters)


# -- claims ----------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Claim:
    """One delivery leased to this sender until `lease_until`, with all it takes to send it: `number` is the
    attempt's, `manual` whether a manual redelivery asked for it, `failing` whether its endpoint was failing."""

    delivery_id: str
    endpoint_id: str
    url: str
    secret: str
    webhook_id: str
    event_seq: int
    event_created_at: datetime
    body: bytes
    number: int
    manual: bool
    failing: bool
    lease_until: datetime


def due(now: datetime) -> QuerySet[WebhookDelivery]:
    """Pending deliveries whose next attempt is due and that no sender holds."""
    return WebhookDelivery.objects.filter(status=PENDING, next_attempt_at__lte=now).filter(
        Q(lease_until__isnull=True) | Q(lease_until__lt=now)
    )


def claim(
    *, owner: str, config: DeliveryConfig, held: Mapping[str, int], blocked: Collection[str], room: int
) -> list[Claim]:
    """Lease due deliveries to `owner`, each endpoint's oldest first: up to `PREFETCH_FACTOR` times the endpoint
    concurrency per endpoint (one while it is failing) less what `held` says this sender holds for it, at most
    `room` in all. Endpoints that are disabled, in their backoff (`retry_after`) or `blocked` get nothing.

    On PostgreSQL one statement does it all (`CLAIM_STATEMENT`); elsewhere a query per endpoint (`claim_portable`).
    """
    if connection.vendor != "postgresql":
        return claim_portable(owner=owner, config=config, held=held, blocked=blocked, room=room)
    now = timezone.now()
    lease_until = now + timedelta(seconds=config.lease_seconds)
    parameters: dict[str, Any] = {
        "now": now,
        "lease_until": lease_until,
        "owner": owner,
        "hold": config.endpoint_concurrency * PREFETCH_FACTOR,
        "held_ids": list(held),
        "held_counts": list(held.values()),
        "blocked": list(blocked),
        "endpoints": ENDPOINTS_PER_PASS,
        "room": room,
    }
    with transaction.atomic(), connection.cursor() as cursor:
        relax(cursor)
        cursor.execute(CLAIM_STATEMENT, parameters)
        rows = cursor.fetchall()
    claims = [claimed(row, lease_until) for row in rows]
    return sorted(claims, key=lambda claim: (claim.endpoint_id, claim.event_seq))


def claimed(row: tuple[Any, ...], lease_until: datetime) -> Claim:
    """A row `CLAIM_STATEMENT` returned, as a claim."""
    delivery_id, endpoint_id, attempt_count, manual, url, sealed, failures, event_id, seq, created_at, data = row
    event = WebhookEvent(seq=seq, id=event_id, created_at=created_at, data=loaded(data))
    return Claim(
        delivery_id=delivery_id,
        endpoint_id=endpoint_id,
        url=url,
        secret=signing_secret(endpoint_id, sealed),
        webhook_id=event_id,
        event_seq=seq,
        event_created_at=created_at,
        body=orjson.dumps(payload(event)),
        number=attempt_count + 1,
        manual=manual,
        failing=failures > 0,
        lease_until=lease_until,
    )


DELIVERIES = WebhookDelivery._meta.db_table
ENDPOINTS = WebhookEndpoint._meta.db_table
EVENTS = WebhookEvent._meta.db_table
DUE = """d.status = 'pending' AND d.next_attempt_at <= %(now)s AND (d.lease_until IS NULL OR d.lease_until < %(now)s)"""
# The endpoints that may be sent to and have something due (at most `endpoints`, in random order), how many each
# may take, and each one's oldest due deliveries (its pending index, skipping rows another sender is claiming),
# leased in the same statement, which returns what sending them takes.
CLAIM_STATEMENT = f"""
WITH held(endpoint_id, count) AS (
    SELECT * FROM unnest(%(held_ids)s::text[], %(held_counts)s::int[])
), wanted AS (
    SELECT e.id, CASE WHEN e.consecutive_failures > 0 THEN 1 ELSE %(hold)s END - COALESCE(h.count, 0) AS n
    FROM {ENDPOINTS} e LEFT JOIN held h ON h.endpoint_id = e.id
    WHERE e.state = 'enabled' AND (e.retry_after IS NULL OR e.retry_after <= %(now)s)
      AND e.id <> ALL(%(blocked)s::text[])
      AND EXISTS (SELECT 1 FROM {DELIVERIES} d WHERE d.endpoint_id = e.id AND {DUE})
    ORDER BY random()
    LIMIT %(endpoints)s
), chosen AS (
    SELECT taken.id FROM wanted w CROSS JOIN LATERAL (
        SELECT d.id FROM {DELIVERIES} d
        WHERE d.endpoint_id = w.id AND {DUE}
        ORDER BY d.event_id
        LIMIT GREATEST(w.n, 0)
        FOR UPDATE OF d SKIP LOCKED
    ) taken
    LIMIT %(room)s
)
UPDATE {DELIVERIES} d SET lease_until = %(lease_until)s, leased_by = %(owner)s
FROM chosen c, {EVENTS} ev, {ENDPOINTS} e
WHERE d.id = c.id AND ev.seq = d.event_id AND e.id = d.endpoint_id
RETURNING d.id, d.endpoint_id, d.attempt_count, d.redelivery_requested, e.url, e.signing_secret_sealed,
    e.consecutive_failures, ev.id, ev.seq, ev.created_at, ev.data
"""


def loaded(data: object) -> object:
    """A jsonb value as the cursor gave it (Django's connections hand jsonb over as text)."""
    return orjson.loads(data) if isinstance(data, str | bytes) else data


def relax(cursor: CursorWrapper) -> None:
    """This transaction's commit does not wait for the WAL flush (PostgreSQL). Safe here: a commit lost in a
    database crash only undoes a lease, a fan-out or a record of an attempt, and each is redone (a delivery is
    sent again at worst: at least once, same `webhook-id`), so the queue's hot path skips an fsync per batch."""
    if connection.vendor == "postgresql":
        cursor.execute("SET LOCAL synchronous_commit TO OFF")


def claim_portable(
    *, owner: str, config: DeliveryConfig, held: Mapping[str, int], blocked: Collection[str], room: int
) -> list[Claim]:
    """`claim` with the ORM, a query per endpoint (SQLite, where a single sender runs)."""
    now = timezone.now()
    candidates = list(
        WebhookEndpoint.objects.filter(state=ENABLED)
        .filter(Q(retry_after__isnull=True) | Q(retry_after__lte=now))
        .exclude(pk__in=list(blocked))
        .filter(Exists(due(now).filter(endpoint=OuterRef("pk"))))
        .values_list("pk", "url", "signing_secret_sealed", "consecutive_failures")
    )
    random.shuffle(candidates)  # no endpoint always waits behind the same others when `room` runs out
    lease_until = now + timedelta(seconds=config.lease_seconds)
    endpoints: dict[str, tuple[str, str, bool]] = {}
    with transaction.atomic():
        chosen: list[str] = []
        for endpoint_id, url, sealed, failures in candidates[:ENDPOINTS_PER_PASS]:
            hold = 1 if failures else config.endpoint_concurrency * PREFETCH_FACTOR
            wanted = min(hold - held.get(endpoint_id, 0), room - len(chosen))
            if wanted <= 0:
                continue
            found = list(
                due(now)
                .filter(endpoint_id=endpoint_id)
                .order_by("event_id")
                .select_for_update(skip_locked=True, of=("self",))
                .values_list("pk", flat=True)[:wanted]
            )
            if found:
                chosen.extend(found)
                endpoints[endpoint_id] = (url, sealed, failures > 0)
        if not chosen:
            return []
        WebhookDelivery.objects.filter(pk__in=chosen).update(lease_until=lease_until, leased_by=owner)
        rows = list(
            WebhookDelivery.objects.filter(pk__in=chosen)
            .select_related("event")
            .only("pk", "endpoint_id", "attempt_count", "redelivery_requested", "event")
        )
    claims = []
    for row in sorted(rows, key=lambda row: (row.endpoint_id, row.event_id)):
        url, sealed, failing = endpoints[row.endpoint_id]
        event = row.event
        claims.append(
            Claim(
                delivery_id=row.pk,
                endpoint_id=row.endpoint_id,
                url=url,
                secret=signing_secret(row.endpoint_id, sealed),
                webhook_id=event.id,
                event_seq=event.seq,
                event_created_at=event.created_at,
                body=orjson.dumps(payload(event)),
                number=row.attempt_count + 1,
                manual=row.redelivery_requested,
                failing=failing,
                lease_until=lease_until,
            )
        )
    return claims


@lru_cache(maxsize=4096)
def signing_secret(endpoint_id: str, sealed: str) -> str:
    """The endpoint's `whsec_` secret (remembered per sealed value, so a regenerated secret is used at once);
    empty when it cannot be unsealed (its key left the key ring), which the sender records as the failure."""
    try:
        return unseal(sealed, context=seal_context(endpoint_id))
    except Exception:  # InvalidTag, a missing key, a damaged value: that endpoint fails, the others go on
        logger.exception("webhook endpoint %s: its signing secret could not be unsealed", endpoint_id)
        return ""


def release(delivery_ids: Collection[str], *, owner: str) -> int:
    """Let claims go unsent: due again at once for any sender."""
    if not delivery_ids:
        return 0
    return WebhookDelivery.objects.filter(pk__in=list(delivery_ids), leased_by=owner, status=PENDING).update(
        lease_until=None, leased_by=""
    )


# -- settling attempts -----------------------------------------------------------------------------------------
@dataclass
class Settled:
    """What a batch of attempts changed: deliveries whose retries ran out, endpoints disabled or recovered."""

    failed_deliveries: int = 0
    disabled: list[str] = field(default_factory=list)
    recovered: list[str] = field(default_factory=list)


def settle(attempts: Sequence[tuple[Claim, SendResult]], *, owner: str, config: DeliveryConfig) -> Settled:
    """Record the attempts (in the order they ended) and move their deliveries and endpoints on.

    A success completes its delivery and ends its endpoint's failure run; after an outage (a run longer than the
    first retry step) the endpoint's pending deliveries become due at once, so they go out in event order. A
    failure schedules the next try (`config.retry_delay`) or fails the delivery when the schedule is spent,
    counts against the endpoint, sets its backoff (`retry_after`), and disables it once it has failed for
    `disable_after_seconds` with no success (its backlog then due at once, for when it is enabled again).
    """
    settled = Settled()
    now = timezone.now()
    with transaction.atomic():
        with connection.cursor() as cursor:
            relax(cursor)
        insert_attempts(attempts)
        held = WebhookDelivery.objects.filter(leased_by=owner, status=PENDING)
        done = {"lease_until": None, "leased_by": "", "redelivery_requested": False}
        succeeded = [claim.delivery_id for claim, result in attempts if result.succeeded]
        if succeeded:
            held.filter(pk__in=succeeded).update(
                status=WebhookDelivery.Status.SUCCEEDED,
                attempt_count=F("attempt_count") + 1,
                completed_at=now,
                next_attempt_at=None,
                **done,
            )
        for claim, result in attempts:
            if result.succeeded:
                continue
            delay = config.retry_delay(claim.number)
            if delay is None:
                settled.failed_deliveries += held.filter(pk=claim.delivery_id).update(
                    status=WebhookDelivery.Status.FAILED,
                    attempt_count=F("attempt_count") + 1,
                    completed_at=now,
                    next_attempt_at=None,
                    **done,
                )
            else:
                held.filter(pk=claim.delivery_id).update(
                    attempt_count=F("attempt_count") + 1, next_attempt_at=now + timedelta(seconds=delay), **done
                )
        by_endpoint: dict[str, list[tuple[Claim, SendResult]]] = defaultdict(list)
        for claim, result in attempts:
            by_endpoint[claim.endpoint_id].append((claim, result))
        ended = {endpoint_id for endpoint_id, outcomes in by_endpoint.items() if outcomes[-1][1].succeeded}
        # One query locks what changes, in one order across senders: the endpoints whose last attempt failed, and
        # those a success took out of a failure run (usually none: a healthy endpoint's row is not even locked).
        rows = (
            WebhookEndpoint.objects.select_for_update()
            .filter(Q(pk__in=sorted(ended), consecutive_failures__gt=0) | Q(pk__in=sorted(set(by_endpoint) - ended)))
            .order_by("pk")
            .values("pk", "state", "consecutive_failures", "failing_since")
        )
        for row in rows:
            if row["pk"] in ended:
                _end_run(row["pk"], row["failing_since"], now=now, config=config, settled=settled)
            else:
                _settle_failures(row, by_endpoint[row["pk"]], now=now, config=config, settled=settled)
    return settled


def _end_run(
    endpoint_id: str, since: datetime | None, *, now: datetime, config: DeliveryConfig, settled: Settled
) -> None:
    """A success ended the endpoint's failure run."""
    WebhookEndpoint.objects.filter(pk=endpoint_id).update(consecutive_failures=0, failing_since=None, retry_after=None)
    settled.recovered.append(endpoint_id)
    # After an outage (a run longer than the first retry step) the backlog goes out now, in event order. A
    # shorter run is one delivery failing among successes: its own schedule stands.
    first_step = config.retry_schedule[0] if config.retry_schedule else 0.0
    if since is None or (now - since).total_seconds() > first_step:
        _pull_forward(endpoint_id, now)


def _settle_failures(
    row: Mapping[str, Any],
    attempts: list[tuple[Claim, SendResult]],
    *,
    now: datetime,
    config: DeliveryConfig,
    settled: Settled,
) -> None:
    """The endpoint's (`row`, locked) last attempts in this batch failed: count them, back off, maybe disable it."""
    endpoint_id = row["pk"]
    last_success = max((index for index, (_, result) in enumerate(attempts) if result.succeeded), default=-1)
    failures = [result for _, result in attempts[last_success + 1 :]]
    run_continues = last_success < 0
    count = (row["consecutive_failures"] if run_continues else 0) + len(failures)
    since = (row["failing_since"] if run_continues else None) or failures[0].started_at
    values: dict[str, object] = {
        "consecutive_failures": count,
        "failing_since": since,
        "retry_after": now + timedelta(seconds=config.endpoint_backoff(count)),
    }
    if row["state"] == ENABLED and (now - since).total_seconds() >= config.disable_after_seconds:
        reason = (
            f"Disabled after failing continuously since {since.isoformat(timespec='seconds')} "
            f"({count} failed attempts in a row; last error: {failures[-1].error or 'none'})"
        )
        # The run is over: a re-enabled endpoint starts a new one, with its backlog due at once (in event order).
        values.update(
            state=DISABLED, disabled_reason=reason[:REASON_LIMIT], failing_since=None, retry_after=None, updated_at=now
        )
        _pull_forward(endpoint_id, now)
        settled.disabled.append(endpoint_id)
    WebhookEndpoint.objects.filter(pk=endpoint_id).update(**values)


def _pull_forward(endpoint_id: str, now: datetime) -> None:
    WebhookDelivery.objects.filter(endpoint_id=endpoint_id, status=PENDING, next_attempt_at__gt=now).update(
        next_attempt_at=now
    )


INSERT_ATTEMPTS = f"""
INSERT INTO {WebhookAttempt._meta.db_table}
    (id, delivery_id, number, manual, started_at, latency_ms, response_status, response_body, error, succeeded)
SELECT * FROM unnest(
    %(ids)s::text[], %(deliveries)s::text[], %(numbers)s::int[], %(manual)s::bool[], %(started)s::timestamptz[],
    %(latencies)s::int[], %(statuses)s::int[], %(bodies)s::text[], %(errors)s::text[], %(succeeded)s::bool[]
)
"""


def insert_attempts(attempts: Sequence[tuple[Claim, SendResult]]) -> None:
    """One row per attempt: on PostgreSQL one statement over arrays, elsewhere `bulk_create`."""
    if connection.vendor != "postgresql":
        WebhookAttempt.objects.bulk_create(
            [
                WebhookAttempt(
                    delivery_id=claim.delivery_id,
                    number=claim.number,
                    manual=claim.manual,
                    started_at=result.started_at,
                    latency_ms=result.latency_ms,
                    response_status=result.status,
                    response_body=result.body,
                    error=result.error,
                    succeeded=result.succeeded,
                )
                for claim, result in attempts
            ]
        )
        return
    parameters: dict[str, Any] = {
        "ids": [new_id(ATTEMPT_ID_PREFIX) for _ in attempts],
        "deliveries": [claim.delivery_id for claim, _ in attempts],
        "numbers": [claim.number for claim, _ in attempts],
        "manual": [claim.manual for claim, _ in attempts],
        "started": [result.started_at for _, result in attempts],
        "latencies": [result.latency_ms for _, result in attempts],
        "statuses": [result.status for _, result in attempts],
        "bodies": [result.body for _, result in attempts],
        "errors": [result.error for _, result in attempts],
        "succeeded": [result.succeeded for _, result in attempts],
    }
    with connection.cursor() as cursor:
        cursor.execute(INSERT_ATTEMPTS, parameters)


# -- housekeeping ----------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Pruned:
    deliveries: int
    events: int


def prune(*, retention_days: int, batch: int = 1000) -> Pruned:
    """Delete finished deliveries (with their attempts) and dispatched events left without deliveries, once
    older than the retention; in batches, each its own transaction."""
    cutoff = timezone.now() - timedelta(days=retention_days)
    deliveries = events = 0
    while True:
        ids = list(
            WebhookDelivery.objects.filter(completed_at__lt=cutoff)
            .exclude(status=PENDING)
            .values_list("pk", flat=True)[:batch]
        )
        if not ids:
            break
        WebhookAttempt.objects.filter(delivery_id__in=ids).delete()
        deliveries += WebhookDelivery.objects.filter(pk__in=ids).delete()[0]
    while True:
        seqs = list(
            WebhookEvent.objects.filter(created_at__lt=cutoff, dispatched_at__isnull=False)
            .exclude(Exists(WebhookDelivery.objects.filter(event=OuterRef("pk"))))
            .values_list("pk", flat=True)[:batch]
        )
        if not seqs:
            break
        events += WebhookEvent.objects.filter(pk__in=seqs).delete()[0]
    return Pruned(deliveries, events)


def queue_depth() -> dict[tuple[str, ...], int]:
    """Pending deliveries and undispatched events, for the `registry_webhook_queue_depth` gauge."""
    return {
        ("pending_deliveries",): WebhookDelivery.objects.filter(status=PENDING).count(),
        ("undispatched_events",): WebhookEvent.objects.filter(dispatched_at__isnull=True).count(),
    }


def disabled_endpoints() -> int:
    return WebhookEndpoint.objects.filter(state=DISABLED).count()
