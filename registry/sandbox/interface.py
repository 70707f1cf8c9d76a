"""What the runtime needs of a session's sandbox and of the backend that makes them: the seam between the
runtime and a way to run a session's tools. `BwrapBackend` (bubblewrap on this host) is the first
implementation; the runtime, the toolset and the package builder name only these protocols."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Protocol

from registry.sandbox.spec import CommandResult, Limits, SandboxSpec


class PreparedDisk(Protocol):
    """The host folders where what a session's sandbox mounts is put together before it starts."""

    @property
    def workspace(self) -> Path: ...  # the session's working directory (`/workspace` inside)
    @property
    def mounts(self) -> Path: ...  # sources of read-write mounts (memory stores, repositories)
    @property
    def files(self) -> Path: ...  # copies of the session's file resources
    @property
    def staging(self) -> Path: ...  # scratch space on the same filesystem, for atomic renames


class SessionPlace(Protocol):
    """A session's place on the host: the uid its sandbox runs as, its private folder and its disk."""

    @property
    def uid(self) -> int: ...
    @property
    def home(self) -> Path: ...  # the host's folder of the session, never visible inside
    @property
    def disk(self) -> PreparedDisk: ...


class Sandbox(Protocol):
    """One session's sandbox: a persistent shell, its workspace files, snapshots of them."""

    spec: SandboxSpec
    limits: Limits

    @property
    def place(self) -> SessionPlace: ...

    def catch_up(self) -> None:
        """Resume: a newer snapshot of the session (written by another worker) replaces the workspace."""

    def warm(self) -> None:
        """Start the shell in the background, so the turn's first command finds it running."""

    def run(self, command: str, *, timeout_ms: int | None = None, restart: bool = False) -> CommandResult:
        """Run a command in the session's shell (its cwd and exports persist between commands)."""
        ...

    def read_file(self, path: str, *, limit: int) -> bytes:
        """A regular file of the workspace (relative path), at most `limit` bytes; OSError if it is none."""
        ...

    def write_file(self, path: str, data: bytes) -> None:
        """Write a file of the workspace as the session itself would."""

    def list_files(self, path: str = "") -> list[str]:
        """The names in a folder of the workspace, sorted."""
        ...

    def remove_file(self, path: str) -> None:
        """Remove a file of the workspace (no link is followed)."""

    def refusal(self, command: str | None = None) -> str | None:
        """Why a command would be refused now (the workspace over its cap), or None."""
        ...

    def over_quota(self) -> str | None:
        """Why the workspace breaks its size cap, or None."""
        ...

    def snapshot(self, *, commit_if: Callable[[], None] | None = None) -> None:
        """The workspace to storage, so any worker can go on (OSError when it cannot be taken): only what
        changed since the session's last snapshot, when this host took it. Snapshots of a session run one at
        a time; a failed one leaves the previous snapshot the latest. `commit_if` runs just before this one
        becomes the latest: an exception from it (a lost lease) abandons it."""

    def stop(self) -> None:
        """Stop the shell and everything started in it; the files stay."""

    def destroy(self) -> None:
        """Stop and remove the sandbox and its disk on this host (after a snapshot in flight landed)."""


class SandboxBackend(Protocol):
    """Makes and keeps the sandboxes of one worker, one per session."""

    limits: Limits

    @property
    def root(self) -> Path: ...  # this backend's folder (its repository cache lives there)
    @property
    def shared(self) -> Path: ...  # what every sandbox mounts read-only (skills, package layers)

    def place(self, session_id: str) -> SessionPlace:
        """The session's place on this host, made on first use (before its sandbox starts)."""
        ...

    def ensure(self, spec: SandboxSpec) -> Sandbox:
        """Open the session's sandbox (created, and restored from its snapshot, on first use here)."""
        ...

    def transient(self, spec: SandboxSpec, limits: Limits) -> Sandbox:
        """A sandbox this backend does not keep (a package build); the caller destroys it."""
        ...

    def holds(self, session_id: str) -> bool:
        """The session has a sandbox here."""
        ...

    def stop_idle(self, idle_seconds: float) -> None:
        """Stop the shells of sandboxes unused this long; their files stay."""

    def destroy(self, session_id: str, *, forget: bool = False) -> None:
        """Remove the session's sandbox here; `forget` deletes its snapshot too."""

    def health(self) -> str | None:
        """Why this backend cannot run sandboxes now, or None."""
        ...

    def close(self) -> None:
        """Stop every sandbox's processes (a worker that exits); files and snapshots stay."""
