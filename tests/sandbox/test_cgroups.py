"""The sandbox cgroups, for real on this host (run as root): joining at spawn, the CPU, memory (tmpfs
included) and process caps, an unprivileged member's lack of write access, destroy and sweep; and the
v2 delegation and limit writing against a fake cgroup tree."""

from __future__ import annotations

import contextlib
import errno
import os
import secrets
import signal
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from fakes.waiting import wait_until
from registry.sandbox import cgroups
from registry.sandbox.cgroups import CgroupManager, CgroupMount, SandboxCgroup

MiB = 1 << 20
PYTHON = "/usr/bin/python3"  # the system's, which an unprivileged uid can run (the venv's is under /root)
UNPRIVILEGED = 250123
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")

Spawn = Callable[..., "subprocess.Popen[str]"]
Make = Callable[..., SandboxCgroup]

SLEEP = "import time\ntime.sleep(60)"
BUSY = """
import os, sys
if sys.argv[1] == "widen":
    os.sched_setaffinity(0, {0, 1})
print(sorted(os.sched_getaffinity(0)), flush=True)
while True:
    pass
"""
ALLOCATE = """
import sys
block = b"x" * (int(sys.argv[1]) << 20)
print(len(block) >> 20, flush=True)
"""
FILL = """
import sys
with open(sys.argv[1], "wb") as file:
    for _ in range(int(sys.argv[2])):
        file.write(b"x" * (1 << 20))
        file.flush()
print("written", flush=True)
"""
FORK_LOOP = """
import os, signal, time
children = []
try:
    while len(children) < 100:
        pid = os.fork()
        if pid == 0:
            time.sleep(60)
            os._exit(0)
        children.append(pid)
except OSError as error:
    print(len(children), error.errno, flush=True)
for pid in children:
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
"""
TRY_WRITE = """
import sys
for path in sys.argv[1:]:
    try:
        with open(path, "w") as file:
            file.write("0")
        print("wrote", path, flush=True)
    except PermissionError:
        print("refused", path, flush=True)
"""


@pytest.fixture
def manager(monkeypatch: pytest.MonkeyPatch) -> CgroupManager:
    monkeypatch.delenv(cgroups.ENVIRONMENT_VARIABLE, raising=False)
    detected = cgroups.detect()
    assert detected.kind in ("v1", "v2"), f"these tests need real cgroups (run as root): {detected.reason}"
    return detected


@pytest.fixture
def made(manager: CgroupManager) -> Iterator[Make]:
    """Sandbox cgroups of unique names (other workers' tests may share this host), destroyed after."""
    token = secrets.token_hex(4)
    created: list[SandboxCgroup] = []

    def make(name: str = "", *, memory_bytes: int = 256 * MiB, cpus: float = 0.0, pids: int = 64) -> SandboxCgroup:
        name = name or f"test-{token}-{len(created)}"
        cgroup = manager.create(name, memory_bytes=memory_bytes, cpus=cpus, pids=pids)
        assert cgroup is not None
        created.append(cgroup)
        return cgroup

    yield make
    for cgroup in created:
        cgroup.destroy()
    assert not [path for cgroup in created for path in cgroup.paths if path.exists()]


@pytest.fixture
def run_in() -> Iterator[Spawn]:
    """Starts Python code in a cgroup the way the runtime does: join through the cgroup's command, then
    (optionally) drop to an unprivileged uid, then exec. Every process is killed and reaped after the test."""
    started: list[subprocess.Popen[str]] = []

    def start(cgroup: SandboxCgroup, code: str, *args: str, uid: int | None = None) -> subprocess.Popen[str]:
        drop = ["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups"] if uid is not None else []
        process = subprocess.Popen(
            [*cgroup.join_command(), *drop, PYTHON, "-I", "-S", "-c", code, *args],
            cwd="/",
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )

        def joined() -> bool:  # (a quick one may already have exited)
            return process.pid in cgroup.pids() or process.poll() is not None

        wait_until(joined, timeout=5, what="the process to join its cgroup")
        started.append(process)
        return process

    yield start
    for process in started:
        with contextlib.suppress(ProcessLookupError):
            process.kill()
        process.wait()
        for pipe in (process.stdout, process.stderr):
            if pipe is not None:
                pipe.close()


