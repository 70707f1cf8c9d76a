"""The sandbox's seccomp filter: its program read instruction by instruction (for every architecture it
supports), and real bubblewrap sandboxes under it, where each refused call fails and ordinary work runs."""

from __future__ import annotations

import atexit
import errno
import functools
import os
import platform
import re
import shutil
import signal
import struct
import subprocess
import tempfile
from collections.abc import Sequence
from pathlib import Path

import pytest

from registry.sandbox import seccomp
from registry.sandbox.bubblewrap import usable_bwrap
from registry.sandbox.seccomp import (
    AFFINITY,
    ARCHITECTURES,
    REFUSED,
    SECCOMP_RET_ALLOW,
    SECCOMP_RET_ERRNO,
    SECCOMP_RET_KILL_PROCESS,
    SYSCALL_NUMBERS,
    UnsupportedArchitecture,
    program_for,
)
from registry.sandbox.spec import SandboxUnavailable

SUPPORTED = ("x86_64", "aarch64")
MACHINE = platform.machine()
# A host uid just below the allocator's range (`uids.py`), so that no live sandbox shares it.
SANDBOX_UID = 199_990
# A refusal errno no refused call returns by itself: with it, a refusal is the filter's and not the kernel's.
MARK = errno.ENOTRECOVERABLE
REFUSED_EPERM = SECCOMP_RET_ERRNO | errno.EPERM
AUDIT_ARCH_I386 = 0x4000_0003
AUDIT_ARCH_ARM = 0x4000_0028
# Calls every program makes (numbers from the same headers as the filter's table).
ORDINARY = {
    "x86_64": {"read": 0, "write": 1, "execve": 59, "clone": 56, "clone3": 435, "openat": 257, "chroot": 161,
               "adjtimex": 159, "sched_getaffinity": 204, "statmount": 457},
    "aarch64": {"read": 63, "write": 64, "execve": 221, "clone": 220, "clone3": 435, "openat": 56, "chroot": 51,
                "adjtimex": 171, "sched_getaffinity": 123, "statmount": 457},
}  # fmt: skip
HEADERS = {
    "x86_64": Path("/usr/include/x86_64-linux-gnu/asm/unistd_64.h"),
    "aarch64": Path("/usr/include/asm-generic/unistd.h"),
}


# -- the program, instruction by instruction -----------------------------------------------------------
def instructions(program: bytes) -> list[tuple[int, int, int, int]]:
    return [struct.unpack_from("<HBBI", program, offset) for offset in range(0, len(program), 8)]


def verdict(program: bytes, *, nr: int, arch: int, args: Sequence[int] = (), loaded: set[int] | None = None) -> int:
    """What the program answers for one system call, run the way the kernel runs it; the offsets of
    `struct seccomp_data` it read go to `loaded`."""
    words = [*args, *[0] * (6 - len(args))]
    data = struct.pack("<II8x6Q", nr & 0xFFFF_FFFF, arch, *words)
    code_at = instructions(program)
    accumulator, pc = 0, 0
    while True:
        code, jump_true, jump_false, k = code_at[pc]
        if code == seccomp.BPF_LD_W_ABS:
            (accumulator,) = struct.unpack_from("<I", data, k)
            if loaded is not None:
                loaded.add(k)
            pc += 1
        elif code == seccomp.BPF_JMP_JEQ_K:
            pc += 1 + (jump_true if accumulator == k else jump_false)
        elif code == seccomp.BPF_JMP_JGE_K:
            pc += 1 + (jump_true if accumulator >= k else jump_false)
        elif code == seccomp.BPF_RET_K:
            return k
        else:
            raise AssertionError(f"instruction {pc} has an unexpected code {code:#x}")


def numbers(machine: str, names: Sequence[str]) -> list[tuple[str, int]]:
    column = ARCHITECTURES[machine].column
    return [(name, number) for name in names if (number := SYSCALL_NUMBERS[name][column]) is not None]


