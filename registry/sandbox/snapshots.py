"""Workspace snapshots through Django's storage API, so a session's files outlive its worker.

A session's snapshot is a **chain** of archives in `storages["default"]` (a directory by default, an
object store in production) under `sandbox-snapshots/<session>/`: a full base, then increments that
each hold only what changed since the link before (GNU tar's `--listed-incremental`: changed files, and
every folder's list of names, so deletions and renames are replayed). A manifest names the chain:

    manifest-<seq>.json       {"version": "<seq>-<token>", "archives": [{"name": ..., "size": ...}, ...]}
    archive-<token>.tar.gz    one link of a chain (never overwritten: each upload has a new name)

A snapshot uploads its archive, then writes the next manifest under a new name, and only then removes
the objects the new manifest no longer names. So an interrupted snapshot (a worker that dies, storage
that fails) leaves the previous manifest and every archive it names in place, and a reader takes the
highest-numbered manifest that parses and whose archives are all there. A chain is cut (the next
snapshot is a new base) once it is `MAX_CHAIN` long or its increments together outgrow its base.

The host side of a chain (`LocalState`, in the session's host folder, which the sandbox never sees):
the version this host's workspace matches, and tar's incremental state. The state is written by tar
inside the snapshot helper; the host only creates it empty, renames and removes it, never reads it.

This module only moves archives between host files and storage: they are made and unpacked *inside*
the session's sandbox, as its uid (`BwrapSandbox.snapshot`, `unpack.py`), so the host never reads or
writes a workspace path the sandbox could have changed. A session snapshotted before chains existed
(`workspace.tar.gz` and `version`) reads as a chain of that one archive.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import secrets
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from io import BytesIO
from pathlib import Path
from typing import IO

from django.core.files import File
from django.core.files.storage import storages

MAX_CHAIN = 16  # archives in a chain, its base included
MANIFEST = re.compile(r"manifest-(\d+)\.json")
LEGACY_ARCHIVE, LEGACY_VERSION = "workspace.tar.gz", "version"
LENGTH_BYTES = 8  # `fetch` frames each archive with its length, big-endian


@dataclass(frozen=True)
class Chain:
    """A session's latest snapshot: its version and its archives (base first) with their sizes."""

    seq: int
    version: str
    archives: tuple[str, ...]
    sizes: tuple[int, ...]

    def wants_base(self) -> bool:
        """The next snapshot should start a new chain: this one is long, or its increments outgrew its base."""
        return len(self.archives) >= MAX_CHAIN or sum(self.sizes[1:]) > self.sizes[0]

    def manifest(self) -> bytes:
        links = [{"name": name, "size": size} for name, size in zip(self.archives, self.sizes, strict=True)]
        return json.dumps({"version": self.version, "archives": links}).encode()


def folder(session_id: str) -> str:
    return f"sandbox-snapshots/{session_id}"


def _names(session_id: str) -> set[str]:
    """The objects stored for the session (names within its folder)."""
    try:
        return set(storages["default"].listdir(folder(session_id))[1])
    except FileNotFoundError:
        return set()


def _manifests(names: set[str]) -> list[tuple[int, str]]:
    """The manifests among `names` with their numbers, highest first."""
    return sorted(((int(found[1]), name) for name in names if (found := MANIFEST.fullmatch(name))), reverse=True)


def latest(session_id: str) -> Chain | None:
    """The session's latest complete snapshot, or None when it has none."""
    names = _names(session_id)
    for seq, name in _manifests(names):
        chain = _read_manifest(session_id, seq, name)
        if chain is not None and set(chain.archives) <= names:
            return chain
    return _legacy(session_id, names)


def _read_manifest(session_id: str, seq: int, name: str) -> Chain | None:
    """A manifest as stored, or None when it is damaged (a write cut short)."""
    try:
        with storages["default"].open(f"{folder(session_id)}/{name}", "rb") as stored:
            manifest = json.loads(stored.read())
        archives = tuple(str(archive["name"]) for archive in manifest["archives"])
        sizes = tuple(int(archive["size"]) for archive in manifest["archives"])
        return Chain(seq, str(manifest["version"]), archives, sizes) if archives else None
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _legacy(session_id: str, names: set[str]) -> Chain | None:
    """A snapshot of the single-archive layout, as a chain of one."""
    if not {LEGACY_ARCHIVE, LEGACY_VERSION} <= names:
        return None
    storage = storages["default"]
    with storage.open(f"{folder(session_id)}/{LEGACY_VERSION}", "rb") as stored:
        token = stored.read().decode(errors="replace")
    return Chain(0, token, (LEGACY_ARCHIVE,), (storage.size(f"{folder(session_id)}/{LEGACY_ARCHIVE}"),))


