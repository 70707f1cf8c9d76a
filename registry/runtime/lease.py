"""Holding sessions: a worker's fenced leases, trusted until they may have run out, renewed by one keeper.

A claim (`log.claim`) raises the session's `lease_token`; every write the turn makes carries that token
(a `Fence`) and is refused in its own transaction once another worker has claimed the session. A worker
also stops itself before any side effect once its lease may have run out (a renewal that did not land
in time), so a stalled worker that wakes up writes nothing. The lease columns are written only by
`registry.sessions.log`.
"""

from __future__ import annotations

import logging
import threading
import time

from django.db import connection

from registry.sessions import log
from registry.sessions.log import Claim, Fence, LeaseLost

__all__ = ["Claim", "Fence", "Lease", "LeaseKeeper", "LeaseLost"]

logger = logging.getLogger(__name__)


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
            raise LeaseLost(f"session {self.session_id}: this worker's lease was lost or could not be renewed in time")

    def release(self, *, keep_attempt: bool = True) -> None:
        """Give the session back; a turn left for another worker on shutdown does not count as an attempt."""
        log.release(self.fence, keep_attempt=keep_attempt)


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
        kept = log.renew(owner=self.owner, fences=[lease.fence for lease in leases], seconds=self.seconds)
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
