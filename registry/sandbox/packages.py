"""An environment's packages as a cached, read-only layer: built once per environment version in a
sandbox of its own, under the environment's network policy, then bound read-only at `/opt/packages`
into every sandbox of that environment.

The build sandbox is an ordinary session sandbox (its own uid, egress proxy and scratch workspace, which
is its HOME for installer caches and is removed afterwards) whose other writable mount is the layer;
once it is gone, the layer is handed to root.
Inside, `BUILD_SOURCE` runs each installer with an argument list (never a shell): pip with `--target`,
npm with `--prefix`, apt by `apt-get install --download-only` against the host's package lists and
`dpkg-deb -x` (a package with maintainer scripts is refused, since nothing runs as root), and cargo,
gem and go when the host has them (else a clear error naming what is missing). pip is the runtime's
own (pure Python), bound read-only in front of the sandbox python3's path, so the host's python3 need
not ship pip. `PIP_INDEX_URL`, `PIP_EXTRA_INDEX_URL`, `PIP_TRUSTED_HOST` and `npm_config_registry`
pass from the runtime's environment into the build, for a mirror.

Layers live in the shared area, `<sandbox root>/shared/layers/<key>`, the key a digest of the environment id and its
packages; an flock on its `lock` file makes threads and worker processes wait for one build, `.complete`
marks a finished layer, and `build.log` is kept either way (a failed build has no mark: the next call
retries).
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import importlib.metadata
import importlib.util
import json
import os
import shutil
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from registry.sandbox.egress import NetworkPolicy
from registry.sandbox.fsops import chown_tree, locked
from registry.sandbox.interface import SandboxBackend
from registry.sandbox.launch import SHELL_PATH
from registry.sandbox.spec import Mount, SandboxSpec

LAYER_INSIDE = "/opt/packages"
BUILD_INSIDE = "/opt/build"
PIP_INSIDE = "/opt/pip"
MANAGERS = ("apt", "pip", "npm", "cargo", "gem", "go")  # apt first: its libraries may serve the others
TOOLS = {
    "apt": ("apt-get", "dpkg-deb"),
    "pip": ("python3",),
    "npm": ("npm",),
    "cargo": ("cargo",),
    "gem": ("gem",),
    "go": ("go",),
}
APT_STATE = ("/etc/apt", "/etc/dpkg", "/var/lib/apt/lists", "/var/lib/dpkg")
# Mirrors an operator (or a test) points the installers at; with `allow_package_managers`, their hosts
# count as package indexes.
MIRROR_VARIABLES = ("PIP_INDEX_URL", "PIP_EXTRA_INDEX_URL", "PIP_TRUSTED_HOST", "npm_config_registry")
BUILD_TIMEOUT_MS = 30 * 60 * 1000
BUILD_OUTPUT_LIMIT = 400_000
LAST_LINES = 20
MULTIARCH = getattr(sys.implementation, "_multiarch", "x86_64-linux-gnu")

# Runs inside the build sandbox (its python3, standard library only): /opt/build/spec.json holds
# {manager: [names]}; every installer gets an argument list; output goes to stdout for the log.
BUILD_SOURCE = r"""
import glob, io, json, os, subprocess, sys, tarfile
LAYER, HOME = "/opt/packages", os.environ["HOME"]
MAINTAINER_SCRIPTS = {"preinst", "postinst", "prerm", "postrm", "config"}
os.umask(0o022)

def run(*argv, **extra):
    print("$", *argv, flush=True)
    status = subprocess.run(argv, stdin=subprocess.DEVNULL, env={**os.environ, **extra}).returncode
    if status:
        sys.exit(f"{argv[0]} exited with status {status}")

def pip(names):
    run("python3", "-m", "pip", "install", "--no-input", "--no-cache-dir", "--disable-pip-version-check",
        "--no-warn-script-location", "--target", LAYER + "/python", *names, PYTHONPATH="/opt/pip")

def npm(names):
    run("npm", "install", "--prefix", LAYER + "/node", "--no-audit", "--no-fund", "--no-update-notifier", *names)

def apt(names):
    cache = HOME + "/apt"
    os.makedirs(cache + "/archives/partial", exist_ok=True)
    run("apt-get", "install", "--download-only", "--yes", "--no-install-recommends", "-o", "Debug::NoLocking=1",
        "-o", "Dir::Cache=" + cache, "-o", "Dir::Cache::archives=" + cache + "/archives", *names)
    debs = sorted(glob.glob(cache + "/archives/*.deb"))
    for deb in debs:
        control = subprocess.run(["dpkg-deb", "--ctrl-tarfile", deb], capture_output=True, check=True).stdout
        with tarfile.open(fileobj=io.BytesIO(control)) as archive:
            scripts = sorted(MAINTAINER_SCRIPTS & {os.path.basename(name) for name in archive.getnames()})
        if scripts:
            sys.exit(f"apt: {os.path.basename(deb)} has maintainer scripts ({', '.join(scripts)}), which need root "
                     "to run: it cannot be installed into the package layer.")
    for deb in debs:
        run("dpkg-deb", "-x", deb, LAYER + "/apt")

