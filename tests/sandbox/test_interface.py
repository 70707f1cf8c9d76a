"""`BwrapSandbox` as the interface's sandbox: the file operations the runtime may ask of it, done without
a privileged hand on a path the sandbox controls (writes and lists run inside, as the session's uid;
reads follow no link and wait on no FIFO)."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest

from registry.sandbox.backend import BwrapBackend, BwrapSandbox
from registry.sandbox.interface import Sandbox, SandboxBackend


def test_files_are_written_listed_read_and_removed_as_the_session(
    sandbox_for: Callable[[str], BwrapSandbox],
) -> None:
    sandbox: Sandbox = sandbox_for("sesn_files")
    sandbox.run("mkdir -p notes")
    sandbox.write_file("notes/a.txt", b"alpha\n")
    sandbox.write_file("b.txt", b"beta")
    assert sandbox.list_files() == ["b.txt", "notes"]
    assert sandbox.list_files("notes") == ["a.txt"]
    assert sandbox.read_file("notes/a.txt", limit=3) == b"alp"
    owner = os.stat(sandbox.place.disk.workspace / "b.txt").st_uid
    assert owner == sandbox.place.uid  # written by the session, not by root
    assert "beta" in sandbox.run("cat b.txt").output
    sandbox.remove_file("b.txt")
    assert sandbox.list_files() == ["notes"]


def test_a_planted_link_or_fifo_is_not_read_and_a_write_stays_inside(
    sandbox_for: Callable[[str], BwrapSandbox], host_secret: tuple[Path, str]
) -> None:
    folder, secret = host_secret
    sandbox = sandbox_for("sesn_planted")
    sandbox.run(f"ln -s {folder / 'secret.txt'} leak && mkfifo pipe")
    for planted in ("leak", "pipe"):
        with pytest.raises(OSError):
            sandbox.read_file(planted, limit=100)
    with pytest.raises(OSError):
        sandbox.write_file("leak", b"overwritten")  # the link points outside the sandbox's view
    assert (folder / "secret.txt").read_text() == secret


def test_the_backend_answers_the_interface(backend: BwrapBackend) -> None:
    seam: SandboxBackend = backend
    assert seam.health() is None
    assert not seam.holds("sesn_none")
    seam.close()  # nothing running: nothing to stop
