"""Unpacks a workspace snapshot *inside* the session's sandbox, as the session's own uid.

Not imported by the registry: its source is handed to the sandbox's `python3 -I`, the chain's archives
(tar, gzip) on stdin, each framed by its length (8 bytes, big-endian), base first. Running inside means
every path resolves in the sandbox's own view and every file is created by (so owned by) the session's
uid; and the rules below refuse what a hostile archive could carry anyway. Only directories, regular
files, hard links to files already unpacked and symbolic links that stay inside the workspace (or point
at the sandbox's read-only system, as a virtualenv's `bin/python` does) are unpacked; devices, FIFOs,
absolute or `..` names, and links out of the tree are skipped and named on stdout. Modes keep their
permission bits only (no setuid, setgid or sticky bit).

An increment (GNU tar `--listed-incremental`, pax format) replays what changed since the archive before:
a folder's `GNU.dumpdir` lists the names it holds, so what is not listed any more is removed; folders
renamed since are renamed first (the `R`/`T` records, with a temporary name, `X`, for swaps); a file in
the increment replaces the one unpacked before. Standard library only (the sandbox's python3 may predate
tarfile's extraction filters).
"""

import itertools
import os
import posixpath
import shutil
import sys
import tarfile
import tempfile

HOME = "/workspace"
SYSTEM = ("/usr/", "/bin/", "/lib/", "/lib64/", "/sbin/", "/etc/", "/opt/packages/")
PERMISSIONS = 0o777
LENGTH_BYTES = 8


def inside(path):
    return path == HOME or path.startswith(HOME + "/")


def destination(name):
    """The name's absolute path in the workspace (the workspace itself for "."), or None when it leaves it."""
    parts = [part for part in name.split("/") if part not in ("", ".")]
    if name.startswith("/") or ".." in parts:
        return None
    return posixpath.join(HOME, *parts)


def link_allowed(path, target):
    if target.startswith("/"):
        resolved = posixpath.normpath(target)
        return inside(resolved) or resolved.startswith(SYSTEM)
    return inside(posixpath.normpath(posixpath.join(posixpath.dirname(path), target)))


def parent_is_real(path):
    """Every folder between the workspace and `path` is a folder this unpacking made, not a link."""
    parent = posixpath.dirname(path)
    return os.path.realpath(parent) == parent and inside(parent)


def is_folder(path):
    return os.path.isdir(path) and not os.path.islink(path)


def remove(path):
    """Remove a name of the workspace (a folder with everything in it; no link is followed)."""
    if is_folder(path):
        shutil.rmtree(path)
    else:
        os.unlink(path)


def unpack(member, tar, path):
    mode = member.mode & PERMISSIONS
    if member.isdir():
        os.makedirs(path, exist_ok=True)
        os.chmod(path, mode | 0o700)
    elif member.isreg():
        with (
            tar.extractfile(member) as source,
            open(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600), "wb") as copy,
        ):
            shutil.copyfileobj(source, copy, 1 << 20)
        os.chmod(path, mode)
        os.utime(path, (member.mtime, member.mtime), follow_symlinks=False)
    elif member.issym() and link_allowed(path, member.linkname):
        os.symlink(member.linkname, path)
    elif member.islnk():
        target = destination(member.linkname)
        if target is None or not os.path.isfile(target) or os.path.islink(target):
            return False
        os.link(target, path)
    else:
        return False
    return True


def real_folder(path):
    """A folder of the workspace (or the workspace itself) reached through folders only."""
    return path is not None and is_folder(path) and (path == HOME or parent_is_real(path))


def movable(path):
    return path != HOME and parent_is_real(path)


def rename_folders(records, skipped):
    """The renames of a dumpdir, in order: `R<from>` then `T<to>`; an empty name is the temporary folder
    that the last `X<folder>` made (a swap goes through it)."""
    temporary = None
    for record, following in itertools.pairwise([*records, ""]):
        if record.startswith("X"):
            parent = destination(record[1:])
            temporary = tempfile.mkdtemp(prefix="tar.", dir=parent) if real_folder(parent) else None
        elif record.startswith("R") and following.startswith("T"):
            source = destination(record[1:]) if record[1:] else temporary
            target = destination(following[1:]) if following[1:] else temporary
            if (
                source is None
                or target is None
                or not (movable(source) and movable(target) and os.path.lexists(source))
            ):
                skipped.append(f"rename {record[1:]} -> {following[1:]}")
                continue
            os.makedirs(posixpath.dirname(target), exist_ok=True)
            os.rename(source, target)


def purge(path, records):
    """Remove what the folder holds but the dumpdir does not list (or lists as another kind)."""
    listed = {record[1:]: record[0] for record in records if record[:1] in ("Y", "N", "D")}
    for name in os.listdir(path):
        kind = listed.get(name)
        full = posixpath.join(path, name)
        if kind is None or (kind == "D" and not is_folder(full)) or (kind == "Y" and is_folder(full)):
            remove(full)


def follow_dumpdir(member, path, skipped):
    """A folder of an incremental archive: replay its renames, then remove what it no longer holds."""
    dumpdir = member.pax_headers.get("GNU.dumpdir")
    if dumpdir is None or not real_folder(path):
        return
    records = [record for record in dumpdir.split("\0") if record]
    rename_folders(records, skipped)
    purge(path, records)


def place(member, tar, path, skipped):
    """One member at its path; what stands there from an earlier archive is replaced (a folder stays a
    folder)."""
    if not parent_is_real(path):
        skipped.append(member.name)
        return
    if os.path.lexists(path) and not (member.isdir() and is_folder(path)):
        if is_folder(path):
            skipped.append(member.name)
            return
        os.unlink(path)
    os.makedirs(posixpath.dirname(path), exist_ok=True)
    if not unpack(member, tar, path):
        skipped.append(member.name)


def unpack_archive(stream, skipped):
    with tarfile.open(fileobj=stream, mode="r|gz") as tar:
        for member in tar:
            path = destination(member.name)
            if path is None or (path == HOME and not member.isdir()):
                skipped.append(member.name)
                continue
            try:
                if path != HOME:
                    place(member, tar, path, skipped)
                if member.isdir():
                    follow_dumpdir(member, path, skipped)
            except OSError as error:
                skipped.append(f"{member.name} ({error.strerror})")


class Framed:
    """One framed archive of stdin: reads stop at its end."""

    def __init__(self, source, length):
        self.source = source
        self.left = length

    def read(self, size=-1):
        size = self.left if size is None or size < 0 else min(size, self.left)
        data = self.source.read(size)
        self.left -= len(data)
        return data

    def drain(self):
        while self.left and self.read(1 << 20):
            pass


def main():
    skipped: list[str] = []
    source = sys.stdin.buffer
    while header := source.read(LENGTH_BYTES):
        archive = Framed(source, int.from_bytes(header, "big"))
        try:
            unpack_archive(archive, skipped)
        except (tarfile.TarError, EOFError, OSError) as error:  # a damaged archive: the next ones still apply
            skipped.append(f"an archive ({error})")
        archive.drain()
    for name in skipped:
        print(f"skipped: {name}")


if __name__ == "__main__":
    main()
