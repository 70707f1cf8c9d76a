"""The host's own operations on a sandbox's files, attacked from inside the sandbox for real.

The bug class: a privileged process acting on a path an unprivileged party can change. Each test plants
what a hostile agent would (links swapped in a loop with `renameat2(RENAME_EXCHANGE)`, crafted archives,
FIFOs) and checks the host never reads, writes or waits on anything outside the session's own files.
The races run until a naive host-side version of the same operation (what the runtime used to do) has
lost to the attack at least once, so a pass means the attack was live.
"""

from __future__ import annotations

import gzip
import io
import os
import stat
import tarfile
import threading
import time
from pathlib import Path

import pytest

from registry.sandbox import snapshots
from registry.sandbox.backend import BwrapBackend, SandboxSpec
from registry.sandbox.fsops import UnsafePath
from registry.sandbox.toolset import read_answer, run_tool
from registry.sandbox.uids import UidAllocator, recorded_uid
from tests.support.sandbox_attacks import RACE_SECONDS, start_swapper


def naive_archive_leaks(workspace: Path, secret: str) -> bool:
    """What the runtime used to do: archive the workspace as root, by path."""
    buffer = io.BytesIO()
    try:
        with tarfile.open(fileobj=buffer, mode="w") as tar:
            tar.add(workspace, arcname=".", recursive=True)
    except OSError:
        pass  # a walk that trips over the swapping may fail; what it read so far is in the buffer
    return secret.encode() in buffer.getvalue()


def stored_snapshot_leaks(session_id: str, secret: str, names: tuple[str, ...] = ()) -> bool:
    chain = snapshots.latest(session_id)
    assert chain is not None
    content = b""
    for name in chain.archives:
        with snapshots.open_archive(session_id, name) as archive:
            content += gzip.decompress(archive.read())
    return secret.encode() in content or any(name.encode() in content for name in names)


def test_the_snapshot_never_reads_a_host_file_through_a_swapped_link(sandbox_for, host_secret):
    folder, secret = host_secret
    session_id = f"sesn_snapshot_race_{os.urandom(4).hex()}"
    box = sandbox_for(session_id)
    start_swapper(box, str(folder))
    naive_wins = leaks = rounds = 0
    deadline = time.monotonic() + RACE_SECONDS
    while (naive_wins == 0 or rounds < 5) and time.monotonic() < deadline:
        naive_wins += naive_archive_leaks(box.workspace, secret)
        box.snapshot()
        leaks += stored_snapshot_leaks(session_id, secret, ("secret.txt",))
        rounds += 1
    assert naive_wins > 0, f"the race never won against the naive archiver in {rounds} rounds"
    assert leaks == 0, f"{leaks} of {rounds} snapshots held the host's secret"
    assert box.run("ls /workspace/tree | wc -l").output.strip() == "16"  # the tree was really there


Member = tuple[tarfile.TarInfo, bytes]


def member(name: str, kind: bytes = tarfile.REGTYPE, data: bytes = b"", **fields: object) -> Member:
    """One entry of a crafted archive; `dumpdir` (an increment's list of a folder's names) goes in a pax header."""
    info = tarfile.TarInfo(name)
    info.type, info.size = kind, len(data)
    dumpdir = fields.pop("dumpdir", None)
    if dumpdir is not None:
        info.pax_headers = {"GNU.dumpdir": str(dumpdir)}
    for key, value in fields.items():
        setattr(info, key, value)
    return info, data


def archive_of(*members: Member, format: int = tarfile.GNU_FORMAT) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz", format=format) as tar:
        for info, data in members:
            tar.addfile(info, io.BytesIO(data) if data else None)
    return buffer.getvalue()


def crafted_archive(host_folder: Path) -> bytes:
    """A snapshot as a hostile sandbox could make it."""
    return archive_of(
        member(".", tarfile.DIRTYPE, mode=0o755),
        member("sub", tarfile.DIRTYPE, mode=0o755),
        member("sub/file.txt", data=b"kept", mode=0o644),
        member("../escaped.txt", data=b"escaped"),
        member("/abs-escaped.txt", data=b"escaped"),
        member("out", tarfile.SYMTYPE, linkname=str(host_folder)),
        member("out/planted.txt", data=b"planted through a link"),
        member("rel-out", tarfile.SYMTYPE, linkname="../../../../../../etc"),
        member("rel-in", tarfile.SYMTYPE, linkname="sub/file.txt"),
        member("venv-python", tarfile.SYMTYPE, linkname="/usr/bin/python3"),
        member("hard-out", tarfile.LNKTYPE, linkname="/etc/passwd"),
        member("hard-in", tarfile.LNKTYPE, linkname="sub/file.txt"),
        member("pipe", tarfile.FIFOTYPE),
        member("device", tarfile.CHRTYPE, devmajor=1, devminor=3),
        member("suid", data=b"#!/bin/sh\n", mode=0o4755),
    )