@pytest.fixture
def tmpfs() -> Iterator[Path]:
    """A 200 MiB tmpfs anyone may write to, mounted by root (as bubblewrap mounts the sandbox's /tmp)."""
    point = Path(tempfile.mkdtemp(prefix="cgroup-tmpfs-", dir="/tmp"))
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=200M,mode=1777", "tmpfs", str(point)], check=True)
    try:
        yield point
    finally:
        subprocess.run(["umount", str(point)], check=True)
        point.rmdir()


@pytest.fixture
def scoped(manager: CgroupManager) -> Iterator[CgroupManager]:
    """A manager whose bases are fresh test cgroups below the detected ones, so a sweep cannot reach the
    sandbox cgroups of anything else running on this host."""
    token = secrets.token_hex(4)
    bases = {controller: base / f"test-scope-{token}" for controller, base in manager.bases.items()}
    for base in dict.fromkeys(bases.values()):
        base.mkdir()
        if manager.kind == "v2":
            (base / "cgroup.subtree_control").write_text("+cpu +memory +pids")
    scope = CgroupManager(manager.kind, "", bases)
    yield scope
    scope.sweep(keep=set())
    for base in dict.fromkeys(bases.values()):
        base.rmdir()


def memberships(pid: int) -> dict[str, str]:
    """Controller -> cgroup path of a process ("" for v2)."""
    found: dict[str, str] = {}
    for line in Path(f"/proc/{pid}/cgroup").read_text().splitlines():
        _, controllers, path = line.split(":", 2)
        found.update(dict.fromkeys(controllers.split(","), path))
    return found


def cpu_ticks(pid: int) -> int:
    """utime + stime of a process, in clock ticks."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])


def throttled_periods(cgroup: SandboxCgroup) -> int:
    """The CPU periods in which the cgroup ran out of quota."""
    stat = (cgroup.directories["cpu"] / "cpu.stat").read_text().split()
    return int(stat[stat.index("nr_throttled") + 1])


def limit_files(cgroup: SandboxCgroup) -> list[Path]:
    """The limit files of a sandbox cgroup that exist on this host."""
    if cgroup.kind == "v1":
        names = [
            ("memory", "memory.limit_in_bytes"),
            ("memory", "memory.memsw.limit_in_bytes"),
            ("cpu", "cpu.cfs_period_us"),
            ("cpu", "cpu.cfs_quota_us"),
            ("pids", "pids.max"),
        ]
    else:
        names = [("memory", "memory.max"), ("memory", "memory.swap.max"), ("cpu", "cpu.max"), ("pids", "pids.max")]
    paths = [cgroup.directories[controller] / name for controller, name in names]
    return [path for path in paths if path.exists()]


def limits_of(cgroup: SandboxCgroup) -> dict[str, str]:
    return {path.name: path.read_text().strip() for path in limit_files(cgroup)}


def expected_limits(cgroup: SandboxCgroup, memory_bytes: int, quota_us: int | None, pids: int) -> dict[str, str]:
    if cgroup.kind == "v1":
        expected = {
            "memory.limit_in_bytes": str(memory_bytes),
            "memory.memsw.limit_in_bytes": str(memory_bytes),
            "cpu.cfs_period_us": "100000",
            "cpu.cfs_quota_us": str(quota_us or -1),
            "pids.max": str(pids),
        }
    else:
        expected = {
            "memory.max": str(memory_bytes),
            "memory.swap.max": "0",
            "cpu.max": f"{quota_us or 'max'} 100000",
            "pids.max": str(pids),
        }
    present = {path.name for path in limit_files(cgroup)}
    return {name: value for name, value in expected.items() if name in present}


def alive(pid: int) -> bool:
    """Whether `pid` is a process that has not exited (a zombie has)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def test_detects_the_cgroups_of_this_host(manager: CgroupManager) -> None:
    mountinfo = Path("/proc/self/mountinfo").read_text().splitlines()
    v1_memory = any(" - cgroup cgroup " in line and "memory" in line.split()[-1].split(",") for line in mountinfo)
    assert manager.kind == ("v1" if v1_memory else "v2")
    if manager.kind == "v1":  # this host: memory, cpu, cpuacct and pids are separate hierarchies
        own = memberships(os.getpid())
        for controller in ("memory", "cpu", "pids", "cpuacct"):
            assert manager.bases[controller] == Path("/sys/fs/cgroup", controller, own[controller].lstrip("/"))
        with pytest.raises(cgroups.CgroupUnavailable, match="REGISTRY_SANDBOX_CGROUP=v2, but cgroup v2: "):
            cgroups.detect("v2")


