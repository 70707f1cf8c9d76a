"""Where sandboxes' files live on the host: each session's disk, and the area its sandboxes share.

A session's **disk** holds everything its sandbox may write or is given: the workspace, its memory
folders and repositories mounted outside the workspace, copies of its files, the egress socket. In
`image` mode it is an ext4 image of `REGISTRY_SANDBOX_WORKSPACE_MB` (sparse: a copy of an empty image
made once per size; `discard` gives deleted blocks back to the host), loop-mounted `nosuid,nodev`
(`loops.py`): the cap holds while writing (ENOSPC), usage is one `statvfs`, and the sandbox's
`/proc/self/mountinfo` shows paths inside the image, never the host's layout or the session id. In
`directory` mode (a host that cannot loop-mount: no root, no loop device) it is a plain folder: the
cap is measured after each command and every command but `rm` is refused while the disk is over it.

The **shared area** holds what every sandbox of this root mounts read-only (unpacked skills, package
layers, the trust bundle): one image per root, mounted once per host, in image mode.

Host layout under the sandbox root (every folder root-owned; 0711 where a session uid must pass):

    shared.img, shared/                 the shared area
    disk-<size>mb.img                   the empty image each session's disk is copied from
    sessions/<session>/                 host-side state of one session (its uid, snapshot version,
        disk.img, disk/                 memory manifests) and its disk:
            workspace/ mounts/ files/ run/    what is bound into the sandbox
            .staging/                   root-only: trees built by the host before they are placed
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

from registry.sandbox import loops
from registry.sandbox.fsops import locked, tree_usage

SHARED_IMAGE_BYTES = 1 << 40  # sparse: only what is written takes host space
JOURNAL_FROM_MB = 256  # smaller images go without a journal (it would eat a large share of them)
MIN_IMAGE_MB = 2
MEBIBYTE = 1024 * 1024


class DiskUnavailable(OSError):
    """The host cannot make or mount a disk image (the backend then keeps plain folders)."""


def make_template(template: Path, size_bytes: int) -> None:
    """An empty ext4 image of `size_bytes` (sparse, root's, mode 0600), made once per size and root; each
    disk starts as a sparse copy of it, which is faster than `mkfs` every time."""
    if template.exists():
        return
    aside = template.with_name(f".{template.name}.making")
    with open(os.open(aside, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "wb") as handle:
        handle.truncate(size_bytes)
    features = "has_journal" if size_bytes >= JOURNAL_FROM_MB * MEBIBYTE else "^has_journal"
    try:
        done = subprocess.run(
            ["mkfs.ext4", "-q", "-F", "-m", "0", "-O", features,
             "-E", "lazy_itable_init=1,lazy_journal_init=1,nodiscard,root_owner=0:0", str(aside)],
            stdin=subprocess.DEVNULL, capture_output=True, text=True, check=False,
        )  # fmt: skip
    except FileNotFoundError as error:
        aside.unlink(missing_ok=True)
        raise DiskUnavailable(str(error)) from None
    if done.returncode:
        aside.unlink(missing_ok=True)
        raise DiskUnavailable(f"mkfs.ext4 failed: {(done.stderr or done.stdout).strip()[-300:]}")
    os.replace(aside, template)


def make_image(image: Path, template: Path) -> None:
    """A new disk image: a sparse copy of the template, written aside (mode 0600) then renamed into place."""
    aside = image.with_name(f".{image.name}.making")
    loops.sparse_copy(template, aside)
    os.chmod(aside, 0o600)
    os.replace(aside, image)


def mount_image(image: Path, mountpoint: Path, *, read_only: bool = False) -> None:
    """Loop-mount `image` at `mountpoint` unless something is mounted there already."""
    mountpoint.mkdir(exist_ok=True)
    if os.path.ismount(mountpoint):
        return
    try:
        loops.mount_image(image, mountpoint, read_only=read_only)
    except OSError as error:
        raise DiskUnavailable(f"{image.name} could not be mounted ({error})") from None


def unmount(mountpoint: Path) -> None:
    """Unmount (lazily when still busy: what holds it keeps its view until it lets go)."""
    if os.path.ismount(mountpoint):
        loops.unmount(mountpoint)


def mounts_under(root: Path) -> list[Path]:
    """This host's mount points at or below `root`, deepest first."""
    prefix = str(root.resolve())
    found = []
    with open("/proc/self/mountinfo") as table:
        for line in table:
            point = line.split()[4].encode().decode("unicode_escape")
            if point == prefix or point.startswith(prefix + "/"):
                found.append(Path(point))
    return sorted(found, key=lambda path: len(path.parts), reverse=True)


def release_root(root: Path) -> None:
    """Unmount every disk and shared area under a sandbox root (tests, `manage.py` clean-ups)."""
    for mountpoint in mounts_under(root):
        unmount(mountpoint)


def private_directory(path: Path, mode: int) -> Path:
    """A root-owned folder with `mode` (0711: session uids pass through it; 0700: the host's only)."""
    path.mkdir(parents=True, exist_ok=True)
    if os.geteuid() == 0:
        os.chown(path, 0, 0, follow_symlinks=False)
    os.chmod(path, mode)
    return path


class SharedArea:
    """What every sandbox of the root mounts read-only: `skills/`, `layers/`, the trust bundle."""

    def __init__(self, root: Path, *, use_image: bool) -> None:
        self.path = root / "shared"
        self.uses_image = use_image
        if use_image:
            with locked(root / "shared.lock"):
                make_template(root / "shared.img", SHARED_IMAGE_BYTES)
                mount_image(root / "shared.img", self.path)
        private_directory(self.path, 0o711)


class SessionDisk:
    """One session's disk (see the module docstring) and the host-side folder around it."""

    def __init__(self, home: Path, *, size_mb: int, use_image: bool, templates: Path) -> None:
        self.home = home
        self.templates = templates
        self.size_mb = max(size_mb, MIN_IMAGE_MB)
        self.uses_image = use_image
        self.root = home / "disk"
        self.workspace = self.root / "workspace"
        self.mounts = self.root / "mounts"
        self.files = self.root / "files"
        self.run = self.root / "run"
        self.staging = self.root / ".staging"

    def open(self, uid: int) -> bool:
        """Make (first time) and mount the disk, and its layout for `uid`; True when it was new."""
        private_directory(self.home, 0o711)
        image = self.home / "disk.img"
        fresh = not (image.exists() if self.uses_image else self.workspace.exists())
        if self.uses_image:
            if not image.exists():
                template = self.templates / f"disk-{self.size_mb}mb.img"
                with locked(template.with_suffix(".lock")):
                    make_template(template, self.size_mb * MEBIBYTE)
                make_image(image, template)
            mount_image(image, self.root)
        private_directory(self.root, 0o711)
        for folder in (self.mounts, self.files, self.run):
            private_directory(folder, 0o711)
        private_directory(self.staging, 0o700)
        self.workspace.mkdir(exist_ok=True)
        os.chown(self.workspace, uid, uid, follow_symlinks=False)  # its parent is root's: not a swapped link
        os.chmod(self.workspace, 0o755, follow_symlinks=False)
        return fresh

    def used_bytes(self) -> int:
        """What the session's files take: the image's used blocks, or a walk of the folder (stopping just
        past the cap: enough to know it is over)."""
        if self.uses_image:
            stats = os.statvfs(self.root)
            return (stats.f_blocks - stats.f_bfree) * stats.f_frsize
        return tree_usage(self.root, limit=self.size_mb * MEBIBYTE + 1)

    def clear_workspace(self, uid: int) -> None:
        """An empty workspace in place of the old one (its processes stopped first by the caller)."""
        shutil.rmtree(self.workspace, ignore_errors=True)  # fd-relative: never follows a planted link
        self.workspace.mkdir()
        os.chown(self.workspace, uid, uid, follow_symlinks=False)

    def destroy(self) -> None:
        """Unmount and remove everything of the session on this host."""
        if self.uses_image:
            unmount(self.root)
        shutil.rmtree(self.home, ignore_errors=True)


def image_support(root: Path) -> str | None:
    """None when this host can make and mount disk images under `root`, else why not."""
    if os.geteuid() != 0:
        return "the runtime does not run as root"
    if shutil.which("mkfs.ext4") is None:
        return "mkfs.ext4 is missing"
    if not os.path.exists("/dev/loop-control"):
        return "the host has no loop devices"
    return None