def test_a_hostile_snapshot_restores_only_the_sessions_own_files(backend, host_secret):
    folder, secret = host_secret
    before = sorted(path.name for path in folder.iterdir())
    session_id = f"sesn_hostile_restore_{os.urandom(4).hex()}"
    snapshots.extend(session_id, io.BytesIO(crafted_archive(folder)), after=None)
    box = backend.ensure(SandboxSpec(session_id=session_id, workspace_id="wsp"))

    assert sorted(path.name for path in folder.iterdir()) == before
    assert not (box.workspace.parent / "escaped.txt").exists() and not Path("/abs-escaped.txt").exists()
    entries = {str(path.relative_to(box.workspace)): path for path in box.workspace.rglob("*")}
    # `out/planted.txt` lands in a real folder `out` of the workspace: its link to the host was refused
    assert set(entries) == {"sub", "sub/file.txt", "rel-in", "venv-python", "hard-in", "suid", "out", "out/planted.txt"}
    links = {name: os.readlink(path) for name, path in entries.items() if path.is_symlink()}
    assert links == {"rel-in": "sub/file.txt", "venv-python": "/usr/bin/python3"}
    for path in entries.values():
        info = path.lstat()
        assert info.st_uid == box.uid and stat.S_IMODE(info.st_mode) & 0o7000 == 0, path
    assert box.run("cat sub/file.txt hard-in; readlink -f venv-python").output == "keptkept/usr/bin/python3.11\n"
    assert secret not in box.run("cat rel-in out/planted.txt 2>&1").output


def test_a_hostile_increment_renames_and_removes_only_inside_the_workspace(backend):
    session_id = f"sesn_hostile_increment_{os.urandom(4).hex()}"
    base = archive_of(
        member(".", tarfile.DIRTYPE, mode=0o755, dumpdir="Dsub\0Ykeep\0Ylnk\0"),
        member("sub", tarfile.DIRTYPE, mode=0o755, dumpdir="Yfile\0"),
        member("keep", data=b"keep", mode=0o644),
        member("sub/file", data=b"file", mode=0o644),
        member("lnk", tarfile.SYMTYPE, linkname="sub"),
        format=tarfile.PAX_FORMAT,
    )
    renames = "X..\0R../outside\0T./stolen\0R./sub\0T/abs\0R./sub\0T../escaped\0R\0T./made\0R./keep\0T./sub/../../up\0"
    increment = archive_of(
        member(".", tarfile.DIRTYPE, mode=0o755, dumpdir="Dsub\0Nkeep\0Dlnk\0" + renames),
        member("lnk", tarfile.DIRTYPE, mode=0o755, dumpdir=""),  # a folder where a link to `sub` stood
        member("sub", tarfile.DIRTYPE, mode=0o755, dumpdir="Nfile\0"),
        format=tarfile.PAX_FORMAT,
    )
    chain = snapshots.extend(session_id, io.BytesIO(base), after=None)
    snapshots.extend(session_id, io.BytesIO(increment), after=chain)
    try:
        box = backend.ensure(SandboxSpec(session_id=session_id, workspace_id="wsp"))
        # every rename was refused; the link was replaced by an empty folder, what it pointed at kept
        assert box.run("find . | sort; cat keep sub/file").output == ".\n./keep\n./lnk\n./sub\n./sub/file\nkeepfile"
    finally:
        backend.destroy(session_id, forget=True)


def test_restore_makes_a_fresh_worker_whole(backend, limits):
    session_id = f"sesn_roundtrip_{os.urandom(4).hex()}"
    here = backend.ensure(SandboxSpec(session_id=session_id, workspace_id="wsp"))
    here.run("mkdir -p a/b && echo deep > a/b/c.txt && ln -s a/b/c.txt link && chmod 750 a && python3 -m venv v")
    here.snapshot()
    elsewhere = BwrapBackend(backend.root / "elsewhere", limits)
    try:
        there = elsewhere.ensure(SandboxSpec(session_id=session_id, workspace_id="wsp"))
        check = "cat link; stat -c %a a; v/bin/python -c 'import sys; print(sys.prefix)'"
        assert there.run(check).output == "deep\n750\n/workspace/v\n"
        assert there.uid != here.uid or elsewhere.root != backend.root
    finally:
        elsewhere.destroy(session_id, forget=True)