def test_none_and_the_environment_override(monkeypatch: pytest.MonkeyPatch) -> None:
    none = cgroups.detect("none")
    assert (none.kind, none.reason) == ("none", "REGISTRY_SANDBOX_CGROUP=none")
    assert none.create("abc", memory_bytes=MiB, cpus=1, pids=1) is None
    assert none.sweep(keep=set()) == []
    monkeypatch.setenv(cgroups.ENVIRONMENT_VARIABLE, "none")
    assert cgroups.detect().kind == "none"
    monkeypatch.setenv(cgroups.ENVIRONMENT_VARIABLE, "v3")
    with pytest.raises(ValueError, match="not 'v3'"):
        cgroups.detect()


@pytest.mark.parametrize("name", ["", "../memory", "a/b", "a b", "x" * 65, "ünï"])
def test_names_are_validated(manager: CgroupManager, name: str) -> None:
    with pytest.raises(ValueError, match="1-64 of"):
        manager.create(name, memory_bytes=MiB, cpus=1, pids=1)


def open_files(pid: int) -> list[str]:
    """What the process's descriptors point at (one closed between the listing and its reading is not held)."""
    targets = []
    for entry in Path(f"/proc/{pid}/fd").iterdir():
        with contextlib.suppress(FileNotFoundError):
            targets.append(os.readlink(entry))
    return targets


def test_a_process_joins_at_spawn_and_keeps_no_cgroup_descriptor(made: Make, run_in: Spawn) -> None:
    cgroup = made()
    process = run_in(cgroup, SLEEP)
    joined = memberships(process.pid)
    for controller, directory in cgroup.directories.items():
        assert joined["" if cgroup.kind == "v2" else controller].endswith(f"/{directory.name}")
    assert cgroup.pids() == {process.pid}
    assert not [target for target in open_files(process.pid) if "cgroup" in target]


def test_cpu_quota_holds_two_busy_processes_to_one_core_even_with_affinity_widened(made: Make, run_in: Spawn) -> None:
    cgroup = made(cpus=1.0)
    widened, other = run_in(cgroup, BUSY, "widen"), run_in(cgroup, BUSY, "stay")
    assert widened.stdout is not None and other.stdout is not None
    assert widened.stdout.readline().strip() == "[0, 1]"
    other.stdout.readline()
    usage, ticks, started = cgroup.cpu_usage_seconds(), cpu_ticks(widened.pid) + cpu_ticks(other.pid), time.monotonic()
    time.sleep(1.5)
    usage_after, ticks_after = cgroup.cpu_usage_seconds(), cpu_ticks(widened.pid) + cpu_ticks(other.pid)
    elapsed = time.monotonic() - started
    assert usage is not None and usage_after is not None
    cores_by_cgroup = (usage_after - usage) / elapsed
    cores_by_process = (ticks_after - ticks) / CLOCK_TICKS / elapsed
    assert 0.2 < cores_by_cgroup <= 1.1
    assert cores_by_process <= 1.1
    # A busy host may not give them a full core anyway: rewritten live to a tenth of one, the cap bites.
    made(cgroup.name, cpus=0.1)
    usage, throttled, started = cgroup.cpu_usage_seconds(), throttled_periods(cgroup), time.monotonic()
    time.sleep(1.0)
    usage_after = cgroup.cpu_usage_seconds()
    assert usage is not None and usage_after is not None
    assert (usage_after - usage) / (time.monotonic() - started) <= 0.15
    assert throttled_periods(cgroup) > throttled


