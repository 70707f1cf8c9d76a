"""Per-sandbox cgroups: caps on CPU bandwidth, memory and process count that the sandbox cannot lift.

The runtime worker (root) makes one cgroup per sandbox, writes its limits, and starts each sandbox process
through a command that joins it first (`SandboxCgroup.join_command`), so the process is capped before
it drops to the session's uid. The cgroup's files stay root's: the sandbox
can read its limits but never write them, nor move itself out. Memory counts every page the sandbox's
processes are charged for, tmpfs pages they write included (the kernel charges a tmpfs page to the
writer's memory cgroup), with no swap beyond it.

`detect()` picks, once at start:

- `v2`: a delegated cgroup v2 subtree. The worker's own cgroup (`0::<path>` in /proc/self/cgroup, under
  the cgroup2 mount) must be writable and offer `cpu`, `memory` and `pids`. As a v2 cgroup with
  controllers enabled below it may hold no processes, the worker first moves its own processes into a
  leaf, `<own>/supervisor`, then enables the controllers and makes `<own>/sandbox-<name>` beside it.
  To delegate a subtree: under systemd, run the worker as a service with `Delegate=cpu memory pids`;
  in a container, give it a private cgroup namespace and a writable /sys/fs/cgroup (docs/cgroups.md).
- `v1`: separate cgroup v1 hierarchies writable by root: `<mount>/<own path>/sandbox-<name>` in each of
  `memory`, `cpu` and `pids`, and `cpuacct` when mounted (for CPU usage).
- `none`: neither is usable (not root, a read-only cgroupfs, a controller missing); `reason` says why,
  and the caller falls back to rlimits, CPU pinning that seccomp keeps the sandbox from widening, and
  sized tmpfs.

`REGISTRY_SANDBOX_CGROUP` (`auto`, `v2`, `v1` or `none`) overrides `auto`; a forced kind that is not
usable raises `CgroupUnavailable`.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import signal
import time
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from pathlib import Path

from registry.sandbox.spec import SandboxUnavailable

__all__ = ["ENVIRONMENT_VARIABLE", "CgroupManager", "CgroupUnavailable", "SandboxCgroup", "detect"]

logger = logging.getLogger(__name__)

ENVIRONMENT_VARIABLE = "REGISTRY_SANDBOX_CGROUP"
MODES = ("auto", "v2", "v1", "none")
CONTROLLERS = ("cpu", "memory", "pids")  # what a sandbox cgroup must cap
PREFIX = "sandbox-"
SUPERVISOR = "supervisor"  # the v2 leaf the worker's own processes move into
NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")
PERIOD_US = 100_000
MIN_QUOTA_US = 1_000
KILL_WAIT_SECONDS = 5.0
MOVE_ROUNDS = 10  # passes over the worker's cgroup.procs (processes it forks meanwhile join it)
# `sh -c JOIN_SCRIPT join <cgroup.procs>... -- <command>`: join each, then become the command.
JOIN_SCRIPT = 'for procs do if [ "$procs" = -- ]; then shift; exec "$@"; fi; echo 0 > "$procs" || exit 126; shift; done'
MOUNTINFO = Path("/proc/self/mountinfo")
OWN_CGROUPS = Path("/proc/self/cgroup")


class CgroupUnavailable(SandboxUnavailable):
    """The cgroup kind asked for cannot be used on this host (the message says why)."""


class SandboxCgroup:
    """One sandbox's cgroup: a directory per controller (the same one on v2; one per hierarchy on v1)."""

    def __init__(self, kind: str, name: str, directories: Mapping[str, Path]) -> None:
        self.kind = kind
        self.name = name
        self.directories = dict(directories)  # controller ("memory", "cpu", "pids", "cpuacct") -> directory

    @property
    def paths(self) -> list[Path]:
        """Its distinct directories, in controller order."""
        return list(dict.fromkeys(self.directories.values()))

    def join_command(self) -> list[str]:
        """The start of a command line that moves itself into this cgroup, then execs the rest (after a
        `--`): a shell of the host, run as root before the privileges are dropped. An exec chain rather
        than a `preexec_fn`, so the worker can spawn with vfork instead of copying its whole address space."""
        return ["/bin/sh", "-c", JOIN_SCRIPT, "join", *(str(path / "cgroup.procs") for path in self.paths), "--"]

    def pids(self) -> set[int]:
        """The processes in it now (in any of its hierarchies); none once it is gone."""
        found: set[int] = set()
        for directory in self.paths:
            with contextlib.suppress(FileNotFoundError):
                found.update(int(pid) for pid in (directory / "cgroup.procs").read_text().split())
        return found

    def kill(self) -> None:
        """SIGKILL everything in it, and wait (a bounded while) until it is empty. v2's `cgroup.kill` where
        the kernel has it; else each listed process, by pidfd, again until none is left."""
        kill_file = self.directories["memory"] / "cgroup.kill"
        use_kill_file = self.kind == "v2" and kill_file.exists()
        deadline = time.monotonic() + KILL_WAIT_SECONDS
        while pids := self.pids():
            if time.monotonic() > deadline:
                logger.warning("cgroup %s still holds %s after SIGKILL", self.name, sorted(pids))
                return
            if use_kill_file:
                _write(kill_file, "1")
            else:
                self._kill_listed(pids)
            time.sleep(0.01)

    def _kill_listed(self, pids: set[int]) -> None:
        """SIGKILL those of `pids` still in it: each is pinned by a pidfd first, and signalled only if it is
        listed again after that, so a pid reused by an unrelated process is never hit."""
        pinned: dict[int, int] = {}
        try:
            for pid in pids:
                with contextlib.suppress(ProcessLookupError):
                    pinned[pid] = os.pidfd_open(pid)
            still_in = self.pids()
            for pid, descriptor in pinned.items():
                if pid in still_in:
                    with contextlib.suppress(ProcessLookupError):
                        signal.pidfd_send_signal(descriptor, signal.SIGKILL)
        finally:
            for descriptor in pinned.values():
                os.close(descriptor)

    def destroy(self) -> None:
        """Kill what is in it and remove its directories; a directory already gone is fine, one that cannot
        be removed yet is logged and left to `CgroupManager.sweep`."""
        self.kill()
        for directory in self.paths:
            try:
                directory.rmdir()
            except FileNotFoundError:
                pass
            except OSError as error:
                logger.warning("cgroup %s not removed (%s); a later sweep retries", directory, error)

    def memory_current_bytes(self) -> int:
        """The memory charged to it now (tmpfs pages its processes wrote included)."""
        name = "memory.current" if self.kind == "v2" else "memory.usage_in_bytes"
        return int((self.directories["memory"] / name).read_text())

    def memory_peak_bytes(self) -> int | None:
        """The most memory ever charged to it (None on a v2 kernel older than 5.19, without `memory.peak`)."""
        path = self.directories["memory"] / ("memory.peak" if self.kind == "v2" else "memory.max_usage_in_bytes")
        return int(path.read_text()) if path.exists() else None

    def cpu_usage_seconds(self) -> float | None:
        """CPU time its processes used (None on v1 without a `cpuacct` hierarchy)."""
        if self.kind == "v2":
            stat = dict(line.split() for line in (self.directories["cpu"] / "cpu.stat").read_text().splitlines())
            return int(stat["usage_usec"]) / 1e6
        if "cpuacct" not in self.directories:
            return None
        return int((self.directories["cpuacct"] / "cpuacct.usage").read_text()) / 1e9


