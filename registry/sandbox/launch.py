"""How a sandbox process starts: what bubblewrap lets it see, and the caps it cannot lift.

The worker spawns (vfork: its address space is not copied) a chain of small programs, each exec'ing
the next: a shell that joins the sandbox's cgroup (CPU bandwidth, memory including its tmpfs pages,
process count) where the host gives one, `prlimit` (address space, processes per uid, file size, no
core dumps), `taskset` to `ceil(cpus)` cores, `setpriv` to the session's host uid, then bubblewrap
(`bubblewrap.py`: which binary, and one that uid can run).
bubblewrap makes user, PID, mount, network, IPC and UTS namespaces with no further user namespaces
allowed inside (`--disable-userns`), a read-only root with the host's `/usr`, sized tmpfs at `/tmp` and
`/dev/shm` (a read-only `/dev` otherwise), the view's binds, and loads the seccomp filter
(`seccomp.py`) last, so nothing the sandbox runs can mount, ptrace-attach, use io_uring, keyrings, BPF
or kernel modules, or (without a CPU cgroup) widen its cores.
"""

from __future__ import annotations

import math
import os
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from registry.sandbox import cgroups, seccomp
from registry.sandbox.egress import PROXY_ENV, SOCKET_INSIDE
from registry.sandbox.interception import SYSTEM_BUNDLE, TRUST_ENV
from registry.sandbox.spec import SANDBOX_HOME, Limits, Mount, SandboxUnavailable

INSIDE_UID = 1000
SYSTEM_PATHS = ("/usr", "/etc/alternatives", "/etc/ssl", "/etc/ca-certificates", "/etc/ld.so.cache", "/etc/localtime")
SHELL_PATH = "/usr/local/bin:/usr/bin:/bin"
MEBIBYTE = 1024 * 1024
MIN_ADDRESS_SPACE_MB = 64


