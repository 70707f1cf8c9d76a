"""`pip install` and `npm install -g` in a session's sandbox, without flags, into the session's own prefix
in its workspace (`/workspace/.local`), which persists with the workspace; the environment's package
layer stays visible. Real bubblewrap, real pip and npm, indexes on the host's loopback."""

from __future__ import annotations

import base64
import hashlib
import io
import json
import secrets
import shutil
import tarfile
from dataclasses import dataclass

import pytest

from registry.sandbox.backend import SHELL_PATH, BwrapBackend, BwrapSandbox, Limits, Mount, SandboxSpec
from registry.sandbox.egress import NetworkPolicy
from registry.sandbox.packages import ensure_layer
from registry.sandbox.userinstalls import USER_PREFIX
from tests.support.package_index import Index

SITE = f"{USER_PREFIX}/lib/python3"  # then `.X/site-packages`
HAS_NPM = shutil.which("npm", path=SHELL_PATH) is not None


@pytest.fixture
def limits() -> Limits:
    """The sandbox tests' limits, with address space enough for node (V8 reserves more than 512 MB)."""
    return Limits(memory_mb=2048, pids=64, workspace_mb=64, output_limit=4000, command_timeout_ms=60_000)


@pytest.fixture
def index(loopback_site, settings) -> Index:
    """A PyPI "simple" index on loopback, which the sandbox's proxy may reach."""
    made = Index()
    made.add("userpkg", "from the session's prefix")
    made.url = loopback_site(made.route)
    settings.REGISTRY_SANDBOX_EGRESS_ALLOW = "127.0.0.1"
    return made


def session(
    backend: BwrapBackend,
    session_id: str,
    index: Index,
    *,
    env: dict[str, str] | None = None,
    mounts: tuple[Mount, ...] = (),
) -> BwrapSandbox:
    """The session's sandbox, its pip pointed at the loopback index (as a session's own variable would)."""
    variables = {**(env or {}), "PIP_INDEX_URL": f"{index.url}/simple/"}
    return backend.ensure(SandboxSpec(session_id=session_id, workspace_id="wsp", env=variables, mounts=mounts))


def succeeds(box: BwrapSandbox, command: str) -> str:
    result = box.run(command)
    assert result.exit_code == 0, result.output
    return result.output


IMPORT = "python3 -c 'import userpkg; print(userpkg.VALUE); print(userpkg.__file__)'"


def test_pip_install_without_flags_installs_into_the_sessions_prefix(backend, index):
    box = session(backend, "sesn_pip", index)
    output = succeeds(box, "pip install userpkg 2>&1")
    assert "externally-managed" not in output and "Successfully installed userpkg-1.0" in output
    value, where = succeeds(box, IMPORT).splitlines()  # a later command, a fresh python3
    assert value == "from the session's prefix" and where.startswith(SITE) and where.endswith("/userpkg/__init__.py")
    assert succeeds(box, "stat -c %u $(dirname $(python3 -c 'import userpkg; print(userpkg.__file__)'))") == "1000\n"

    index.add("otherpkg", "through python3 -m pip")
    succeeds(box, "python3 -m pip install otherpkg 2>&1")
    assert succeeds(box, "python3 -c 'import otherpkg; print(otherpkg.VALUE)'") == "through python3 -m pip\n"
    assert succeeds(box, "pip3 --version").startswith("pip ")
    assert succeeds(box, "echo $PATH").startswith(f"{USER_PREFIX}/bin:")


def test_a_virtualenv_still_gets_its_own_installs(backend, index):
    box = session(backend, "sesn_venv", index)
    succeeds(box, "python3 -m venv --without-pip venv && venv/bin/python -m pip install userpkg 2>&1")
    where = succeeds(box, "venv/bin/python -c 'import userpkg; print(userpkg.__file__)'")
    assert where.startswith("/workspace/venv/lib/python3")
    assert "No module named" in box.run("python3 -c 'import userpkg' 2>&1").output


