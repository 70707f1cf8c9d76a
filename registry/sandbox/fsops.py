"""File operations the host does in a sandbox's disk without trusting a path the sandbox can change.

The host side (root) reaches into a session's disk for a few things: placing a repository it copied,
reading an answer file a tool wrote, measuring usage. A sandbox process may swap any directory or
file it owns for a link (or a FIFO) at any moment, so nothing here resolves such a path by name:
directories are walked one component at a time from a descriptor with `O_NOFOLLOW`, files are opened
non-blocking and must be regular, and renames and chowns are relative to descriptors. Trees the host
builds itself live in a root-only staging folder until they are renamed into place.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import stat
from collections.abc import Iterator
from pathlib import Path

DIRECTORY_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC


class UnsafePath(OSError):
    """A path the sandbox made into something the host will not follow (a link, a FIFO, a device)."""


def relative_parts(relative: str) -> list[str]:
    """The components of a path below a root; `..`, absolute paths and empty names are refused."""
    parts = [part for part in relative.split("/") if part not in ("", ".")]
    if relative.startswith("/") or any(part == ".." for part in parts):
        raise UnsafePath(f"{relative!r} does not stay below its root")
    return parts


@contextlib.contextmanager
def directory_beneath(root: Path | int, parts: list[str], *, create_as: int | None = None) -> Iterator[int]:
    """A descriptor of `root`/parts..., every component opened without following a link; missing
    folders are made (mode 0755, owned by `create_as`) when `create_as` is given. `root` is a path no
    sandbox can change, or a descriptor of a folder already opened that way."""
    descriptor = os.dup(root) if isinstance(root, int) else os.open(root, DIRECTORY_FLAGS)
    try:
        for part in parts:
            if create_as is not None:
                with contextlib.suppress(FileExistsError):
                    os.mkdir(part, 0o755, dir_fd=descriptor)
                    os.chown(part, create_as, create_as, dir_fd=descriptor, follow_symlinks=False)
            try:
                child = os.open(part, DIRECTORY_FLAGS, dir_fd=descriptor)
            except OSError as error:
                raise UnsafePath(f"{part!r} is not a directory the host will enter ({error.strerror})") from None
            os.close(descriptor)
            descriptor = child
        yield descriptor
    finally:
        os.close(descriptor)


def exists_beneath(root: Path, relative: str) -> bool:
    """Whether anything (a link included, not followed) is at `relative` below `root`."""
    *parents, name = relative_parts(relative)
    try:
        with directory_beneath(root, parents) as directory:
            os.stat(name, dir_fd=directory, follow_symlinks=False)
    except (FileNotFoundError, UnsafePath):
        return False
    return True


def place_tree(tree: Path, root: Path, relative: str, *, owner: int) -> None:
    """Rename `tree` (a folder in a root-only staging area on the same filesystem) to `relative` below
    `root`; missing parents are made for `owner`. Anything the sandbox put there meanwhile (an empty
    folder, a link) is replaced, never followed; a non-empty folder there wins (FileExistsError)."""
    *parents, name = relative_parts(relative)
    with directory_beneath(root, parents, create_as=owner) as directory:
        try:
            os.rename(tree, name, dst_dir_fd=directory)
        except NotADirectoryError:  # a file or a link there: the tree takes its place
            os.unlink(name, dir_fd=directory)
            os.rename(tree, name, dst_dir_fd=directory)
        except OSError as error:
            if error.errno in (errno.ENOTEMPTY, errno.EEXIST):  # the session has a folder of its own there
                raise FileExistsError(f"{relative} exists already") from None
            raise


def read_regular_file(root: Path, relative: str, *, limit: int) -> bytes:
    """At most `limit` bytes of a regular file below `root`, opened without following a link and
    without blocking (a FIFO or a device planted there is refused, never waited on)."""
    *parents, name = relative_parts(relative)
    with directory_beneath(root, parents) as directory:
        try:
            descriptor = os.open(name, FILE_FLAGS, dir_fd=directory)
        except OSError as error:
            raise UnsafePath(f"{relative!r} could not be opened as a file ({error.strerror})") from None
        try:
            if not stat.S_ISREG(os.fstat(descriptor).st_mode):
                raise UnsafePath(f"{relative!r} is not a regular file")
            os.set_blocking(descriptor, True)
            chunks: list[bytes] = []
            size = 0
            while size < limit and (chunk := os.read(descriptor, min(1 << 20, limit - size))):
                chunks.append(chunk)
                size += len(chunk)
            return b"".join(chunks)
        finally:
            os.close(descriptor)


def remove_beneath(root: Path | int, relative: str) -> None:
    """Unlink a file (or link) below `root`; quietly nothing when it is gone or not a file."""
    *parents, name = relative_parts(relative)
    with contextlib.suppress(OSError), directory_beneath(root, parents) as directory:
        os.unlink(name, dir_fd=directory)


def chown_tree(root: Path, uid: int) -> None:
    """Give `root` and everything below it to `uid` (links themselves, never their targets). Only for
    trees no sandbox can change while this runs (a root-only staging folder, a finished build)."""
    os.chown(root, uid, uid, follow_symlinks=False)
    for _, folders, files, directory in os.fwalk(root, follow_symlinks=False):
        for name in (*folders, *files):
            os.chown(name, uid, uid, dir_fd=directory, follow_symlinks=False)


def tree_usage(root: Path, *, limit: int) -> int:
    """Bytes allocated below `root` (links not followed; `os.fwalk` checks each folder it enters is the
    one it listed), counting stops once past `limit`."""
    total = 0
    for _, _, files, directory in os.fwalk(root, follow_symlinks=False):
        for name in files:
            with contextlib.suppress(OSError):
                total += os.stat(name, dir_fd=directory, follow_symlinks=False).st_blocks * 512
        total += os.fstat(directory).st_blocks * 512
        if total > limit:
            break
    return total


@contextlib.contextmanager
def locked(path: Path) -> Iterator[None]:
    """An exclusive flock across threads and processes (each caller opens its own file)."""
    with open(path, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        yield
