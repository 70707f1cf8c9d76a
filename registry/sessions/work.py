"""The work queue of self-hosted environments: one work item per session that needs a self-hosted sandbox.

A session of a `self_hosted` environment is queued when it is created (in its transaction) and again when
new input reaches it while its last item is stopping or stopped. Environment workers `poll` (a long poll
woken by `pg_notify` on `WORK_CHANNEL`), `ack`, `heartbeat` under an optimistic-concurrency rule, and `stop`.
A lease that lapses puts the item back in the queue; an archived, deleted or terminated session stops it.
It lives in the sessions app because it reads and writes both sessions and environments, and the app
layering puts sessions above environments.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import connection, transaction
from django.db.models import Count, Min, Q
from django.db.models.fields.json import KT
from django.utils import timezone

from registry.core.errors import ApiError, ErrorType, conflict
from registry.core.fields import merge_metadata
from registry.core.serialization import timestamp
from registry.environments.models import Environment
from registry.sessions import notify
from registry.sessions.models import Session, SessionEvent, WorkItem, WorkPoller
from registry.workspaces import scoped_credentials

State = WorkItem.State
SELF_HOSTED = "self_hosted"
WORK_CHANNEL = "registry_work"
NO_HEARTBEAT = "NO_HEARTBEAT"
# The reference client's documented default for `reclaim_older_than_ms`.
RECLAIM_DEFAULT_MS = 5000
BLOCK_MAX_MS = 999
TTL_MAX_SECONDS = 3600
# `workers_polling` counts the workers whose last poll is this recent.
POLLING_WINDOW = timedelta(seconds=30)
# Only SQLite (no LISTEN) waits by looking again, this often, within `block_ms`.
SQLITE_RECHECK_SECONDS = 0.05
LIVE_STATES = (State.QUEUED, State.STARTING, State.ACTIVE)
LEASED_STATES = (State.STARTING, State.ACTIVE)


def lease_seconds() -> int:
    """The lease a heartbeat (or an ack) grants when it names no `desired_ttl_seconds`."""
    return int(getattr(settings, "REGISTRY_WORK_LEASE_SECONDS", 60))


# A self-hosted environment's built-in tools run in the client's worker: the only harness that lets them.
CLIENT_RUN_HARNESS = {"type": "agent_sdk_harness", "mode": "separate"}


def default_harness(environment: Environment) -> dict[str, str]:
    """The harness of a session created without one: the client-run harness on a self-hosted environment."""
    return dict(CLIENT_RUN_HARNESS) if _self_hosted(environment.config) else {"type": "default"}


def client_runs_builtin(harness: dict[str, Any], environment_config: dict[str, Any]) -> bool:
    """An environment worker runs the session's built-in tools (and answers them with `user.tool_result`):
    the agent SDK harness in separate mode on a self-hosted environment."""
    separate = harness.get("type") == "agent_sdk_harness" and harness.get("mode") == "separate"
    return separate and _self_hosted(environment_config)


def _self_hosted(environment_config: dict[str, Any] | None) -> bool:
    return bool((environment_config or {}).get("type") == SELF_HOSTED)


def needs_work(session: Session) -> bool:
    return client_runs_builtin(session.harness, session.environment.config)


def _announce(environment_id: str) -> None:
    """Wake long polls on the environment once the transaction commits (PostgreSQL delivers on commit)."""
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_notify(%s, %s)", [WORK_CHANNEL, environment_id])


# -- queueing -----------------------------------------------------------------------------------------
def work_queue(*, session: Session) -> WorkItem:
    """Queue a work item for `session` (callers hold a transaction: the session's create or append)."""
    item = WorkItem.objects.create(
        workspace_id=session.workspace_id,
        environment_id=session.environment_id,
        session_ref=session.pk,
        created_at=timezone.now(),
    )
    _announce(session.environment_id)
    return item


def work_requeue_if_dormant(*, session: Session) -> WorkItem | None:
    """New input for a session (under its row lock, in the append's transaction): queue it again when its
    last item is stopping or stopped, as no worker will run the input. PostgreSQL's one-statement append
    does the same in its statement (`registry.sessions.log.APPEND_STATEMENT`)."""
    latest = WorkItem.objects.filter(session_ref=session.pk).order_by("-created_at").values_list("state").first()
    if latest is None or latest[0] in LIVE_STATES or session.status == Session.Status.TERMINATED:
        return None
    return work_queue(session=session)


def work_stop_for_session(*, session_id: str) -> None:
    """The session is archived, deleted or terminated: its queued items stop, a running one is told to."""
    now = timezone.now()
    stopped = list(WorkItem.objects.filter(session_ref=session_id, state=State.QUEUED).values_list("id", flat=True))
    WorkItem.objects.filter(pk__in=stopped).update(
        state=State.STOPPED, stop_requested_at=now, stopped_at=now, lease_expires_at=None
    )
    WorkItem.objects.filter(session_ref=session_id, state__in=LEASED_STATES).update(
        state=State.STOPPING, stop_requested_at=now
    )
    for work_id in stopped:
        _revoke_secrets(work_id)


def _revoke_secrets(work_id: str) -> None:
    """A stopped item's secret is refused from the next request on (in the stop's transaction)."""
    scoped_credentials.revoke_work_secrets(work_id)


# -- polling ------------------------------------------------------------------------------------------
def _claimable(environment_id: str, now: datetime, reclaim_ms: int) -> Q:
    """Queued and never polled, polled longer ago than `reclaim_ms` without an ack, or a lapsed lease."""
    reclaim_before = now - timedelta(milliseconds=reclaim_ms)
    queued = Q(state=State.QUEUED) & (Q(polled_at__isnull=True) | Q(polled_at__lte=reclaim_before))
    lapsed = Q(state__in=LEASED_STATES, lease_expires_at__lte=now)
    return Q(environment_id=environment_id) & (queued | lapsed)


def _finish_lapsed_stopping(environment_id: str, now: datetime) -> None:
    """A stopping item whose worker stopped heartbeating is stopped."""
    lapsed = WorkItem.objects.filter(environment_id=environment_id, state=State.STOPPING, lease_expires_at__lte=now)
    ids = list(lapsed.values_list("id", flat=True))
    if ids:
        WorkItem.objects.filter(pk__in=ids, state=State.STOPPING).update(
            state=State.STOPPED, stopped_at=now, lease_expires_at=None
        )
        for work_id in ids:
            _revoke_secrets(work_id)


def _claim(environment_id: str, reclaim_ms: int, worker_id: str | None) -> WorkItem | None:
    """Hand the oldest claimable item to this poller (`SKIP LOCKED` on PostgreSQL; a conditional update on
    both, so two pollers never get the same item)."""
    now = timezone.now()
    with transaction.atomic():
        _finish_lapsed_stopping(environment_id, now)
        candidates = (
            WorkItem.objects.select_for_update(skip_locked=True)
            .filter(_claimable(environment_id, now, reclaim_ms))
            .order_by("created_at", "id")
        )
        for candidate in candidates[:5]:
            taken = WorkItem.objects.filter(
                pk=candidate.pk, state=candidate.state, polled_at=candidate.polled_at
            ).update(
                state=State.QUEUED,
                polled_at=now,
                worker_id=worker_id,
                acknowledged_at=None,
                started_at=None,
                latest_heartbeat_at=None,
                lease_expires_at=None,
            )
            if taken:
                if candidate.polled_at is not None:  # taken from another poller: its secret ends here
                    _revoke_secrets(candidate.pk)
                return WorkItem.objects.get(pk=candidate.pk)
    return None


def _record_poller(environment_id: str, worker_id: str | None) -> None:
    if worker_id:
        WorkPoller.objects.update_or_create(
            environment_id=environment_id, worker_id=worker_id[:256], defaults={"polled_at": timezone.now()}
        )


class PollWakeups:
    """This process's long polls share one LISTEN connection on `WORK_CHANNEL` (started at the first poll):
    each waits on an event that a notification naming its environment sets, as does the listener's
    (re)connection (a notification may have been missed: every poll looks again)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._waiting: dict[str, set[threading.Event]] = {}
        self._listener: notify.ChannelListener | None = None

    @contextmanager
    def waiting(self, environment_id: str) -> Iterator[threading.Event]:
        """An event set when `environment_id` may have a new item; registered before the caller looks."""
        woken = threading.Event()
        with self._lock:
            if self._listener is None:
                self._listener = notify.ChannelListener(WORK_CHANNEL, self._deliver, name="work-listen")
                self._listener.start()
            self._waiting.setdefault(environment_id, set()).add(woken)
        try:
            yield woken
        finally:
            with self._lock:
                waiters = self._waiting[environment_id]
                waiters.discard(woken)
                if not waiters:
                    del self._waiting[environment_id]

    def stop(self) -> None:
        """Close the shared connection (a later poll opens it again)."""
        with self._lock:
            listener, self._listener = self._listener, None
        if listener is not None:
            listener.stop()

    def _deliver(self, environment_id: str | None) -> None:
        with self._lock:
            if environment_id is None:
                woken = [event for events in self._waiting.values() for event in events]
            else:
                woken = list(self._waiting.get(environment_id, ()))
        for event in woken:
            event.set()


POLL_WAKEUPS = PollWakeups()


def work_poll(
    *, environment: Environment, block_ms: int, reclaim_older_than_ms: int | None, worker_id: str | None
) -> WorkItem | None:
    """The next item for a worker, waiting up to `block_ms` for one to be queued; None when none came.

    On PostgreSQL the wait is woken by the process's shared LISTEN (`POLL_WAKEUPS`, registered before
    looking again, so an item queued in between is not missed); SQLite looks again every 50 ms.
    """
    reclaim_ms = RECLAIM_DEFAULT_MS if reclaim_older_than_ms is None else reclaim_older_than_ms
    _record_poller(environment.pk, worker_id)
    item = _claim(environment.pk, reclaim_ms, worker_id)
    if item is not None or block_ms <= 0:
        return item
    deadline = time.monotonic() + block_ms / 1000
    if connection.vendor != "postgresql":
        while (remaining := deadline - time.monotonic()) > 0:
            time.sleep(min(SQLITE_RECHECK_SECONDS, remaining))
            item = _claim(environment.pk, reclaim_ms, worker_id)
            if item is not None:
                return item
        return None
    with POLL_WAKEUPS.waiting(environment.pk) as woken:
        while True:
            item = _claim(environment.pk, reclaim_ms, worker_id)
            remaining = deadline - time.monotonic()
            if item is not None or remaining <= 0:
                return item
            woken.wait(remaining)
            woken.clear()


# -- the worker's calls -------------------------------------------------------------------------------
def _locked(item: WorkItem) -> WorkItem:
    return WorkItem.objects.select_for_update().get(pk=item.pk)


@transaction.atomic
def work_ack(*, item: WorkItem) -> WorkItem:
    """`queued` → `starting`: the worker has the item; it holds a lease until its first heartbeat."""
    locked = _locked(item)
    if locked.state != State.QUEUED:
        raise conflict(f"work_not_queued: work {locked.pk} is {locked.state}, only a queued item can be acked.")
    now = timezone.now()
    locked.state = State.STARTING
    locked.acknowledged_at = now
    locked.ttl_seconds = lease_seconds()
    locked.lease_expires_at = now + timedelta(seconds=locked.ttl_seconds)
    locked.save(update_fields=["state", "acknowledged_at", "ttl_seconds", "lease_expires_at"])
    return locked


@dataclass(frozen=True)
class Heartbeat:
    """A heartbeat's answer (also the lease state a refused one reports)."""

    last_heartbeat: str | None
    lease_extended: bool
    state: str
    ttl_seconds: int

    def response(self) -> dict[str, Any]:
        return {
            "last_heartbeat": self.last_heartbeat or "",
            "lease_extended": self.lease_extended,
            "state": self.state,
            "ttl_seconds": self.ttl_seconds,
            "type": "work_heartbeat",
        }


