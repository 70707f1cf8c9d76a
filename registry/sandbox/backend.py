"""The bubblewrap backend: one sandbox per session, its shell, and the host's side of its files.

A sandbox runs as an unprivileged host uid of the session's own (allocated, `uids.py`) and uid 1000
inside; how its processes start and what caps hold them is `launch.py`. It sees the host's `/usr`
read-only, private sized `/tmp` and `/dev/shm`, its workspace at `/workspace` and the mounts it was
given, nothing else. Its files live on its own disk (`disks.py`: a size-capped image where the host can
mount one). Its only way out is its egress proxy (`egress.py`). A persistent bash shell keeps cwd and
exports between commands; a deadline per command kills the whole sandbox (its PID namespace, and its
cgroup where there is one) and the next command starts a fresh shell.

The host never acts on a workspace path the sandbox could change: snapshots are archived and restored
by helpers run *inside* a sandbox view as the session's uid, and everything else goes through
`fsops.py` (descriptor-relative, no links followed, regular files only, non-blocking).
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import secrets
import select
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import IO, Any

from django.conf import settings

from registry.core.egress import EgressRules
from registry.sandbox import cgroups, snapshots
from registry.sandbox.bubblewrap import bwrap_failure, bwrap_path, usable_bwrap
from registry.sandbox.disks import (
    DiskUnavailable,
    SessionDisk,
    SharedArea,
    image_support,
    private_directory,
)
from registry.sandbox.egress import BRIDGE_SOURCE, PROXY_PORT, EgressProxy, chown_socket
from registry.sandbox.fsops import read_regular_file, remove_beneath
from registry.sandbox.interception import Interception, SecretInjection, interception_for
from registry.sandbox.launch import SHELL_PATH, Confinement, View, start
from registry.sandbox.spec import SANDBOX_HOME, CommandResult, Limits, Mount, SandboxSpec, SandboxUnavailable
from registry.sandbox.uids import HOST_UID_BASE, UidAllocator, recorded_uid
from registry.sandbox.userinstalls import user_installs

__all__ = [
    "SANDBOX_HOME",
    "SHELL_PATH",
    "BwrapBackend",
    "BwrapSandbox",
    "CommandResult",
    "Limits",
    "Mount",
    "SandboxSpec",
    "SandboxUnavailable",
    "bwrap_path",
]

logger = logging.getLogger(__name__)

UNPACK_SOURCE = (Path(__file__).with_name("unpack.py")).read_text()
HELPER_TIMEOUT_SECONDS = 600
# The shell's first moments: the bridge to the egress proxy in the background ($1 is its source),
# up to a second for it to listen, then the interactive shell itself.
SHELL_STARTUP = (
    'python3 -I -c "$1" </dev/null >/dev/null 2>&1 & '
    f"for _ in $(seq 100); do (echo -n > /dev/tcp/127.0.0.1/{PROXY_PORT}) 2>/dev/null && break; sleep 0.01; done; "
    "exec /bin/bash --noprofile --norc"
)
# A snapshot's helper: tar's incremental state after the last snapshot is bound at `previous` (read-only)
# for an increment, and copied to `next` (bound writable; empty for a base), which tar updates.
SNAPSHOT_STATE = "/snapshot"
ARCHIVE = ("tar", "--create", "--format=posix", "--pax-option=delete=atime,delete=ctime",
           f"--listed-incremental={SNAPSHOT_STATE}/next", "--no-check-device", "--use-compress-program=gzip -1",
           "--sparse", "--file=-", "--directory", SANDBOX_HOME, "--one-file-system",
           "--ignore-failed-read", "--warning=no-file-changed", "--warning=no-file-ignored", ".")  # fmt: skip
ARCHIVE_SCRIPT = (
    f'if [ "$1" = increment ]; then cat {SNAPSHOT_STATE}/previous > {SNAPSHOT_STATE}/next || exit 2; fi; '
    'shift; exec "$@"'
)
TAR_FILES_CHANGED = 1  # GNU tar: some file changed while it was read (the archive is still whole)


class SandboxHost:
    """What the sandboxes of one root share: the root, the shared area, disks, cgroups, uids, the spawner,
    the bubblewrap binary, and what they install into their own prefix with (`userinstalls.py`)."""

    def __init__(self, root: Path, bwrap: str) -> None:
        self.root = private_directory(root, 0o711)
        self.bwrap = bwrap
        private_directory(root / "sessions", 0o711)
        mode = settings.REGISTRY_SANDBOX_DISK
        why_not = "REGISTRY_SANDBOX_DISK=directory" if mode == "directory" else image_support(root)
        try:
            self.shared = SharedArea(root, use_image=why_not is None)
        except DiskUnavailable as error:
            why_not = str(error)
            self.shared = SharedArea(root, use_image=False)
        if mode == "image" and why_not:
            raise SandboxUnavailable(f"REGISTRY_SANDBOX_DISK=image, but {why_not}")
        self.user_installs = user_installs(self.shared.path)
        self.uses_images = why_not is None
        if why_not:
            logger.warning("sandbox disks are plain folders (%s): the workspace cap is checked after commands", why_not)
        self.uids = UidAllocator(root)
        self.cgroups = cgroups.detect(settings.REGISTRY_SANDBOX_CGROUP)
        if self.cgroups.kind == "none":
            logger.warning("no cgroup for sandboxes (%s): CPU pinned, memory by rlimit", self.cgroups.reason)
        # Cgroups are named by root and uid: workers of other roots on this host never touch these, and
        # what a worker of this root left behind when it died (no live claim) is removed.
        self.cgroup_prefix = hashlib.sha256(str(root.resolve()).encode()).hexdigest()[:8] + "-"
        self.cgroups.sweep({self.cgroup_name(uid) for uid in self.uids.claimed()}, prefix=self.cgroup_prefix)
        self.spawner = ThreadPoolExecutor(max_workers=1, thread_name_prefix="sandbox-spawner")

    def home(self, session_id: str) -> Path:
        return self.root / "sessions" / session_id

    def cgroup_name(self, uid: int) -> str:
        return f"{self.cgroup_prefix}{uid}"

    def interception_for(self, injections: tuple[SecretInjection, ...]) -> Interception | None:
        """The CA stays in the root (never bound into a sandbox); the trust bundle is in the shared area."""
        return interception_for(injections, ca_dir=self.root / "ca", bundle_dir=self.shared.path)


class Place:
    """A session's place on this host: its uid and its disk (made before its sandbox starts, so what
    the session brings can be staged on the disk first)."""

    def __init__(self, host: SandboxHost, session_id: str, limits: Limits) -> None:
        self.session_id = session_id
        self.home = host.home(session_id)
        private_directory(self.home, 0o711)
        self.uid = host.uids.uid_for(self.home, session_id)
        self.disk = SessionDisk(self.home, size_mb=limits.workspace_mb, use_image=host.uses_images, templates=host.root)
        self.needs_restore = self.disk.open(self.uid)


# Names in a folder, NUL-separated (a name may hold a newline).
LIST_SOURCE = "import os, sys; sys.stdout.write(chr(0).join(os.listdir(sys.argv[1])))"


class BwrapSandbox:
    """One session's sandbox: its place on the host and, while it runs, a persistent shell."""

    def __init__(self, spec: SandboxSpec, host: SandboxHost, limits: Limits, place: Place) -> None:
        self.spec = spec
        self.host = host
        self.limits = limits
        self.place = place
        self.uid = place.uid
        self.disk = place.disk
        self.workspace = place.disk.workspace
        self.cgroup = host.cgroups.create(
            host.cgroup_name(self.uid), memory_bytes=limits.memory_mb * 1024 * 1024, cpus=limits.cpus, pids=limits.pids
        )
        self.confinement = Confinement(self.uid, limits, self.cgroup)
        self.shell: subprocess.Popen[bytes] | None = None
        self.lock = threading.Lock()
        self.last_used = time.monotonic()
        self.over_cap = False
        self.interception = host.interception_for(spec.injections)
        self.proxy = EgressProxy(
            self.disk.run / "egress.sock", spec.network, sandbox_rules(), self.interception, session_id=spec.session_id
        )
        chown_socket(self.proxy.socket_path, self.uid)
        self.local = snapshots.LocalState(place.home)
        self.snapshot_lock = threading.Lock()  # one snapshot or restore of the session at a time
        self.destroyed = False
        if place.needs_restore:
            self._restore(snapshots.latest(spec.session_id))
            place.needs_restore = False

    # -- snapshots ---------------------------------------------------------------------------
    def _restore(self, chain: snapshots.Chain | None) -> None:
        """Unpack the session's chain into its (empty) workspace, inside the sandbox as its uid."""
        if chain is not None:
            with tempfile.TemporaryFile() as archives:
                snapshots.fetch(self.spec.session_id, chain, archives)
                try:
                    output = self._helper(["/usr/bin/python3", "-I", "-c", UNPACK_SOURCE], stdin=archives)
                except OSError as error:  # a damaged archive: the session goes on with what could be unpacked
                    logger.warning("restoring the snapshot of %s failed: %s", self.spec.session_id, error)
                    output = ""
            skipped = [line for line in output.splitlines() if line.startswith("skipped: ")]
            if skipped:
                logger.warning("restoring %s skipped %d entries", self.spec.session_id, len(skipped))
        self.local.restored(chain.version if chain else None)

    def catch_up(self) -> None:
        """A session that ran on another worker since this copy was made: its newer snapshot replaces it."""
        latest = snapshots.latest(self.spec.session_id)
        if latest is None or latest.version == self.local.version():
            return
        with self.snapshot_lock, self.lock:
            self.stop()
            self.disk.clear_workspace(self.uid)
            self._restore(latest)

    def snapshot(self, *, commit_if: Callable[[], None] | None = None) -> None:
        """The workspace to storage: an increment of the session's chain when this host made its latest link,
        else a new base. Archived inside a sandbox view as the session's uid (so it holds only what the
        session itself can read), one snapshot of the session at a time; refused (OSError) while the
        workspace is over its size cap or once the sandbox is destroyed. `commit_if` runs just before the
        snapshot becomes the session's latest: an exception from it abandons the snapshot."""
        if self.over_quota():
            raise OSError(f"the workspace is over its {self.limits.workspace_mb} MB cap; not snapshotted")
        with self.snapshot_lock:
            if self.destroyed:
                raise OSError("the sandbox was destroyed; not snapshotted")
            chain = snapshots.latest(self.spec.session_id)
            after = chain if self.local.continues(chain) else None
            try:
                with tempfile.TemporaryFile() as archive:
                    self._archive(archive, increment=after is not None)
                    landed = snapshots.extend(self.spec.session_id, archive, after=after, commit_if=commit_if)
            except BaseException:
                self.local.abandoned()
                raise
            self.local.committed(landed.version)

    def _archive(self, into: IO[bytes], *, increment: bool) -> None:
        """tar in a helper with the workspace read-only and its incremental state bound (see `ARCHIVE_SCRIPT`)."""
        mounts = [Mount(self.local.start(self.uid), f"{SNAPSHOT_STATE}/next", read_only=False)]
        if increment:
            mounts.append(Mount(self.local.state, f"{SNAPSHOT_STATE}/previous"))
        kind = "increment" if increment else "base"
        inner = ["/bin/sh", "-c", ARCHIVE_SCRIPT, "snapshot", kind, *ARCHIVE]
        status = self._finish(self._start_helper(inner, stdout=into, writable=False, mounts=tuple(mounts)))
        if status not in (0, TAR_FILES_CHANGED):
            raise OSError(f"archiving the workspace failed (tar exit status {status})")

    def _helper(self, inner: list[str], *, stdin: IO[bytes]) -> str:
        """Run `inner` in a helper sandbox with the workspace writable; its output (capped)."""
        process = self._start_helper(inner, stdin=stdin)
        assert process.stdout is not None
        output = process.stdout.read(1 << 20).decode(errors="replace")
        if self._finish(process):
            raise OSError(f"the helper {inner[0]} failed: {output[-500:]}")
        return output

    def _start_helper(
        self, inner: list[str], *, stdin: int | IO[bytes] = subprocess.DEVNULL,
        stdout: int | IO[bytes] = subprocess.PIPE, writable: bool = True, mounts: tuple[Mount, ...] = (),
    ) -> subprocess.Popen[bytes]:  # fmt: skip
        """A helper: the session's uid, cgroup and caps, its workspace (and `mounts`), nothing else (no network)."""
        view = View(workspace=self.workspace, workspace_writable=writable, mounts=mounts)
        stderr = subprocess.STDOUT if stdout == subprocess.PIPE else subprocess.DEVNULL  # never into an archive
        return self._start(view, inner, stdin=stdin, stdout=stdout, stderr=stderr)

    def _finish(self, process: subprocess.Popen[bytes]) -> int:
        try:
            return process.wait(timeout=HELPER_TIMEOUT_SECONDS)
        except subprocess.TimeoutExpired:
            _kill_sandbox(process)
            raise OSError(f"a workspace helper took longer than {HELPER_TIMEOUT_SECONDS} s") from None
        finally:
            if process.stdout is not None:
                process.stdout.close()

    # -- the workspace's files -----------------------------------------------------------------
    def read_file(self, path: str, *, limit: int) -> bytes:
        """Read by the host without following a link or waiting on a FIFO: a regular file only."""
        return read_regular_file(self.workspace, path, limit=limit)

    def remove_file(self, path: str) -> None:
        remove_beneath(self.workspace, path)

    def write_file(self, path: str, data: bytes) -> None:
        """Written inside a helper sandbox as the session's uid (the host never opens a path it controls)."""
        with tempfile.TemporaryFile() as content:
            content.write(data)
            content.seek(0)
            self._helper(["/bin/sh", "-c", 'cat > "$1"', "write", f"{SANDBOX_HOME}/{path}"], stdin=content)

    def list_files(self, path: str = "") -> list[str]:
        """Listed inside a helper sandbox as the session's uid."""
        folder = f"{SANDBOX_HOME}/{path}".rstrip("/")
        with tempfile.TemporaryFile() as nothing:
            output = self._helper(["/usr/bin/python3", "-I", "-c", LIST_SOURCE, folder], stdin=nothing)
        return sorted(line for line in output.split("\0") if line)

    # -- the workspace cap ---------------------------------------------------------------------
    def over_quota(self) -> str | None:
        """Why the workspace breaks its size cap, or None. On an image disk the filesystem holds the cap
        while writing (a write past it fails), so there is never anything to report."""
        if self.disk.uses_image:
            self.over_cap = False
            return None
        used = self.disk.used_bytes()
        self.over_cap = used > self.limits.workspace_mb * 1024 * 1024
        if not self.over_cap:
            return None
        return (
            f"The workspace holds over {used // (1024 * 1024)} MB, past its {self.limits.workspace_mb} MB cap: "
            "until files are deleted, every command but `rm` is refused and nothing is snapshotted."
        )

    def refusal(self, command: str | None = None) -> str | None:
        """While a folder disk is over its cap: why this command (anything but `rm ...`) is refused."""
        if not self.over_cap or (command is not None and command.lstrip().startswith("rm ")):
            return None
        return self.over_quota()

    # -- starting processes inside ---------------------------------------------------------
    def view(self) -> View:
        """The session's view: its workspace, the runtime's pip and its own mounts, egress, trust, and its
        variables with those that make `pip install` and `npm install -g` use its prefix."""
        installs = self.host.user_installs
        return View(
            workspace=self.workspace,
            mounts=(*installs.mounts, *self.spec.mounts),
            socket=self.proxy.socket_path,
            bundle=self.interception.bundle if self.interception else None,
            env=installs.env(self.spec.env),
        )

    def spawn(self, *inner: str) -> subprocess.Popen[bytes]:
        """Start a process in the sandbox with the session's view."""
        return self._start(self.view(), inner)

    def _start(self, view: View, inner: Sequence[str], **streams: Any) -> subprocess.Popen[bytes]:
        """Start `inner` in a sandbox with `view`, forked by the backend's long-lived spawner thread: bwrap's
        `--die-with-parent` follows the thread that forked it, so a short-lived caller thread would take
        the sandbox with it when it ends (the worker process dying still does)."""
        return self.host.spawner.submit(start, self.host.bwrap, view, self.confinement, inner, **streams).result()

    # -- the shell ---------------------------------------------------------------------------
    def run(self, command: str, *, timeout_ms: int | None = None, restart: bool = False) -> CommandResult:
        """Run `command` in the session's shell (cwd and exports persist); stdin is empty."""
        refused = self.refusal(command)
        if refused:
            return CommandResult(refused, None)
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

    def warm(self) -> None:
        """Start the shell in the background, so the turn's first command finds it running (a new shell
        costs tens of milliseconds: bubblewrap, the cgroup join, the network bridge). A command issued
        meanwhile waits for it under the lock."""
        if self.shell is None or self.shell.poll() is not None:
            threading.Thread(target=self._warm, name="sandbox-warm", daemon=True).start()

    def _warm(self) -> None:
        with self.lock, contextlib.suppress(SandboxUnavailable):  # reported by the command that needs it
            self.last_used = time.monotonic()
            self._shell()

    def _shell(self) -> subprocess.Popen[bytes]:
        """The session's shell; a new one first starts the network bridge and waits for it to listen."""
        if self.shell is None or self.shell.poll() is not None:
            self._follow_injections()
            self.shell = self.spawn("/bin/bash", "-c", SHELL_STARTUP, "sandbox", BRIDGE_SOURCE)
        return self.shell

    def _follow_injections(self) -> None:
        """A new spec's secrets (placeholders in its env) reach the proxy before a shell with that env starts."""
        if (self.interception.injections if self.interception else ()) != self.spec.injections:
            self.interception = self.host.interception_for(self.spec.injections)
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
        """Kill the shell and everything it started (the whole PID namespace goes with its init; the cgroup,
        where there is one, catches anything else of the sandbox's)."""
        shell, self.shell = self.shell, None
        if shell is not None:
            if shell.poll() is None:
                _kill_sandbox(shell)
            for pipe in (shell.stdin, shell.stdout):
                if pipe is not None:
                    with contextlib.suppress(OSError):
                        pipe.close()
        if self.cgroup is not None:
            self.cgroup.kill()

    def destroy(self) -> None:
        """Stop everything and remove the session's disk and host folder; its uid is free again after. A
        snapshot in flight lands first; none starts after."""
        with self.snapshot_lock:
            self.destroyed = True
        self.stop()
        if self.cgroup is not None:
            self.cgroup.destroy()
        self.proxy.close()
        self.disk.destroy()
        self.host.uids.release(self.uid, self.spec.session_id)


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


