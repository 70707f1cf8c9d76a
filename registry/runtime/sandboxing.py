"""The session's sandbox through a turn: made ready at the turn's start (its problems reported before the
model runs), running the built-in tools the model calls (with the session's resources as they are now,
memory folders synced around each call), snapshotted when the turn ends so any worker can go on.

The snapshot is off the turn's critical path: it starts once the turn's idle status is written and lands
in the background. The session's next turn waits for it before it touches the sandbox, and so does the
end of the runner (`settle`), so the worker releases the lease, and another worker may claim the
session, only once it landed; it lands only while the lease holds."""

from __future__ import annotations

import contextvars
import dataclasses
import logging
import threading
from typing import NoReturn

from django.db import transaction

from registry.runtime.checkpoints import Checkpoints, TurnEnded, TurnInterrupted, WorkerStopping
from registry.runtime.lease import LeaseLost
from registry.runtime.provision import Provisioner, SessionSetup, Unprovisioned, worker_prompt_sections
from registry.runtime.running import RunningSession
from registry.runtime.tools import wants_builtin_tools
from registry.runtime.writer import TurnLog
from registry.sandbox.interface import Sandbox, SandboxBackend
from registry.sandbox.spec import SandboxUnavailable
from registry.sandbox.toolset import ToolOutcome, run_tool
from registry.sessions import selectors
from registry.sessions.models import SessionEvent

logger = logging.getLogger(__name__)

NO_SANDBOX_ERROR = "sandbox_unavailable_error"
NO_SANDBOX = (
    "This agent has built-in tools (bash, read, ...), but this runtime has no sandbox to run them in "
    "(REGISTRY_SANDBOX_BACKEND=none, or the worker's start-up check of its sandboxes failed: its log says "
    "why); they are not offered to the model."
)


class SandboxUse:
    """One held session's sandbox, as its turns use it."""

    def __init__(
        self, session: RunningSession, backend: SandboxBackend | None, turn: TurnLog, checkpoints: Checkpoints
    ) -> None:
        self.session = session
        self.backend = backend
        self.turn = turn
        self.checkpoints = checkpoints
        self.provisioner = self._provisioner()
        self.prompt_sections = self._prompt_sections()
        self.used: Sandbox | None = None  # set once a turn used it: snapshot at its end
        self.in_flight: threading.Thread | None = None  # the last turn's snapshot, landing in the background

    def _provisioner(self) -> Provisioner | None:
        """The sandbox's provisioner, when this runtime runs the agent's built-in tools."""
        session = self.session
        if self.backend is None or session.client_runs_builtin or not wants_builtin_tools(session.agent):
            return None
        # What the provisioner knows of the session: the running session's fields of the same names.
        setup = SessionSetup(**{item.name: getattr(session, item.name) for item in dataclasses.fields(SessionSetup)})
        return Provisioner(setup, self.backend, lambda kind, message: self.turn.error(kind, message, retry="terminal"))

    def _prompt_sections(self) -> list[str]:
        """What the system prompt says of the session's resources, where the tools see them: this runtime's
        sandbox, or the working directory and memory mounts of the client's environment worker."""
        session = self.session
        if self.provisioner is not None:
            return self.provisioner.prompt_sections(session.resources)
        if session.client_runs_builtin:
            return worker_prompt_sections(
                workspace_id=session.workspace_id, agent=session.agent, resources=session.resources
            )
        return []

    def provision(self) -> None:
        """At a turn's start: missing skills or a failed package build end the turn; a sandbox that cannot
        start is reported by the first tool call that needs it. The last turn's snapshot lands first."""
        self.settle()
        if self.provisioner is None:
            return
        self.checkpoints.lease.check()
        try:
            self.provisioner.sandbox(self.session.resources, catch_up=True)
        except Unprovisioned as failure:
            self.turn.error(failure.error_type, failure.message, retry="terminal")
            raise TurnEnded({"type": "retries_exhausted"}) from None
        except (SandboxUnavailable, OSError) as failure:
            logger.warning("session %s: sandbox not ready at turn start: %s", self.session.session_id, failure)

    def run(self, call: SessionEvent) -> ToolOutcome:
        """A built-in tool call in the session's sandbox; an interrupt stops the sandbox's processes."""
        if self.provisioner is None:
            return ToolOutcome.text(NO_SANDBOX, is_error=True)
        lease = self.checkpoints.lease
        lease.check()
        try:
            sandbox = self._current()
            self.provisioner.before_tool()
            self.used = sandbox
            try:
                outcome = self.checkpoints.wait_for(lambda: run_tool(sandbox, call.body["name"], call.body["input"]))
            except (TurnInterrupted, LeaseLost, WorkerStopping):
                sandbox.stop()
                raise
        except (SandboxUnavailable, OSError) as failure:
            self._failed(call, str(failure))
        lease.check()
        memory = self.provisioner.after_tool()
        notes = [note for note in (memory.note() if memory.refused else None, sandbox.over_quota()) if note]
        if notes:
            return ToolOutcome([*outcome.content, *({"type": "text", "text": note} for note in notes)], is_error=True)
        return outcome

    def _current(self) -> Sandbox:
        """The sandbox with the session's resources as they are now (one added since is mounted)."""
        assert self.provisioner is not None
        current = selectors.session_resources(self.session.session_id)
        if current is not None and current != self.session.resources:
            self.session.resources = list(current)
            self.prompt_sections = self.provisioner.prompt_sections(self.session.resources)
        try:
            return self.provisioner.sandbox(self.session.resources)
        except Unprovisioned as failure:
            raise SandboxUnavailable(failure.message) from None

    def _failed(self, call: SessionEvent, cause: str) -> NoReturn:
        """A sandbox that cannot start ends the turn with `session.error` naming the cause; the call gets
        an error result, so the transcript stays whole and the next turn can try again."""
        with transaction.atomic():
            self.turn.tool_result(call, [{"type": "text", "text": cause}], is_error=True)
            self.turn.error(NO_SANDBOX_ERROR, cause, retry="exhausted")
        raise TurnEnded({"type": "retries_exhausted"})

    def snapshot(self) -> None:
        """After a turn that used the sandbox (its idle status written): its workspace to storage in the
        background, so any worker can go on."""
        sandbox, self.used = self.used, None
        if sandbox is None:
            return
        name = f"snapshot-{self.session.session_id}"
        run = contextvars.copy_context().run  # its log lines carry the session's ids
        self.in_flight = threading.Thread(target=run, args=(self._take, sandbox), name=name, daemon=True)
        self.in_flight.start()

    def _take(self, sandbox: Sandbox) -> None:
        try:
            sandbox.snapshot(commit_if=self.checkpoints.lease.check)
        except (OSError, SandboxUnavailable, LeaseLost) as error:
            # the files stay here; a worker elsewhere would miss this turn's changes
            logger.warning("snapshot of session %s failed: %s", self.session.session_id, error)
        except Exception:
            logger.exception("snapshot of session %s failed", self.session.session_id)

    def settle(self) -> None:
        """Wait until the snapshot in flight, if any, landed (or failed)."""
        in_flight, self.in_flight = self.in_flight, None
        if in_flight is not None:
            in_flight.join()

    def report_missing(self) -> None:
        """Once per session: the agent has built-in tools but this runtime cannot run them."""
        if self.backend is not None or self.session.client_runs_builtin or not wants_builtin_tools(self.session.agent):
            return
        if not selectors.error_reported(self.session.session_id, NO_SANDBOX_ERROR):
            self.turn.error(NO_SANDBOX_ERROR, NO_SANDBOX, retry="terminal")