class HeartbeatPreconditionFailed(ApiError):
    """412: `expected_last_heartbeat` is not the stored heartbeat (another worker may hold the lease)."""

    error_code = "heartbeat_precondition_failed"

    def __init__(self, message: str, current: Heartbeat) -> None:
        super().__init__(ErrorType.INVALID_REQUEST, message, status=412)
        self.current = current

    def details(self) -> dict[str, Any]:
        return {
            "error_code": self.error_code,
            "current_state": {
                "last_heartbeat": self.current.last_heartbeat,
                "lease_extended": False,
                "state": self.current.state,
                "ttl_seconds": self.current.ttl_seconds,
            },
        }


@transaction.atomic
def work_heartbeat(
    *, item: WorkItem, expected_last_heartbeat: str | None, desired_ttl_seconds: int | None
) -> Heartbeat:
    """Extend the lease if `expected_last_heartbeat` is the stored one (`NO_HEARTBEAT` before the first);
    the first heartbeat makes a starting item active. A stopping item is extended without the comparison
    (the worker winds down and reads `stopping`); a stopped one is not extended."""
    locked = _locked(item)
    stored = timestamp(locked.latest_heartbeat_at)
    if locked.state == State.STOPPED:
        return Heartbeat(stored, False, locked.state, locked.ttl_seconds)
    if locked.state != State.STOPPING:
        expected_stored = stored if stored is not None else NO_HEARTBEAT
        if locked.state == State.QUEUED or (
            expected_last_heartbeat is not None and expected_last_heartbeat != expected_stored
        ):
            current = Heartbeat(stored, False, locked.state, locked.ttl_seconds)
            raise HeartbeatPreconditionFailed(
                f"expected_last_heartbeat: work {locked.pk} has last_heartbeat {expected_stored}"
                + (" and is back in the queue." if locked.state == State.QUEUED else "."),
                current,
            )
    now = timezone.now()
    locked.ttl_seconds = desired_ttl_seconds or lease_seconds()
    locked.latest_heartbeat_at = now
    locked.lease_expires_at = now + timedelta(seconds=locked.ttl_seconds)
    if locked.state == State.STARTING:
        locked.state = State.ACTIVE
        locked.started_at = now
    locked.save(update_fields=["ttl_seconds", "latest_heartbeat_at", "lease_expires_at", "state", "started_at"])
    return Heartbeat(timestamp(now), True, locked.state, locked.ttl_seconds)