def _kill_sandbox(process: subprocess.Popen[bytes]) -> None:
    """Kill a sandbox's PID namespace through its init (the outer bwrap's child, a session of its own),
    so the outer bwrap reaps it and exits: no process and no zombie is left behind."""
    with contextlib.suppress(OSError):
        for child in Path(f"/proc/{process.pid}/task/{process.pid}/children").read_text().split():
            with contextlib.suppress(ProcessLookupError):
                os.killpg(int(child), 9)
    try:
        process.wait(timeout=5)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, 9)
        process.wait(timeout=10)


def _read_some(fd: int, timeout: float) -> str | None:
    """Up to 64 KiB decoded, "" on a quiet wait, None at end of file."""
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

    def __init__(self, root: Path, limits: Limits, *, on_create: Callable[[], None] | None = None) -> None:
        self.root = root
        self.limits = limits
        self.on_create = on_create  # told of each sandbox made for a session (a metric)
        self.sandboxes: dict[str, BwrapSandbox] = {}
        self.places: dict[str, Place] = {}
        self.lock = threading.Lock()
        self._host: SandboxHost | None = None
        self._host_lock = threading.Lock()
        self._bwrap: str | None = None
        self._bwrap_lock = threading.Lock()

    @property
    def host(self) -> SandboxHost:
        """The root's shared parts, set up on first use (so a root that cannot be used is reported by the
        sessions that need it, and a worker starts without waiting for a disk image)."""
        with self._host_lock:
            if self._host is None:
                try:
                    self._host = SandboxHost(self.root, self.bwrap)
                except OSError as error:
                    raise SandboxUnavailable(f"the session's sandbox could not be prepared: {error}") from None
            return self._host

    @property
    def bwrap(self) -> str:
        """The bubblewrap binary this root's sandboxes start, one every session uid can run (`bubblewrap.py`:
        a root-owned copy under `<root>/tools` where need be), chosen once."""
        with self._bwrap_lock:
            if self._bwrap is None:
                self._bwrap = usable_bwrap(self.root / "tools", lambda: private_directory(self.root, 0o711))
            return self._bwrap

    @property
    def shared(self) -> Path:
        """Where what every sandbox mounts read-only lives (skills, package layers)."""
        return self.host.shared.path

    def place(self, session_id: str) -> Place:
        """The session's uid and disk on this host, made on first use (before its sandbox starts)."""
        host = self.host
        with self.lock:
            found = self.places.get(session_id)
            if found is None:
                try:
                    found = self.places[session_id] = Place(host, session_id, self.limits)
                except OSError as error:
                    raise SandboxUnavailable(f"the session's sandbox could not be prepared: {error}") from None
            return found

    def ensure(self, spec: SandboxSpec) -> BwrapSandbox:
        """The session's sandbox, created (and restored from its snapshot) on first use here. A spec
        that changed (a resource added or removed) takes effect with the next command's new shell."""
        place = self.place(spec.session_id)
        with self.lock:
            sandbox = self.sandboxes.get(spec.session_id)
            if sandbox is None:
                sandbox = self.sandboxes[spec.session_id] = self._new_sandbox(spec, self.limits, place)
                if self.on_create is not None:
                    self.on_create()
        if sandbox.spec != spec:
            with sandbox.lock:
                sandbox.stop()
                sandbox.spec = spec
        return sandbox

    def transient(self, spec: SandboxSpec, limits: Limits) -> BwrapSandbox:
        """A sandbox this backend does not keep (a package build); the caller destroys it."""
        return self._new_sandbox(spec, limits, Place(self.host, spec.session_id, limits))

    def _new_sandbox(self, spec: SandboxSpec, limits: Limits, place: Place) -> BwrapSandbox:
        try:
            return BwrapSandbox(spec, self.host, limits, place)
        except OSError as error:
            raise SandboxUnavailable(f"the session's sandbox could not be prepared: {error}") from None

    def holds(self, session_id: str) -> bool:
        return session_id in self.sandboxes

    def health(self) -> str | None:
        """Why no sandbox can start here, or None: the worker's start-up check that bubblewrap (and every
        library it loads) starts as an unprivileged uid, as a session's sandbox starts it. The rest of the
        root is set up by the first session that needs it, which reports a root that cannot be."""
        try:
            bwrap = self.bwrap
        except (SandboxUnavailable, OSError) as problem:
            return str(problem)
        return bwrap_failure(bwrap, HOST_UID_BASE)

    def close(self) -> None:
        with self.lock:
            running = list(self.sandboxes.values())
        for sandbox in running:
            with sandbox.lock:
                sandbox.stop()

    def stop_idle(self, idle_seconds: float) -> None:
        """Stop the shells (and background processes) of sandboxes unused this long; files stay."""
        now = time.monotonic()
        with self.lock:
            idle = [box for box in self.sandboxes.values() if box.shell and now - box.last_used > idle_seconds]
        for sandbox in idle:
            with sandbox.lock:
                sandbox.stop()

    def destroy(self, session_id: str, *, forget: bool = False) -> None:
        """Stop the session's sandbox and remove its disk here; `forget` deletes its snapshot too."""
        with self.lock:
            sandbox = self.sandboxes.pop(session_id, None)
            place = self.places.pop(session_id, None)
        if sandbox is not None:
            sandbox.destroy()
        else:
            self._remove_place(session_id, place)
        if forget:
            snapshots.delete(session_id)

    def _remove_place(self, session_id: str, place: Place | None) -> None:
        """A session with a disk here but no sandbox (this worker never ran it, or ran it before a restart)."""
        try:
            host = self.host
        except SandboxUnavailable:
            return  # no sandbox can have been made under this root
        home = host.home(session_id)
        uid = place.uid if place is not None else recorded_uid(home)
        SessionDisk(home, size_mb=self.limits.workspace_mb, use_image=host.uses_images, templates=host.root).destroy()
        if uid is not None:
            host.uids.release(uid, session_id)


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


def make_backend(*, on_create: Callable[[], None] | None = None) -> BwrapBackend | None:
    """The configured backend (`REGISTRY_SANDBOX_BACKEND=bwrap|none`); None when there is none."""
    if settings.REGISTRY_SANDBOX_BACKEND != "bwrap":
        return None
    root = Path(settings.REGISTRY_SANDBOX_ROOT)
    check_traversable(root)
    return BwrapBackend(root, Limits.from_settings(), on_create=on_create)
