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
marks a finished layer, and `build.log` is kept either way.

A failed build says which installer failed, for which packages, and why, as read from its log: a refusal
of the sandbox's egress proxy (quoted by the installer from the proxy's reason phrase), the build script's
own cause, the installer's last error line, else the log's last lines. It is remembered beside the layer
(`failed.json`: the failure, when, how many times in a row, and under which conditions) and not tried
again before a backoff elapses (`REGISTRY_SANDBOX_BUILD_RETRY_SECONDS`, doubling with each failure up to
`REGISTRY_SANDBOX_BUILD_RETRY_MAX_SECONDS`): meanwhile every call gets the same failure at once. New
packages are a new layer, built at once; so is a build under other conditions (the environment's
networking, the mirrors, `REGISTRY_SANDBOX_EGRESS_ALLOW`), tried at once.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import importlib.metadata
import importlib.util
import json
import math
import os
import re
import shutil
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from django.conf import settings

from registry.sandbox.copies import root_owned_copy
from registry.sandbox.egress import NetworkPolicy
from registry.sandbox.fsops import chown_tree, locked
from registry.sandbox.interface import SandboxBackend
from registry.sandbox.launch import SHELL_PATH
from registry.sandbox.refusals import PHRASE_MARK, UNSAFE_CHARACTERS
from registry.sandbox.spec import CommandResult, Mount, SandboxSpec

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
COMPLETE, FAILED = ".complete", "failed.json"
# What a build log says (`BUILD_SOURCE` marks each installer's start and its own causes of failure).
STEP = re.compile(r"^== installing (\w+) packages:", re.MULTILINE)
OWN_CAUSE = re.compile(r"^== cause: (.+)$", re.MULTILINE)
PROXY_REFUSAL = re.compile(rf"{PHRASE_MARK} (refused: [^{re.escape(UNSAFE_CHARACTERS)}\r\n]+)")
INSTALLER_ERROR = re.compile(r"^(?:ERROR|E|error|npm ERR!|npm error)(?:\[[\w-]+\])?:?\s+(\S.*)$", re.MULTILINE)
NOT_A_CAUSE = ("A complete log of this run",)
MULTIARCH = getattr(sys.implementation, "_multiarch", "x86_64-linux-gnu")

# Runs inside the build sandbox (its python3, standard library only): /opt/build/spec.json holds
# {manager: [names]}; every installer gets an argument list; output goes to stdout for the log.
BUILD_SOURCE = r"""
import glob, io, json, os, subprocess, sys, tarfile
LAYER, HOME = "/opt/packages", os.environ["HOME"]
MAINTAINER_SCRIPTS = {"preinst", "postinst", "prerm", "postrm", "config"}
os.umask(0o022)

def fail(cause):
    print("== cause:", cause, flush=True)
    sys.exit(1)

def run(*argv, **extra):
    print("$", *argv, flush=True)
    status = subprocess.run(argv, stdin=subprocess.DEVNULL, env={**os.environ, **extra}).returncode
    if status:
        sys.exit(status)

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
            fail(f"{os.path.basename(deb)} has maintainer scripts ({', '.join(scripts)}), which need root to run: "
                 "it cannot be installed into the package layer")
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
        print("== installing", manager, "packages:", *names, flush=True)
        INSTALLERS[manager](names)
print("packages installed", flush=True)
"""


@dataclass(frozen=True)
class PackageLayer:
    """What a sandbox of the environment needs to see its packages: the layer, and where to look in it."""

    mounts: tuple[Mount, ...]
    env: dict[str, str]


class PackageBuildFailed(Exception):
    """The layer could not be built: the message names the installer, its packages and the cause, and when
    the build is tried again."""


@dataclass(frozen=True)
class BuildFailure:
    """A failed build, as remembered beside its layer (`failed.json`)."""

    summary: str  # "pip could not install latepkg: No matching distribution found for latepkg"
    details: str = ""  # the log's last lines, where no cause could be read from it
    conditions: str = ""  # a digest of what the build depended on besides its packages (`_conditions`)
    attempts: int = 1  # failed builds in a row under these conditions
    failed_at: float = 0.0  # wall-clock time: worker processes share the marker

    def retry_at(self) -> float:
        """When the next build may start: the backoff doubles with each failure, up to its cap."""
        backoff = settings.REGISTRY_SANDBOX_BUILD_RETRY_SECONDS * 2 ** (self.attempts - 1)
        return self.failed_at + min(backoff, settings.REGISTRY_SANDBOX_BUILD_RETRY_MAX_SECONDS)

    def error(self) -> PackageBuildFailed:
        """The failure as the session is told, with when the build is tried again."""
        wait = _duration(self.retry_at() - time.time())
        message = (
            f"{self.summary.rstrip('.')}. Tried again by a turn after {wait}, "
            "or at once when the environment's packages or networking change."
        )
        return PackageBuildFailed(message + (f"\nThe installer's last lines:\n{self.details}" if self.details else ""))


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
    if (directory / COMPLETE).exists():
        return layer
    with _locked(directory):
        if not (directory / COMPLETE).exists():
            _build_unless_backing_off(backend, directory, wanted, network)
    return layer