@transaction.atomic
def work_stop(*, item: WorkItem, force: bool, by_worker: bool = False) -> WorkItem:
    """Graceful: a running item becomes `stopping` (its worker reads it at the next heartbeat); one nobody
    runs (queued) or already stopping becomes `stopped`, and so does one whose own worker (`by_worker`: its
    environment key or secret) says it is done. `force` stops it at once. Stopped is a 409."""
    locked = _locked(item)
    if locked.state == State.STOPPED:
        raise conflict(f"work_stopped: work {locked.pk} is already stopped.")
    now = timezone.now()
    locked.stop_requested_at = locked.stop_requested_at or now
    if force or by_worker or locked.state in (State.QUEUED, State.STOPPING):
        locked.state = State.STOPPED
        locked.stopped_at = now
        locked.lease_expires_at = None
        _revoke_secrets(locked.pk)
    else:
        locked.state = State.STOPPING
    locked.save(update_fields=["state", "stop_requested_at", "stopped_at", "lease_expires_at"])
    if locked.state == State.STOPPED:
        _requeue_if_calls_left(locked)
    return locked


def _calls_left_open(session_id: str) -> bool:
    """Built-in calls of the session that no result answers and no confirmation holds back: a worker that
    stopped without answering them (shut down, crashed after its stop) leaves them to the next one."""
    calls = SessionEvent.objects.filter(session_id=session_id, type="agent.tool_use")
    answered = SessionEvent.objects.filter(session_id=session_id, type__in=("user.tool_result", "agent.tool_result"))
    confirmed = SessionEvent.objects.filter(session_id=session_id, type="user.tool_confirmation")
    held = calls.filter(body__evaluated_permission="ask").exclude(pk__in=confirmed.values(call=KT("body__tool_use_id")))
    open_calls = calls.exclude(pk__in=answered.values(call=KT("body__tool_use_id")))
    return open_calls.exclude(pk__in=held.values("pk")).exists()


