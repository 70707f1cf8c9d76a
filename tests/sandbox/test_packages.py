"""Environment packages as a cached, read-only layer: built once (real bubblewrap, real pip, a PyPI
"simple" index on loopback) and seen by every session of the environment; failures (naming the installer,
its packages and the cause), their backoff, the network policy and missing toolchains."""

from __future__ import annotations

import base64
import hashlib
import io
import json
import logging
import os
import shutil
import socket
import tarfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from registry.sandbox.backend import SHELL_PATH, BwrapBackend, Limits, SandboxSpec
from registry.sandbox.egress import REFUSED, NetworkPolicy
from registry.sandbox.packages import (
    PackageBuildFailed,
    PackageLayer,
    diagnosed,
    ensure_layer,
    layer_key,
    missing_tools,
    shared_pip,
    wanted_packages,
)
from registry.sandbox.spec import CommandResult
from tests.support.package_index import Index


@pytest.fixture
def limits() -> Limits:
    """The sandbox tests' limits, with address space enough for node (V8 reserves more than 512 MB)."""
    return Limits(memory_mb=2048, pids=64, workspace_mb=64, output_limit=2000, command_timeout_ms=10_000)


@pytest.fixture
def index(loopback_site, monkeypatch, settings) -> Index:
    made = Index()
    made.add("tinypkg", "from the layer")
    made.url = loopback_site(made.route)
    monkeypatch.setenv("PIP_INDEX_URL", made.url + "/simple/")
    settings.REGISTRY_SANDBOX_EGRESS_ALLOW = "127.0.0.1"
    return made


def pip_packages(*names: str) -> dict[str, object]:
    return {"type": "packages", "apt": [], "cargo": [], "gem": [], "go": [], "npm": None, "pip": list(names)}


def session(backend: BwrapBackend, session_id: str, layer: PackageLayer | None) -> Callable[[str], str]:
    assert layer is not None
    box = backend.ensure(SandboxSpec(session_id=session_id, workspace_id="wsp", mounts=layer.mounts, env=layer.env))
    return lambda command: box.run(command).output.strip()


def refusals() -> float:
    """The egress proxy's refusals for hosts outside the policy, so far."""
    return sum(
        sample.value
        for metric in REFUSED.collect()
        for sample in metric.samples
        if sample.name.endswith("_total") and sample.labels.get("reason") == "not_allowed"
    )


IMPORT = "python3 -c 'import tinypkg; print(tinypkg.VALUE)' 2>&1"


def test_a_pip_package_is_importable_in_two_sessions_while_the_installer_ran_once(backend, index):
    layers: list[PackageLayer | None] = []

    def start() -> None:
        packages = pip_packages("tinypkg")
        layers.append(ensure_layer(backend, environment_id="env_a", packages=packages, network=NetworkPolicy()))

    starters = [threading.Thread(target=start) for _ in range(2)]
    for starter in starters:
        starter.start()
    for starter in starters:
        starter.join()
    assert len(layers) == 2 and layers[0] == layers[1]
    assert session(backend, "sesn_first", layers[0])(IMPORT) == "from the layer"
    later = ensure_layer(backend, environment_id="env_a", packages=pip_packages("tinypkg"), network=NetworkPolicy())
    assert session(backend, "sesn_second", later)(IMPORT) == "from the layer"
    assert index.downloads("tinypkg") == 1
    assert sum("/simple/tinypkg" in path for path in index.requests) == 1


def test_the_layer_is_read_only_inside_the_sandbox(backend, index):
    layer = ensure_layer(backend, environment_id="env_ro", packages=pip_packages("tinypkg"), network=NetworkPolicy())
    run = session(backend, "sesn_ro", layer)
    assert "Read-only file system" in run("touch /opt/packages/python/tinypkg/new 2>&1")
    assert "Read-only file system" in run("rm -rf /opt/packages/python/tinypkg 2>&1 | head -1")
    assert run(IMPORT) == "from the layer"


def test_a_new_package_list_is_a_new_layer(backend, index):
    index.add("otherpkg", "other")
    first = ensure_layer(backend, environment_id="env_v", packages=pip_packages("tinypkg"), network=NetworkPolicy())
    second = ensure_layer(
        backend, environment_id="env_v", packages=pip_packages("tinypkg", "otherpkg"), network=NetworkPolicy()
    )
    assert first is not None and second is not None and first.mounts != second.mounts
    assert session(backend, "sesn_v", second)("python3 -c 'import otherpkg; print(otherpkg.VALUE)'") == "other"
    assert index.downloads("tinypkg") == 2