def _build_unless_backing_off(
    backend: SandboxBackend, directory: Path, wanted: dict[str, list[str]], network: NetworkPolicy
) -> None:
    """Build the layer, unless its last build under the same conditions failed less than a backoff ago:
    then that failure again, at once. A failure is remembered; a finished layer is marked complete."""
    _require_tools(directory, wanted)
    conditions = _conditions(network)
    last = _last_failure(directory)
    if last is not None and last.conditions != conditions:
        last = None  # other conditions: a first attempt
    if last is not None and time.time() < last.retry_at():
        raise last.error()
    failure = _build(backend, directory, wanted, network)
    if failure is not None:
        attempts = last.attempts + 1 if last else 1
        failure = dataclasses.replace(failure, conditions=conditions, attempts=attempts, failed_at=time.time())
        _remember(directory, failure)
        raise failure.error()
    (directory / FAILED).unlink(missing_ok=True)
    (directory / COMPLETE).touch()


@contextlib.contextmanager
def _locked(directory: Path) -> Iterator[None]:
    """An exclusive flock on the layer's lock file: each caller opens its own file description, so
    threads of one worker wait for each other as worker processes do."""
    for folder in (directory.parent, directory):  # traversable by every session's uid, listable by none
        folder.mkdir(parents=True, exist_ok=True)
        os.chmod(folder, 0o711)
    with locked(directory / "lock"):
        yield


def _require_tools(directory: Path, wanted: dict[str, list[str]]) -> None:
    """A worker without an installer says so (each time: another worker may have it)."""
    missing = missing_tools(wanted)
    if missing:
        managers = ", ".join(manager for manager in wanted if set(TOOLS[manager]) & set(missing))
        message = f"This worker has no {', '.join(missing)}, needed for the environment's {managers} packages."
        (directory / "build.log").write_text(message + "\n")
        raise PackageBuildFailed(message)


def _build(
    backend: SandboxBackend, directory: Path, wanted: dict[str, list[str]], network: NetworkPolicy
) -> BuildFailure | None:
    """Install the packages into a fresh layer in a build sandbox; how it failed, or None."""
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
    if result.timed_out or result.exit_code != 0:
        return diagnosed(result, wanted)
    return None


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
    source = found.submodule_search_locations[0]

    def fill(staging: Path) -> None:
        shutil.copytree(source, staging / "pip", symlinks=True)

    return root_owned_copy(shared / "tools", f"pip-{importlib.metadata.version('pip')}", fill) / "pip"


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


def diagnosed(result: CommandResult, wanted: dict[str, list[str]]) -> BuildFailure:
    """Which installer failed, for which packages, and why, as far as its log tells."""
    log = result.output
    steps = STEP.findall(log)
    manager = steps[-1] if steps and steps[-1] in wanted else None
    subject = f"{manager} could not install {', '.join(wanted[manager])}" if manager else "the build failed"
    if result.timed_out:
        return BuildFailure(f"{subject}: it timed out after {BUILD_TIMEOUT_MS // 60000} min", _last_lines(log))
    cause = _cause(log)
    if cause is None:
        return BuildFailure(f"{subject} (exit status {result.exit_code})", _last_lines(log))
    return BuildFailure(f"{subject}: {cause}")


def _cause(log: str) -> str | None:
    """The most telling line of a failed build's log: a refusal of the egress proxy, the build script's own
    cause, else the installer's last error line."""
    if refusal := PROXY_REFUSAL.search(log):
        return f"the sandbox's egress proxy {refusal.group(1).rstrip()}"
    if own := OWN_CAUSE.findall(log):
        return str(own[-1]).strip()
    errors = [line.strip() for line in INSTALLER_ERROR.findall(log) if not line.startswith(NOT_A_CAUSE)]
    return errors[-1] if errors else None


def _last_lines(log: str) -> str:
    return "\n".join(log.rstrip().splitlines()[-LAST_LINES:])


def _conditions(network: NetworkPolicy) -> str:
    """A digest of what a build depends on besides its packages: the environment's networking (not the
    agent's MCP hosts), the mirrors and the operator's egress exceptions."""
    policy = dataclasses.asdict(dataclasses.replace(_build_network(network), mcp_hosts=()))
    given = {"network": policy, "mirrors": _mirror_env(), "egress_allow": settings.REGISTRY_SANDBOX_EGRESS_ALLOW}
    return hashlib.sha256(json.dumps(given, sort_keys=True).encode()).hexdigest()[:32]


def _last_failure(directory: Path) -> BuildFailure | None:
    """The failure remembered beside the layer (None without one, or an unreadable one)."""
    try:
        return BuildFailure(**json.loads((directory / FAILED).read_text()))
    except (OSError, ValueError, TypeError):
        return None


def _remember(directory: Path, failure: BuildFailure) -> None:
    """Write the failure beside the layer, whole or not at all (a worker that dies meanwhile leaves the last one)."""
    staging = directory / f"{FAILED}.new"
    staging.write_text(json.dumps(dataclasses.asdict(failure)))
    os.replace(staging, directory / FAILED)


def _duration(seconds: float) -> str:
    """A wait as people read it: seconds up to two minutes, then minutes."""
    whole = max(math.ceil(seconds), 0)
    return f"{whole} s" if whole < 120 else f"{math.ceil(whole / 60)} min"