class CgroupManager:
    """Makes sandbox cgroups under the worker's own cgroup: `bases` maps each controller to the directory
    they are made in (empty for kind "none"); `reason` says why no better kind is used ("" when none was
    passed over)."""

    def __init__(self, kind: str, reason: str = "", bases: Mapping[str, Path] | None = None) -> None:
        self.kind = kind
        self.reason = reason
        self.bases = dict(bases or {})

    def create(self, name: str, *, memory_bytes: int, cpus: float, pids: int) -> SandboxCgroup | None:
        """The cgroup `sandbox-<name>` capped at `memory_bytes` (no swap), `cpus` cores (<= 0: no CPU cap)
        and `pids` tasks; an existing one of that name is reused and its limits rewritten. None for kind
        "none". Raises ValueError for a bad name or limit, OSError when the kernel refuses a limit."""
        cgroup = self._cgroup(name)
        if cgroup is None:
            return None
        if memory_bytes <= 0 or pids <= 0:
            raise ValueError(f"memory_bytes and pids must be positive, not {memory_bytes} and {pids}")
        for directory in cgroup.paths:
            directory.mkdir(mode=0o755, exist_ok=True)
        limit = _limit_v2 if self.kind == "v2" else _limit_v1
        limit(cgroup.directories, memory_bytes, cpus, pids)
        return cgroup

    def sweep(self, keep: Collection[str], *, prefix: str = "") -> list[str]:
        """Destroy the `sandbox-*` cgroups whose names start with `prefix` (one sandbox root's) and are not in
        `keep` (left by a worker that died, say), killing what is in them; returns the names removed."""
        found: set[str] = set()
        for base in dict.fromkeys(self.bases.values()):
            with contextlib.suppress(FileNotFoundError):
                found.update(entry.name.removeprefix(PREFIX) for entry in base.iterdir() if _is_sandbox(entry))
        found = {name for name in found if name.startswith(prefix)}
        stale = sorted(found - set(keep))
        for name in stale:
            cgroup = self._cgroup(name)
            if cgroup is not None:
                cgroup.destroy()
        return stale

    def _cgroup(self, name: str) -> SandboxCgroup | None:
        if not NAME.fullmatch(name):
            raise ValueError(f"a sandbox cgroup name is 1-64 of [A-Za-z0-9_-], not {name!r}")
        if self.kind == "none":
            return None
        return SandboxCgroup(self.kind, name, {c: base / f"{PREFIX}{name}" for c, base in self.bases.items()})


