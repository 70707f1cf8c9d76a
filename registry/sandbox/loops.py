"""Disk images on the host through the kernel's own interfaces: a sparse copy, a loop device, a mount.

`mount(8)` and `losetup(8)` cost about 20 ms a disk on a busy host (option parsing, scanning sysfs for a
free device); the same three steps through `/dev/loop-control`, `LOOP_CONFIGURE` (Linux 5.8) and
`mount(2)` take a few. Loop devices are configured `LO_FLAGS_AUTOCLEAR`, so unmounting frees them.
"""

from __future__ import annotations

import ctypes
import errno
import fcntl
import os
import struct
from pathlib import Path

LOOP_CTL_GET_FREE = 0x4C82
LOOP_CONFIGURE = 0x4C0A
LO_FLAGS_READ_ONLY = 1
LO_FLAGS_AUTOCLEAR = 4
# struct loop_config: u32 fd, u32 block_size, struct loop_info64 (232 bytes; lo_flags at 52), u64[8].
LOOP_INFO_BYTES = 232
LOOP_FLAGS_OFFSET = 52
LOOP_RESERVED_BYTES = 64
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOATIME = 1, 2, 4, 1024
MNT_DETACH = 2
ATTACH_ATTEMPTS = 20  # another process may take the free device between asking and configuring it
COPY_CHUNK = 1 << 24

_libc = ctypes.CDLL(None, use_errno=True)


def _checked(result: int, what: str) -> None:
    if result != 0:
        number = ctypes.get_errno()
        raise OSError(number, f"{what}: {os.strerror(number)}")


def sparse_copy(source: Path, target: Path) -> None:
    """Copy `source` to `target` extent by extent: the holes stay holes (an empty image is mostly hole)."""
    with open(source, "rb") as reader, open(target, "wb") as writer:
        size = os.fstat(reader.fileno()).st_size
        writer.truncate(size)
        offset = 0
        while offset < size:
            try:
                start = os.lseek(reader.fileno(), offset, os.SEEK_DATA)
            except OSError as error:
                if error.errno == errno.ENXIO:  # nothing but a hole to the end
                    break
                raise
            end = os.lseek(reader.fileno(), start, os.SEEK_HOLE)
            while start < end:
                start += os.copy_file_range(
                    reader.fileno(), writer.fileno(), min(COPY_CHUNK, end - start), start, start
                )
            offset = end


def mount_image(image: Path, mountpoint: Path, *, read_only: bool = False, options: str = "discard") -> None:
    """Attach `image` to a free loop device and mount its ext4 at `mountpoint` (`nosuid,nodev,noatime`).
    The device stays open until the mount holds it: closing it first would autoclear it."""
    device, loop = _attach(image, read_only=read_only)
    flags = MS_NOSUID | MS_NODEV | MS_NOATIME | (MS_RDONLY if read_only else 0)
    try:
        _checked(_libc.mount(device.encode(), str(mountpoint).encode(), b"ext4", flags, options.encode()), "mount")
    finally:
        os.close(loop)  # unmounted (or never mounted), the device is free again


def unmount(mountpoint: Path) -> None:
    """Unmount; lazily when still busy (what holds it keeps its view until it lets go)."""
    if _libc.umount2(str(mountpoint).encode(), 0) != 0 and ctypes.get_errno() == errno.EBUSY:
        _libc.umount2(str(mountpoint).encode(), MNT_DETACH)


def _attach(image: Path, *, read_only: bool) -> tuple[str, int]:
    """A free loop device configured on `image`, and a descriptor of it (the caller closes it)."""
    flags = LO_FLAGS_AUTOCLEAR | (LO_FLAGS_READ_ONLY if read_only else 0)
    info = bytearray(LOOP_INFO_BYTES)
    struct.pack_into("I", info, LOOP_FLAGS_OFFSET, flags)
    backing = os.open(image, (os.O_RDONLY if read_only else os.O_RDWR) | os.O_CLOEXEC)
    try:
        config = struct.pack("II", backing, 0) + bytes(info) + bytes(LOOP_RESERVED_BYTES)
        for _ in range(ATTACH_ATTEMPTS):
            device = f"/dev/loop{_free_device()}"
            loop = os.open(device, os.O_RDWR | os.O_CLOEXEC)
            try:
                fcntl.ioctl(loop, LOOP_CONFIGURE, config)
            except OSError as error:
                os.close(loop)
                if error.errno != errno.EBUSY:
                    raise
                continue
            return device, loop
        raise OSError(errno.EBUSY, "no loop device stayed free long enough to be configured")
    finally:
        os.close(backing)


def _free_device() -> int:
    control = os.open("/dev/loop-control", os.O_RDWR | os.O_CLOEXEC)
    try:
        return fcntl.ioctl(control, LOOP_CTL_GET_FREE)
    finally:
        os.close(control)