@pytest.mark.parametrize("deny_affinity", [True, False])
@pytest.mark.parametrize("machine", SUPPORTED)
def test_the_program_is_well_formed(machine: str, deny_affinity: bool) -> None:
    program = program_for(machine, deny_affinity=deny_affinity)
    assert len(program) % 8 == 0
    code_at = instructions(program)
    assert 0 < len(code_at) <= 4096
    assert code_at[-1][0] == seccomp.BPF_RET_K
    known = {seccomp.BPF_LD_W_ABS, seccomp.BPF_JMP_JEQ_K, seccomp.BPF_JMP_JGE_K, seccomp.BPF_RET_K}
    for index, (code, jump_true, jump_false, k) in enumerate(code_at):
        assert code in known, index
        if code == seccomp.BPF_LD_W_ABS:  # inside struct seccomp_data (64 bytes), one aligned word
            assert k % 4 == 0 and k < 64, index
        if code in (seccomp.BPF_JMP_JEQ_K, seccomp.BPF_JMP_JGE_K):
            assert index + 1 + max(jump_true, jump_false) < len(code_at), index
        else:
            assert jump_true == jump_false == 0, index


@pytest.mark.parametrize("machine", SUPPORTED)
def test_each_refused_call_is_refused_and_ordinary_ones_are_allowed(machine: str) -> None:
    program = program_for(machine, deny_affinity=False)
    arch = ARCHITECTURES[machine].audit_arch
    refused = numbers(machine, [name for refusal in REFUSED for name in refusal.names])
    assert len(refused) >= 45
    for name, number in refused:
        assert verdict(program, nr=number, arch=arch) == REFUSED_EPERM, name
    for name, number in ORDINARY[machine].items():
        assert verdict(program, nr=number, arch=arch) == SECCOMP_RET_ALLOW, name
    assert verdict(program, nr=ORDINARY[machine]["read"], arch=arch, args=(0xFFFF_FFFF,)) == SECCOMP_RET_ALLOW


@pytest.mark.parametrize("machine", SUPPORTED)
def test_calls_no_rule_names_are_allowed_without_reading_their_arguments(machine: str) -> None:
    """So the kernel's cache of always-allowed calls holds them, and they never run the filter."""
    program = program_for(machine, deny_affinity=True)
    arch = ARCHITECTURES[machine].audit_arch
    named = {number for row in SYSCALL_NUMBERS.values() if (number := row[ARCHITECTURES[machine].column]) is not None}
    checked = 0
    for nr in set(range(1024)) - named:
        loaded: set[int] = set()
        assert verdict(program, nr=nr, arch=arch, args=(16, 0x40000), loaded=loaded) == SECCOMP_RET_ALLOW, nr
        assert loaded == {seccomp.OFFSET_ARCH, seccomp.OFFSET_NR}, nr
        checked += 1
    assert checked > 900


def test_io_ports_are_refused_only_where_they_exist() -> None:
    assert [name for name, _ in numbers("x86_64", ["iopl", "ioperm"])] == ["iopl", "ioperm"]
    assert numbers("aarch64", ["iopl", "ioperm"]) == []


@pytest.mark.parametrize("machine", SUPPORTED)
def test_sched_setaffinity_is_refused_only_with_deny_affinity(machine: str) -> None:
    arch = ARCHITECTURES[machine].audit_arch
    [(_, number)] = numbers(machine, ["sched_setaffinity"])
    assert verdict(program_for(machine, deny_affinity=True), nr=number, arch=arch) == REFUSED_EPERM
    assert verdict(program_for(machine, deny_affinity=False), nr=number, arch=arch) == SECCOMP_RET_ALLOW


@pytest.mark.parametrize("machine", SUPPORTED)
def test_a_foreign_architecture_kills_the_process(machine: str) -> None:
    program = program_for(machine, deny_affinity=False)
    native = ARCHITECTURES[machine].audit_arch
    other_supported = next(found.audit_arch for found in ARCHITECTURES.values() if found.audit_arch != native)
    for arch in (AUDIT_ARCH_I386, AUDIT_ARCH_ARM, other_supported, 0):
        for nr in (0, 20, 39, 172):  # harmless calls too: nothing of another ABI passes
            assert verdict(program, nr=nr, arch=arch) == SECCOMP_RET_KILL_PROCESS, (hex(arch), nr)


