"""Unpacks a workspace snapshot *inside* the session's sandbox, as the session's own uid.

Not imported by the registry: its source is handed to the sandbox's `python3 -I`, the archive (tar,
gzip) on stdin. Running inside means every path resolves in the sandbox's own view and every file is
created by (so owned by) the session's uid; and the rules below refuse what a hostile archive could
carry anyway. Only directories, regular files, hard links to files already unpacked and symbolic links
that stay inside the workspace (or point at the sandbox's read-only system, as a virtualenv's
`bin/python` does) are unpacked; devices, FIFOs, absolute or `..` names, and links out of the tree are
skipped and named on stdout. Modes keep their permission bits only (no setuid, setgid or sticky bit).
Standard library only (the sandbox's python3 may predate tarfile's extraction filters).
"""

import os
import posixpath
import shutil
import sys
import tarfile

HOME = "/workspace"
SYSTEM = ("/usr/", "/bin/", "/lib/", "/lib64/", "/sbin/", "/etc/", "/opt/packages/")
PERMISSIONS = 0o777


def inside(path):
    return path == HOME or path.startswith(HOME + "/")


def destination(member):
    """The member's absolute path in the workspace, or None for a name that leaves it."""
    name = member.name
    while name.startswith("./"):
        name = name[2:]
    parts = [part for part in name.split("/") if part not in ("", ".")]
    if name.startswith("/") or ".." in parts or not parts:
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
        target = destination(tarfile.TarInfo(member.linkname))
        if target is None or not os.path.isfile(target) or os.path.islink(target):
            return False
        os.link(target, path)
    else:
        return False
    return True


def main():
    skipped = []
    with tarfile.open(fileobj=sys.stdin.buffer, mode="r|gz") as tar:
        for member in tar:
            path = destination(member)
            if path is None:
                if member.name.strip("./") or not member.isdir():  # the archive's own "." is the workspace
                    skipped.append(member.name)
                continue
            taken = os.path.lexists(path) and (not member.isdir() or os.path.islink(path))
            if taken or not parent_is_real(path):
                skipped.append(member.name)
                continue
            try:
                os.makedirs(posixpath.dirname(path), exist_ok=True)
                if not unpack(member, tar, path):
                    skipped.append(member.name)
            except OSError as error:
                skipped.append(f"{member.name} ({error.strerror})")
    for name in skipped:
        print(f"skipped: {name}")


if __name__ == "__main__":
    main()
