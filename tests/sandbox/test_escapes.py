"""The bubblewrap sandbox for real: what a session's commands can and cannot reach, and faults it survives.

Every escape attempt is followed by an ordinary command that must still work.
"""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from fakes.waiting import wait_until
from registry.sandbox.backend import BwrapBackend, SandboxSpec, SandboxUnavailable, check_traversable
from registry.sandbox.toolset import run_tool

PROJECT = Path(__file__).resolve().parents[2]
CANARY_FILE = Path("/tmp") / f"sandbox-canary-{os.getpid()}"


def processes_of(uid: int) -> list[str]:
    return subprocess.run(["pgrep", "-u", str(uid)], capture_output=True, text=True).stdout.split()


def text(outcome) -> str:
    return outcome.content[0]["text"]


@pytest.fixture
def canary(monkeypatch, tmp_path) -> Iterator[str]:
    """A secret in this process's environment and in a host file outside any workspace."""
    secret = "canary-" + os.urandom(8).hex()
    monkeypatch.setenv("REGISTRY_CANARY_SECRET", secret)
    CANARY_FILE.write_text(secret)
    yield secret
    CANARY_FILE.unlink()


def test_the_shell_persists_and_restarts(sandbox_for):
    box = sandbox_for("sesn_shell")
    assert text(run_tool(box, "bash", {"command": "mkdir -p sub && cd sub && export GREETING=hi"})) == "exit code: 0"
    assert text(run_tool(box, "bash", {"command": "pwd; echo $GREETING; false"})) == "/workspace/sub\nhi\nexit code: 1"
    assert text(run_tool(box, "bash", {"command": "pwd; echo ${GREETING:-unset}", "restart": True})) == (
        "/workspace\nunset\nexit code: 0"
    )


def test_nothing_of_the_host_is_visible(sandbox_for, canary):
    box = sandbox_for("sesn_escape")
    probe = (
        f"cat {PROJECT}/manage.py; ls /root /work /home; cat {CANARY_FILE}; env; "
        "cat /etc/shadow; ls /proc | grep -c '^[0-9]'; ps -e | wc -l; id -u"
    )
    output = text(run_tool(box, "bash", {"command": probe}))
    assert canary not in output and "django" not in output.lower()
    assert "No such file or directory" in output
    lines = output.splitlines()
    assert lines[-2] == "1000"  # uid inside; the host sees an unprivileged uid of the session's own
    assert int(lines[-4]) <= 5  # only the sandbox's own processes in /proc
    for path in ("/etc/hosts", "/usr/bin/x", "/proc/1/root/etc/passwd"):
        assert run_tool(box, "write", {"file_path": path, "content": "x"}).is_error
    # The checkout's path may lie under /tmp, the sandbox's own scratch space: a write there lands in
    # the sandbox, never in the host's file.
    before = (PROJECT / "manage.py").read_bytes()
    run_tool(box, "write", {"file_path": f"{PROJECT}/manage.py", "content": "x"})
    assert (PROJECT / "manage.py").read_bytes() == before
    assert text(run_tool(box, "bash", {"command": "echo still fine"})) == "still fine\nexit code: 0"


def test_path_tricks_stay_inside(sandbox_for, canary):
    box = sandbox_for("sesn_paths")
    run_tool(box, "bash", {"command": f"ln -s {CANARY_FILE} link; ln -s / rootlink"})
    for file_path in ("link", f"../../../..{CANARY_FILE}", f"rootlink{CANARY_FILE}"):
        outcome = run_tool(box, "read", {"file_path": file_path})
        assert outcome.is_error and canary not in text(outcome)
    outcome = run_tool(box, "write", {"file_path": "../../escaped.txt", "content": "x"})
    assert outcome.is_error and not (Path(box.workspace).parent.parent / "escaped.txt").exists()


def test_no_network_reaches_the_host(sandbox_for):
    box = sandbox_for("sesn_network")
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        port = listener.getsockname()[1]
        accepted: list[object] = []

        def accept() -> None:
            with contextlib.suppress(OSError):  # the listener closes under it when the test ends
                accepted.append(listener.accept())

        threading.Thread(target=accept, daemon=True).start()
        script = (
            "import socket\n"
            f"for port in (5432, 6379, {port}):\n"
            "    try:\n"
            "        socket.create_connection(('127.0.0.1', port), timeout=2); print('open', port)\n"
            "    except OSError as error: print('refused', port)\n"
        )
        run_tool(box, "write", {"file_path": "probe.py", "content": script})
        output = text(run_tool(box, "bash", {"command": "python3 probe.py"}))
    assert "open" not in output and output.count("refused") == 3 and accepted == []