def cargo(names):
    run("cargo", "install", "--root", LAYER + "/cargo", *names, CARGO_HOME=HOME + "/cargo")

def gem(names):
    run("gem", "install", "--no-document", "--install-dir", LAYER + "/gem", "--bindir", LAYER + "/gem/bin", *names)

def go(names):
    versioned = [name if "@" in name else name + "@latest" for name in names]
    run("go", "install", *versioned, GOBIN=LAYER + "/go/bin", GOPATH=HOME + "/go", GOCACHE=HOME + "/go-cache")

INSTALLERS = {"apt": apt, "pip": pip, "npm": npm, "cargo": cargo, "gem": gem, "go": go}
with open("/opt/build/spec.json") as spec:
    for manager, names in json.load(spec).items():
        INSTALLERS[manager](names)
print("packages installed", flush=True)
"""


@dataclass(frozen=True)
class PackageLayer:
    """What a sandbox of the environment needs to see its packages: the layer, and where to look in it."""

    mounts: tuple[Mount, ...]
    env: dict[str, str]


class PackageBuildFailed(Exception):
    """The layer could not be built; the message ends with the installer's last lines."""


def wanted_packages(packages: dict[str, Any] | None) -> dict[str, list[str]]:
    """The non-empty package lists of a config's `packages`, in installation order."""
    given = packages or {}
    return {manager: list(given[manager]) for manager in MANAGERS if given.get(manager)}


def layer_key(environment_id: str, wanted: dict[str, list[str]]) -> str:
    """One key per environment version's packages (a new list is a new layer)."""
    return hashlib.sha256(json.dumps([environment_id, wanted]).encode()).hexdigest()[:32]


def layer_env(wanted: dict[str, list[str]]) -> dict[str, str]:
    """The variables that make the layer's programs, modules and libraries found in the sandbox's shell."""
    env: dict[str, str] = {}
    path: list[str] = []
    if "apt" in wanted:
        path += [f"{LAYER_INSIDE}/apt/usr/bin", f"{LAYER_INSIDE}/apt/usr/sbin", f"{LAYER_INSIDE}/apt/bin"]
        libraries = (f"{LAYER_INSIDE}/apt/usr/lib/{MULTIARCH}", f"{LAYER_INSIDE}/apt/lib/{MULTIARCH}")
        env["LD_LIBRARY_PATH"] = ":".join((*libraries, f"{LAYER_INSIDE}/apt/usr/lib"))
    if "pip" in wanted:
        path.append(f"{LAYER_INSIDE}/python/bin")
        env["PYTHONPATH"] = f"{LAYER_INSIDE}/python"
    if "npm" in wanted:
        path.append(f"{LAYER_INSIDE}/node/node_modules/.bin")
        env["NODE_PATH"] = f"{LAYER_INSIDE}/node/node_modules"
    if "gem" in wanted:
        path.append(f"{LAYER_INSIDE}/gem/bin")
        env["GEM_PATH"] = f"{LAYER_INSIDE}/gem"
    path += [f"{LAYER_INSIDE}/{manager}/bin" for manager in ("cargo", "go") if manager in wanted]
    env["PATH"] = ":".join((*path, SHELL_PATH))
    return env


def missing_tools(wanted: dict[str, list[str]], search_path: str = SHELL_PATH) -> list[str]:
    """The installers the sandbox would need but cannot find (the sandbox sees the host's /usr)."""
    needed = [tool for manager in wanted for tool in TOOLS[manager]]
    return [tool for tool in needed if shutil.which(tool, path=search_path) is None]


def ensure_layer(
    backend: SandboxBackend, *, environment_id: str, packages: dict[str, Any], network: NetworkPolicy
) -> PackageLayer | None:
    """The environment's layer, built here first if no worker has finished it; None without packages."""
    wanted = wanted_packages(packages)
    if not wanted:
        return None
    directory = backend.shared / "layers" / layer_key(environment_id, wanted)
    layer = PackageLayer(mounts=(Mount(directory / "layer", LAYER_INSIDE),), env=layer_env(wanted))
    if (directory / ".complete").exists():
        return layer
    with _locked(directory):
        if not (directory / ".complete").exists():
            _build(backend, directory, wanted, network)
            (directory / ".complete").touch()
    return layer


@contextlib.contextmanager
def _locked(directory: Path) -> Iterator[None]:
    """An exclusive flock on the layer's lock file: each caller opens its own file description, so
    threads of one worker wait for each other as worker processes do."""
    for folder in (directory.parent, directory):  # traversable by every session's uid, listable by none
        folder.mkdir(parents=True, exist_ok=True)
        os.chmod(folder, 0o711)
    with locked(directory / "lock"):
        yield