def test_the_environments_packages_stay_visible_beside_the_sessions(backend, index, monkeypatch):
    index.add("tinypkg", "from the layer")
    monkeypatch.setenv("PIP_INDEX_URL", f"{index.url}/simple/")  # the layer's build reads the mirror from here
    layer = ensure_layer(backend, environment_id="env_u", packages={"pip": ["tinypkg"]}, network=NetworkPolicy())
    assert layer is not None
    box = session(backend, "sesn_layered", index, mounts=layer.mounts, env=layer.env)
    succeeds(box, "pip install userpkg 2>&1")
    both = "python3 -c 'import tinypkg, userpkg; print(tinypkg.VALUE); print(userpkg.VALUE)'"
    assert succeeds(box, both) == "from the layer\nfrom the session's prefix\n"
    assert "Requirement already satisfied: tinypkg in /opt/packages/python" in succeeds(box, "pip install tinypkg")
    assert index.downloads("tinypkg") == 1  # the layer's build only


def test_installed_packages_persist_with_the_workspace(backend, index):
    session_id = f"sesn_persist_{secrets.token_hex(4)}"  # no snapshot of an earlier run to resume from
    box = session(backend, session_id, index)
    try:
        succeeds(box, "pip install userpkg 2>&1")
        box.run("true", restart=True)  # a new shell
        assert succeeds(box, IMPORT).startswith("from the session's prefix\n")
        box.snapshot()
        backend.destroy(session_id)  # its disk is gone from this worker: the session resumes from its snapshot
        again = session(backend, session_id, index)
        assert succeeds(again, IMPORT).startswith("from the session's prefix\n")
        assert index.downloads("userpkg") == 1
    finally:
        backend.destroy(session_id, forget=True)


def npm_tarball(files: dict[str, str]) -> bytes:
    """An npm package tarball of `files` (paths below `package/`)."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as archive:
        for path, text in files.items():
            info = tarfile.TarInfo(f"package/{path}")
            info.size = len(text.encode())
            archive.addfile(info, io.BytesIO(text.encode()))
    return buffer.getvalue()


@dataclass
class NpmRegistry:
    """An npm registry of one package with a program (`bin`), as a loopback route."""

    name: str
    root: str = ""

    def __post_init__(self) -> None:
        manifest = {"name": self.name, "version": "1.0.0", "bin": {self.name: "cli.js"}}
        program = f"#!/usr/bin/env node\nconsole.log('hello from {self.name}');\n"
        self.tarball = npm_tarball({"package.json": json.dumps(manifest), "cli.js": program})

    def route(self, path: str) -> tuple[bytes, str]:
        if path.endswith(".tgz"):
            return self.tarball, "application/octet-stream"
        dist = {
            "tarball": f"{self.root}/{self.name}/-/{self.name}-1.0.0.tgz",
            "shasum": hashlib.sha1(self.tarball).hexdigest(),
            "integrity": "sha512-" + base64.b64encode(hashlib.sha512(self.tarball).digest()).decode(),
        }
        version = {"name": self.name, "version": "1.0.0", "bin": {self.name: "cli.js"}, "dist": dist}
        packument = {"name": self.name, "dist-tags": {"latest": "1.0.0"}, "versions": {"1.0.0": version}}
        return json.dumps(packument).encode(), "application/json"


def test_npm_install_global_lands_in_the_sessions_prefix(backend, index, loopback_site):
    registry = NpmRegistry("tinycli")
    registry.root = loopback_site(registry.route)
    box = session(backend, "sesn_npm", index, env={"npm_config_registry": f"{registry.root}/"})
    assert succeeds(box, "echo $npm_config_prefix") == f"{USER_PREFIX}\n"
    if not HAS_NPM:  # on a host without npm the variable is all there is
        return
    succeeds(box, "npm install -g tinycli 2>&1")
    assert succeeds(box, "tinycli") == "hello from tinycli\n"  # a later command finds its program on PATH
    assert succeeds(box, "command -v tinycli; npm prefix -g") == f"{USER_PREFIX}/bin/tinycli\n{USER_PREFIX}\n"
