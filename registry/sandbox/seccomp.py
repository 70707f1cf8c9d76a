"""The seccomp filter every sandbox process runs under: a short deny list over an otherwise allowed kernel,
written as a policy (a table of system call numbers and the rules) and assembled into classic BPF for
bubblewrap's `--seccomp FD`, which loads it last, after its own mounts and namespaces are in place.

Refused with EPERM, and why (the sandbox has no capabilities, so the kernel refuses most of these anyway;
the filter removes the attack surface behind the permission checks, as Docker's default profile does):
- keyctl, add_key, request_key: keyrings are not namespaced, and a long source of kernel bugs;
- io_uring_setup, io_uring_enter, io_uring_register: a large surface, invisible to seccomp once set up;
- init_module, finit_module, delete_module: kernel modules;
- kexec_load, kexec_file_load: replacing the running kernel;
- bpf, perf_event_open: in-kernel programs and performance counters (attack surface, side channels);
- userfaultfd: page faults stalled at will, the classic way to widen a kernel race;
- mount, umount2, pivot_root and the new mount API (open_tree, open_tree_attr, move_mount, fsopen,
  fsconfig, fsmount, fspick, mount_setattr): the view bubblewrap set up is final;
- unshare, setns: no new namespaces and no joining others (see also bubblewrap's `--disable-userns`);
- swapon, swapoff, reboot, syslog, acct, quotactl, quotactl_fd, settimeofday, clock_settime,
  clock_adjtime: administering the host;
- open_by_handle_at, name_to_handle_at: file handles reach files outside the sandbox's mounts;
- iopl, ioperm (x86_64 only): raw I/O ports;
- lookup_dcookie, nfsservctl, vhangup: obsolete, or hanging up terminals;
- process_vm_readv, process_vm_writev: another process's memory;
- fanotify_init: filesystem-wide watches and permission events;
- personality, except the values Docker allows (0, PER_LINUX32, UNAME26, both, and the 0xffffffff
  query): no turning address-space randomization off (`setarch -R`) or other execution domains;
- ptrace PTRACE_ATTACH and PTRACE_SEIZE: no tracing of a process that did not ask for it, so
  `strace -p` and `gdb -p` cannot attach (PTRACE_TRACEME, and with it `gdb`'s `run` and plain
  `strace CMD`, keeps working);
- sched_setaffinity, only with `deny_affinity` (a host without a CPU cgroup, where pinning the
  sandbox to its cores is the CPU cap): `taskset -pc 0-1 $$` cannot widen it.
Any other architecture at run time (i386 through `int 0x80`, 32-bit ARM) kills the process, and x32
system calls (numbers from 0x40000000 on x86_64) are refused with EPERM: this filter knows only the
native numbers, and a foreign ABI would walk around it.

Deliberately allowed: everything else, notably clone and clone3 (new namespaces need capabilities the
sandbox does not have, and bubblewrap's `--disable-userns` stops nested user namespaces), adjtimex (its
read-only use; setting the clock needs CAP_SYS_TIME), the other ptrace requests (they only work on a
tracee), chroot, and the read-only mount calls (statmount, listmount).
"""

from __future__ import annotations

import functools
import os
import platform
import struct
from collections.abc import Mapping
from dataclasses import dataclass
from errno import EPERM
from typing import Final, Literal

from registry.sandbox.spec import SandboxUnavailable

__all__ = ["UnsupportedArchitecture", "filter_program", "program_fd", "program_for"]


class UnsupportedArchitecture(SandboxUnavailable):
    """This machine's architecture has no syscall table here, so no filter (and no sandbox) can be built."""


@dataclass(frozen=True)
class Architecture:
    """One architecture the filter is built for: its audit number and its column of the syscall table."""

    name: str
    audit_arch: int  # seccomp_data.arch, AUDIT_ARCH_* of <linux/audit.h>
    column: int
    x32_numbers: bool  # numbers from 0x40000000 are the x32 ABI, which shares x86_64's audit number


X86_64: Final = Architecture("x86_64", audit_arch=0xC000003E, column=0, x32_numbers=True)
AARCH64: Final = Architecture("aarch64", audit_arch=0xC00000B7, column=1, x32_numbers=False)
ARCHITECTURES: Final[Mapping[str, Architecture]] = {
    "x86_64": X86_64,
    "amd64": X86_64,
    "aarch64": AARCH64,
    "arm64": AARCH64,
}
X32_SYSCALL_BIT: Final = 0x4000_0000
NO_SYSCALL: Final = 0xFFFF_FFFF  # nr -1: a tracer skipping a call; the kernel answers ENOSYS itself

