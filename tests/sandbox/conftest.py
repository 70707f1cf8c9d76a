"""Fixtures of the sandbox tests: a backend whose root any session uid can traverse (not pytest's tmp),
HTTP servers on the host's loopback for the network tests, and the test PKI that the egress proxy trusts
upstream."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from fakes.pki import Pki, make_pki
from registry.sandbox.backend import BwrapBackend, BwrapSandbox, Limits, SandboxSpec
from tests.support.recording_servers import Serve, recording_servers
from tests.support.sandbox_attacks import host_secret
from tests.support.sandbox_roots import traversable_root
from tests.support.sites import Route, loopback_sites

__all__ = ["host_secret"]


@pytest.fixture
def pki(tmp_path: Path) -> Pki:
    return make_pki(tmp_path)


@pytest.fixture
def serve() -> Iterator[Serve]:
    yield from recording_servers()


@pytest.fixture
def proxied(settings: Any, pki: Pki) -> None:
    """The proxy may reach loopback (where the test servers are) and trusts the test CA upstream."""
    settings.REGISTRY_SANDBOX_EGRESS_ALLOW = "127.0.0.1"
    settings.REGISTRY_SANDBOX_EXTRA_CA_FILE = str(pki.ca_file)


@pytest.fixture
def limits() -> Limits:
    return Limits(memory_mb=512, pids=64, workspace_mb=64, output_limit=2000, command_timeout_ms=10_000)


@pytest.fixture
def backend(limits: Limits) -> Iterator[BwrapBackend]:
    with traversable_root("sandboxes-") as root:
        made = BwrapBackend(root, limits)
        yield made
        for session_id in list(made.sandboxes):
            made.destroy(session_id)


@pytest.fixture
def sandbox_for(backend: BwrapBackend) -> Callable[[str], BwrapSandbox]:
    def make(session_id: str) -> BwrapSandbox:
        return backend.ensure(SandboxSpec(session_id=session_id, workspace_id="wsp_test"))

    return make


@pytest.fixture
def loopback_site() -> Iterator[Callable[[Route], str]]:
    yield from loopback_sites()
