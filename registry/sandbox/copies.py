"""Root-owned copies of the runtime's own files that every session uid can read (and run).

A sandbox process runs as the session's uid, which may not pass the folders above the runtime's
virtualenv (a checkout in a 0700 folder, say). What such a process needs from there (bubblewrap from its
wheel, pip) is copied once into a `tools` folder under the sandbox root: made in a staging folder of its
own, given to root, folders 0755 and files world-readable (and world-executable where they were
executable, with no setuid or setgid bit), then renamed into place, so no reader ever sees half a copy.
A copy is named by its content (its caller puts a version or a digest in the name), so a changed source
is a new copy and an unchanged one is never made again; an flock makes threads and worker processes
wait for one copy.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import stat
import tempfile
from collections.abc import Callable, Iterable
from pathlib import Path

from registry.sandbox.fsops import chown_tree, locked


def root_owned_copy(tools: Path, name: str, fill: Callable[[Path], None]) -> Path:
    """`tools/name`, made first (under `tools`' lock) by `fill`, which puts the files in the folder it is
    given. `tools`' parent must exist."""
    copy = tools / name
    if copy.exists():
        return copy
    tools.mkdir(exist_ok=True)
    os.chmod(tools, 0o755)  # whatever the umask
    with locked(tools.with_name(f"{tools.name}.lock")):
        if not copy.exists():
            staging = Path(tempfile.mkdtemp(dir=tools, prefix=".staging-"))
            try:
                fill(staging)
                chown_tree(staging, 0)
                readable_by_all(staging)
                os.rename(staging, copy)
            except BaseException:
                shutil.rmtree(staging, ignore_errors=True)
                raise
    return copy


def readable_by_all(root: Path) -> None:
    """Folders 0755; files at least 0644, 0755 where anyone could run them; no setuid or setgid bit."""
    os.chmod(root, 0o755)
    for folder, folders, files in os.walk(root):
        for name in folders:
            os.chmod(os.path.join(folder, name), 0o755)
        for name in files:
            path = os.path.join(folder, name)
            mode = os.lstat(path).st_mode
            if stat.S_ISREG(mode):
                os.chmod(path, (mode & 0o777) | (0o755 if mode & 0o111 else 0o644))


def content_digest(files: Iterable[tuple[str, bytes]]) -> str:
    """A digest of (name, content) pairs: the part of a copy's name that changes with what it holds."""
    digest = hashlib.sha256()
    for name, content in sorted(files):
        digest.update(hashlib.sha256(name.encode()).digest() + hashlib.sha256(content).digest())
    return digest.hexdigest()[:16]