def detect(mode: str = "auto") -> CgroupManager:
    """The cgroup manager this host allows: `mode` "auto" (where `REGISTRY_SANDBOX_CGROUP` may name another)
    tries v2, then v1, else gives kind "none" with the reasons; "v2" or "v1" raises `CgroupUnavailable`
    when that kind is not usable; "none" never uses cgroups."""
    if mode == "auto":
        mode = os.environ.get(ENVIRONMENT_VARIABLE, "auto")
    if mode not in MODES:
        raise ValueError(f"{ENVIRONMENT_VARIABLE} is one of {', '.join(MODES)}, not {mode!r}")
    if mode == "none":
        return CgroupManager("none", f"{ENVIRONMENT_VARIABLE}=none")
    try:
        mounts = _mounts(MOUNTINFO.read_text())
        memberships = _memberships(OWN_CGROUPS.read_text())
    except OSError as error:
        return _unavailable(mode, [f"cgroups cannot be read ({error})"])
    builders: dict[str, Callable[[list[CgroupMount], dict[str, str]], CgroupManager]] = {
        "v2": _v2_manager,
        "v1": _v1_manager,
    }
    reasons: list[str] = []
    for kind, build in builders.items():
        if mode in ("auto", kind):
            try:
                manager = build(mounts, memberships)
            except CgroupUnavailable as error:
                reasons.append(f"cgroup {kind}: {error}")
            else:
                manager.reason = "; ".join(reasons)
                return manager
    return _unavailable(mode, reasons)


def _unavailable(mode: str, reasons: list[str]) -> CgroupManager:
    reason = "; ".join(reasons)
    if mode != "auto":
        raise CgroupUnavailable(f"{ENVIRONMENT_VARIABLE}={mode}, but {reason}")
    return CgroupManager("none", reason)


@dataclass(frozen=True)
class CgroupMount:
    """A cgroup filesystem mount: the cgroup shown at `point` (`root`), its type and super options."""

    root: str
    point: Path
    fstype: str  # "cgroup2", or "cgroup" (v1)
    options: frozenset[str]  # for v1, the controllers of the hierarchy among them

    def directory(self, cgroup: str) -> Path:
        """Where the cgroup `cgroup` (a path as /proc/self/cgroup gives it) is under this mount."""
        root = self.root.rstrip("/")
        if not (cgroup == root or cgroup.startswith(f"{root}/")) or ".." in cgroup.split("/"):
            raise CgroupUnavailable(f"the worker's cgroup {cgroup} is not under {self.point}")
        return self.point / cgroup[len(root) :].lstrip("/")


def _mounts(mountinfo: str) -> list[CgroupMount]:
    """The cgroup mounts of a /proc/<pid>/mountinfo text."""
    found = []
    for line in mountinfo.splitlines():
        before, _, after = line.partition(" - ")
        fields, tail = before.split(), after.split()
        if len(fields) >= 5 and len(tail) >= 3 and tail[0] in ("cgroup", "cgroup2"):
            point = Path(re.sub(r"\\([0-7]{3})", lambda match: chr(int(match[1], 8)), fields[4]))
            found.append(CgroupMount(fields[3], point, tail[0], frozenset(tail[2].split(","))))
    return found


def _memberships(proc_cgroup: str) -> dict[str, str]:
    """Controller -> cgroup path from a /proc/<pid>/cgroup text; "" is the v2 hierarchy."""
    found: dict[str, str] = {}
    for line in proc_cgroup.splitlines():
        _, controllers, path = line.split(":", 2)
        for controller in controllers.split(","):
            found[controller] = path
    return found


