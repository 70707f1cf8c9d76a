"""Workspace snapshots through Django's storage API, so a session's files outlive its worker.

At the end of a turn that used the sandbox, the workspace is archived (tar + gzip) to
`sandbox-snapshots/<session>/workspace.tar.gz` in `storages["default"]` (a directory by default, an
object store in production), with a version token beside it (`version`); a worker that creates the
session's sandbox without a local workspace restores it first, and one whose local copy is older than
the stored version (the session ran elsewhere since) replaces it with the snapshot at the next turn.

This module only moves archives between a host file and storage: the archive is made and unpacked
*inside* the session's sandbox, as its uid (`BwrapSandbox.snapshot`, `unpack.py`), so the host never
reads or writes a workspace path the sandbox could have changed.
"""

from __future__ import annotations

import secrets
import shutil
from io import BytesIO
from typing import IO

from django.core.files import File
from django.core.files.storage import storages


def snapshot_name(session_id: str) -> str:
    return f"sandbox-snapshots/{session_id}/workspace.tar.gz"


def version_name(session_id: str) -> str:
    return f"sandbox-snapshots/{session_id}/version"


def version(session_id: str) -> str | None:
    """The token of the session's latest snapshot, or None when it has none."""
    storage = storages["default"]
    name = version_name(session_id)
    if not storage.exists(name):
        return None
    with storage.open(name, "rb") as stored:
        return str(stored.read().decode())


def _replace(name: str, content: File) -> None:  # type: ignore[type-arg]
    """Store `content` at `name`, removing what was there."""
    storage = storages["default"]
    if storage.exists(name):
        storage.delete(name)
    storage.save(name, content)


def save(session_id: str, archive: IO[bytes]) -> str:
    """Replace the session's snapshot with `archive` (a host file, read from its start); the new token."""
    archive.seek(0)
    _replace(snapshot_name(session_id), File(archive))
    token = secrets.token_hex(8)
    _replace(version_name(session_id), File(BytesIO(token.encode())))
    return token


def fetch(session_id: str, into: IO[bytes]) -> bool:
    """Copy the session's snapshot into `into` (a host file, rewound); False when it has none."""
    storage = storages["default"]
    name = snapshot_name(session_id)
    if not storage.exists(name):
        return False
    with storage.open(name, "rb") as archive:
        shutil.copyfileobj(archive, into, 1 << 20)
    into.seek(0)
    return True


def delete(session_id: str) -> None:
    storage = storages["default"]
    for name in (snapshot_name(session_id), version_name(session_id)):
        if storage.exists(name):
            storage.delete(name)