def test_the_fetch_answer_is_read_only_as_a_regular_file(sandbox_for, host_secret):
    folder, _ = host_secret
    box = sandbox_for("sesn_answer")
    box.run(f"mkfifo fifo.json; ln -s {folder}/secret.txt link.json; mkdir dir.json")
    for name in ("fifo.json", "link.json", "dir.json"):
        started = time.monotonic()
        with pytest.raises(UnsafePath):
            read_answer(box, name)
        assert time.monotonic() - started < 2, f"{name} made the host wait"
    box.run('echo \'{"text": "x"}\' > plain.json')
    assert read_answer(box, "plain.json").strip() == '{"text": "x"}'


def test_a_fifo_swapped_in_for_the_fetch_answer_never_hangs_the_tool(backend, loopback_site, settings):
    settings.REGISTRY_SANDBOX_EGRESS_ALLOW = "127.0.0.1"
    site = loopback_site(lambda path: (b"the page", "text/plain"))
    box = backend.ensure(SandboxSpec(session_id="sesn_fetch_fifo", workspace_id="wsp"))
    watcher = (
        "import os\n"
        "while True:\n"
        "    for name in os.listdir('/workspace'):\n"
        "        if name.startswith('.web_fetch-') and not name.endswith('.fifo'):\n"
        "            try:\n"
        "                os.mkfifo('/workspace/x.fifo'); os.replace('/workspace/x.fifo', '/workspace/' + name)\n"
        "            except OSError: pass\n"
    )
    box.run(f"cat > /tmp/watch.py <<'EOF'\n{watcher}EOF\nnohup python3 /tmp/watch.py >/dev/null 2>&1 &")
    outcomes: list[object] = []
    for _ in range(5):
        worker = threading.Thread(target=lambda: outcomes.append(run_tool(box, "web_fetch", {"url": site})))
        worker.start()
        worker.join(timeout=60)
        assert not worker.is_alive(), "web_fetch hung on a planted FIFO"
    assert len(outcomes) == 5


def test_the_sandbox_reads_no_host_path_nor_its_session_id(backend):
    box = backend.ensure(SandboxSpec(session_id="sesn_mountinfo_probe", workspace_id="wsp"))
    seen = box.run(
        "cat /proc/self/mountinfo /proc/self/mounts /proc/1/cmdline /proc/self/cgroup 2>&1; "
        "for p in /proc/[0-9]*; do tr '\\0' ' ' < $p/cmdline; echo; done"
    ).output
    assert "sesn_mountinfo_probe" not in seen
    assert str(backend.root) not in seen and "/sessions/" not in seen, seen


def test_uids_are_allocated_uniquely_and_recycled_only_after_release(tmp_path):
    allocator = UidAllocator(tmp_path)
    homes = {f"sesn_{index}": tmp_path / "sessions" / f"sesn_{index}" for index in range(500)}
    uids = {session: allocator.uid_for(home, session) for session, home in homes.items()}
    assert len(set(uids.values())) == 500
    assert allocator.uid_for(homes["sesn_7"], "sesn_7") == uids["sesn_7"] == recorded_uid(homes["sesn_7"])
    allocator.release(uids["sesn_7"], "sesn_other")  # not its holder: nothing happens
    assert (tmp_path / "uids" / str(uids["sesn_7"])).exists()
    allocator.release(uids["sesn_7"], "sesn_7")
    assert not (tmp_path / "uids" / str(uids["sesn_7"])).exists()


def test_what_the_sandbox_plants_never_stalls_a_snapshot(sandbox_for):
    box = sandbox_for(f"sesn_snapshot_plants_{os.urandom(4).hex()}")
    planted = box.run(
        "mkfifo pipe; truncate -s 40M sparse.bin; (while true; do echo more >> growing.log; done) & "
        "python3 -c 'import socket; s = socket.socket(socket.AF_UNIX); s.bind(\"sock\")'; echo planted"
    )
    assert planted.output.strip().endswith("planted")
    started = time.monotonic()
    box.snapshot()
    assert time.monotonic() - started < 30
    chain = snapshots.latest(box.spec.session_id)
    assert chain is not None and len(chain.archives) == 1
    with (
        snapshots.open_archive(box.spec.session_id, chain.archives[0]) as archive,
        tarfile.open(fileobj=archive, mode="r:gz") as tar,
    ):
        names = {member.name.removeprefix("./"): member for member in tar.getmembers()}
    assert names["sparse.bin"].size == 40 * 1024 * 1024 and "growing.log" in names
    assert names["pipe"].isfifo() and "sock" not in names  # a FIFO is recorded, never read; sockets are left out
