"""Caps the sandbox cannot lift, tried from inside: CPU (even after widening its own affinity), memory
with its tmpfs counted, sized `/tmp` and `/dev/shm`, a read-only `/dev`, the workspace cap while
writing, and a narrow kernel surface (no nested user namespace, no keyrings, io_uring, ptrace-attach or
mounts)."""

from __future__ import annotations

import platform
from collections.abc import Callable, Iterator
from dataclasses import replace

import pytest

from registry.sandbox.backend import BwrapBackend, BwrapSandbox, Limits, SandboxSpec
from registry.sandbox.seccomp import ARCHITECTURES, SYSCALL_NUMBERS

MEBIBYTE = 1024 * 1024
# Two busy processes for two seconds, after `taskset` asked for every core: the CPU time they got
# over the wall time they ran.
BURN = """
import os, time
def burn(seconds):
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        pass
started = time.monotonic()
children = [os.fork() for _ in range(2)]
if 0 in children:
    burn(2.0); os._exit(0)
for child in children:
    os.waitpid(child, 0)
usage = os.times()
print(round((usage.children_user + usage.children_system) / (time.monotonic() - started), 2))
"""
PROBED = {  # call: its arguments (refused calls, with arguments that would otherwise do something)
    "keyctl": (1, 0),  # KEYCTL_JOIN_SESSION_KEYRING
    "io_uring_setup": (8, 0),
    "ptrace": (16, 1),  # PTRACE_ATTACH to pid 1
    "mount": (0, 0, 0, 0, 0),
    "bpf": (0, 0, 0),
    "unshare": (0x10000000,),  # CLONE_NEWUSER
}
SYSCALL_PROBE = """
import ctypes, errno, sys
libc = ctypes.CDLL(None, use_errno=True)
for name, number, *arguments in {calls}:
    result = libc.syscall(number, *arguments)
    print(name, errno.errorcode.get(ctypes.get_errno(), ctypes.get_errno()) if result < 0 else "allowed")
"""


def probe_calls() -> str:
    """The probed calls with this machine's numbers (the seccomp policy's own table)."""
    column = ARCHITECTURES[platform.machine()].column
    return repr([(name, SYSCALL_NUMBERS[name][column], *arguments) for name, arguments in PROBED.items()])


@pytest.fixture
def capped(backend: BwrapBackend, limits: Limits) -> Iterator[Callable[..., BwrapSandbox]]:
    """A sandbox of a backend with other limits (its own root under the test's)."""
    made: list[BwrapBackend] = []

    def make(name: str, **changes: object) -> BwrapSandbox:
        other = BwrapBackend(backend.root / name, replace(limits, **changes))  # type: ignore[arg-type]
        made.append(other)
        return other.ensure(SandboxSpec(session_id=f"sesn_{name}", workspace_id="wsp"))

    yield make
    for other in made:
        for session_id in list(other.sandboxes):
            other.destroy(session_id, forget=True)


def test_the_cpu_cap_holds_after_the_sandbox_widens_its_affinity(capped):
    box = capped("cpu", cpus=1.0)
    box.run(f"cat > burn.py <<'EOF'\n{BURN}EOF")
    widened = box.run("taskset -pc 0-$(( $(getconf _NPROCESSORS_ONLN) - 1 )) $$ >/dev/null 2>&1; python3 burn.py")
    assert widened.exit_code == 0, widened.output
    assert float(widened.output.split()[-1]) <= 1.1, widened.output


def test_tmp_and_shm_are_sized_and_dev_is_read_only(capped):
    box = capped("tmpfs", memory_mb=512, tmp_mb=16)
    fill = box.run(
        "head -c 40M /dev/zero > /tmp/big; head -c 40M /dev/zero > /dev/shm/big; "
        "du -sm /tmp/big /dev/shm/big | cut -f1; echo x > /dev/planted"
    )
    sizes = [int(line) for line in fill.output.splitlines() if line.isdigit()]
    assert sizes and all(size <= 16 for size in sizes) and len(sizes) == 2, fill.output
    assert "No space left on device" in fill.output and "Read-only file system" in fill.output


def test_memory_and_tmpfs_together_stay_under_the_memory_cap(capped):
    box = capped("memory", memory_mb=256, tmp_mb=200)
    box.run(
        "head -c 190M /dev/zero > /tmp/a 2>/dev/null; head -c 190M /dev/zero > /dev/shm/b 2>/dev/null; "
        "python3 -c 'x = bytearray(150 * 1024 * 1024); x[::4096] = b\"y\" * len(x[::4096])' 2>/dev/null",
        timeout_ms=60_000,
    )
    held = box.run("du -sm /tmp /dev/shm 2>/dev/null | cut -f1")
    in_tmpfs = sum(int(line) for line in held.output.split() if line.isdigit())
    assert in_tmpfs <= 256 * 1.1, held.output


def test_the_workspace_cap_holds_while_writing(capped):
    box = capped("disk", workspace_mb=48)
    if not box.disk.uses_image:
        pytest.fail("this host can loop-mount images; the backend should have made one")
    written = box.run("for n in 1 2 3 4 5 6 7 8; do head -c 10M /dev/zero > f$n || break; done; du -sm . | cut -f1")
    assert "No space left on device" in written.output, written.output
    assert int(written.output.split()[-1]) <= 48 * 1.1
    assert box.over_quota() is None
    assert box.run("rm f1 f2; echo more > g; cat g").output == "more\n"


def test_a_folder_disk_refuses_every_command_but_rm_while_over_its_cap(capped, settings):
    settings.REGISTRY_SANDBOX_DISK = "directory"
    box = capped("folder", workspace_mb=2)
    assert not box.disk.uses_image
    for name in "abc":  # each file under the per-file rlimit, together over the cap
        assert box.run(f"head -c 900000 /dev/urandom > {name}.bin").exit_code == 0
    problem = box.over_quota()
    assert problem is not None and "past its 2 MB cap" in problem
    refused = box.run("echo hello")
    assert refused.exit_code is None and "every command but `rm`" in refused.output
    with pytest.raises(OSError, match="not snapshotted"):
        box.snapshot()
    assert box.run("rm a.bin b.bin").exit_code == 0
    assert box.over_quota() is None
    assert box.run("echo hello").output == "hello\n"
    box.snapshot()


def test_the_kernel_surface_is_narrow(sandbox_for):
    box = sandbox_for("sesn_kernel")
    box.run(f"cat > probe.py <<'EOF'\n{SYSCALL_PROBE.format(calls=probe_calls())}EOF")
    found = box.run("unshare -Ur true 2>/dev/null; echo userns $?; grep Seccomp: /proc/self/status; python3 probe.py")
    lines = dict(line.split(None, 1) for line in found.output.splitlines() if line.strip())
    assert lines["userns"] != "0" and lines["Seccomp:"] == "2", found.output
    for name in PROBED:
        assert lines[name] == "EPERM", found.output
    assert box.run("echo still fine").output == "still fine\n"