# The numbers of the calls the rules name: (x86_64, aarch64), None where the architecture has no such call.
# x86_64 from /usr/include/x86_64-linux-gnu/asm/unistd_64.h, aarch64 from the generic table
# /usr/include/asm-generic/unistd.h (both linux-libc-dev 6.1). open_tree_attr (Linux 6.15) is newer than
# those headers: 467 on both, from the kernel's arch/x86/entry/syscalls/syscall_64.tbl and scripts/syscall.tbl.
# fmt: off
SYSCALL_NUMBERS: Final[Mapping[str, tuple[int | None, int | None]]] = {
    # name                  x86_64  aarch64
    "keyctl":               (250,   219),
    "add_key":              (248,   217),
    "request_key":          (249,   218),
    "io_uring_setup":       (425,   425),
    "io_uring_enter":       (426,   426),
    "io_uring_register":    (427,   427),
    "init_module":          (175,   105),
    "finit_module":         (313,   273),
    "delete_module":        (176,   106),
    "kexec_load":           (246,   104),
    "kexec_file_load":      (320,   294),
    "bpf":                  (321,   280),
    "perf_event_open":      (298,   241),
    "userfaultfd":          (323,   282),
    "mount":                (165,   40),
    "umount2":              (166,   39),
    "pivot_root":           (155,   41),
    "open_tree":            (428,   428),
    "open_tree_attr":       (467,   467),
    "move_mount":           (429,   429),
    "fsopen":               (430,   430),
    "fsconfig":             (431,   431),
    "fsmount":              (432,   432),
    "fspick":               (433,   433),
    "mount_setattr":        (442,   442),
    "unshare":              (272,   97),
    "setns":                (308,   268),
    "swapon":               (167,   224),
    "swapoff":              (168,   225),
    "reboot":               (169,   142),
    "syslog":               (103,   116),
    "acct":                 (163,   89),
    "quotactl":             (179,   60),
    "quotactl_fd":          (443,   443),
    "settimeofday":         (164,   170),
    "clock_settime":        (227,   112),
    "clock_adjtime":        (305,   266),
    "open_by_handle_at":    (304,   265),
    "name_to_handle_at":    (303,   264),
    "iopl":                 (172,   None),
    "ioperm":               (173,   None),
    "lookup_dcookie":       (212,   18),
    "nfsservctl":           (180,   42),
    "vhangup":              (153,   58),
    "process_vm_readv":     (310,   270),
    "process_vm_writev":    (311,   271),
    "fanotify_init":        (300,   262),
    "personality":          (135,   92),
    "ptrace":               (101,   117),
    "sched_setaffinity":    (203,   122),
}
# fmt: on


@dataclass(frozen=True)
class Refusal:
    """A group of calls refused outright, and why."""

    group: str
    why: str
    names: tuple[str, ...]


@dataclass(frozen=True)
class ArgumentRule:
    """A call refused by the value of one argument: `refuse` the listed values, or `allow-only` them.
    `bits` is how wide the kernel takes the argument: a 32-bit one is compared on its low word only,
    exactly as the kernel truncates it; a 64-bit one on both words."""

    name: str
    why: str
    argument: int
    mode: Literal["refuse", "allow-only"]
    values: tuple[int, ...]
    bits: Literal[32, 64]