RETRIED = "Tried again by a turn after {}, or at once when the environment's packages or networking change."


def build_failure(backend, environment_id: str, packages: dict, network: NetworkPolicy | None = None) -> str:
    """The message of a build that fails."""
    with pytest.raises(PackageBuildFailed) as failure:
        ensure_layer(backend, environment_id=environment_id, packages=packages, network=network or NetworkPolicy())
    return str(failure.value)


def test_a_failed_build_names_the_installer_the_package_and_the_cause_and_is_retried_after_a_backoff(
    backend, index, settings
):
    settings.REGISTRY_SANDBOX_BUILD_RETRY_SECONDS = 2
    packages = pip_packages("latepkg")
    cause = "pip could not install latepkg: No matching distribution found for latepkg."
    assert build_failure(backend, "env_f", packages) == f"{cause} {RETRIED.format('2 s')}"
    directory = backend.shared / "layers" / layer_key("env_f", wanted_packages(packages))
    assert "No matching distribution found for latepkg" in (directory / "build.log").read_text()
    assert not (directory / ".complete").exists()
    remembered = json.loads((directory / "failed.json").read_text())
    assert remembered["attempts"] == 1 and remembered["summary"] == cause.rstrip(".")

    index.add("latepkg", "second time lucky")
    asked = len(index.requests)
    assert build_failure(backend, "env_f", packages).startswith(f"{cause} Tried again by a turn after ")
    assert len(index.requests) == asked  # backing off: the same failure, no build

    time.sleep(2.1)
    layer = ensure_layer(backend, environment_id="env_f", packages=packages, network=NetworkPolicy())
    assert session(backend, "sesn_retry", layer)("python3 -c 'import latepkg; print(latepkg.VALUE)'") == (
        "second time lucky"
    )
    assert (directory / ".complete").exists() and "packages installed" in (directory / "build.log").read_text()
    assert not (directory / "failed.json").exists()


def test_the_backoff_doubles_with_each_failure_up_to_its_cap(backend, index, settings):
    settings.REGISTRY_SANDBOX_BUILD_RETRY_SECONDS = 1
    settings.REGISTRY_SANDBOX_BUILD_RETRY_MAX_SECONDS = 2
    packages = pip_packages("latepkg")
    waits = []
    for _ in range(3):
        message = build_failure(backend, "env_d", packages)
        waits.append(message.partition("Tried again by a turn after ")[2].partition(",")[0])
        time.sleep(int(waits[-1].split()[0]) + 0.1)
    assert waits == ["1 s", "2 s", "2 s"]
    assert index.requests.count("/simple/latepkg/") == 3


def test_a_changed_environment_builds_at_once(backend, index, settings):
    """New packages are a new layer; new networking or egress exceptions are other conditions: neither waits
    for the backoff of the failure before."""
    packages = pip_packages("latepkg")
    build_failure(backend, "env_c", packages)
    assert build_failure(backend, "env_c", packages).endswith(RETRIED.format("60 s"))  # backing off
    assert index.requests.count("/simple/latepkg/") == 1

    limited = NetworkPolicy("limited", allow_package_managers=True)  # the mirror counts as a package index
    assert build_failure(backend, "env_c", packages, limited).endswith(RETRIED.format("60 s"))
    assert index.requests.count("/simple/latepkg/") == 2
    settings.REGISTRY_SANDBOX_EGRESS_ALLOW = "127.0.0.1,192.0.2.7"
    build_failure(backend, "env_c", packages, limited)
    assert index.requests.count("/simple/latepkg/") == 3

    layer = ensure_layer(backend, environment_id="env_c", packages=pip_packages("tinypkg"), network=limited)
    assert session(backend, "sesn_changed", layer)(IMPORT) == "from the layer"


def test_an_index_the_proxy_refuses_is_named_with_the_reason(backend, monkeypatch, settings, caplog):
    """The incident: an index on a documentation-range address; pip quotes the proxy's reason phrase."""
    monkeypatch.setenv("PIP_INDEX_URL", "https://203.0.113.80/simple/")
    settings.REGISTRY_SANDBOX_EGRESS_ALLOW = ""
    caplog.set_level(logging.INFO, logger="registry.sandbox.refusals")
    refusal = "refused: 203.0.113.80 is in a documentation range; REGISTRY_SANDBOX_EGRESS_ALLOW lifts it"
    assert build_failure(backend, "env_r", pip_packages("tinypkg")) == (
        f"pip could not install tinypkg: the sandbox's egress proxy {refusal}. {RETRIED.format('60 s')}"
    )
    key = layer_key("env_r", wanted_packages(pip_packages("tinypkg")))
    assert f"session=layer_{key} host=203.0.113.80 port=443 address=203.0.113.80 rule=documentation" in caplog.text


