"""Folders for sandbox roots and session copies in tests: under /tmp, which every session uid can traverse
(pytest's own temporary folders are 0700), released (disks unmounted) and removed afterwards."""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

from registry.sandbox.disks import release_root


@contextlib.contextmanager
def traversable_root(prefix: str) -> Iterator[Path]:
    root = Path(tempfile.mkdtemp(prefix=prefix, dir="/tmp"))
    os.chmod(root, 0o711)
    try:
        yield root
    finally:
        release_root(root)
        shutil.rmtree(root, ignore_errors=True)