# fmt: off
REFUSED: Final[tuple[Refusal, ...]] = (
    Refusal("keyrings", "not namespaced; a long source of kernel bugs", ("keyctl", "add_key", "request_key")),
    Refusal("io_uring", "a large surface, invisible to seccomp",
            ("io_uring_setup", "io_uring_enter", "io_uring_register")),
    Refusal("modules", "loading code into the kernel", ("init_module", "finit_module", "delete_module")),
    Refusal("kexec", "replacing the running kernel", ("kexec_load", "kexec_file_load")),
    Refusal("bpf", "in-kernel programs and performance counters", ("bpf", "perf_event_open")),
    Refusal("userfaultfd", "stalling page faults widens kernel races", ("userfaultfd",)),
    Refusal("mounts", "the view bubblewrap set up is final",
            ("mount", "umount2", "pivot_root", "open_tree", "open_tree_attr", "move_mount", "fsopen", "fsconfig",
             "fsmount", "fspick", "mount_setattr")),
    Refusal("namespaces", "no new namespaces, no joining others", ("unshare", "setns")),
    Refusal("host administration", "swap, reboot, the kernel log, accounting, quotas and clocks belong to the host",
            ("swapon", "swapoff", "reboot", "syslog", "acct", "quotactl", "quotactl_fd", "settimeofday",
             "clock_settime", "clock_adjtime")),
    Refusal("file handles", "handles reach files outside the mounts", ("open_by_handle_at", "name_to_handle_at")),
    Refusal("io ports", "raw hardware access (x86_64 only)", ("iopl", "ioperm")),
    Refusal("obsolete", "obsolete, or hanging up terminals", ("lookup_dcookie", "nfsservctl", "vhangup")),
    Refusal("process memory", "another process's memory", ("process_vm_readv", "process_vm_writev")),
    Refusal("fanotify", "filesystem-wide watches and permission events", ("fanotify_init",)),
)
# fmt: on
# Without a CPU cgroup the sandbox's cap is the cores it was pinned to: it must not widen them.
AFFINITY: Final = Refusal("affinity", "pinning is the CPU cap where there is no CPU cgroup", ("sched_setaffinity",))
PTRACE_ATTACH: Final = 16
PTRACE_SEIZE: Final = 0x4206
ARGUMENT_RULES: Final[tuple[ArgumentRule, ...]] = (
    ArgumentRule(
        "personality",
        "Docker's allowed execution domains: PER_LINUX, PER_LINUX32, UNAME26, both, and the query",
        argument=0,
        mode="allow-only",
        values=(0x0, 0x8, 0x20000, 0x20008, 0xFFFFFFFF),
        bits=32,  # personality(unsigned int)
    ),
    ArgumentRule(
        "ptrace",
        "no attaching to a process that did not ask to be traced (PTRACE_TRACEME)",
        argument=0,
        mode="refuse",
        values=(PTRACE_ATTACH, PTRACE_SEIZE),
        bits=64,  # ptrace(long request, ...)
    ),
)

# Classic BPF as seccomp takes it (<linux/filter.h>, <linux/seccomp.h>).
BPF_LD_W_ABS: Final = 0x20
BPF_JMP_JEQ_K: Final = 0x15
BPF_JMP_JGE_K: Final = 0x35
BPF_RET_K: Final = 0x06
MAX_INSTRUCTIONS: Final = 4096  # BPF_MAXINSNS
SECCOMP_RET_KILL_PROCESS: Final = 0x8000_0000
SECCOMP_RET_ERRNO: Final = 0x0005_0000
SECCOMP_RET_ALLOW: Final = 0x7FFF_0000
MAX_ERRNO: Final = 4095  # the kernel caps what SECCOMP_RET_ERRNO returns here
# struct seccomp_data: int nr; __u32 arch; __u64 instruction_pointer; __u64 args[6] (little-endian words)
OFFSET_NR: Final = 0
OFFSET_ARCH: Final = 4
OFFSET_ARGS: Final = 16
INSTRUCTION: Final = struct.Struct("<HBBI")  # struct sock_filter: code, jt, jf, k


@dataclass(frozen=True)
class _Op:
    """One instruction with symbolic jump targets (None: the next instruction)."""

    code: int
    k: int
    true: str | None = None
    false: str | None = None


def filter_program(*, deny_affinity: bool) -> bytes:
    """The filter for this machine's architecture, as bubblewrap's `--seccomp` reads it (built once per value)."""
    return _for_this_machine(deny_affinity)


@functools.cache
def _for_this_machine(deny_affinity: bool) -> bytes:
    return program_for(platform.machine(), deny_affinity=deny_affinity)


def program_for(machine: str, *, deny_affinity: bool, errno: int = EPERM) -> bytes:
    """The filter for `machine` (a `platform.machine()` name); refusals answer `errno` (tests use another
    value to tell the filter's refusals from the kernel's own)."""
    if not 0 < errno <= MAX_ERRNO:
        raise ValueError(f"a seccomp refusal answers an errno from 1 to {MAX_ERRNO}, not {errno}")
    architecture = ARCHITECTURES.get(machine)
    if architecture is None:
        supported = ", ".join(sorted({found.name for found in ARCHITECTURES.values()}))
        raise UnsupportedArchitecture(f"no seccomp filter for the {machine!r} architecture (supported: {supported})")
    refusals = (*REFUSED, AFFINITY) if deny_affinity else REFUSED
    names = [name for refusal in refusals for name in refusal.names]
    refused = sorted({number for name in names if (number := _number(name, architecture)) is not None})
    return _assemble(_policy(architecture, refused, SECCOMP_RET_ERRNO | errno))