def _requeue_if_calls_left(item: WorkItem) -> None:
    session = Session.objects.filter(pk=item.session_ref).exclude(status=Session.Status.TERMINATED).first()
    if session is not None and _calls_left_open(session.pk):
        work_queue(session=session)


@transaction.atomic
def work_update(*, item: WorkItem, metadata: dict[str, str | None]) -> WorkItem:
    locked = _locked(item)
    locked.metadata = merge_metadata(locked.metadata, metadata)
    locked.save(update_fields=["metadata"])
    return locked


# -- reads --------------------------------------------------------------------------------------------
def work_stats(*, environment: Environment) -> dict[str, Any]:
    queued = WorkItem.objects.filter(environment=environment, state=State.QUEUED)
    oldest = queued.aggregate(oldest=Min("created_at"))["oldest"]
    since = timezone.now() - POLLING_WINDOW
    return {
        "depth": queued.filter(polled_at__isnull=True).count(),
        "oldest_queued_at": timestamp(oldest),
        "pending": queued.filter(polled_at__isnull=False).count(),
        "type": "work_queue_stats",
        "workers_polling": WorkPoller.objects.filter(environment=environment, polled_at__gte=since).count(),
    }


def queued_by_environment() -> dict[tuple[str], int]:
    """Items queued and never polled (each environment's `stats.depth`), per environment."""
    rows = WorkItem.objects.filter(state=State.QUEUED, polled_at__isnull=True).values_list("environment_id")
    return {(environment_id,): count for environment_id, count in rows.annotate(count=Count("id"))}


def live_by_environment() -> dict[tuple[str], int]:
    """Items queued, starting or active per environment: each wants a worker of its own."""
    rows = WorkItem.objects.filter(state__in=LIVE_STATES).values_list("environment_id")
    return {(environment_id,): count for environment_id, count in rows.annotate(count=Count("id"))}


def work_secret(item: WorkItem) -> str:
    """The credential a poll hands the worker with the item: its sessions token, valid until the item stops."""
    return scoped_credentials.mint_work_secret(
        work_id=item.pk, session_id=item.session_ref, environment_id=item.environment_id, workspace_id=item.workspace_id
    )
