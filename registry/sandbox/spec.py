"""What a session asks of its sandbox and what the deployment allows it: plain immutable values."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from django.conf import settings

from registry.sandbox.egress import NetworkPolicy
from registry.sandbox.interception import SecretInjection

# The session's working directory, inside every sandbox.
SANDBOX_HOME = "/workspace"


class SandboxUnavailable(Exception):
    """The backend cannot run a sandbox here (none configured, or bubblewrap cannot start)."""


@dataclass(frozen=True)
class Mount:
    source: Path  # host path
    target: str  # absolute path inside the sandbox
    read_only: bool = True


@dataclass(frozen=True)
class SandboxSpec:
    session_id: str
    workspace_id: str
    mounts: tuple[Mount, ...] = ()
    env: Mapping[str, str] = field(default_factory=dict)
    network: NetworkPolicy = field(default_factory=NetworkPolicy)
    injections: tuple[SecretInjection, ...] = ()  # secrets the proxy puts in; `env` holds their placeholders


@dataclass(frozen=True)
class CommandResult:
    """What a command printed (stdout and stderr interleaved), how it ended, and whether it was cut."""

    output: str
    exit_code: int | None
    timed_out: bool = False
    truncated: bool = False
    shell_ended: bool = False  # the command ended the shell (`exit`, a limit): the next one starts anew


@dataclass(frozen=True)
class Limits:
    memory_mb: int
    pids: int
    workspace_mb: int
    output_limit: int
    command_timeout_ms: int
    cpus: float = 0.0  # cores the sandbox may use; 0: no cap
    tmp_mb: int = 64  # size of each of /tmp and /dev/shm (tmpfs), counted against memory_mb

    @classmethod
    def from_settings(cls) -> Limits:
        return cls(
            memory_mb=settings.REGISTRY_SANDBOX_MEMORY_MB,
            pids=settings.REGISTRY_SANDBOX_PIDS,
            workspace_mb=settings.REGISTRY_SANDBOX_WORKSPACE_MB,
            output_limit=settings.REGISTRY_SANDBOX_OUTPUT_LIMIT,
            command_timeout_ms=settings.REGISTRY_SANDBOX_COMMAND_TIMEOUT_MS,
            cpus=settings.REGISTRY_SANDBOX_CPUS,
            tmp_mb=settings.REGISTRY_SANDBOX_TMP_MB,
        )