def test_x32_calls_are_refused_and_a_skipped_call_passes() -> None:
    program = program_for("x86_64", deny_affinity=False)
    arch = ARCHITECTURES["x86_64"].audit_arch
    for nr in (0x4000_0000 | 39, 0x4000_0000 | 250, 0x4000_0000 | 521, 0x7FFF_FFFF):  # getpid, keyctl, x32 ptrace
        assert verdict(program, nr=nr, arch=arch) == REFUSED_EPERM, hex(nr)
    assert verdict(program, nr=-1, arch=arch) == SECCOMP_RET_ALLOW


@pytest.mark.parametrize("machine", SUPPORTED)
def test_personality_allows_only_dockers_values(machine: str) -> None:
    program = program_for(machine, deny_affinity=False)
    arch = ARCHITECTURES[machine].audit_arch
    [(_, number)] = numbers(machine, ["personality"])
    for persona in (0x0, 0x8, 0x20000, 0x20008, 0xFFFF_FFFF, 0xFFFF_FFFF_0000_0008):  # the kernel reads 32 bits
        assert verdict(program, nr=number, arch=arch, args=(persona,)) == SECCOMP_RET_ALLOW, hex(persona)
    for persona in (0x0040000, 0x0400000, 0x1, 0x20001, 0xFFFF_FFFE):  # ADDR_NO_RANDOMIZE, READ_IMPLIES_EXEC, ...
        assert verdict(program, nr=number, arch=arch, args=(persona,)) == REFUSED_EPERM, hex(persona)


@pytest.mark.parametrize("machine", SUPPORTED)
def test_ptrace_refuses_attaching_only(machine: str) -> None:
    program = program_for(machine, deny_affinity=False)
    arch = ARCHITECTURES[machine].audit_arch
    [(_, number)] = numbers(machine, ["ptrace"])
    for request in (16, 0x4206):  # PTRACE_ATTACH, PTRACE_SEIZE
        assert verdict(program, nr=number, arch=arch, args=(request, 42)) == REFUSED_EPERM, hex(request)
    for request in (0, 7, 2, 0x4207, 17, (1 << 32) | 16):  # TRACEME, CONT, PEEKDATA, INTERRUPT, DETACH, not ATTACH
        assert verdict(program, nr=number, arch=arch, args=(request, 42)) == SECCOMP_RET_ALLOW, hex(request)


INSTALLED_HEADERS = [machine for machine in SUPPORTED if HEADERS[machine].exists()]


def test_this_machines_kernel_header_is_installed() -> None:
    """`make test` installs linux-libc-dev; without it the table below is checked against nothing."""
    assert MACHINE in INSTALLED_HEADERS, f"{HEADERS.get(MACHINE)} is missing (Debian's linux-libc-dev)"


@pytest.mark.parametrize("machine", INSTALLED_HEADERS)
def test_the_numbers_match_the_kernel_headers(machine: str) -> None:
    header = HEADERS[machine]
    defined = dict(re.findall(r"^#define __NR_(\w+)\s+(\d+)\b", header.read_text(), re.MULTILINE))
    column = ARCHITECTURES[machine].column
    compared = 0
    for name, row in SYSCALL_NUMBERS.items():
        if name in defined:
            assert row[column] == int(defined[name]), name
            compared += 1
        elif name != "open_tree_attr":  # newer than the headers (Linux 6.15)
            assert row[column] is None, f"{name} is not in {header}"
    assert compared >= len(SYSCALL_NUMBERS) - 3


def test_the_filter_is_built_once_for_this_machine() -> None:
    denying = seccomp.filter_program(deny_affinity=True)
    assert seccomp.filter_program(deny_affinity=True) is denying
    assert denying == program_for(MACHINE, deny_affinity=True)
    assert seccomp.filter_program(deny_affinity=False) != denying


def test_an_unknown_architecture_has_no_filter() -> None:
    with pytest.raises(UnsupportedArchitecture, match="riscv64"):
        program_for("riscv64", deny_affinity=False)
    assert issubclass(UnsupportedArchitecture, SandboxUnavailable)
    with pytest.raises(ValueError, match="errno"):
        program_for("x86_64", deny_affinity=False, errno=0)


