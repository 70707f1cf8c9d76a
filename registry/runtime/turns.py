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

import dataclasses
import logging
import threading
import time
from collections.abc import Callable
from functools import partial
from typing import Any

from django.db import connection, transaction

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
from registry.runtime.running import RunningSession, model_id
from registry.runtime.sandboxing import SandboxUse
from registry.runtime.threads import (
    NO_REPLY,
    Roster,
    ThreadCheckpoints,
    ThreadGroup,
    ThreadTools,
    ThreadTurnLog,
    text_of,
)
from registry.runtime.transcript import (
    BOUNDARY_TYPES,
    awaits_model,
    latest_outcome,
    tool_work,
    turn_boundary,
    turn_graded,
)
from registry.runtime.writer import TurnLog
from registry.sandbox.interface import SandboxBackend
from registry.sessions import selectors, thread_log, work
from registry.sessions.models import Session, SessionEvent, SessionThread, primary_thread_id

logger = logging.getLogger(__name__)

Status = Session.Status
# How often a child thread waiting on the client's answers reads its log.
CLIENT_POLL_SECONDS = 0.2


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
        # What the worker gave this runner, which a child thread's runner shares.
        self.worker_parts: dict[str, Any] = {
            "lease": lease,
            "model": model,
            "identity": identity,
            "config": config,
            "stopping": stopping,
            "sandboxes": sandboxes,
            "logs": self.logs,
            "observer": self.observer,
        }
        # Set by the worker when a notification names this session (an interrupt, an archive...).
        self.attention = threading.Event()
        # The trace context of the user event that started the turn (its `session.turn` span's parent).
        self.turn_traceparent: str | None = None
        # The primary thread; a child thread's runner (`ThreadRunner`) says which it is.
        self.thread_id = primary_thread_id(self.session_id)
        self.depth = 0
        self.agent_name: str | None = None
        self.group = ThreadGroup(self.session_id, self._thread_runner)

    def _assemble(self) -> None:
        """Read the session and put the turn's parts together."""
        session = self.session = RunningSession.load(self.session_id, self.config)
        self.roster = Roster.of(session.agent)
        self.turn = TurnLog(self.lease.fence, self.observer, session.status)
        self.checkpoints = Checkpoints(
            lease=self.lease,
            turn=self.turn,
            stopping=self.stopping,
            check_seconds=self.config.check_seconds,
            honors_interrupts=session.honors_interrupts,
            attention=self.attention,
            interrupt_threads=self.group.interrupt,
        )
        self._assemble_parts(spawns=True, advises=True)

    def _assemble_parts(self, *, spawns: bool, advises: bool) -> None:
        """The parts over the session, writer and stops: the sandbox, the tools (with the multi-agent tools
        the session's agent allows this thread), the model and the grader."""
        session, turn, checkpoints = self.session, self.turn, self.checkpoints
        self.sandbox = SandboxUse(session, self.sandboxes, turn, checkpoints)
        own = ThreadTools(self, self.roster, spawns=spawns, advises=advises) if self.roster else None
        self.tools = ToolDispatch(
            session=session,
            config=self.config,
            turn=turn,
            checkpoints=checkpoints,
            sandbox=self.sandbox,
            auth=self._auth,
            own=own,
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
            thread_id=None if self.depth == 0 else self.thread_id,
        )
        self.grader = Grader(session=session, config=self.config, turn=turn, model=self.model)

    def _auth(self) -> dict[str, str]:
        return self.identity.headers(workspace_id=self.session.workspace_id, session_id=self.session_id)

    def events(self) -> list[SessionEvent]:
        """This thread's visible log as the database has it now (the session's, without its children's calls
        and answers shown there)."""
        return [event for event in self.logs.read(self.session_id) if not thread_log.cross_posted(event)]

    def consult(self, request: dict[str, Any]) -> str:
        """A model call of a tool (the advisor), through the turn's model path: identity, usage, budget."""
        budget = context.output_budget(context.context_window(request["model"], self.config.context_tokens), 4096)
        return self.model.create({"max_tokens": budget, **request}).text()

    def _thread_runner(self, thread: SessionThread, group: ThreadGroup) -> Callable[[], None]:
        return ThreadRunner(self, thread, group).run_pending

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
            self.group.stop_all()  # a lost lease, an archive or a shutdown: the children go with the turn
            self.sandbox.settle()

    def _apply(self, batch: list[SessionEvent]) -> None:
        """Acknowledge the batch; an interrupt after the last input cancels the turn it would start.

        Calls the new input leaves unanswered get their result first (as the model is shown it). The
        acknowledgment and the turn's start commit together (one commit less before the model call).
        """
        self.lease.check()
        # An interrupt naming a child thread, read while no turn runs, finds it stopped already.
        interrupts = [event for event in batch if event.type == "user.interrupt" and not thread_log.child_named(event)]
        # Answers to a child thread's calls went to its log when they were appended: they start no turn here.
        inputs = [event for event in batch if event.type != "user.interrupt" and not thread_log.cross_posted(event)]
        honored = self.session.honors_interrupts
        closing = any(event.type in BOUNDARY_TYPES and (honored or event.type != "user.interrupt") for event in batch)
        with transaction.atomic():
            if closing:  # new input or an interrupt closes the calls still open (the transcript does)
                self.tools.abandon_open(self.events())
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
            self.group.resume()
            stop_reason, details = self.advance(), None
        except TurnInterrupted as interrupted:  # unwound: the turn ends as a finished one does
            self.group.stop_all()
            with transaction.atomic():
                self.tools.abandon_open(self.events())
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
        self.group.stop_all()  # the turn's children end with it
        self.turn.add_usage({}, active_seconds=time.monotonic() - started)
        self.turn.set_status(Status.IDLE, stop_reason, details)
        self.sandbox.snapshot()  # lands in the background: the idle status does not wait for it
        return stop_reason

    def advance(self) -> dict[str, Any]:
        """Step until the turn ends or waits on the client; returns the idle stop reason."""
        compactions = 0
        while True:
            self.checkpoints.check()
            events = self.events()
            work = tool_work(events)
            if self.session.client_runs_builtin:  # the environment worker runs the built-in tools
                for_worker = [call for call in work.runnable if self._for_worker(call)]
                work.blocking += [call.id for call in for_worker]
                work.runnable = [call for call in work.runnable if call not in for_worker]
            if work.denied or work.runnable:
                self.tools.answer(work.denied, work.runnable)
                continue
            if work.blocking:
                if self._await_client():
                    continue
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

    def _await_client(self) -> bool:
        """Whether to wait here for the client's answers: a session's turn ends `requires_action` instead."""
        return False

    def _for_worker(self, call: SessionEvent) -> bool:
        return call.type == "agent.tool_use" and not self.tools.runs_itself(call)