@dataclass(frozen=True)
class View:
    """What one bubblewrap process sees besides the system: the workspace, mounts, egress, trust."""

    workspace: Path
    workspace_writable: bool = True
    mounts: tuple[Mount, ...] = ()
    socket: Path | None = None  # the egress proxy's socket; None: no network at all
    bundle: Path | None = None  # a trust bundle over the system's (sandboxes with secrets)
    env: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Confinement:
    """The caps of one sandbox: its host uid, its limits, its cgroup (None where the host has none)."""

    uid: int
    limits: Limits
    cgroup: cgroups.SandboxCgroup | None

    def tmpfs_mb(self) -> int:
        """The size of each of `/tmp` and `/dev/shm`. With a memory cgroup their pages count against the
        cap like any other memory; without one, they are cut so that both, full, still leave the
        smallest address space below `memory_mb`."""
        limits = self.limits
        if self.cgroup is not None:
            return limits.tmp_mb
        return max(1, min(limits.tmp_mb, (limits.memory_mb - MIN_ADDRESS_SPACE_MB) // 2))

    def command(self) -> list[str]:
        """What runs before bubblewrap, each program exec'ing the next: join the cgroup (as root), set the
        rlimits, pin the cores, drop to the session's uid. The address space is what is left of
        `memory_mb` once both tmpfs are full (with a cgroup, the cgroup counts them instead, and the
        address space only stops one allocation past the cap)."""
        limits = self.limits
        tmpfs_mb = 0 if self.cgroup else 2 * self.tmpfs_mb()
        memory_mb = max(limits.memory_mb - tmpfs_mb, MIN_ADDRESS_SPACE_MB)
        cores = self.cores()
        return [
            *(self.cgroup.join_command() if self.cgroup else []),
            "prlimit", f"--as={memory_mb * MEBIBYTE}", f"--nproc={limits.pids}",
            f"--fsize={limits.workspace_mb * MEBIBYTE}", "--core=0", "--",
            *(["taskset", "-c", ",".join(map(str, sorted(cores)))] if cores else []),
            "setpriv", f"--reuid={self.uid}", f"--regid={self.uid}", "--clear-groups",
        ]  # fmt: skip

    def cores(self) -> set[int]:
        """`ceil(cpus)` cores spread over the host by uid (so `nproc` tells programs their share); none
        when `cpus` is 0 or covers every core. Without a CPU cgroup this pinning is the cap, and the
        seccomp filter refuses `sched_setaffinity`, so the sandbox cannot widen it."""
        available = os.cpu_count() or 1
        wanted = math.ceil(self.limits.cpus)
        if self.limits.cpus <= 0 or wanted >= available:
            return set()
        return {(self.uid + offset) % available for offset in range(wanted)}


def bwrap_arguments(view: View, confinement: Confinement, seccomp_fd: int) -> list[str]:
    """bubblewrap's options, passed through a descriptor (`--args`): the sandbox's pid 1 is bubblewrap, whose
    command line any process inside can read, and the host paths of the binds must not be in it."""
    binds: list[str] = []
    for path in SYSTEM_PATHS:
        if os.path.exists(path):
            binds += ["--ro-bind", path, path]
    env = {"PATH": SHELL_PATH, "HOME": SANDBOX_HOME, "LANG": "C.UTF-8"}
    if view.bundle is not None:  # over the system bundle bound with /etc/ssl just above
        binds += ["--ro-bind", str(view.bundle), SYSTEM_BUNDLE]
        env.update(TRUST_ENV)
    if view.socket is not None:
        binds += ["--bind", str(view.socket), SOCKET_INSIDE]
        env.update(PROXY_ENV)
    binds += ["--bind" if view.workspace_writable else "--ro-bind", str(view.workspace), SANDBOX_HOME]
    for mount in view.mounts:  # after the workspace, so a mount inside /workspace shows through
        binds += ["--ro-bind" if mount.read_only else "--bind", str(mount.source), mount.target]
    variables: list[str] = []
    for name, value in {**env, **view.env}.items():
        variables += ["--setenv", name, value]
    tmp_bytes = str(confinement.tmpfs_mb() * MEBIBYTE)
    return [
        "--unshare-all", "--unshare-user", "--disable-userns", "--die-with-parent", "--new-session",
        "--uid", str(INSIDE_UID), "--gid", str(INSIDE_UID), "--hostname", "sandbox",
        "--symlink", "usr/bin", "/bin", "--symlink", "usr/lib", "/lib", "--symlink", "usr/lib64", "/lib64",
        "--symlink", "usr/sbin", "/sbin",
        "--proc", "/proc", "--dev", "/dev", "--size", tmp_bytes, "--tmpfs", "/dev/shm", "--remount-ro", "/dev",
        "--size", tmp_bytes, "--tmpfs", "/tmp",
        *binds, "--remount-ro", "/", "--chdir", SANDBOX_HOME,
        "--clearenv", *variables, "--seccomp", str(seccomp_fd),
    ]  # fmt: skip


def start(
    bwrap: str,
    view: View,
    confinement: Confinement,
    inner: Sequence[str],
    *,
    stdin: int | IO[bytes] = subprocess.PIPE,
    stdout: int | IO[bytes] = subprocess.PIPE,
    stderr: int | IO[bytes] = subprocess.STDOUT,
) -> subprocess.Popen[bytes]:
    """Start `inner` in a new sandbox of the bubblewrap binary `bwrap` with `view`, confined as
    `confinement` says. Call it from a thread that outlives the sandbox: `--die-with-parent`
    follows the thread that forked."""
    program = seccomp.filter_program(deny_affinity=confinement.cgroup is None)
    seccomp_fd = seccomp.program_fd(program)
    arguments_fd = _memory_file(
        b"".join(argument.encode() + b"\0" for argument in bwrap_arguments(view, confinement, seccomp_fd))
    )
    try:
        return subprocess.Popen(
            [*confinement.command(), bwrap, "--args", str(arguments_fd), "--", *inner],
            stdin=stdin, stdout=stdout, stderr=stderr, start_new_session=True,
            env={"PATH": SHELL_PATH}, pass_fds=(seccomp_fd, arguments_fd),
        )  # fmt: skip
    except OSError as error:
        raise SandboxUnavailable(f"the sandbox could not start: {error}") from None
    finally:
        for descriptor in (seccomp_fd, arguments_fd):
            os.close(descriptor)


def _memory_file(content: bytes) -> int:
    """A descriptor of an anonymous file holding `content`, positioned at its start."""
    descriptor = os.memfd_create("bwrap-arguments", os.MFD_CLOEXEC)
    os.write(descriptor, content)
    os.lseek(descriptor, 0, os.SEEK_SET)
    return descriptor
