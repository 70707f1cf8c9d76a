"""Installing into the session's own prefix: `pip install` and `npm install -g` work in every sandbox
without flags, as they do in the hosted original's containers.

The prefix is `/workspace/.local`: Python's user base (`PYTHONUSERBASE`, which `HOME=/workspace` makes
the default anyway) and npm's global prefix (`npm_config_prefix`). pip, finding the system's
site-packages read-only, falls back to a user install there (`lib/python3.X/site-packages`, scripts in
`bin/`), PEP 668's refusal lifted (`PIP_BREAK_SYSTEM_PACKAGES`: nothing of the system can change from
inside anyway); `npm install -g` puts packages in `lib/node_modules` and their programs in `bin/`, which
is first on PATH. Nothing forces `--user`, so inside a virtualenv pip installs into the virtualenv.

**The prefix persists with the workspace.** It is part of the session's workspace: it stays while the
session's disk does, goes with its snapshots (a session resumed later, on this worker or another, finds
its packages installed), counts against the workspace cap, and is no other session's.

pip itself is the runtime's (pure Python), copied root-owned into the shared area once
(`packages.shared_pip`) and bound read-only at `/opt/pip/pip`, last on PYTHONPATH, so `python3 -m pip`
works where the host's python3 has no pip (and the same pip runs everywhere); `pip` and `pip3`
launchers (`python3 -m pip`) are at `/opt/pip/bin`, last on PATH. The environment's own packages stay
visible: its layer (`/opt/packages`, `packages.py`) keeps its place on PATH and PYTHONPATH, so pip
counts them as installed, and a module both hold is imported from the layer.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from registry.sandbox.copies import content_digest, root_owned_copy
from registry.sandbox.launch import SHELL_PATH
from registry.sandbox.packages import PIP_INSIDE, shared_pip
from registry.sandbox.spec import SANDBOX_HOME, Mount

USER_PREFIX = f"{SANDBOX_HOME}/.local"
LAUNCHER = b'#!/bin/sh\nexec python3 -m pip "$@"\n'
LAUNCHER_NAMES = ("pip", "pip3")
USER_INSTALL_ENV = {
    "PYTHONUSERBASE": USER_PREFIX,
    "PIP_BREAK_SYSTEM_PACKAGES": "1",
    "PIP_DISABLE_PIP_VERSION_CHECK": "1",
    "npm_config_prefix": USER_PREFIX,
    "npm_config_update_notifier": "false",
}


@dataclass(frozen=True)
class UserInstalls:
    """What every session sandbox of a root gets for installing into its prefix: pip's binds (none where
    the runtime has no pip: the host's python3 may have its own), and the variables."""

    mounts: tuple[Mount, ...] = ()

    def env(self, given: Mapping[str, str]) -> dict[str, str]:
        """`given` (the spec's variables, a package layer's among them) with the prefix's: its `bin` first
        on PATH, the runtime's pip last on PATH and PYTHONPATH."""
        pip = (PIP_INSIDE,) if self.mounts else ()
        path = (f"{USER_PREFIX}/bin", given.get("PATH", SHELL_PATH), *(f"{folder}/bin" for folder in pip))
        env = {**USER_INSTALL_ENV, **given, "PATH": ":".join(path)}
        python_path = [folder for folder in (given.get("PYTHONPATH"), *pip) if folder]
        if python_path:
            env["PYTHONPATH"] = ":".join(python_path)
        return env


def user_installs(shared: Path) -> UserInstalls:
    """The runtime's pip and its launchers, copied into the shared area `shared` once."""
    pip = shared_pip(shared)
    if pip is None:
        return UserInstalls()
    name = f"pip-launchers-{content_digest((launcher, LAUNCHER) for launcher in LAUNCHER_NAMES)}"
    launchers = root_owned_copy(shared / "tools", name, _write_launchers)
    return UserInstalls(mounts=(Mount(pip, f"{PIP_INSIDE}/pip"), Mount(launchers, f"{PIP_INSIDE}/bin")))


def _write_launchers(folder: Path) -> None:
    for name in LAUNCHER_NAMES:
        (folder / name).write_bytes(LAUNCHER)
        (folder / name).chmod(0o755)
