"""Claiming sessions and holding them: fenced leases (owner, token, expiry) renewed by one keeper.

A claim raises the session's `lease_token`; every write the turn makes carries that token (a
`Fence`) and is refused in its own transaction once another worker has claimed the session. A
worker also stops itself before any side effect once its lease may have run out (a renewal that
did not land in time), so a stalled worker that wakes up writes nothing.

PostgreSQL claims in one `UPDATE ... WHERE id IN (SELECT ... FOR UPDATE SKIP LOCKED) RETURNING`, so
workers never wait on each other;
SQLite serializes writers, and the conditional update is what makes a claim exclusive there.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.db import connection, transaction
from django.db.models import Case, F, Q, QuerySet, Value, When
from django.utils import timezone

from registry.sessions.models import Session
from registry.sessions.services import Fence, LeaseLost, sessions_with_work

__all__ = ["Claim", "Lease", "LeaseKeeper", "LeaseLost", "claim_batch"]

logger = logging.getLogger(__name__)
ORPHANED = (Session.Status.RUNNING, Session.Status.RESCHEDULING)


@dataclass(frozen=True)
class Claim:
    """A session this worker just leased: its fence and how many times its turn has been claimed."""

    fence: Fence
    attempts: int


def claim_batch(*, owner: str, seconds: float, limit: int) -> list[Claim]:
    """Lease up to `limit` sessions that have waited longest for work."""
    if limit <= 0:
        return []
    expires = timezone.now() + timedelta(seconds=seconds)
    claim = _claim_in_one_statement if connection.vendor == "postgresql" else _claim_in_transaction
    return [
        Claim(Fence(session_id, owner, token), attempts) for session_id, token, attempts in claim(owner, expires, limit)
    ]


def _candidates(limit: int) -> QuerySet[Session]:
    return Session.objects.filter(sessions_with_work()).order_by("updated_at")[:limit]


# One round trip: the oldest sessions with work that no other worker is claiming right now (SKIP
# LOCKED), each given this owner, an expiry and the next fencing token.
CLAIM_STATEMENT = f"""
UPDATE {Session._meta.db_table} SET lease_owner = %s, lease_expires_at = %s, lease_token = lease_token + 1,
    turn_attempts = CASE WHEN status = ANY(%s) THEN turn_attempts + 1 ELSE 1 END
WHERE id IN ({{candidates}} FOR UPDATE SKIP LOCKED)
RETURNING id, lease_token, turn_attempts
"""


def _claim_in_one_statement(owner: str, expires: datetime, limit: int) -> list[tuple[str, int, int]]:
    candidates, parameters = _candidates(limit).values("pk").query.sql_with_params()
    with connection.cursor() as cursor:
        cursor.execute(CLAIM_STATEMENT.format(candidates=candidates), [owner, expires, list(ORPHANED), *parameters])
        return list(cursor.fetchall())


def _claim_in_transaction(owner: str, expires: datetime, limit: int) -> list[tuple[str, int, int]]:
    """SQLite: a conditional update is what makes the claim exclusive (writers are serialized)."""
    with transaction.atomic():
        ids = list(_candidates(limit).values_list("pk", flat=True))
        if not ids:
            return []
        Session.objects.filter(sessions_with_work(), pk__in=ids).update(
            lease_owner=owner,
            lease_expires_at=expires,
            lease_token=F("lease_token") + 1,
            turn_attempts=Case(When(status__in=ORPHANED, then=F("turn_attempts") + 1), default=Value(1)),
        )
        claimed = Session.objects.filter(pk__in=ids, lease_owner=owner).values_list(
            "pk", "lease_token", "turn_attempts"
        )
        return list(claimed)


class Lease:
    """One worker's hold on one session. `check()` raises once it is lost or may have run out."""

    def __init__(self, fence: Fence, seconds: float) -> None:
        self.fence = fence
        self.seconds = seconds
        self.lost = threading.Event()
        # A renewal landed at this monotonic time; the lease is trusted until `seconds` after it,
        # less a margin for the clock skew between this host and the database.
        self.renewed_at = time.monotonic()

    @property
    def session_id(self) -> str:
        return self.fence.session_id

    def trusted_until(self) -> float:
        return self.renewed_at + self.seconds * 0.8

    def check(self) -> None:
        if self.lost.is_set() or time.monotonic() > self.trusted_until():
            self.lost.set()
            raise LeaseLost(self.session_id)

    def release(self, *, keep_attempt: bool = True) -> None:
        """Give the session back; a turn left for another worker on shutdown does not count as an attempt."""
        fields: dict[str, object] = {"lease_owner": None, "lease_expires_at": None}
        if not keep_attempt:
            fields["turn_attempts"] = Case(When(turn_attempts__gt=0, then=F("turn_attempts") - 1), default=Value(0))
        Session.objects.filter(pk=self.session_id, lease_owner=self.fence.owner, lease_token=self.fence.token).update(
            **fields
        )


class LeaseKeeper:
    """Renews every lease of a worker in one statement, a third of a lease period apart."""

    def __init__(self, *, owner: str, seconds: float) -> None:
        self.owner, self.seconds = owner, seconds
        self.leases: dict[str, Lease] = {}
        self._lock = threading.Lock()
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._run, name="lease-keeper", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stopped.set()
        self._thread.join(timeout=10)

    def hold(self, claim: Claim) -> Lease:
        lease = Lease(claim.fence, self.seconds)
        with self._lock:
            self.leases[lease.session_id] = lease
        return lease

    def drop(self, lease: Lease) -> None:
        with self._lock:
            if self.leases.get(lease.session_id) is lease:
                del self.leases[lease.session_id]

    def renew_all(self) -> None:
        """One UPDATE for every held lease; a lease the database no longer shows as ours is lost."""
        with self._lock:
            leases = list(self.leases.values())
        if not leases:
            return
        started = time.monotonic()
        held = Q()
        for lease in leases:
            held |= Q(pk=lease.session_id, lease_token=lease.fence.token)
        expires = timezone.now() + timedelta(seconds=self.seconds)
        with transaction.atomic():
            Session.objects.filter(held, lease_owner=self.owner).exclude(status=Session.Status.TERMINATED).update(
                lease_expires_at=expires
            )
            kept = set(
                Session.objects.filter(held, lease_owner=self.owner, lease_expires_at=expires).values_list(
                    "pk", flat=True
                )
            )
        for lease in leases:
            if lease.session_id in kept:
                lease.renewed_at = started
            else:
                lease.lost.set()

    def _run(self) -> None:
        try:
            while not self._stopped.wait(self.seconds / 3):
                try:
                    self.renew_all()
                except Exception as error:  # the database is briefly away: leases age, turns stop in time
                    logger.warning("lease renewal failed: %s", error)
                    connection.close()
        finally:
            connection.close()