def test_the_descriptor_holds_the_program_to_its_end() -> None:
    program = program_for("x86_64", deny_affinity=True)
    descriptor = seccomp.program_fd(program)
    try:
        assert not os.get_inheritable(descriptor)  # only a child given it by pass_fds sees it
        read = b""
        while chunk := os.read(descriptor, 65536):  # end of file: the write end is closed
            read += chunk
        assert read == program
    finally:
        os.close(descriptor)


# -- real sandboxes --------------------------------------------------------------------------------------
@functools.cache
def bwrap() -> str:
    """The bubblewrap the backend would start, where an unprivileged uid can run it wherever the project is
    (a root-owned copy in a folder of this test run's when need be, as the backend makes one)."""
    tools = Path(tempfile.mkdtemp(prefix="bwrap-tools-", dir="/tmp"))
    os.chmod(tools, 0o711)
    atexit.register(shutil.rmtree, tools, True)
    return usable_bwrap(tools / "tools", lambda: None)


def sandboxed(
    command: Sequence[str], program: bytes | None, *, pinned_to_one_core: bool = False
) -> subprocess.CompletedProcess[str]:
    """Run `command` in a bubblewrap sandbox as an unprivileged uid, under `program` (None: no filter)."""
    descriptor = seccomp.program_fd(program or b"")
    filtering = ["--seccomp", str(descriptor)] if program is not None else []
    pinning = ["taskset", "-c", "0"] if pinned_to_one_core else []
    try:
        return subprocess.run(
            ["setpriv", f"--reuid={SANDBOX_UID}", f"--regid={SANDBOX_UID}", "--clear-groups", *pinning, bwrap(),
             "--unshare-all", "--die-with-parent", "--ro-bind", "/usr", "/usr", "--symlink", "usr/bin", "/bin",
             "--symlink", "usr/lib", "/lib", "--symlink", "usr/lib64", "/lib64", "--proc", "/proc", "--dev", "/dev",
             "--tmpfs", "/tmp", "--chdir", "/tmp", *filtering, "--", *command],
            pass_fds=(descriptor,), capture_output=True, text=True, timeout=120, cwd="/",
            env={"PATH": "/usr/bin:/bin", "HOME": "/tmp", "LANG": "C.UTF-8"},
        )  # fmt: skip
    finally:
        os.close(descriptor)


def python(source: str) -> list[str]:
    return ["python3", "-c", source]


def answers(found: subprocess.CompletedProcess[str]) -> dict[str, str]:
    assert found.returncode == 0, found.stdout + found.stderr
    return dict(line.rsplit(" ", 1) for line in found.stdout.splitlines())


# Each call by number with its arguments (zeros if none); prints "<label> <errno name or 'ok'>".
CALLS = """
import ctypes, errno
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
for label, number, *arguments in CALLS:
    arguments = [ctypes.c_long(value) for value in (arguments + [0] * 6)[:6]]
    result = libc.syscall(ctypes.c_long(number), *arguments)
    print(label, errno.errorcode[ctypes.get_errno()] if result < 0 else "ok", flush=True)
"""
# The calls refused by an argument: (label, name, arguments).
ARGUMENT_CASES: dict[str, list[tuple[str, str, tuple[int, ...]]]] = {
    "personality": [("personality ADDR_NO_RANDOMIZE", "personality", (0x0040000,))],
    "ptrace": [("ptrace PTRACE_ATTACH", "ptrace", (16, 0)), ("ptrace PTRACE_SEIZE", "ptrace", (0x4206, 0))],
}


def call_probe(cases: Sequence[tuple[object, ...]]) -> list[str]:
    return python(f"CALLS = {list(cases)!r}\n{CALLS}")


def group_cases(group: str) -> list[tuple[object, ...]]:
    column = ARCHITECTURES[MACHINE].column
    if group in ARGUMENT_CASES:
        return [(label, SYSCALL_NUMBERS[name][column], *arguments) for label, name, arguments in ARGUMENT_CASES[group]]
    [refusal] = [refusal for refusal in (*REFUSED, AFFINITY) if refusal.group == group]
    return [(name, number) for name, number in numbers(MACHINE, refusal.names)]