def extend(
    session_id: str, archive: IO[bytes], *, after: Chain | None, commit_if: Callable[[], None] | None = None
) -> Chain:
    """Store `archive` (a host file) as the link after `after`, or as a new base when `after` is None; the
    new chain. `commit_if` runs just before the manifest is written: an exception from it (a lease that
    was lost) abandons the snapshot. On any failure the previous chain stays the latest."""
    before = _names(session_id)
    name = f"archive-{secrets.token_hex(8)}.tar.gz"
    size = archive.seek(0, os.SEEK_END)
    try:
        _store(session_id, name, archive)
        if commit_if is not None:
            commit_if()
        chain = _linked(after, name, size, seq=max((seq for seq, _ in _manifests(before)), default=0) + 1)
        _store(session_id, f"manifest-{chain.seq:08d}.json", BytesIO(chain.manifest()))
    except BaseException:
        _remove(session_id, {name})
        raise
    _remove(session_id, before - set(chain.archives))
    return chain


def _linked(after: Chain | None, name: str, size: int, *, seq: int) -> Chain:
    """The chain `after` with one more archive (a new chain of it alone when `after` is None)."""
    archives, sizes = (after.archives, after.sizes) if after else ((), ())
    return Chain(seq, f"{seq}-{secrets.token_hex(4)}", (*archives, name), (*sizes, size))


def _store(session_id: str, name: str, content: IO[bytes]) -> None:
    """Save a new object from the start of `content`; OSError when the name was taken meanwhile (another
    writer: never overwrite)."""
    content.seek(0)
    wanted = f"{folder(session_id)}/{name}"
    saved = storages["default"].save(wanted, File(content))
    if saved != wanted:
        storages["default"].delete(saved)
        raise OSError(f"{wanted} was written by someone else meanwhile")


def _remove(session_id: str, names: set[str]) -> None:
    """Remove objects of the session's folder (best effort: what is left is removed by the next snapshot)."""
    storage = storages["default"]
    for name in names:
        with contextlib.suppress(OSError):
            storage.delete(f"{folder(session_id)}/{name}")


def fetch(session_id: str, chain: Chain, into: IO[bytes]) -> None:
    """The chain's archives, in order, into `into` (a host file, rewound): each framed by its length
    (`LENGTH_BYTES`, big-endian), as `unpack.py` reads them."""
    storage = storages["default"]
    for name in chain.archives:
        start = into.tell()
        into.write(bytes(LENGTH_BYTES))
        with storage.open(f"{folder(session_id)}/{name}", "rb") as archive:
            shutil.copyfileobj(archive, into, 1 << 20)
        end = into.tell()
        into.seek(start)
        into.write((end - start - LENGTH_BYTES).to_bytes(LENGTH_BYTES, "big"))
        into.seek(end)
    into.seek(0)


def open_archive(session_id: str, name: str) -> IO[bytes]:
    """One stored archive of the session, to read."""
    opened: IO[bytes] = storages["default"].open(f"{folder(session_id)}/{name}", "rb")
    return opened


def delete(session_id: str) -> None:
    """Every snapshot object of the session."""
    _remove(session_id, _names(session_id))


class LocalState:
    """Where this host stands in the session's chain, in its host folder (root's; the sandbox never sees
    it): the version its workspace matches (`snapshot-version`), and tar's incremental state after that
    version (`snapshot.snar`) with the copy a snapshot in progress writes (`snapshot-next.snar`)."""

    def __init__(self, home: Path) -> None:
        self.version_file = home / "snapshot-version"
        self.state = home / "snapshot.snar"
        self.next = home / "snapshot-next.snar"

    def version(self) -> str | None:
        return self.version_file.read_text() if self.version_file.exists() else None

    def continues(self, chain: Chain | None) -> bool:
        """A snapshot now can be an increment of `chain`: it is this host's and its tar state is here."""
        return chain is not None and not chain.wants_base() and chain.version == self.version() and self.state.exists()

    def start(self, uid: int) -> Path:
        """An empty state file for the next snapshot's tar, owned by the session's uid (made by the host in its
        own folder: no link can be planted there)."""
        self.next.unlink(missing_ok=True)
        descriptor = os.open(self.next, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        try:
            os.fchown(descriptor, uid, uid)
        finally:
            os.close(descriptor)
        return self.next

    def committed(self, version: str) -> None:
        """The snapshot landed: its tar state is the one to continue from."""
        os.replace(self.next, self.state)
        self.version_file.write_text(version)

    def abandoned(self) -> None:
        self.next.unlink(missing_ok=True)

    def restored(self, version: str | None) -> None:
        """The workspace was unpacked from the stored chain: its files are new, so the next snapshot is a base."""
        self.state.unlink(missing_ok=True)
        self.abandoned()
        if version is None:
            self.version_file.unlink(missing_ok=True)
        else:
            self.version_file.write_text(version)
