"""The turn loop: a held session's pending events acknowledged and its turns run until nothing is left.

A turn is a loop over the log: answer the tool calls the runtime can answer, pause for the ones the
client must answer, let the model speak while the transcript ends with user content, then grade the
outcome. Every state is derived from the stored events, so a turn whose worker died is resumed by
running the same loop again. The loop drives parts, each in its module: `ModelStep` (request, stream,
compaction), `ToolDispatch` (built-in, MCP, custom tools, confirmations), `Grader`, `SandboxUse`
(resources mounted; snapshots, which land in the background after the idle status); `Checkpoints` stop
it for an interrupt, a lost lease or a shutdown; every write goes through `TurnLog` to the session log,
fenced by the lease. `code_harness` runs the same loop but does not honor `user.interrupt`. Tracing and
metrics attach through a `TurnObserver`.
"""

from __future__ import annotations

import threading
import time
from typing import Any

from django.db import transaction

from registry.core import tracing
from registry.runtime import context
from registry.runtime.checkpoints import Checkpoints, TurnEnded, TurnInterrupted, WorkerStopping
from registry.runtime.config import RuntimeSettings
from registry.runtime.dispatch import ToolDispatch
from registry.runtime.eventlog import VisibleLogs
from registry.runtime.grading import Grader
from registry.runtime.identity import ModelCallIdentity
from registry.runtime.lease import Lease, LeaseLost
from registry.runtime.model import ModelClient, ModelError
from registry.runtime.model_step import ModelStep
from registry.runtime.observer import LEASE_LOST, LEFT, TracingObserver, TurnObserver, TurnWatch
from registry.runtime.running import RunningSession
from registry.runtime.sandboxing import SandboxUse
from registry.runtime.transcript import BOUNDARY_TYPES, awaits_model, latest_outcome, tool_work, turn_graded
from registry.runtime.writer import TurnLog
from registry.sandbox.interface import SandboxBackend
from registry.sessions import selectors, work
from registry.sessions.models import Session, SessionEvent

Status = Session.Status