def result(output: str, exit_code: int | None = 1, timed_out: bool = False) -> CommandResult:
    return CommandResult(output=output, exit_code=exit_code, timed_out=timed_out)


@pytest.mark.parametrize(
    ("log", "summary"),
    [
        (
            "== installing pip packages: a b\nWARNING: Retrying after connection broken by 'OSError('Tunnel connection "
            "failed: 403 Forbidden - sandbox egress refused: 10.0.0.9 (pypi.org) is in a private range; "
            "REGISTRY_SANDBOX_EGRESS_ALLOW lifts it')': /simple/a/\nERROR: No matching distribution found for a\n",
            "pip could not install a, b: the sandbox's egress proxy refused: 10.0.0.9 (pypi.org) is in a private "
            "range; REGISTRY_SANDBOX_EGRESS_ALLOW lifts it",
        ),
        (
            "== installing apt packages: hello\nErr:1 http://deb.debian.org/debian bookworm/main hello\n  403  "
            "Forbidden - sandbox egress refused: deb.debian.org is not among the hosts this environment allows; "
            "networking.allow_package_managers admits it (a package index) [IP: 127.0.0.1 3128]\n"
            "E: Failed to fetch http://deb.debian.org/debian/pool/main/h/hello.deb  403  Forbidden\n",
            "apt could not install hello: the sandbox's egress proxy refused: deb.debian.org is not among the hosts "
            "this environment allows; networking.allow_package_managers admits it (a package index)",
        ),
        (
            "== installing apt packages: hello\n== cause: hello_2.10.deb has maintainer scripts (postinst)\n",
            "apt could not install hello: hello_2.10.deb has maintainer scripts (postinst)",
        ),
        (
            "== installing apt packages: hello\n== installing npm packages: left-pad\nnpm error code E404\n"
            "npm error 404 Not Found - GET http://registry.example/left-pad\n"
            "npm error A complete log of this run can be found in: /workspace/.npm/_logs/x.log\n",
            "npm could not install left-pad: 404 Not Found - GET http://registry.example/left-pad",
        ),
    ],
)
def test_the_cause_is_read_from_the_build_log(log, summary):
    wanted = {"apt": ["hello"], "pip": ["a", "b"], "npm": ["left-pad"]}
    failure = diagnosed(result(log), wanted)
    assert failure.summary == summary and failure.details == ""


def test_without_a_cause_in_the_log_its_last_lines_are_shown():
    log = "== installing pip packages: a\n" + "".join(f"line {number}\n" for number in range(30))
    failure = diagnosed(result(log, exit_code=2), {"pip": ["a"]})
    assert failure.summary == "pip could not install a (exit status 2)"
    assert failure.details.splitlines() == [f"line {number}" for number in range(10, 30)]
    timed_out = diagnosed(result(log, exit_code=None, timed_out=True), {"pip": ["a"]})
    assert timed_out.summary == "pip could not install a: it timed out after 30 min" and timed_out.details
    assert diagnosed(result("python3: not found\n", exit_code=127), {"pip": ["a"]}).summary == (
        "the build failed (exit status 127)"
    )


@pytest.mark.parametrize("allowed", [False, True])
def test_limited_networking_builds_only_with_package_managers_allowed(backend, index, allowed):
    policy = NetworkPolicy("limited", allow_package_managers=allowed)
    packages = pip_packages("tinypkg")
    if allowed:
        layer = ensure_layer(backend, environment_id="env_l", packages=packages, network=policy)
        assert session(backend, "sesn_limited", layer)(IMPORT) == "from the layer"
    else:
        before = refusals()
        with pytest.raises(PackageBuildFailed) as failure:
            ensure_layer(backend, environment_id="env_l", packages=packages, network=policy)
        assert "No matching distribution found for tinypkg" in str(failure.value)
        assert refusals() > before and index.requests == []


