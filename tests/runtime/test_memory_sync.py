"""The memory folder's sync with its store, on the host side: what is pushed, what is refused, what is
pulled, and that a link planted in the folder never leads the runtime outside it."""

from __future__ import annotations

import os

import pytest

from registry.memory.models import Memory, MemoryVersion
from registry.memory.services import memory_create, memory_update
from registry.memory.services import memory_store_create as store_create
from registry.runtime.memory_mounts import MemoryMount

pytestmark = pytest.mark.django_db

API = {"type": "api_actor", "api_key_id": "key_test"}


@pytest.fixture
def store(tenant):
    return store_create(workspace=tenant.workspace, values={"name": "notes"})


def mount_for(store, tmp_path, access="read_write", resource_id="sesrsc_1", session_id="sesn_1"):
    resource = {
        "id": resource_id,
        "type": "memory_store",
        "memory_store_id": store.id,
        "access": access,
        "mount_path": "/mnt/memory/notes",
    }
    folder, manifest = tmp_path / resource_id, tmp_path / "manifests" / f"{resource_id}.json"
    mount = MemoryMount(resource=resource, session_id=session_id, folder=folder, manifest=manifest, uid=os.getuid())
    mount.prepare()
    mount.pull()
    return mount


def test_pull_writes_each_memory_as_a_file_and_push_stores_changes(store, tmp_path):
    memory_create(store=store, path="/a/b.md", content="one", actor=API)
    mount = mount_for(store, tmp_path)
    assert (mount.folder / "a" / "b.md").read_text() == "one"
    (mount.folder / "a" / "b.md").write_text("two")
    (mount.folder / "c.md").write_text("new")
    report = mount.push()
    assert sorted(report.stored) == ["/a/b.md", "/c.md"] and report.refused == []
    assert dict(Memory.objects.filter(store=store).values_list("path", "content")) == {"/a/b.md": "two", "/c.md": "new"}
    assert mount.push().stored == []  # nothing changed since


def test_a_new_worker_carries_on_from_the_manifest(store, tmp_path):
    memory_create(store=store, path="/kept.md", content="v1", actor=API)
    mount_for(store, tmp_path)
    again = mount_for(store, tmp_path)  # another runner: no spurious writes, no lost files
    assert again.push().stored == []
    assert MemoryVersion.objects.filter(store=store).count() == 1


def test_rules_refuse_what_the_store_would_refuse(store, tmp_path):
    mount = mount_for(store, tmp_path)
    (mount.folder / "big.md").write_bytes(b"x" * 200_000)
    (mount.folder / "binary.bin").write_bytes(b"\xff\xfe\x00")
    deep = mount.folder.joinpath(*[f"d{n}" for n in range(21)])
    deep.mkdir(parents=True)
    (deep / "f.md").write_text("too deep")
    report = mount.push()
    assert report.stored == []
    assert len(report.refused) == 3 and "memory limit" in " ".join(report.refused)
    assert not Memory.objects.filter(store=store).exists()


def test_a_planted_symlink_is_not_followed(store, tmp_path):
    secret = tmp_path / "host-secret"
    secret.write_text("HOST ONLY")
    mount = mount_for(store, tmp_path)
    (mount.folder / "leak.md").symlink_to(secret)
    (mount.folder / "dir").symlink_to(tmp_path)
    assert mount.push().stored == []
    assert not Memory.objects.filter(store=store).exists()

    memory_create(store=store, path="/dir/host-secret", content="overwrite?", actor=API)
    mount.pull()
    assert secret.read_text() == "HOST ONLY"


def test_a_change_in_the_store_is_pulled_unless_the_folder_changed_too(store, tmp_path):
    first = memory_create(store=store, path="/a.md", content="one", actor=API)
    second = memory_create(store=store, path="/b.md", content="one", actor=API)
    mount = mount_for(store, tmp_path)
    memory_update(memory=first, values={"content": "from the api"}, actor=API)
    memory_update(memory=second, values={"content": "from the api"}, actor=API)
    (mount.folder / "b.md").write_text("from the sandbox, later")
    mount.pull()
    assert (mount.folder / "a.md").read_text() == "from the api"
    assert (mount.folder / "b.md").read_text() == "from the sandbox, later"
    mount.push()
    assert Memory.objects.get(pk=second.pk).content == "from the sandbox, later"
    operations = list(MemoryVersion.objects.filter(memory_id=second.pk).values_list("operation", flat=True))
    assert operations.count("modified") == 2  # both writes are in the history


def test_a_read_only_store_is_never_written(store, tmp_path):
    memory_create(store=store, path="/a.md", content="one", actor=API)
    mount = mount_for(store, tmp_path, access="read_only")
    assert mount.mount.read_only
    (mount.folder / "a.md").write_text("changed anyway")
    assert mount.push().stored == []
    assert Memory.objects.get(store=store, path="/a.md").content == "one"


def test_a_planted_fifo_is_never_opened(store, tmp_path):
    mount = mount_for(store, tmp_path)
    os.mkfifo(mount.folder / "pipe.md")  # opening it for reading would wait for a writer forever
    (mount.folder / "kept.md").write_text("kept")
    assert mount.push().stored == ["/kept.md"]
    assert list(Memory.objects.filter(store=store).values_list("path", flat=True)) == ["/kept.md"]