# The groups with calls on this machine (iopl and ioperm exist only on x86_64).
GROUPS = [
    group for group in [refusal.group for refusal in (*REFUSED, AFFINITY)] + list(ARGUMENT_CASES) if group_cases(group)
]


@pytest.mark.parametrize("group", GROUPS)
def test_refused_calls_fail_with_eperm_in_a_sandbox(group: str) -> None:
    cases = group_cases(group)
    refused = answers(sandboxed(call_probe(cases), seccomp.filter_program(deny_affinity=True)))
    assert refused == {str(case[0]): "EPERM" for case in cases}
    # The same calls under the same policy answering another errno: the refusal is the filter's, not the kernel's.
    marked = answers(sandboxed(call_probe(cases), program_for(MACHINE, deny_affinity=True, errno=MARK)))
    assert marked == {str(case[0]): errno.errorcode[MARK] for case in cases}


TRACING = """
import ctypes, errno, os, signal, subprocess
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
def ptrace(request, pid):
    result = libc.syscall(ctypes.c_long(PTRACE), ctypes.c_long(request), ctypes.c_long(pid), ctypes.c_long(0),
                          ctypes.c_long(0))
    return errno.errorcode[ctypes.get_errno()] if result < 0 else "ok"
child = os.fork()
if child == 0:  # as gdb's `run` starts its program: the child asks to be traced, then stops
    if ptrace(0, 0) != "ok":
        os._exit(3)
    os.kill(os.getpid(), signal.SIGSTOP)
    os._exit(7)
_, status = os.waitpid(child, 0)
print("traceme", "stopped" if os.WIFSTOPPED(status) else f"status-{status}")
print("cont", ptrace(7, child))
_, status = os.waitpid(child, 0)
print("child-exit", os.WEXITSTATUS(status) if os.WIFEXITED(status) else f"status-{status}")
for label, request in (("attach", 16), ("seize", 0x4206)):  # a process that did not ask to be traced
    sleeper = subprocess.Popen(["sleep", "60"])
    print(label, ptrace(request, sleeper.pid))
    sleeper.kill()
    sleeper.wait()
"""


def test_a_child_can_ask_to_be_traced_but_nothing_can_attach() -> None:
    [(_, number)] = numbers(MACHINE, ["ptrace"])
    probe = python(f"PTRACE = {number}\n{TRACING}")
    filtered = answers(sandboxed(probe, seccomp.filter_program(deny_affinity=True)))
    assert filtered == {"traceme": "stopped", "cont": "ok", "child-exit": "7", "attach": "EPERM", "seize": "EPERM"}
    unfiltered = answers(sandboxed(probe, None))  # the same uid may attach to its own child without the filter
    assert unfiltered["attach"] == unfiltered["seize"] == "ok", unfiltered


def test_strace_runs_a_command_but_cannot_attach_to_one() -> None:
    assert shutil.which("strace"), "strace is missing (`make test` installs Debian's strace)"
    script = "strace -f -o /dev/null true; echo run $?; sleep 30 & timeout 5 strace -p $! 2>&1; echo attach $?; kill $!"
    found = sandboxed(["bash", "-c", script], seccomp.filter_program(deny_affinity=True))
    assert "run 0\n" in found.stdout, found.stdout + found.stderr
    assert "attach 1\n" in found.stdout and "Operation not permitted" in found.stdout, found.stdout


# `taskset` on the shell itself, then Python asking for every core; how many cores it ends with.
WIDEN = """
taskset -pc 0-$(($(nproc --all) - 1)) $$ >/dev/null 2>&1; echo taskset $?
python3 - <<'EOF'
import os
try:
    os.sched_setaffinity(0, range(os.cpu_count()))
    print("python ok")
except OSError as error:
    print("python", error.errno)
print("cores", len(os.sched_getaffinity(0)))
EOF
"""