def npm_tarball(name: str, value: str) -> bytes:
    """A minimal npm package tarball whose main module exports `value`."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as archive:
        for path, text in {
            "package/package.json": json.dumps({"name": name, "version": "1.0.0", "main": "index.js"}),
            "package/index.js": f"module.exports = {json.dumps(value)};\n",
        }.items():
            info = tarfile.TarInfo(path)
            info.size = len(text.encode())
            archive.addfile(info, io.BytesIO(text.encode()))
    return buffer.getvalue()


def test_an_npm_package_is_required_from_the_layer(backend, loopback_site, monkeypatch, settings):
    tarball = npm_tarball("tinynpm", "from the npm layer")
    requests: list[str] = []

    def registry(path: str) -> tuple[bytes, str]:
        requests.append(path)
        if path.endswith(".tgz"):
            return tarball, "application/octet-stream"
        integrity = "sha512-" + base64.b64encode(hashlib.sha512(tarball).digest()).decode()
        version = {
            "name": "tinynpm",
            "version": "1.0.0",
            "dist": {
                "tarball": f"{root}/tinynpm/-/tinynpm-1.0.0.tgz",
                "shasum": hashlib.sha1(tarball).hexdigest(),
                "integrity": integrity,
            },
        }
        packument = {"name": "tinynpm", "dist-tags": {"latest": "1.0.0"}, "versions": {"1.0.0": version}}
        return json.dumps(packument).encode(), "application/json"

    root = loopback_site(registry)
    monkeypatch.setenv("npm_config_registry", root + "/")
    settings.REGISTRY_SANDBOX_EGRESS_ALLOW = "127.0.0.1"
    packages = {"npm": ["tinynpm"]}
    layer = ensure_layer(backend, environment_id="env_npm", packages=packages, network=NetworkPolicy())
    again = ensure_layer(backend, environment_id="env_npm", packages=packages, network=NetworkPolicy())
    assert layer == again
    run = session(backend, "sesn_npm", layer)
    assert run("cd /tmp && node -e 'console.log(require(\"tinynpm\"))' 2>&1") == "from the npm layer"
    assert sum(path.endswith(".tgz") for path in requests) == 1


@pytest.fixture
def debian_mirror(settings) -> None:
    """The host's apt sources (deb.debian.org), reachable through the proxy at whatever addresses they have here."""
    addresses = {str(info[4][0]) for info in socket.getaddrinfo("deb.debian.org", 80, type=socket.SOCK_STREAM)}
    settings.REGISTRY_SANDBOX_EGRESS_ALLOW = ",".join(addresses)


def test_an_apt_package_is_unpacked_into_the_layer_without_root(backend, debian_mirror):
    layer = ensure_layer(backend, environment_id="env_apt", packages={"apt": ["hello"]}, network=NetworkPolicy())
    assert session(backend, "sesn_apt", layer)("hello 2>&1; command -v hello") == (
        "Hello, world!\n/opt/packages/apt/usr/bin/hello"
    )


def test_an_apt_package_with_maintainer_scripts_is_refused(backend, debian_mirror):
    with pytest.raises(PackageBuildFailed) as failure:
        ensure_layer(backend, environment_id="env_apt", packages={"apt": ["figlet"]}, network=NetworkPolicy())
    assert "figlet_" in str(failure.value) and "has maintainer scripts (postinst, prerm)" in str(failure.value)


def test_a_missing_toolchain_is_a_clear_error(backend):
    absent = [tool for tool in ("gem", "go", "cargo") if shutil.which(tool, path=SHELL_PATH) is None]
    assert absent, "this test needs a host without one of gem, go or cargo in the sandbox's PATH"
    manager = absent[0]
    with pytest.raises(PackageBuildFailed) as failure:
        ensure_layer(backend, environment_id="env_t", packages={manager: ["something"]}, network=NetworkPolicy())
    assert f"This worker has no {manager}, needed for the environment's {manager} packages." == str(failure.value)
    assert missing_tools({"pip": ["x"], manager: ["y"]}) == [manager]


def test_no_packages_no_layer(backend):
    assert ensure_layer(backend, environment_id="env_n", packages=pip_packages(), network=NetworkPolicy()) is None
    assert ensure_layer(backend, environment_id="env_n", packages={}, network=NetworkPolicy()) is None
    assert not (backend.shared / "layers").exists()


def test_the_runtimes_pip_is_copied_once_into_the_shared_area_readable_by_every_uid(tmp_path: Path) -> None:
    """A build's uid may not pass the folders above the runtime's virtualenv (a checkout under a 0700
    folder): the pip it runs is a root-owned copy in the shared area, made once."""
    old = os.umask(0o077)  # copies made under a strict umask are readable all the same
    try:
        copy = shared_pip(tmp_path)
    finally:
        os.umask(old)
    assert copy is not None and copy.is_relative_to(tmp_path / "tools") and (copy / "__init__.py").is_file()
    for path in (copy.parent, copy, copy / "__init__.py"):
        info = os.stat(path)
        assert info.st_uid == 0 and info.st_mode & 0o444 == 0o444
    assert shared_pip(tmp_path) == copy
    assert [entry.name for entry in (tmp_path / "tools").iterdir()] == [copy.parent.name]