def _build(backend: SandboxBackend, directory: Path, wanted: dict[str, list[str]], network: NetworkPolicy) -> None:
    missing = missing_tools(wanted)
    if missing:
        managers = ", ".join(manager for manager in wanted if set(TOOLS[manager]) & set(missing))
        message = f"This worker has no {', '.join(missing)}, needed for the environment's {managers} packages."
        (directory / "build.log").write_text(message + "\n")
        raise PackageBuildFailed(message)
    shutil.rmtree(directory / "layer", ignore_errors=True)  # what a failed build left
    spec = SandboxSpec(
        session_id=f"layer_{directory.name}",
        workspace_id="layers",
        mounts=(*_prepare(directory, wanted), *_tool_mounts(wanted, backend.shared)),
        env=_mirror_env(),
        network=_build_network(network),
    )
    limits = dataclasses.replace(backend.limits, output_limit=BUILD_OUTPUT_LIMIT, command_timeout_ms=BUILD_TIMEOUT_MS)
    sandbox = backend.transient(spec, limits)
    try:
        os.chown(directory / "layer", sandbox.place.uid, sandbox.place.uid)
        result = sandbox.run(f"python3 -I {BUILD_INSIDE}/build.py")
    finally:
        sandbox.destroy()
    chown_tree(directory / "layer", 0)  # the build's processes are gone, so the tree is still: root's from now on
    (directory / "build.log").write_text(result.output)
    if result.timed_out:
        _fail(directory, f"Installing the environment's packages timed out after {BUILD_TIMEOUT_MS // 60000} min.")
    if result.exit_code != 0:
        _fail(directory, f"Installing the environment's packages failed (exit status {result.exit_code}).")


def _prepare(directory: Path, wanted: dict[str, list[str]]) -> list[Mount]:
    """The empty layer (given to the build's uid once its sandbox has one) and the build script with its
    spec (read-only)."""
    layer, scripts = directory / "layer", directory / "build"
    layer.mkdir()
    os.chmod(layer, 0o755)
    scripts.mkdir(exist_ok=True)
    os.chmod(scripts, 0o755)
    (scripts / "build.py").write_text(BUILD_SOURCE)
    (scripts / "spec.json").write_text(json.dumps(wanted))
    for name in ("build.py", "spec.json"):
        os.chmod(scripts / name, 0o644)
    return [Mount(layer, LAYER_INSIDE, read_only=False), Mount(scripts, BUILD_INSIDE)]


def _tool_mounts(wanted: dict[str, list[str]], shared: Path) -> list[Mount]:
    """The runtime's pip (pure Python) for pip packages; the host's apt state, read-only, for apt."""
    mounts: list[Mount] = []
    pip = shared_pip(shared) if "pip" in wanted else None
    if pip is not None:  # else python3's own, if any
        mounts.append(Mount(pip, f"{PIP_INSIDE}/pip"))
    if "apt" in wanted:
        mounts += [Mount(Path(path), path) for path in APT_STATE if os.path.exists(path)]
    return mounts


def shared_pip(shared: Path) -> Path | None:
    """The runtime's pip, copied once into the shared area: a build's uid can read it there wherever the
    runtime's virtualenv lives (a checkout under a 0700 folder, say, which that uid cannot pass)."""
    found = importlib.util.find_spec("pip")
    if found is None or not found.submodule_search_locations:
        return None
    tools = shared / "tools"
    copy = tools / f"pip-{importlib.metadata.version('pip')}"
    if not copy.exists():
        tools.mkdir(mode=0o755, exist_ok=True)
        with locked(shared / "tools.lock"):
            if not copy.exists():
                staging = Path(tempfile.mkdtemp(dir=tools))
                shutil.copytree(found.submodule_search_locations[0], staging / "pip", symlinks=True)
                chown_tree(staging, 0)
                _readable_by_all(staging)
                os.rename(staging, copy)
    return copy / "pip"


def _readable_by_all(root: Path) -> None:
    """Folders 0755 and files at least 0644, whatever the umask they were made under."""
    os.chmod(root, 0o755)
    for folder, folders, files in os.walk(root):
        for name in folders:
            os.chmod(os.path.join(folder, name), 0o755)
        for name in files:
            path = os.path.join(folder, name)
            if not os.path.islink(path):
                os.chmod(path, os.stat(path).st_mode | 0o644)


def _mirror_env() -> dict[str, str]:
    return {name: os.environ[name] for name in MIRROR_VARIABLES if os.environ.get(name)}


def _build_network(network: NetworkPolicy) -> NetworkPolicy:
    """The environment's policy; under `limited` with package managers allowed, the mirrors count too."""
    if network.type != "limited" or not network.allow_package_managers:
        return network
    urls = [url for value in _mirror_env().values() for url in value.split() if "://" in url]
    mirrors = [urlsplit(url).hostname for url in urls]
    hosts = tuple(host.lower() for host in mirrors if host)
    return dataclasses.replace(network, allowed_hosts=network.allowed_hosts + hosts)


def _fail(directory: Path, message: str) -> None:
    last_lines = (directory / "build.log").read_text().rstrip().splitlines()[-LAST_LINES:]
    raise PackageBuildFailed(f"{message} The installer's last lines:\n" + "\n".join(last_lines))