@pytest.mark.parametrize("deny_affinity", [True, False])
def test_a_pinned_sandbox_widens_its_cores_only_without_deny_affinity(deny_affinity: bool) -> None:
    cores = os.cpu_count() or 1
    assert cores >= 2, "this check needs a host with more cores than the one the sandbox is pinned to"
    program = seccomp.filter_program(deny_affinity=deny_affinity)
    found = answers(sandboxed(["bash", "-c", WIDEN], program, pinned_to_one_core=True))
    if deny_affinity:
        assert found == {"taskset": "1", "python": str(errno.EPERM), "cores": "1"}
    else:
        assert found == {"taskset": "0", "python": "ok", "cores": str(cores)}


I386_GETPID = """
import ctypes, mmap
code = bytes([0xB8, 20, 0, 0, 0, 0xCD, 0x80, 0xC3])  # mov eax, 20 (i386 getpid); int 0x80; ret
page = mmap.mmap(-1, mmap.PAGESIZE, prot=mmap.PROT_READ | mmap.PROT_WRITE | mmap.PROT_EXEC)
page.write(code)
call = ctypes.CFUNCTYPE(ctypes.c_int)(ctypes.addressof(ctypes.c_char.from_buffer(page)))
print("i386-getpid", call(), flush=True)
"""


@pytest.mark.skipif(MACHINE != "x86_64", reason="int 0x80 is x86")
def test_an_i386_call_kills_the_process() -> None:
    unfiltered = sandboxed(python(I386_GETPID), None)
    if unfiltered.returncode != 0:
        pytest.skip(f"this kernel runs no i386 calls: {unfiltered.stderr[-300:]}")
    assert int(unfiltered.stdout.split()[-1]) > 0
    filtered = sandboxed(python(I386_GETPID), seccomp.filter_program(deny_affinity=False))
    assert filtered.returncode == 128 + signal.SIGSYS, filtered  # bubblewrap's status for a child killed by a signal
    assert "i386-getpid" not in filtered.stdout


@pytest.mark.skipif(MACHINE != "x86_64", reason="x32 is x86_64's")
def test_an_x32_call_is_refused() -> None:
    probe = call_probe([("x32-getpid", 0x4000_0000 | 39), ("x32-keyctl", 0x4000_0000 | 250)])
    assert answers(sandboxed(probe, seccomp.filter_program(deny_affinity=False))) == {
        "x32-getpid": "EPERM",
        "x32-keyctl": "EPERM",
    }
    assert "EPERM" not in answers(sandboxed(probe, None)).values()  # ENOSYS, or served where x32 is built in


ORDINARY_WORK = r"""
set -e
grep '^Seccomp:' /proc/self/status | tr -s '\t ' ' '
mkdir work && cd work
git init -q repo && git -C repo -c user.name=t -c user.email=t@t commit -q --allow-empty -m first
echo "git $(git -C repo rev-list --count HEAD)"
seq 1000 > numbers && tar czf numbers.tgz numbers && rm numbers && tar xzf numbers.tgz && echo "tar $(wc -l < numbers)"
gzip -k numbers && echo "gzip $(gzip -dc numbers.gz | tail -1)"
python3 - <<'EOF'
import multiprocessing, subprocess, threading
totals = []
threads = [threading.Thread(target=lambda n=n: totals.append(n * n)) for n in range(8)]
for thread in threads:
    thread.start()
for thread in threads:
    thread.join()
print("threads", sum(totals))
print("subprocess", subprocess.run(["bash", "-c", "echo $((6 * 7))"], capture_output=True, text=True).stdout.strip())
def square(n):
    return n * n
if __name__ == "__main__":
    with multiprocessing.Pool(2) as pool:
        print("pool", sum(pool.map(square, range(10))))
EOF
"""


def test_ordinary_work_runs_under_the_filter() -> None:
    found = sandboxed(["bash", "-c", ORDINARY_WORK], seccomp.filter_program(deny_affinity=True))
    assert answers(found) == {
        "Seccomp:": "2",
        "git": "1",
        "tar": "1000",
        "gzip": "1000",
        "threads": "140",
        "subprocess": "42",
        "pool": "285",
    }
