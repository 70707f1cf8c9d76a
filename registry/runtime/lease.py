"""Claiming sessions and holding them: a lease (owner, expiry) renewed by a heartbeat thread.

PostgreSQL claims with `SELECT ... FOR UPDATE SKIP LOCKED`, so workers never wait on each other;
SQLite serializes writers, and the conditional lease update is what makes a claim exclusive there.
A worker that dies stops renewing, and once its lease runs out the session is claimable again.
"""

from __future__ import annotations

import logging
import threading
from datetime import timedelta

from django.db import connection, transaction
from django.db.models import Q
from django.utils import timezone

from registry.sessions.models import Session
from registry.sessions.services import sessions_with_work

logger = logging.getLogger(__name__)


class LeaseLost(Exception):
    """Another worker holds the session now (or it was terminated): stop without writing."""


def claim_next(*, owner: str, seconds: float) -> str | None:
    """Lease the session that has waited longest for work; None when there is none."""
    with transaction.atomic():
        candidates = Session.objects.filter(sessions_with_work()).order_by("updated_at")
        if connection.features.has_select_for_update_skip_locked:
            candidates = candidates.select_for_update(skip_locked=True)
        session_id = candidates.values_list("pk", flat=True).first()
        if session_id is None:
            return None
        claimed = Session.objects.filter(sessions_with_work(), pk=session_id).update(
            lease_owner=owner, lease_expires_at=timezone.now() + timedelta(seconds=seconds)
        )
    return session_id if claimed else None


class Lease:
    """One worker's hold on one session; `lost` is set once a renewal finds it gone."""

    def __init__(self, *, session_id: str, owner: str, seconds: float) -> None:
        self.session_id, self.owner, self.seconds = session_id, owner, seconds
        self.lost = threading.Event()
        self._stopped = threading.Event()
        self._heartbeat = threading.Thread(target=self._beat, name=f"lease-{session_id}", daemon=True)

    def __enter__(self) -> Lease:
        self._heartbeat.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._stopped.set()
        self._heartbeat.join()
        self.release()

    def _held(self) -> Q:
        return Q(pk=self.session_id, lease_owner=self.owner) & ~Q(status=Session.Status.TERMINATED)

    def renew(self) -> bool:
        expires = timezone.now() + timedelta(seconds=self.seconds)
        return bool(Session.objects.filter(self._held()).update(lease_expires_at=expires))

    def release(self) -> None:
        Session.objects.filter(pk=self.session_id, lease_owner=self.owner).update(
            lease_owner=None, lease_expires_at=None
        )

    def _beat(self) -> None:
        try:
            while not self._stopped.wait(self.seconds / 3):
                if not self._renew_quietly():
                    self.lost.set()
                    return
        finally:
            connection.close()

    def _renew_quietly(self) -> bool:
        """A failed renewal (database briefly away) is retried; only a missing lease counts as lost."""
        try:
            return self.renew()
        except Exception as error:
            logger.warning("lease renewal of %s failed: %s", self.session_id, error)
            return True
