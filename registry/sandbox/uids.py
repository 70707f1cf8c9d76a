"""Host uids for sandboxes, allocated rather than hashed: no two live sandboxes of a host share one.

A session's files and processes are told apart by the host uid its sandbox runs as (RLIMIT_NPROC
counts per uid; file ownership decides who may touch what). Each uid of the range is claimed by an
exclusive create of `<root>/uids/<uid>` holding the session id, so workers sharing a sandbox root on
one host never hand out the same uid; the session keeps it (recorded in its host folder) while its
disk exists, and it is released only once the sandbox and its files are gone. A claim whose session
folder does not record it a minute later (a worker died between the two writes) is taken over.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import time
from pathlib import Path

HOST_UID_BASE = 200_000
HOST_UID_SPAN = 100_000
STALE_AFTER_SECONDS = 60


def recorded_uid(home: Path) -> int | None:
    """The uid a session's host folder records, if any."""
    try:
        return int((home / "uid").read_text())
    except (FileNotFoundError, ValueError):
        return None


class UidsExhausted(OSError):
    """Every uid of the range belongs to a live sandbox on this host."""


class UidAllocator:
    """Claims and releases host uids under a sandbox root."""

    def __init__(self, root: Path) -> None:
        self.claims = root / "uids"
        self.claims.mkdir(mode=0o700, parents=True, exist_ok=True)

    def uid_for(self, home: Path, owner: str) -> int:
        """The uid recorded in the session's host folder `home`, else a newly claimed one (recorded)."""
        uid = recorded_uid(home)
        if uid is not None and self._claimant(uid) == owner:
            return uid
        uid = self._claim(owner, home)
        home.mkdir(parents=True, exist_ok=True)
        aside = home / ".uid"
        aside.write_text(str(uid))
        os.replace(aside, home / "uid")
        return uid

    def claimed(self) -> set[int]:
        """The uids claimed under this root (live sandboxes, and sessions whose disks are kept here)."""
        return {int(claim.name) for claim in self.claims.iterdir() if claim.name.isdigit()}

    def release(self, uid: int, owner: str) -> None:
        """Give `uid` back (only if `owner` still holds it); the sandbox and its files must be gone."""
        if self._claimant(uid) == owner:
            with contextlib.suppress(FileNotFoundError):
                (self.claims / str(uid)).unlink()

    def _claim(self, owner: str, home: Path) -> int:
        start = secrets.randbelow(HOST_UID_SPAN)
        for offset in range(HOST_UID_SPAN):
            uid = HOST_UID_BASE + (start + offset) % HOST_UID_SPAN
            if self._take(uid, owner) or self._take_over_stale(uid, owner, home):
                return uid
        raise UidsExhausted("every sandbox uid of this host is in use")

    def _take(self, uid: int, owner: str) -> bool:
        try:
            descriptor = os.open(self.claims / str(uid), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:
            return False
        with os.fdopen(descriptor, "w") as claim:
            claim.write(owner)
        return True

    def _take_over_stale(self, uid: int, owner: str, home: Path) -> bool:
        """A claim whose session folder (a sibling of `home`) does not record this uid is left from a crash."""
        claimant = self._claimant(uid)
        if claimant is None or claimant == owner or not self._old(uid):
            return False
        if recorded_uid(home.parent / claimant) == uid:
            return False
        with contextlib.suppress(FileNotFoundError):
            (self.claims / str(uid)).unlink()
        return self._take(uid, owner)

    def _old(self, uid: int) -> bool:
        """Claimed long enough ago that its session folder must record it by now, if it is alive."""
        try:
            return time.time() - (self.claims / str(uid)).stat().st_mtime > STALE_AFTER_SECONDS
        except FileNotFoundError:
            return False

    def _claimant(self, uid: int) -> str | None:
        try:
            return (self.claims / str(uid)).read_text() or None
        except FileNotFoundError:
            return None