class ThreadRunner(SessionRunner):
    """One child thread's turns, in a Python thread of the worker while its session's turn runs: the turn's
    parts rebuilt on the thread's agent, its log and its stops (see `registry.runtime.threads`)."""

    def __init__(self, root: SessionRunner, thread: SessionThread, group: ThreadGroup) -> None:
        super().__init__(**root.worker_parts)
        self.root, self.thread, self.group = root, thread, group
        self.thread_id, self.depth, self.agent_name = thread.pk, thread.depth, thread.agent_name
        self.read_log: list[SessionEvent] = []

    def _assemble(self) -> None:
        root, thread = self.root, self.thread
        chosen = model_id(thread.agent)
        window = context.context_window(chosen, self.config.context_tokens)
        self.session = dataclasses.replace(
            root.session, agent=thread.agent, model_id=chosen, window=window, status=thread.status
        )
        self.roster = root.roster
        self.turn = ThreadTurnLog(self.lease.fence, self.observer, thread, self._needs_client)
        self.checkpoints = ThreadCheckpoints(
            lease=self.lease,
            turn=self.turn,
            stopping=self.stopping,
            check_seconds=self.config.check_seconds,
            honors_interrupts=False,
            attention=self.attention,
            thread_id=thread.pk,
            halted=partial(self.group.halted, thread.pk),
        )
        # Only the session's own agent (a `self` entry) spawns from a child thread; only the primary advises.
        self._assemble_parts(spawns=thread.agent.get("id") == root.session.agent_id, advises=False)

    def events(self) -> list[SessionEvent]:
        """The thread's log: read once, then from its last `seq` on (a visible event never changes)."""
        known = self.read_log
        self.read_log = known + thread_log.events_after(self.thread, (known[-1].seq or 0) if known else 0)
        return list(self.read_log)

    def _needs_client(self, call: SessionEvent) -> bool:
        """A call the client answers (a custom tool; a built-in one its environment worker runs) or confirms."""
        if call.type == "agent.custom_tool_use" or call.body.get("evaluated_permission") == "ask":
            return True
        return self.session.client_runs_builtin and self._for_worker(call)

    def _await_client(self) -> bool:
        """A child thread's turn goes on while its parent's does: it waits for the answers, routed to its log
        as they are appended (`thread_log.route_answers`)."""
        self.checkpoints.sleep(CLIENT_POLL_SECONDS)
        return True

    def run_pending(self) -> None:
        """The thread's turn (a new one, or one to resume), and another while newer input arrived meanwhile."""
        try:
            self._assemble()
            answered = -2  # the input each turn started from: another turn only for newer input
            while not self.group.halted(self.thread.pk):
                started_from = turn_boundary(self.events())
                if self.thread.status == Status.IDLE and started_from <= answered:
                    break
                answered = started_from
                self._thread_turn()
        except (LeaseLost, WorkerStopping, thread_log.ThreadTerminated):  # nothing more to write
            logger.info("thread %s of session %s let go", self.thread.pk, self.session_id)
        except Exception:
            logger.exception("thread %s of session %s failed", self.thread.pk, self.session_id)
        finally:
            if self.sandbox.used is not None and self.root.sandbox.used is None:
                self.root.sandbox.used = self.sandbox.used  # the session's turn snapshots it at its end
            connection.close()

    def _thread_turn(self) -> None:
        started = time.monotonic()
        self.tools.new_turn()
        self.turn.set_status(Status.RUNNING)
        try:
            stop_reason = self.advance()
        except TurnInterrupted:  # halted: the session's turn ended or was interrupted, or this thread was
            self.tools.abandon_open(self.events())
            stop_reason = {"type": "end_turn"}
        except TurnEnded as ended:
            stop_reason = ended.stop_reason
        except ModelError as failure:
            self.turn.error(failure.kind, failure.message, retry="exhausted" if failure.retryable else "terminal")
            stop_reason = {"type": "retries_exhausted"}
        self.turn.add_usage({}, active_seconds=time.monotonic() - started)
        self.turn.set_status(Status.IDLE, stop_reason)
        self.thread.status = Status.IDLE
        self._reply()

    def _reply(self) -> None:
        """The turn's last message, sent to the parent thread (whose `wait_for_replies` hands it over)."""
        events = self.events()
        said = [event for event in events[turn_boundary(events) + 1 :] if event.type == "agent.message"]
        text = text_of(said[-1].body["content"]) if said else NO_REPLY
        parent = self.thread.parent_thread_id
        parent_name = None if parent == self.root.thread_id else SessionThread.objects.get(pk=parent).agent_name
        thread_log.message(
            session_id=self.session_id,
            sender=(self.thread.pk, self.thread.agent_name),
            receiver=(parent, parent_name),
            content=[{"type": "text", "text": text}],
            delivered=True,
            fence=self.lease.fence,
        )