def test_fork_bomb_memory_hog_endless_output_and_timeout(sandbox_for, limits):
    box = sandbox_for("sesn_faults")
    bomb = run_tool(box, "bash", {"command": "bomb() { bomb | bomb & }; bomb; sleep 1; echo done", "timeout_ms": 4000})
    assert "exit code" in text(bomb) or bomb.is_error
    assert text(run_tool(box, "bash", {"command": "echo after bomb", "restart": True})) == "after bomb\nexit code: 0"

    hog = run_tool(box, "bash", {"command": "python3 -c 'x = bytearray(2 * 1024 ** 3)'"})
    assert "MemoryError" in text(hog) and not text(hog).endswith("exit code: 0")
    assert text(run_tool(box, "bash", {"command": "echo after hog"})) == "after hog\nexit code: 0"

    flood = run_tool(box, "bash", {"command": "yes", "timeout_ms": 1500})
    assert flood.is_error and "timed out" in text(flood) and len(text(flood)) < limits.output_limit + 300
    assert "characters of output truncated" in text(flood)

    slow = run_tool(box, "bash", {"command": "sleep 30", "timeout_ms": 500})
    assert slow.is_error and "timed out after 500 ms" in text(slow)
    assert text(run_tool(box, "bash", {"command": "echo after timeout"})) == "after timeout\nexit code: 0"


def test_stopping_kills_background_processes(sandbox_for):
    box = sandbox_for("sesn_background")
    run_tool(box, "bash", {"command": "(sleep 300 &) ; sleep 300 & echo started"})
    assert len(processes_of(box.uid)) >= 3  # the shell and two detached sleeps (and bwrap)
    box.stop()
    wait_until(lambda: processes_of(box.uid) == [], timeout=5, what="no process (nor zombie) left")


def test_two_sessions_cannot_see_each_others_files(sandbox_for):
    first, second = sandbox_for("sesn_first"), sandbox_for("sesn_second")
    run_tool(first, "write", {"file_path": "secret.txt", "content": "first's"})
    assert first.uid != second.uid
    assert run_tool(second, "read", {"file_path": "secret.txt"}).is_error
    found = text(run_tool(second, "bash", {"command": f"ls {first.workspace} 2>&1; cat /workspace/secret.txt 2>&1"}))
    assert "first's" not in found


def test_file_tools(sandbox_for):
    box = sandbox_for("sesn_files")
    assert not run_tool(box, "write", {"file_path": "src/a.py", "content": "one\ntwo\nthree\n"}).is_error
    assert text(run_tool(box, "read", {"file_path": "src/a.py", "view_range": [2, 0]})) == "2\ttwo\n3\tthree"
    twice = run_tool(box, "edit", {"file_path": "src/a.py", "old_string": "t", "new_string": "T"})
    assert twice.is_error
    assert text(twice) == (
        "old_string occurs 2 times in /workspace/src/a.py; give more context to make it unique, or set replace_all."
    )
    missing = run_tool(box, "edit", {"file_path": "src/a.py", "old_string": "four", "new_string": "4"})
    assert missing.is_error and text(missing) == "old_string was not found in /workspace/src/a.py."
    assert not run_tool(
        box, "edit", {"file_path": "src/a.py", "old_string": "t", "new_string": "T", "replace_all": True}
    ).is_error
    assert (
        text(run_tool(box, "grep", {"pattern": "^T", "path": "src"}))
        == "/workspace/src/a.py:2:Two\n/workspace/src/a.py:3:Three"
    )
    run_tool(box, "write", {"file_path": "src/b.py", "content": ""})
    assert text(run_tool(box, "glob", {"pattern": "**/*.py"})).splitlines() == [
        "/workspace/src/b.py",
        "/workspace/src/a.py",
    ]
    run_tool(box, "bash", {"command": "printf 'a\\000b' > blob.bin"})
    assert "binary" in text(run_tool(box, "read", {"file_path": "blob.bin"}))
    assert run_tool(box, "read", {"path": "x"}).is_error  # the SDK's shape, not ours


def test_a_root_other_users_cannot_reach_is_refused_at_start(tmp_path):
    private = tmp_path / "private"
    private.mkdir(mode=0o700)
    with pytest.raises(SandboxUnavailable, match="cannot traverse"):
        check_traversable(private / "sandboxes")


def test_a_worker_catches_up_with_a_snapshot_made_elsewhere(backend, limits):
    elsewhere = BwrapBackend(backend.root / "elsewhere", limits)
    spec = SandboxSpec(session_id="sesn_moves", workspace_id="wsp")
    try:
        here = backend.ensure(spec)
        here.run("echo first > notes.txt")
        here.snapshot()
        here.catch_up()  # its own snapshot: nothing to do, the shell keeps its state
        there = elsewhere.ensure(spec)  # the session moves to another worker, which restores it
        assert there.run("cat notes.txt").output == "first\n"
        there.run("echo second >> notes.txt")
        there.snapshot()
        here.catch_up()  # back on the first worker: the newer snapshot replaces its stale copy
        assert here.run("cat notes.txt").output == "first\nsecond\n"
    finally:
        elsewhere.destroy("sesn_moves")
        backend.destroy("sesn_moves", forget=True)
