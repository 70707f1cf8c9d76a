"""Workspace snapshots as chains, through real sandboxes and the storage they land in: a base, then
increments that hold only what changed; a fresh worker replays the chain (deletions and renames
included); a snapshot that fails on its way leaves the previous chain the latest, and the next one
still carries what the failed one missed."""

from __future__ import annotations

import io
import os
import tarfile
from collections.abc import Iterator

import pytest
from django.core.files.base import ContentFile
from django.core.files.storage import storages

from registry.sandbox import snapshots
from registry.sandbox.backend import BwrapBackend, BwrapSandbox, Limits, SandboxSpec

# Everything of a workspace a restore must reproduce: each name's kind, mode and link target, each file's hash.
TREE = (
    "find . -mindepth 1 -printf '%y %m %p -> %l\\n' | sort; "
    "find . -type f -print0 | sort -z | xargs -0 -r sha256sum; du -s --apparent-size sparse.bin 2>/dev/null"
)


def tree(box: BwrapSandbox) -> str:
    return box.run(TREE).output


def stored_members(session_id: str, name: str) -> dict[str, tarfile.TarInfo]:
    with snapshots.open_archive(session_id, name) as stored, tarfile.open(fileobj=stored, mode="r:gz") as tar:
        return {member.name.removeprefix("./"): member for member in tar.getmembers()}


def files_of(members: dict[str, tarfile.TarInfo]) -> set[str]:
    return {name for name, member in members.items() if member.isreg()}


@pytest.fixture
def elsewhere(backend: BwrapBackend, limits: Limits) -> Iterator[BwrapBackend]:
    """Another worker's backend (its own root), so a session restores there from storage alone."""
    other = BwrapBackend(backend.root / "elsewhere", limits)
    yield other
    for session_id in list(other.sandboxes):
        other.destroy(session_id)


@pytest.fixture
def session(backend: BwrapBackend) -> Iterator[SandboxSpec]:
    spec = SandboxSpec(session_id=f"sesn_chain_{os.urandom(4).hex()}", workspace_id="wsp")
    yield spec
    backend.destroy(spec.session_id, forget=True)


def test_an_increment_holds_only_the_changed_file(backend, session):
    box = backend.ensure(session)
    box.run("mkdir -p src/pkg docs && for n in $(seq 60); do echo 'x = $n' > src/pkg/m$n.py; done")
    box.run("head -c 2M /dev/urandom > docs/blob.bin; yes text | head -c 3M > docs/notes.txt")
    box.snapshot()
    box.run("echo 'y = 1' >> src/pkg/m7.py")
    box.snapshot()

    chain = snapshots.latest(session.session_id)
    assert chain is not None and len(chain.archives) == 2
    base, increment = (stored_members(session.session_id, name) for name in chain.archives)
    assert len(files_of(base)) == 62
    assert files_of(increment) == {"src/pkg/m7.py"}
    assert chain.sizes[1] < 8_000 < 2_000_000 < chain.sizes[0]  # the folders' name lists, and one file
    assert stored_names(session.session_id) == {f"manifest-{chain.seq:08d}.json", *chain.archives}


def stored_names(session_id: str) -> set[str]:
    return set(os.listdir(snapshots_folder(session_id)))


def snapshots_folder(session_id: str) -> str:
    return str(storages["default"].path(snapshots.folder(session_id)))


# Each step runs in the workspace, then a snapshot: the first is the base (with weight enough that the
# increments stay in its chain), each later one an increment.
STEPS = (
    "mkdir -p a/b c d gone/deep && echo 1 > a/b/f1 && echo 2 > c/f2 && echo 3 > d/f3 && echo top > top && "
    "echo x > gone/deep/x && ln -s a/b/f1 link && head -c 300K /dev/urandom > weight.bin && chmod 750 a && "
    "mkdir \"$(printf 'odd\\nfolder')\" && echo 4 > \"$(printf 'odd\\nfolder/caf\\351')\"",
    "rm -r gone top && mv a a2 && echo new > a2/b/new",  # deletions, a folder renamed, a file added in it
    "mv c tmp && mv d c && mv tmp d && rm link && mkdir link && echo dir > link/inside",  # a swap; a link -> a folder
    "rm -r link && echo file > link && chmod 600 d/f2 && truncate -s 5M sparse.bin && echo again >> a2/b/f1",
    "mkdir -p a2/b/c/d && mv a2/b a2/moved && rm d/f2 && touch empty && mv odd* odd",  # renames, new depth
)