class SessionRunner:
    """Works through one leased session's pending events, one turn boundary at a time."""

    def __init__(
        self,
        *,
        lease: Lease,
        model: ModelClient,
        identity: ModelCallIdentity,
        config: RuntimeSettings,
        stopping: threading.Event,
        sandboxes: SandboxBackend | None = None,
        logs: VisibleLogs | None = None,
        observer: TurnObserver | None = None,
    ) -> None:
        self.lease = lease
        self.session_id = lease.session_id
        self.model_client = model
        self.identity = identity
        self.config = config
        self.stopping = stopping
        self.sandboxes = sandboxes
        self.logs = logs or VisibleLogs(sessions=1)
        self.observer = observer or TracingObserver()
        # Set by the worker when a notification names this session (an interrupt, an archive...).
        self.attention = threading.Event()
        # The trace context of the user event that started the turn (its `session.turn` span's parent).
        self.turn_traceparent: str | None = None

    def _assemble(self) -> None:
        """Read the session and put the turn's parts together."""
        session = self.session = RunningSession.load(self.session_id, self.config)
        turn = self.turn = TurnLog(self.lease.fence, self.observer, session.status)
        checkpoints = self.checkpoints = Checkpoints(
            lease=self.lease,
            turn=turn,
            stopping=self.stopping,
            check_seconds=self.config.check_seconds,
            honors_interrupts=session.honors_interrupts,
            attention=self.attention,
        )
        self.sandbox = SandboxUse(session, self.sandboxes, turn, checkpoints)
        self.tools = ToolDispatch(
            session=session,
            config=self.config,
            turn=turn,
            checkpoints=checkpoints,
            sandbox=self.sandbox,
            auth=self._auth,
        )
        self.model = ModelStep(
            session=session,
            config=self.config,
            model=self.model_client,
            auth=self._auth,
            turn=turn,
            checkpoints=checkpoints,
            tools=self.tools,
            sandbox=self.sandbox,
        )
        self.grader = Grader(session=session, config=self.config, turn=turn, model=self.model)

    def _auth(self) -> dict[str, str]:
        return self.identity.headers(workspace_id=self.session.workspace_id, session_id=self.session_id)

    # -- the outer loop: turn boundaries ---------------------------------------------------------
    def run(self) -> None:
        """The session's turns until nothing is pending; returns once the last turn's snapshot landed (the
        worker then releases the lease)."""
        self._assemble()
        try:
            if self.session.status in (Status.RUNNING, Status.RESCHEDULING):
                self.turn_traceparent = selectors.latest_user_traceparent(self.session_id, tracing.TRACEPARENT_FIELD)
                self._run_turn()  # a turn whose worker went away: carry on from the log
            while batch := selectors.pending_events(self.session_id):
                self._apply(batch)
        finally:
            self.sandbox.settle()

    def _apply(self, batch: list[SessionEvent]) -> None:
        """Acknowledge the batch; an interrupt after the last input cancels the turn it would start.

        Calls the new input leaves unanswered get their result first (as the model is shown it). The
        acknowledgment and the turn's start commit together (one commit less before the model call).
        """
        self.lease.check()
        interrupts = [event for event in batch if event.type == "user.interrupt"]
        inputs = [event for event in batch if event.type != "user.interrupt"]
        honored = self.session.honors_interrupts
        closing = any(event.type in BOUNDARY_TYPES and (honored or event.type != "user.interrupt") for event in batch)
        with transaction.atomic():
            if closing:  # new input or an interrupt closes the calls still open (the transcript does)
                self.tools.abandon_open(self.logs.read(self.session_id))
            self.turn.acknowledge(batch)
            if interrupts and not self.session.honors_interrupts:
                self.checkpoints.reject(interrupts)
            elif interrupts and batch[-1].type == "user.interrupt":
                self._release_environment_worker()
                self.turn.set_status(Status.IDLE, {"type": "end_turn"})
                return
            if inputs:
                self.turn.set_status(Status.RUNNING)
        if inputs:
            traced = (event.body.get(tracing.TRACEPARENT_FIELD) for event in reversed(inputs))
            self.turn_traceparent = next((traceparent for traceparent in traced if traceparent), None)
            self._run_turn()

    def _release_environment_worker(self) -> None:
        """An interrupt stops the work item of a session whose environment worker runs its tools (the worker
        reads `stopping` at its next heartbeat); new input queues another."""
        if self.session.client_runs_builtin:
            work.work_stop_for_session(session_id=self.session_id)

    def _run_turn(self) -> None:
        """The turn, watched by the observer (a span continuing the starting event's trace, metrics)."""
        watch = TurnWatch()
        with self.observer.turn(self.session_id, self.turn_traceparent, watch):
            try:
                watch.outcome = str(self._turn()["type"])
            except WorkerStopping:
                watch.outcome = LEFT
                raise
            except LeaseLost:
                watch.outcome = LEASE_LOST
                raise

    def _turn(self) -> dict[str, Any]:
        started = time.monotonic()
        self.tools.new_turn()
        self.turn.set_status(Status.RUNNING)
        try:
            self.sandbox.provision()
            stop_reason, details = self._advance(), None
        except TurnInterrupted as interrupted:  # unwound: the turn ends as a finished one does
            with transaction.atomic():
                self.tools.abandon_open(self.logs.read(self.session_id))
                self.turn.acknowledge(interrupted.interrupts)
                self._release_environment_worker()
            self.grader.interrupted()
            stop_reason, details = {"type": "end_turn"}, None
        except TurnEnded as ended:
            stop_reason, details = ended.stop_reason, ended.details
        except ModelError as failure:  # reported, then the turn ends as one whose retries ran out
            retry = "exhausted" if failure.retryable else "terminal"
            self.turn.error(failure.kind, failure.message, retry=retry)
            stop_reason, details = {"type": "retries_exhausted"}, None
        self.turn.add_usage({}, active_seconds=time.monotonic() - started)
        self.turn.set_status(Status.IDLE, stop_reason, details)
        self.sandbox.snapshot()  # lands in the background: the idle status does not wait for it
        return stop_reason

    def _advance(self) -> dict[str, Any]:
        """Step until the turn ends or waits on the client; returns the idle stop reason."""
        compactions = 0
        while True:
            self.checkpoints.check()
            events = self.logs.read(self.session_id)
            work = tool_work(events)
            if self.session.client_runs_builtin:
                work.blocking += [call.id for call in work.runnable if call.type == "agent.tool_use"]
                work.runnable = [call for call in work.runnable if call.type != "agent.tool_use"]
            if work.denied or work.runnable:
                self.tools.answer(work.denied, work.runnable)
                continue
            if work.blocking:
                return {"type": "requires_action", "event_ids": work.blocking}
            messages = self.model.messages(events)
            if awaits_model(messages):
                self.model.enforce_limits(events)
                request = self.model.request(messages)
                if context.overflows(request, self.session.window):
                    compactions += 1
                    self.model.compact(events, compactions)
                    continue
                if self.model.speak(request):
                    compactions = 0
                    continue
                return {"type": "end_turn"}  # an empty answer: asking again would loop
            outcome = latest_outcome(events)
            if outcome is None or turn_graded(events):
                return {"type": "end_turn"}
            if self.grader.grade(outcome, messages, events) != "needs_revision":
                return {"type": "end_turn"}
