"""Memory stores in the sandbox: each `memory_store` resource is a folder of files, one per memory.

The folder lives on the session's disk (`mounts/memory-<resource id>/`) and is bound at the
resource's `mount_path` (`/mnt/memory/<store name>/`): read-only for `read_only`, owned by the
session's uid for `read_write`. Around each tool call the runtime syncs it with the store:

- before, `pull`: memories changed in the store since the last sync (another session, the API) are
  written into the folder, unless the file changed locally too (the local change is pushed after);
- after, `push`: files created, changed or deleted in the folder become memory changes through the
  memory services (same path rules and size limit, a new `memver_` version, the server's sha256),
  made by a `session_actor`. A file the rules refuse is reported back and not stored.

What was last synced (path -> content sha256 and the file's size and mtime) is kept in the session's
host folder, out of the sandbox's reach, so a worker that picks the session up again carries on. The
folder is the sandbox's: every host access goes through directory descriptors with `O_NOFOLLOW`, so a
symlink planted there never leads the runtime outside it.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import stat
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from registry.core.errors import ApiError
from registry.memory import selectors as memory_selectors
from registry.memory import services as memory_services
from registry.memory.models import MemoryStore
from registry.memory.services import MAX_CONTENT_BYTES, path_problem
from registry.sandbox.fsops import DIRECTORY_FLAGS, directory_beneath, remove_beneath
from registry.sandbox.spec import Mount


@dataclass
class SyncReport:
    """What a push stored, and what it refused (for the tool result)."""

    stored: list[str] = field(default_factory=list)
    refused: list[str] = field(default_factory=list)

    def note(self) -> str:
        lines = [f"Memory not saved: {problem}" for problem in self.refused]
        return "\n".join(lines)


@dataclass
class Entry:
    sha256: str
    size: int
    mtime_ns: int


class MemoryMount:
    """One `memory_store` resource of a session: its folder, its manifest, and the sync both ways."""

    def __init__(self, *, resource: dict[str, Any], session_id: str, folder: Path, manifest: Path, uid: int) -> None:
        """`folder` is on the session's disk, in a root-owned parent; `manifest` in the host's own folder."""
        self.resource = resource
        self.session_id = session_id
        self.read_only = resource.get("access") == "read_only"
        self.folder = folder
        self.manifest = manifest
        self.owner = 0 if self.read_only else uid
        self.entries: dict[str, Entry] = {}

    @property
    def mount(self) -> Mount:
        return Mount(self.folder, self.resource["mount_path"], read_only=self.read_only)

    def prepare(self) -> None:
        """Create the folder (first time) and load what was last synced."""
        fresh = not self.folder.exists()
        self.folder.mkdir(exist_ok=True)  # in the disk's `mounts`, a root-owned folder: not a swapped link
        os.chown(self.folder, self.owner, self.owner, follow_symlinks=False)
        os.chmod(self.folder, 0o755, follow_symlinks=False)
        self.manifest.parent.mkdir(mode=0o700, exist_ok=True)
        if not fresh and self.manifest.exists():
            stored = json.loads(self.manifest.read_text())
            self.entries = {path: Entry(**entry) for path, entry in stored.items()}

    def _save_manifest(self) -> None:
        data = {path: entry.__dict__ for path, entry in self.entries.items()}
        temporary = self.manifest.with_name(f".{self.manifest.name}.tmp")
        temporary.write_text(json.dumps(data))
        os.replace(temporary, self.manifest)

    # -- store -> folder -------------------------------------------------------------------------
    def pull(self) -> None:
        """Bring the folder up to date with the store, keeping local changes not pushed yet."""
        store_id = self.resource["memory_store_id"]
        store_state = memory_selectors.store_digests(store_id)
        with self._root() as root:
            local = dict(self._scan(root))
            wanted = [path for path, sha256 in store_state.items() if self._should_pull(path, sha256, local)]
            for start in range(0, len(wanted), 500):
                chunk = wanted[start : start + 500]
                for path, content in memory_selectors.contents_at(store_id, chunk):
                    with contextlib.suppress(OSError):  # a folder of the sandbox's in the way: left as it is
                        self.entries[path] = self._write(root, path, content.encode())
            for path in [path for path in self.entries if path not in store_state]:
                if _unchanged(local.get(path), self.entries[path]):
                    remove_beneath(root, path.strip("/"))
                    del self.entries[path]
        self._save_manifest()

    def _should_pull(self, path: str, sha256: str, local: dict[str, os.stat_result]) -> bool:
        """The store has news for this path, and the folder has no change of its own there."""
        known = self.entries.get(path)
        if known is None:
            return path not in local
        return known.sha256 != sha256 and _unchanged(local.get(path), known)

    def _write(self, root: int, path: str, data: bytes) -> Entry:
        *parents, name = path.strip("/").split("/")
        with directory_beneath(root, parents, create_as=self.owner) as directory:
            with contextlib.suppress(FileNotFoundError, IsADirectoryError):
                os.unlink(name, dir_fd=directory)
            descriptor = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644, dir_fd=directory)
            try:
                os.write(descriptor, data)
                os.fchown(descriptor, self.owner, self.owner)
                info = os.fstat(descriptor)
            finally:
                os.close(descriptor)
        return Entry(hashlib.sha256(data).hexdigest(), info.st_size, info.st_mtime_ns)

    # -- folder -> store -------------------------------------------------------------------------
    def push(self) -> SyncReport:
        """Store what the sandbox changed in the folder; report what the memory rules refused."""
        report = SyncReport()
        if self.read_only:
            return report
        store = memory_selectors.store_by_id(self.resource["memory_store_id"])
        actor = {"type": "session_actor", "session_id": self.session_id}
        with self._root() as root:
            local = dict(self._scan(root))
            for path, info in local.items():
                known = self.entries.get(path)
                if known is None or not _unchanged(info, known):
                    self._push_file(root, store, path, actor, report)
            for path in [path for path in self.entries if path not in local]:
                memory = memory_selectors.memory_at(store=store, path=path)
                if memory is not None:
                    self._apply(
                        report,
                        path,
                        lambda m=memory: memory_services.memory_delete(memory=m, expected_sha256=None, actor=actor),
                    )
                self.entries.pop(path, None)
        self._save_manifest()
        return report

    def _push_file(self, root: int, store: MemoryStore, path: str, actor: dict[str, str], report: SyncReport) -> None:
        problem = path_problem(path)
        if problem is not None:
            report.refused.append(f"{self.resource['mount_path']}{path}: the path {problem}")
            return
        try:
            data, info = _read(root, path)
        except OSError:
            report.refused.append(f"{self.resource['mount_path']}{path}: not a regular file the runtime can read")
            return
        if data is None:
            report.refused.append(
                f"{self.resource['mount_path']}{path}: larger than the memory limit of {MAX_CONTENT_BYTES} bytes"
            )
            return
        try:
            content = data.decode()
        except UnicodeDecodeError:
            report.refused.append(f"{self.resource['mount_path']}{path}: not UTF-8 text")
            return
        entry = Entry(hashlib.sha256(data).hexdigest(), info.st_size, info.st_mtime_ns)
        known = self.entries.get(path)
        if known is not None and known.sha256 == entry.sha256:
            self.entries[path] = entry  # touched, same content
            return
        memory = memory_selectors.memory_at(store=store, path=path)
        if memory is None:
            stored = self._apply(
                report,
                path,
                lambda: memory_services.memory_create(store=store, path=path, content=content, actor=actor),
            )
        else:
            stored = self._apply(
                report,
                path,
                lambda: memory_services.memory_update(memory=memory, values={"content": content}, actor=actor),
            )
        if stored:
            self.entries[path] = entry

    def _apply(self, report: SyncReport, path: str, change: Any) -> bool:
        try:
            change()
        except ApiError as refusal:
            report.refused.append(f"{self.resource['mount_path']}{path}: {refusal.message}")
            return False
        report.stored.append(path)
        return True

    # -- walking the folder safely ----------------------------------------------------------------
    @contextlib.contextmanager
    def _root(self) -> Iterator[int]:
        descriptor = os.open(self.folder, DIRECTORY_FLAGS)
        try:
            yield descriptor
        finally:
            os.close(descriptor)

    def _scan(self, root: int, prefix: str = "") -> Iterator[tuple[str, os.stat_result]]:
        """Every regular file below the folder as (memory path, lstat); links and devices are skipped."""
        for name in os.listdir(root):
            info = os.stat(name, dir_fd=root, follow_symlinks=False)
            path = f"{prefix}/{name}"
            if stat.S_ISREG(info.st_mode):
                yield path, info
            elif stat.S_ISDIR(info.st_mode):
                child = os.open(name, DIRECTORY_FLAGS, dir_fd=root)
                try:
                    yield from self._scan(child, path)
                finally:
                    os.close(child)


def _unchanged(info: os.stat_result | None, known: Entry) -> bool:
    return info is not None and info.st_size == known.size and info.st_mtime_ns == known.mtime_ns


def _read(root: int, path: str) -> tuple[bytes | None, os.stat_result]:
    """The file's bytes (None when over the memory limit) and its stat, read without following links."""
    *parents, name = path.strip("/").split("/")
    with directory_beneath(root, parents) as directory:
        descriptor = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY, dir_fd=directory)
        try:
            info = os.fstat(descriptor)
            if not stat.S_ISREG(info.st_mode):  # swapped for a FIFO or the like since the scan
                raise OSError(f"{path} is not a regular file")
            if info.st_size > MAX_CONTENT_BYTES:
                return None, info
            chunks = []
            while chunk := os.read(descriptor, 65536):
                chunks.append(chunk)
                if sum(map(len, chunks)) > MAX_CONTENT_BYTES:
                    return None, info
            return b"".join(chunks), info
        finally:
            os.close(descriptor)


def memory_prompt(resources: list[dict[str, Any]]) -> str | None:
    """The system prompt's memory section: each store's mount path, access, description, instructions."""
    stores = [resource for resource in resources if resource["type"] == "memory_store"]
    if not stores:
        return None
    lines = [
        "# Memory",
        "Memory stores are mounted as folders; each file is one memory. Read them when they can help; in a "
        "read_write store, create, change or delete files to remember what will matter in later sessions.",
    ]
    for store in stores:
        lines.append(f"\n## {store.get('name') or store['memory_store_id']} ({store['access']}): {store['mount_path']}")
        if store.get("description"):
            lines.append(store["description"])
        if store.get("instructions"):
            lines.append(f"Instructions: {store['instructions']}")
    return "\n".join(lines)