def test_memory_cap_kills_an_unprivileged_process_past_it(made: Make, run_in: Spawn) -> None:
    cgroup = made(memory_bytes=64 * MiB)
    small = run_in(cgroup, ALLOCATE, "16", uid=UNPRIVILEGED)
    output, errors = small.communicate(timeout=10)
    assert (small.returncode, output.strip()) == (0, "16"), errors
    big = run_in(cgroup, ALLOCATE, "200", uid=UNPRIVILEGED)
    output, _ = big.communicate(timeout=10)
    assert (big.returncode, output) == (-signal.SIGKILL, "")
    peak = cgroup.memory_peak_bytes()
    assert peak is None or peak <= 64 * MiB


def test_tmpfs_pages_the_process_writes_count_against_its_memory(made: Make, run_in: Spawn, tmpfs: Path) -> None:
    cgroup = made(memory_bytes=64 * MiB)
    filler = run_in(cgroup, FILL, str(tmpfs / "fill"), "100", uid=UNPRIVILEGED)
    output, _ = filler.communicate(timeout=10)
    assert filler.returncode != 0 and "written" not in output
    assert (tmpfs / "fill").stat().st_size < 64 * MiB
    peak = cgroup.memory_peak_bytes()
    assert peak is None or peak > 48 * MiB  # the interpreter alone is ~10 MiB: the tmpfs pages were charged


def test_pids_cap_stops_a_fork_loop(made: Make, run_in: Spawn) -> None:
    cgroup = made(pids=10)
    looper = run_in(cgroup, FORK_LOOP)  # as root, which RLIMIT_NPROC would not stop
    output, errors = looper.communicate(timeout=10)
    assert looper.returncode == 0, errors
    assert output.split() == ["9", str(errno.EAGAIN)]  # the loop itself is the tenth


def test_an_unprivileged_member_cannot_write_its_cgroup(made: Make, run_in: Spawn) -> None:
    cgroup = made(memory_bytes=64 * MiB, cpus=0.5, pids=10)
    before = limits_of(cgroup)
    targets = [*limit_files(cgroup), *(d / "cgroup.procs" for d in cgroup.paths)]
    targets += [d.parent / "cgroup.procs" for d in cgroup.paths]  # and cannot move itself out
    writer = run_in(cgroup, TRY_WRITE, *map(str, targets), uid=UNPRIVILEGED)
    output, errors = writer.communicate(timeout=10)
    assert writer.returncode == 0, errors
    assert output.splitlines() == [f"refused {target}" for target in targets]
    assert limits_of(cgroup) == before == expected_limits(cgroup, 64 * MiB, 50_000, 10)


def test_create_reuses_a_cgroup_and_rewrites_its_limits(made: Make) -> None:
    first = made(memory_bytes=64 * MiB, cpus=1.0, pids=10)
    assert limits_of(first) == expected_limits(first, 64 * MiB, 100_000, 10)
    raised = made(first.name, memory_bytes=256 * MiB, cpus=0.5, pids=20)  # memory+swap must rise first
    assert raised.paths == first.paths
    assert limits_of(raised) == expected_limits(raised, 256 * MiB, 50_000, 20)
    lowered = made(first.name, memory_bytes=32 * MiB, cpus=0, pids=5)
    assert limits_of(lowered) == expected_limits(lowered, 32 * MiB, None, 5)


