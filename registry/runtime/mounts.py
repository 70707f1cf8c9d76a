"""A session's `file` resources in its sandbox: each with its exact bytes, read-only at its
`mount_path` (default `/mnt/session/uploads/<file_id>`). The other resources: `provision.py`.

The bytes are copied once onto the session's disk (`files/<file_id>`, root-owned, mode 0444) and bound
into the sandbox when the worker starts its shell.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

from registry.files.models import File
from registry.files.selectors import file_content, file_in_workspace
from registry.sandbox.spec import Mount


def file_mounts(*, workspace_id: str, resources: list[dict[str, Any]], staging: Path) -> tuple[Mount, ...]:
    """A read-only mount per live `file` resource of the session (a file deleted since is left out)."""
    mounts = []
    for resource in resources:
        if resource["type"] != "file":
            continue
        file = file_in_workspace(workspace_id=workspace_id, file_id=resource["file_id"])
        if file is None or file.expired:
            continue
        mounts.append(Mount(stage(file, staging), resource["mount_path"], read_only=True))
    return tuple(mounts)


def stage(file: File, staging: Path) -> Path:
    """The file's bytes on the host, copied once (written aside, then renamed into place)."""
    target = staging / file.id
    if target.exists():
        return target
    staging.mkdir(parents=True, exist_ok=True)
    os.chmod(staging, 0o711)
    with file_content(file) as source, tempfile.NamedTemporaryFile(dir=staging, delete=False) as copy:
        shutil.copyfileobj(source, copy)
    os.chmod(copy.name, 0o444)
    os.replace(copy.name, target)
    return target


def files_prompt(*, workspace_id: str, resources: list[dict[str, Any]]) -> str | None:
    """The system prompt's files section: each mounted file's path, name and media type (read-only)."""
    lines = []
    for resource in resources:
        if resource["type"] != "file":
            continue
        file = file_in_workspace(workspace_id=workspace_id, file_id=resource["file_id"])
        if file is not None and not file.expired:
            lines.append(f"- {resource['mount_path']}: {file.filename} ({file.mime_type}, {file.size_bytes} bytes)")
    if not lines:
        return None
    return "\n".join(["# Files", "These files are mounted read-only in your sandbox:", *lines])
