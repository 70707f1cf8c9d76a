"""Workspace snapshots through Django's storage API, so a session's files outlive its worker.

At the end of a turn that used the sandbox, the workspace is archived (tar + gzip) to
`sandbox-snapshots/<session>/workspace.tar.gz` in `storages["default"]` (a directory by default, an
object store in production), with a version token beside it (`version`); a worker that creates the
session's sandbox without a local workspace restores it first, and one whose local copy is older than
the stored version (the session ran elsewhere since) replaces it with the snapshot at the next turn.
The archive holds what the sandbox wrote, so it is unpacked with tarfile's `data` filter (no absolute
paths, no `..`, no links out, no devices) and handed to the session's uid.
"""

from __future__ import annotations

import os
import secrets
import tarfile
import tempfile
from io import BytesIO
from pathlib import Path

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


def save(session_id: str, workspace: Path) -> str:
    """Replace the session's snapshot with the workspace as it is now; the new version's token."""
    with tempfile.TemporaryFile() as archive:
        with tarfile.open(fileobj=archive, mode="w:gz") as tar:
            tar.add(workspace, arcname=".", recursive=True)
        archive.seek(0)
        _replace(snapshot_name(session_id), File(archive))
    token = secrets.token_hex(8)
    _replace(version_name(session_id), File(BytesIO(token.encode())))
    return token


def restore(session_id: str, workspace: Path, uid: int) -> bool:
    """Unpack the session's snapshot into an empty workspace; False when there is none."""
    storage = storages["default"]
    name = snapshot_name(session_id)
    if not storage.exists(name):
        return False
    with storage.open(name, "rb") as archive, tarfile.open(fileobj=archive, mode="r:gz") as tar:
        tar.extractall(workspace, filter="data")
    for directory, folders, files in os.walk(workspace):
        for entry in (directory, *(os.path.join(directory, item) for item in (*folders, *files))):
            os.lchown(entry, uid, uid)
    return True


def delete(session_id: str) -> None:
    storage = storages["default"]
    for name in (snapshot_name(session_id), version_name(session_id)):
        if storage.exists(name):
            storage.delete(name)