def test_a_fresh_worker_replays_base_and_increments(backend, elsewhere, session, caplog):
    here = backend.ensure(session)
    for step in STEPS:
        assert here.run(step).exit_code == 0, step
        here.snapshot()
    chain = snapshots.latest(session.session_id)
    assert chain is not None and len(chain.archives) == len(STEPS)

    there = elsewhere.ensure(session)
    assert "restoring" not in caplog.text  # nothing skipped, nothing failed
    assert tree(there) == tree(here)
    assert (
        there.run("cat a2/moved/f1 link; ls").output
        == "1\nagain\nfile\na2\nc\nd\nempty\nlink\nodd\nsparse.bin\nweight.bin\n"
    )


def test_a_snapshot_abandoned_on_its_way_leaves_the_previous_chain(backend, elsewhere, session, limits):
    box = backend.ensure(session)
    box.run("echo one > kept.txt; head -c 200K /dev/urandom > weight.bin")
    box.snapshot()
    before = snapshots.latest(session.session_id)
    stored_before = stored_names(session.session_id)
    box.run("echo two > kept.txt; echo more > added.txt")

    def lease_lost() -> None:
        raise RuntimeError("the lease was lost")

    with pytest.raises(RuntimeError):
        box.snapshot(commit_if=lease_lost)  # its archive was uploaded; the manifest never written
    assert snapshots.latest(session.session_id) == before
    assert stored_names(session.session_id) == stored_before  # the uploaded archive is gone again
    assert elsewhere.ensure(session).run("cat kept.txt; ls").output == "one\nkept.txt\nweight.bin\n"
    elsewhere.destroy(session.session_id)

    box.snapshot()  # the next snapshot carries what the abandoned one missed
    chain = snapshots.latest(session.session_id)
    assert chain is not None and before is not None and chain.archives == (*before.archives, chain.archives[1])
    assert files_of(stored_members(session.session_id, chain.archives[1])) == {"kept.txt", "added.txt"}
    assert elsewhere.ensure(session).run("cat kept.txt added.txt").output == "two\nmore\n"


def test_objects_cut_short_by_a_dying_worker_are_passed_over(backend, elsewhere, session):
    """A worker that died while writing: a manifest cut short and an archive no manifest names are skipped
    by readers and removed by the next snapshot."""
    box = backend.ensure(session)
    box.run("echo one > kept.txt; head -c 100K /dev/urandom > weight.bin")
    box.snapshot()
    before = snapshots.latest(session.session_id)
    assert before is not None
    folder = snapshots_folder(session.session_id)
    with open(f"{folder}/manifest-{before.seq + 1:08d}.json", "w") as cut:
        cut.write('{"version": "2-abc", "archives": [{"name": "archive-')
    with open(f"{folder}/archive-0123456789abcdef.tar.gz", "wb") as partial:
        partial.write(b"\x1f\x8b\x08")
    assert snapshots.latest(session.session_id) == before
    assert elsewhere.ensure(session).run("cat kept.txt").output == "one\n"

    box.run("echo two > kept.txt")
    box.snapshot()
    chain = snapshots.latest(session.session_id)
    assert chain is not None and chain.seq == before.seq + 2 and chain.archives[:1] == before.archives
    assert stored_names(session.session_id) == {f"manifest-{chain.seq:08d}.json", *chain.archives}


def test_a_long_chain_or_heavy_increments_start_a_new_base(backend, session):
    box = backend.ensure(session)
    box.run("head -c 20K /dev/urandom > small.bin")
    box.snapshot()
    box.run("head -c 40K /dev/urandom > bigger.bin")
    box.snapshot()  # an increment larger than its base
    box.run("echo more > more.txt")
    box.snapshot()
    chain = snapshots.latest(session.session_id)
    assert chain is not None and len(chain.archives) == 1  # the increments outgrew the base: a new base
    assert files_of(stored_members(session.session_id, chain.archives[0])) == {"small.bin", "bigger.bin", "more.txt"}
    assert snapshots.Chain(1, "v", ("a",) * snapshots.MAX_CHAIN, (10**6,) + (1,) * 15).wants_base()


def test_a_snapshot_of_the_old_single_archive_layout_is_restored(backend, elsewhere, session):
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        member = tarfile.TarInfo("./old.txt")
        member.size = 4
        tar.addfile(member, io.BytesIO(b"old\n"))
    folder = snapshots.folder(session.session_id)
    storages["default"].save(f"{folder}/workspace.tar.gz", ContentFile(buffer.getvalue()))
    storages["default"].save(f"{folder}/version", ContentFile(b"legacy-token"))
    box = backend.ensure(session)
    assert box.run("cat old.txt").output == "old\n"
    box.run("echo new > new.txt")
    box.snapshot()
    chain = snapshots.latest(session.session_id)
    assert chain is not None and len(chain.archives) == 1 and chain.version != "legacy-token"
    assert stored_names(session.session_id) == {f"manifest-{chain.seq:08d}.json", *chain.archives}
    assert elsewhere.ensure(session).run("cat old.txt new.txt").output == "old\nnew\n"