def program_fd(program: bytes) -> int:
    """A readable descriptor at offset 0 holding `program` to its end (a pipe whose write end is closed),
    for bubblewrap's `--seccomp`; the caller passes it with `pass_fds` and closes it after spawning."""
    if len(program) > MAX_INSTRUCTIONS * INSTRUCTION.size:
        raise ValueError(f"a seccomp program holds at most {MAX_INSTRUCTIONS} instructions")
    read_end, write_end = os.pipe()  # far below the pipe's buffer: the writes cannot block
    try:
        written = 0
        while written < len(program):
            written += os.write(write_end, program[written:])
    except BaseException:
        os.close(read_end)
        raise
    finally:
        os.close(write_end)
    return read_end


def _number(name: str, architecture: Architecture) -> int | None:
    return SYSCALL_NUMBERS[name][architecture.column]


def _policy(architecture: Architecture, refused: list[int], refusal: int) -> list[_Op | str]:
    """The program with labels: the architecture, then the x32 range, then one comparison per refused
    number and per argument rule, each jumping forward to a shared return."""
    program: list[_Op | str] = [
        _Op(BPF_LD_W_ABS, OFFSET_ARCH),
        _Op(BPF_JMP_JEQ_K, architecture.audit_arch, false="kill"),
        _Op(BPF_LD_W_ABS, OFFSET_NR),
    ]
    if architecture.x32_numbers:
        program.append(_Op(BPF_JMP_JGE_K, X32_SYSCALL_BIT, true="x32"))
    program += [_Op(BPF_JMP_JEQ_K, number, true="refuse") for number in refused]
    rules = [(rule, number) for rule in ARGUMENT_RULES if (number := _number(rule.name, architecture)) is not None]
    program += [_Op(BPF_JMP_JEQ_K, number, true=f"rule {rule.name}") for rule, number in rules]
    # A call no rule names is allowed without reading its arguments: the kernel then caches it as
    # always allowed for this architecture and skips the filter for it altogether.
    program.append(_Op(BPF_RET_K, SECCOMP_RET_ALLOW))
    if architecture.x32_numbers:
        program += ["x32", _Op(BPF_JMP_JEQ_K, NO_SYSCALL, true="allow", false="refuse")]
    for rule, _ in rules:
        program += [f"rule {rule.name}", *_argument_check(rule, refusal)]
    program += [
        "allow", _Op(BPF_RET_K, SECCOMP_RET_ALLOW),
        "refuse", _Op(BPF_RET_K, refusal),
        "kill", _Op(BPF_RET_K, SECCOMP_RET_KILL_PROCESS),
    ]  # fmt: skip
    return program


def _argument_check(rule: ArgumentRule, refusal: int) -> list[_Op]:
    """Compare one argument with the rule's values (all below 2**32): a 64-bit argument whose high word
    is set equals none of them. What no value matched returns at the end."""
    listed, unlisted = ("refuse", "allow") if rule.mode == "refuse" else ("allow", "refuse")
    unlisted_action = SECCOMP_RET_ALLOW if unlisted == "allow" else refusal
    if not all(0 <= value < 1 << 32 for value in rule.values):
        raise ValueError(f"the {rule.name} rule compares with values of one word only")
    offset = OFFSET_ARGS + 8 * rule.argument
    check: list[_Op] = []
    if rule.bits == 64:
        check += [_Op(BPF_LD_W_ABS, offset + 4), _Op(BPF_JMP_JEQ_K, 0, false=unlisted)]
    check.append(_Op(BPF_LD_W_ABS, offset))
    check += [_Op(BPF_JMP_JEQ_K, value, true=listed) for value in rule.values]
    check.append(_Op(BPF_RET_K, unlisted_action))
    return check


def _assemble(program: list[_Op | str]) -> bytes:
    """Resolve the labels to relative forward jumps (classic BPF cannot jump back) and pack the result."""
    labels: dict[str, int] = {}
    ops: list[_Op] = []
    for item in program:
        if isinstance(item, str):
            labels[item] = len(ops)
        else:
            ops.append(item)
    if len(ops) > MAX_INSTRUCTIONS:
        raise ValueError(f"the seccomp program has {len(ops)} instructions, over {MAX_INSTRUCTIONS}")

    def offset(index: int, label: str | None) -> int:
        if label is None:
            return 0
        distance = labels[label] - index - 1
        if not 0 <= distance <= 0xFF:
            raise ValueError(f"instruction {index} cannot jump to {label!r} ({distance} instructions on)")
        return distance

    return b"".join(
        INSTRUCTION.pack(op.code, offset(index, op.true), offset(index, op.false), op.k) for index, op in enumerate(ops)
    )
