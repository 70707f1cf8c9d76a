"""An in-memory sandbox backend: the runtime's seam (`registry.sandbox.interface`) held by something
that is not bubblewrap. Commands are answered by a script and recorded; files live in a dict; a snapshot
may be held back (`snapshot_gate`) to see what waits for it."""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from registry.sandbox.spec import CommandResult, Limits, SandboxSpec

DISK_FOLDERS = ("workspace", "mounts", "files", "staging")


class FakeDisk:
    """The host folders of a fake session's disk, made at once."""

    def __init__(self, root: Path) -> None:
        self.workspace, self.mounts, self.files, self.staging = (root / name for name in DISK_FOLDERS)
        for name in DISK_FOLDERS:
            (root / name).mkdir(parents=True, exist_ok=True)


@dataclass
class FakePlace:
    home: Path
    disk: FakeDisk
    uid: int = 60000


@dataclass
class FakeSandbox:
    """One session's sandbox: `answer` makes each command's result; everything done is in `calls`."""

    spec: SandboxSpec
    limits: Limits
    place: FakePlace
    answer: Callable[[str], CommandResult]
    files: dict[str, bytes] = field(default_factory=dict)
    calls: list[str] = field(default_factory=list)
    snapshot_gate: threading.Event | None = None  # a snapshot lands only once it is set

    def catch_up(self) -> None:
        self.calls.append("catch_up")

    def warm(self) -> None:
        self.calls.append("warm")

    def run(self, command: str, *, timeout_ms: int | None = None, restart: bool = False) -> CommandResult:
        self.calls.append(f"run {command}")
        return self.answer(command)

    def read_file(self, path: str, *, limit: int) -> bytes:
        if path not in self.files:
            raise FileNotFoundError(path)
        return self.files[path][:limit]

    def write_file(self, path: str, data: bytes) -> None:
        self.files[path] = data

    def list_files(self, path: str = "") -> list[str]:
        prefix = f"{path}/" if path else ""
        return sorted({name[len(prefix) :].split("/")[0] for name in self.files if name.startswith(prefix)})

    def remove_file(self, path: str) -> None:
        self.files.pop(path, None)

    def refusal(self, command: str | None = None) -> str | None:
        return None

    def over_quota(self) -> str | None:
        return None

    def snapshot(self, *, commit_if: Callable[[], None] | None = None) -> None:
        self.calls.append("snapshot")
        if self.snapshot_gate is not None:
            self.snapshot_gate.wait(timeout=60)
        if commit_if is not None:
            commit_if()
        self.calls.append("snapshot landed")

    def stop(self) -> None:
        self.calls.append("stop")

    def destroy(self) -> None:
        self.calls.append("destroy")


@dataclass
class FakeBackend:
    """Keeps one `FakeSandbox` per session, all answering with `answer`."""

    root: Path
    answer: Callable[[str], CommandResult]
    limits: Limits = field(default_factory=Limits.from_settings)
    sandboxes: dict[str, FakeSandbox] = field(default_factory=dict)
    closed: bool = False
    snapshot_gate: threading.Event | None = None  # handed to each sandbox made

    @property
    def shared(self) -> Path:
        shared = self.root / "shared"
        shared.mkdir(parents=True, exist_ok=True)
        return shared

    def place(self, session_id: str) -> FakePlace:
        home = self.root / session_id
        return FakePlace(home=home, disk=FakeDisk(home))

    def ensure(self, spec: SandboxSpec) -> FakeSandbox:
        found = self.sandboxes.get(spec.session_id)
        if found is None:
            found = self.sandboxes[spec.session_id] = self.transient(spec, self.limits)
        found.spec = spec
        return found

    def transient(self, spec: SandboxSpec, limits: Limits) -> FakeSandbox:
        return FakeSandbox(spec, limits, self.place(spec.session_id), self.answer, snapshot_gate=self.snapshot_gate)

    def holds(self, session_id: str) -> bool:
        return session_id in self.sandboxes

    def stop_idle(self, idle_seconds: float) -> None:
        for sandbox in self.sandboxes.values():
            sandbox.stop()

    def destroy(self, session_id: str, *, forget: bool = False) -> None:
        sandbox = self.sandboxes.pop(session_id, None)
        if sandbox is not None:
            sandbox.destroy()

    def health(self) -> str | None:
        return None

    def close(self) -> None:
        self.closed = True