def _v2_manager(mounts: list[CgroupMount], memberships: dict[str, str]) -> CgroupManager:
    """Sandbox cgroups beside the worker in its delegated v2 cgroup, once that is made ready for them."""
    mount = next((m for m in mounts if m.fstype == "cgroup2"), None)
    if mount is None or "" not in memberships:
        raise CgroupUnavailable("no cgroup2 mount")
    own = mount.directory(memberships[""])
    if own.name == SUPERVISOR:  # this worker already moved itself into its leaf
        own = own.parent
    try:
        offered = set((own / "cgroup.controllers").read_text().split())
    except OSError as error:
        raise CgroupUnavailable(f"{own} cannot be read ({error})") from None
    missing = [controller for controller in CONTROLLERS if controller not in offered]
    if missing:
        raise CgroupUnavailable(f"{own} does not offer {', '.join(missing)}")
    for path in (own, own / "cgroup.procs", own / "cgroup.subtree_control"):
        _require_writable(path)
    try:
        _delegate(own)
    except OSError as error:
        raise CgroupUnavailable(f"{own} could not be prepared ({error})") from None
    return CgroupManager("v2", bases=dict.fromkeys(CONTROLLERS, own))


def _delegate(own: Path) -> None:
    """Let `own` hold sandbox cgroups: its processes into the `supervisor` leaf (the root cgroup, which has
    no `cgroup.type`, is exempt from "no internal processes"), then its controllers enabled below it."""
    if (own / "cgroup.type").exists():
        leaf = own / SUPERVISOR
        leaf.mkdir(mode=0o755, exist_ok=True)
        for _ in range(MOVE_ROUNDS):
            pids = (own / "cgroup.procs").read_text().split()
            if not pids:
                break
            for pid in pids:
                with contextlib.suppress(ProcessLookupError):  # it exited meanwhile
                    _write(leaf / "cgroup.procs", pid)
    _write(own / "cgroup.subtree_control", " ".join(f"+{controller}" for controller in CONTROLLERS))


def _v1_manager(mounts: list[CgroupMount], memberships: dict[str, str]) -> CgroupManager:
    """Sandbox cgroups under the worker's own cgroup of each v1 hierarchy (cpuacct's too when mounted)."""
    bases = {controller: _v1_base(controller, mounts, memberships) for controller in CONTROLLERS}
    with contextlib.suppress(CgroupUnavailable):
        bases["cpuacct"] = _v1_base("cpuacct", mounts, memberships)
    return CgroupManager("v1", bases=bases)


def _v1_base(controller: str, mounts: list[CgroupMount], memberships: dict[str, str]) -> Path:
    mount = next((m for m in mounts if m.fstype == "cgroup" and controller in m.options), None)
    if mount is None or controller not in memberships:
        raise CgroupUnavailable(f"no {controller} hierarchy")
    base = mount.directory(memberships[controller])
    _require_writable(base)
    return base


def _require_writable(path: Path) -> None:
    if not os.access(path, os.W_OK):
        raise CgroupUnavailable(f"{path} is not writable by uid {os.geteuid()}")


def _limit_v2(directories: Mapping[str, Path], memory_bytes: int, cpus: float, pids: int) -> None:
    directory = directories["memory"]
    _write(directory / "memory.max", str(memory_bytes))
    if (directory / "memory.swap.max").exists():
        _write(directory / "memory.swap.max", "0")
    _write(directory / "cpu.max", f"{_quota_us(cpus) or 'max'} {PERIOD_US}")
    _write(directory / "pids.max", str(pids))


def _limit_v1(directories: Mapping[str, Path], memory_bytes: int, cpus: float, pids: int) -> None:
    _limit_v1_memory(directories["memory"], memory_bytes)
    _write(directories["cpu"] / "cpu.cfs_period_us", str(PERIOD_US))
    _write(directories["cpu"] / "cpu.cfs_quota_us", str(_quota_us(cpus) or -1))
    _write(directories["pids"] / "pids.max", str(pids))


def _limit_v1_memory(directory: Path, memory_bytes: int) -> None:
    """`memory.limit_in_bytes`, then memory+swap to the same (no swap). The kernel keeps memory+swap at or
    above memory, so a limit raised past the current memory+swap is written after it instead."""
    files = [directory / "memory.limit_in_bytes", directory / "memory.memsw.limit_in_bytes"]
    if not files[1].exists():
        files.pop()
    elif memory_bytes > int(files[1].read_text()):
        files.reverse()
    for path in files:
        _write(path, str(memory_bytes))


def _quota_us(cpus: float) -> int | None:
    """The CPU quota per period for `cpus` cores (None: no cap)."""
    return max(MIN_QUOTA_US, round(cpus * PERIOD_US)) if cpus > 0 else None


def _is_sandbox(entry: Path) -> bool:
    """A sandbox cgroup's directory: `sandbox-<valid name>`."""
    name = entry.name.removeprefix(PREFIX)
    return name != entry.name and bool(NAME.fullmatch(name)) and entry.is_dir()


def _write(path: Path, value: str) -> None:
    """One write of `value` to an existing (cgroup) file."""
    descriptor = os.open(path, os.O_WRONLY | os.O_CLOEXEC)
    try:
        os.write(descriptor, value.encode())
    finally:
        os.close(descriptor)