def test_destroy_kills_what_is_left_and_removes_the_cgroup(made: Make, run_in: Spawn) -> None:
    cgroup = made()
    process = run_in(cgroup, "import os, time\nos.fork()\ntime.sleep(60)")
    deadline = time.monotonic() + 5
    while len(cgroup.pids()) < 2 and time.monotonic() < deadline:
        time.sleep(0.01)
    members = cgroup.pids()
    assert len(members) == 2
    cgroup.destroy()
    assert process.wait(timeout=5) == -signal.SIGKILL
    assert not [pid for pid in members if alive(pid)]
    assert not [path for path in cgroup.paths if path.exists()]
    cgroup.destroy()  # again: already gone is fine
    assert cgroup.pids() == set()


def test_sweep_removes_the_stale_sandbox_cgroups_only(scoped: CgroupManager, run_in: Spawn) -> None:
    kept = scoped.create("kept", memory_bytes=64 * MiB, cpus=0, pids=10)
    stale = scoped.create("stale", memory_bytes=64 * MiB, cpus=0, pids=10)
    assert kept is not None and stale is not None
    other = scoped.bases["memory"] / "not-a-sandbox"
    other.mkdir()
    try:
        left_running = run_in(stale, SLEEP)
        assert scoped.sweep(keep={"kept"}) == ["stale"]
        assert left_running.wait(timeout=5) == -signal.SIGKILL
        assert not [path for path in stale.paths if path.exists()]
        assert all(path.is_dir() for path in kept.paths) and other.is_dir()
    finally:
        other.rmdir()


def fake_v2_tree(own: Path, controllers: str) -> None:
    """What a delegated v2 cgroup shows, as plain files: its processes already moved out, for the kernel
    would move them."""
    own.mkdir(parents=True)
    for name, content in {
        "cgroup.type": "domain",
        "cgroup.procs": "",
        "cgroup.controllers": controllers,
        "cgroup.subtree_control": "",
    }.items():
        (own / name).write_text(content)


def test_v2_delegation_and_limits_against_a_fake_tree(tmp_path: Path) -> None:
    fake_v2_tree(tmp_path / "worker", "cpuset cpu io memory pids")
    mounts = [CgroupMount("/", tmp_path, "cgroup2", frozenset({"rw"}))]
    manager = cgroups._v2_manager(mounts, {"": "/worker"})
    assert manager.kind == "v2"
    assert manager.bases == dict.fromkeys(["cpu", "memory", "pids"], tmp_path / "worker")
    assert (tmp_path / "worker" / "supervisor").is_dir()
    assert (tmp_path / "worker" / "cgroup.subtree_control").read_text() == "+cpu +memory +pids"
    # a second start, already in its leaf, delegates the same cgroup
    assert cgroups._v2_manager(mounts, {"": "/worker/supervisor"}).bases == manager.bases
    sandbox = tmp_path / "worker" / "sandbox-s1"  # as the kernel makes it (a reused one: create rewrites)
    sandbox.mkdir()
    for name in ("cgroup.procs", "memory.max", "memory.swap.max", "cpu.max", "pids.max"):
        (sandbox / name).write_text("")
    cgroup = manager.create("s1", memory_bytes=64 * MiB, cpus=1.5, pids=10)
    assert cgroup is not None and cgroup.paths == [sandbox]
    assert limits_of(cgroup) == {
        "memory.max": str(64 * MiB),
        "memory.swap.max": "0",
        "cpu.max": "150000 100000",
        "pids.max": "10",
    }


def test_v2_without_a_controller_or_outside_the_mount_is_unusable(tmp_path: Path) -> None:
    fake_v2_tree(tmp_path / "worker", "cpu memory")
    mounts = [CgroupMount("/", tmp_path, "cgroup2", frozenset({"rw"}))]
    with pytest.raises(cgroups.CgroupUnavailable, match="does not offer pids"):
        cgroups._v2_manager(mounts, {"": "/worker"})
    assert not (tmp_path / "worker" / "supervisor").exists()
    bound = [CgroupMount("/other", tmp_path, "cgroup2", frozenset({"rw"}))]
    with pytest.raises(cgroups.CgroupUnavailable, match="is not under"):
        cgroups._v2_manager(bound, {"": "/otherwise/worker"})
