"""Running a claimed session: acknowledge its pending events and run turns until nothing is left.

A turn is a loop over the log: answer tool calls the runtime can answer (MCP), pause for the ones the
client must answer, let the model speak while the transcript ends with user content, then grade the
outcome. Every state is derived from the stored events, so a turn whose worker died is resumed by
running the same loop again. Every write carries the lease's fence and is refused once another
worker holds the session; before every side effect (a model call, a tool call) the lease is checked.
`code_harness` runs the same loop but does not honor `user.interrupt`.
"""

from __future__ import annotations

import contextvars
import logging
import threading
import time
from collections.abc import Callable
from typing import Any, NoReturn, TypeVar
from urllib.parse import urlsplit

from django.conf import settings
from django.db import connection, transaction
from django.utils import timezone

from registry.core import tracing
from registry.core.serialization import timestamp
from registry.runtime import context, mcp_client, outcomes
from registry.runtime.attachments import FileSources, rubric_for_grader
from registry.runtime.budget import BudgetMeter
from registry.runtime.config import RuntimeSettings
from registry.runtime.credentials import bearer_for
from registry.runtime.eventlog import VisibleLogs
from registry.runtime.identity import ModelCallIdentity
from registry.runtime.lease import Lease, LeaseLost
from registry.runtime.model import ModelClient, ModelError, ModelResponse, request_options
from registry.runtime.previews import PreviewPublisher
from registry.runtime.provision import Provisioner, SessionSetup, Unprovisioned
from registry.runtime.tools import BuiltinEntry, McpEntry, ToolCatalog, build_catalog, wants_builtin_tools
from registry.runtime.transcript import (
    BOUNDARY_TYPES,
    TOOL_USE_TYPES,
    awaits_model,
    build_messages,
    latest_compaction,
    latest_outcome,
    tool_work,
    turn_graded,
)
from registry.sandbox.backend import BwrapBackend, BwrapSandbox, SandboxUnavailable
from registry.sandbox.egress import NetworkPolicy
from registry.sandbox.toolset import ToolOutcome, run_tool
from registry.sessions import services
from registry.sessions.events import NATIVE_BETA_FIELD
from registry.sessions.models import Session, SessionEvent

logger = logging.getLogger(__name__)

Status = Session.Status
Result = TypeVar("Result")
HARNESSES_IGNORING_INTERRUPT = ("code_harness",)
DENIED_RESULT = "The user denied this tool call."
UNAPPLIED_INTERRUPT = "user.interrupt is not applied on code_harness: the turn in flight runs to completion."
CUT_TOOL_CALL = "The model's answer was cut off by max_tokens in the middle of a tool call twice; the call was not run."
NO_SANDBOX_ERROR = "sandbox_unavailable_error"
NO_SANDBOX = (
    "This agent has built-in tools (bash, read, ...), but this runtime has no sandbox to run them in "
    "(REGISTRY_SANDBOX_BACKEND=none); they are not offered to the model."
)
# How often a blocking call (MCP, grader) looks at its session while it waits.
WAIT_SLICE_SECONDS = 0.05


class TurnInterrupted(Exception):
    """A `user.interrupt` arrived during a turn of a harness that honors it."""

    def __init__(self, interrupts: list[SessionEvent]) -> None:
        super().__init__("interrupted")
        self.interrupts = interrupts


class WorkerStopping(Exception):
    """The worker was asked to stop: leave the turn to the next worker without writing."""


class TurnEnded(Exception):
    """The turn ends early with this stop reason (a limit, the budget), its error already reported."""

    def __init__(self, stop_reason: dict[str, Any]) -> None:
        super().__init__(stop_reason["type"])
        self.stop_reason = stop_reason


def model_id(agent: dict[str, Any]) -> str:
    """The agent's model id (`model` is stored as `{id, ...}`; a bare id is accepted too)."""
    model = agent["model"]
    return str(model["id"] if isinstance(model, dict) else model)


def span_usage(usage: dict[str, int]) -> dict[str, int]:
    keys = ("input_tokens", "output_tokens", "cache_read_input_tokens", "cache_creation_input_tokens")
    return {key: int(usage.get(key) or 0) for key in keys}


def error_body(kind: str, message: str, retry: str, **fields: Any) -> dict[str, Any]:
    return {"error": {"type": kind, "message": message, "retry_status": {"type": retry}, **fields}}


def fail_turn(lease: Lease, message: str, *, retry: str) -> None:
    """End the session's turn with `session.error` and idle (an abandoned or crashed turn).

    Its pending user events are acknowledged with it, so the failure is not claimed again at once.
    """
    try:
        pending = SessionEvent.objects.filter(session_id=lease.session_id, seq__isnull=True).values_list(
            "id", flat=True
        )
        services.events_acknowledge(session_id=lease.session_id, event_ids=list(pending), fence=lease.fence)
        services.event_emit(
            session_id=lease.session_id,
            type="session.error",
            body=error_body("unknown_error", message, retry),
            fence=lease.fence,
        )
        services.session_transition(
            session_id=lease.session_id,
            status=Status.IDLE,
            stop_reason={"type": "retries_exhausted" if retry == "exhausted" else "error"},
            fence=lease.fence,
        )
    except LeaseLost:
        logger.info("session %s moved on before its failure could be recorded", lease.session_id)
    except Exception:
        logger.exception("could not record the failure of session %s", lease.session_id)


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
        sandboxes: BwrapBackend | None = None,
        logs: VisibleLogs | None = None,
    ) -> None:
        self.lease = lease
        self.logs = logs or VisibleLogs(sessions=1)
        self.identity = identity
        self.sandboxes = sandboxes
        self.session_id = lease.session_id
        self.fence = lease.fence
        self.model = model
        self.config = config
        self.stopping = stopping
        # Set by the worker when a notification names this session (an interrupt, an archive...).
        self.attention = threading.Event()
        self._catalog: ToolCatalog | None = None
        self._sandbox: BwrapSandbox | None = None  # set once a turn used it: snapshot at its end
        self._last_check = time.monotonic()
        self._loaded = False
        # The trace context of the user event that started the turn (its `session.turn` span's parent).
        self.turn_traceparent: str | None = None

    def _load(self) -> None:
        session = Session.objects.select_related("environment").get(pk=self.session_id)
        self.agent: dict[str, Any] = session.agent_snapshot
        self.workspace_id = session.workspace_id
        self.vault_ids: list[str] = list(session.vault_ids)
        self.resources: list[dict[str, Any]] = list(session.resources)
        self.status = session.status
        self.honors_interrupts = session.harness.get("type") not in HARNESSES_IGNORING_INTERRUPT
        separate = session.harness.get("type") == "agent_sdk_harness" and session.harness.get("mode") == "separate"
        # With the agent SDK harness in separate mode on a self-hosted environment the client runs them.
        self.client_runs_builtin = separate and session.environment.config.get("type") == "self_hosted"
        mcp_hosts = tuple(urlsplit(server["url"]).hostname or "" for server in self.agent.get("mcp_servers") or [])
        self.network = NetworkPolicy.from_environment(session.environment.config, mcp_hosts)
        self.budget = BudgetMeter.for_session(session)
        self.model_id = model_id(self.agent)
        self.window = context.context_window(self.model_id, self.config.context_tokens)
        self.files = FileSources(self.workspace_id)
        self.provisioner = self._provisioner(session)
        self.prompt_sections = self.provisioner.prompt_sections(self.resources) if self.provisioner else []
        self._loaded = True

    def _provisioner(self, session: Session) -> Provisioner | None:
        """The sandbox's provisioner, when this runtime runs the agent's built-in tools."""
        if self.sandboxes is None or self.client_runs_builtin or not wants_builtin_tools(self.agent):
            return None
        setup = SessionSetup(
            session_id=self.session_id,
            workspace_id=self.workspace_id,
            agent=self.agent,
            environment_id=session.environment_id,
            environment_config=session.environment.config,
            vault_ids=self.vault_ids,
            network=self.network,
        )
        return Provisioner(
            setup, self.sandboxes, lambda kind, message: self._emit_error(kind, message, retry="terminal")
        )

    # -- the outer loop: turn boundaries ---------------------------------------------------------
    def run(self) -> None:
        self._load()
        if self.status in (Status.RUNNING, Status.RESCHEDULING):
            self.turn_traceparent = self._latest_traceparent()
            self._run_turn()  # a turn whose worker went away: carry on from the log
        while batch := self._pending():
            self._apply(batch)

    def _pending(self) -> list[SessionEvent]:
        return list(
            SessionEvent.objects.filter(session_id=self.session_id, seq__isnull=True).order_by("created_at", "id")
        )

    def _apply(self, batch: list[SessionEvent]) -> None:
        """Acknowledge the batch; an interrupt after the last input cancels the turn it would start.

        The acknowledgment and the turn's start commit together (one commit less before the model call).
        """
        self.lease.check()
        interrupts = [event for event in batch if event.type == "user.interrupt"]
        starts_turn = any(event.type != "user.interrupt" for event in batch)
        with transaction.atomic():
            ids = [event.id for event in batch]
            services.events_acknowledge(session_id=self.session_id, event_ids=ids, fence=self.fence)
            if interrupts and not self.honors_interrupts:
                self._reject_interrupts(interrupts)
            elif interrupts and batch[-1].type == "user.interrupt":
                self._set_status(Status.IDLE, {"type": "interrupted"})
                return
            if starts_turn:
                self._set_status(Status.RUNNING)
        if starts_turn:
            inputs = [event for event in batch if event.type != "user.interrupt"]
            self.turn_traceparent = next(
                (traced for event in reversed(inputs) if (traced := event.body.get(tracing.TRACEPARENT_FIELD))), None
            )
            self._run_turn()

    def _latest_traceparent(self) -> str | None:
        """The trace context of the latest acknowledged user event (a resumed turn continues its trace)."""
        traced = (
            SessionEvent.objects.filter(session_id=self.session_id, seq__isnull=False, type__startswith="user.")
            .order_by("-seq")
            .values_list(f"body__{tracing.TRACEPARENT_FIELD}", flat=True)
            .first()
        )
        return traced if isinstance(traced, str) else None

    def _run_turn(self) -> None:
        """The turn as a `session.turn` span, continuing the trace of the user event that started it."""
        attributes = {"session.id": self.session_id}
        with tracing.continuing(
            self.turn_traceparent, "session.turn", service=tracing.RUNTIME_SERVICE, attributes=attributes
        ) as span:
            stop_reason = self._turn()
            span.set_attribute("registry.stop_reason", str(stop_reason["type"]))
            if stop_reason["type"] in ("error", "retries_exhausted"):
                span.set_status(tracing.ERROR)

    def _turn(self) -> dict[str, Any]:
        started = time.monotonic()
        self._catalog = None
        self._set_status(Status.RUNNING)
        try:
            self._provision()
            stop_reason = self._advance()
        except TurnInterrupted as interrupted:
            ids = [event.id for event in interrupted.interrupts]
            services.events_acknowledge(session_id=self.session_id, event_ids=ids, fence=self.fence)
            self._interrupt_outcome()
            stop_reason = {"type": "interrupted"}
        except TurnEnded as ended:
            stop_reason = ended.stop_reason
        except ModelError as failure:
            retry = "exhausted" if failure.retryable else "terminal"
            self._emit_error(failure.kind, failure.message, retry=retry)
            stop_reason = {"type": "retries_exhausted" if failure.retryable else "error"}
        self._snapshot_sandbox()
        services.session_add_usage(
            session_id=self.session_id, usage={}, active_seconds=time.monotonic() - started, fence=self.fence
        )
        self._set_status(Status.IDLE, stop_reason)
        return stop_reason

    def _advance(self) -> dict[str, Any]:
        """Step until the turn ends or waits on the client; returns the idle stop reason."""
        compactions = 0
        while True:
            self.checkpoint()
            events = self._visible_events()
            work = tool_work(events)
            if self.client_runs_builtin:
                work.blocking += [call.id for call in work.runnable if call.type == "agent.tool_use"]
                work.runnable = [call for call in work.runnable if call.type != "agent.tool_use"]
            if work.denied or work.runnable:
                self._answer_tools(work.denied, work.runnable)
                continue
            if work.blocking:
                return {"type": "requires_action", "event_ids": work.blocking}
            messages = build_messages(events, tool_result_limit=self.config.tool_result_max_chars)
            if awaits_model(messages):
                self._enforce_limits(events)
                request = self._request(messages)
                if context.overflows(request, self.window):
                    compactions += 1
                    self._compact(events, compactions)
                    continue
                if self._model_step(request):
                    compactions = 0
                    continue
                return {"type": "end_turn"}  # an empty answer: asking again would loop
            outcome = latest_outcome(events)
            if (
                outcome is not None
                and not turn_graded(events)
                and self._grade(outcome, messages, events) == "needs_revision"
            ):
                continue
            return {"type": "end_turn"}

    def _visible_events(self) -> list[SessionEvent]:
        return self.logs.read(self.session_id)

    # -- limits and budget --------------------------------------------------------------------
    def _enforce_limits(self, events: list[SessionEvent]) -> None:
        """Before a model call: the turn's model and tool call counts, and the session's budget."""
        boundary = max((i for i, event in enumerate(events) if event.type in BOUNDARY_TYPES), default=-1)
        turn = events[boundary + 1 :]
        model_calls = sum(1 for event in turn if event.type == "span.model_request_start")
        tool_calls = sum(1 for event in turn if event.type in TOOL_USE_TYPES)
        if model_calls >= self.config.turn_max_model_calls or tool_calls >= self.config.turn_max_tool_calls:
            message = (
                f"The turn reached its limit of {self.config.turn_max_model_calls} model calls or "
                f"{self.config.turn_max_tool_calls} tool calls ({model_calls} and {tool_calls} made)."
            )
            self._emit_error("tool_use_limit_reached_error", message, retry="exhausted")
            raise TurnEnded({"type": "retries_exhausted"})
        if self.budget.reached():
            raise TurnEnded({"type": "budget_reached"})

    # -- checkpoints: interrupts, archival, lease, shutdown ---------------------------------------
    def checkpoint(self, force: bool = False) -> None:
        """Between stream chunks and steps: stop for shutdown, a lost lease, or an interrupt."""
        if self.stopping.is_set():
            raise WorkerStopping()
        self.lease.check()
        now = time.monotonic()
        if not (force or self.attention.is_set()) and now - self._last_check < self.config.check_seconds:
            return
        self.attention.clear()
        self._last_check = now
        if not Session.objects.filter(pk=self.session_id).exclude(status=Status.TERMINATED).exists():
            raise LeaseLost(self.session_id)
        interrupts = list(
            SessionEvent.objects.filter(session_id=self.session_id, seq__isnull=True, type="user.interrupt")
        )
        if interrupts and self.honors_interrupts:
            raise TurnInterrupted(interrupts)
        if interrupts:
            ids = [event.id for event in interrupts]
            services.events_acknowledge(session_id=self.session_id, event_ids=ids, fence=self.fence)
            self._reject_interrupts(interrupts)

    def _sleep(self, seconds: float) -> None:
        deadline = time.monotonic() + seconds
        while (remaining := deadline - time.monotonic()) > 0:
            self.attention.wait(min(remaining, self.config.check_seconds))
            self.checkpoint()

    def _wait_for(self, call: Callable[[], Result]) -> Result:
        """Run a blocking call (MCP, grader) in a thread; an interrupt, archive or shutdown abandons it.

        The session's database connection is given back first, so a long wait holds none.
        """
        connection.close()
        box: dict[str, Any] = {}
        done = threading.Event()

        def target() -> None:
            try:
                box["value"] = call()
            except BaseException as error:
                box["error"] = error
            finally:
                done.set()

        # The thread runs in a copy of this one's context: spans (and log ids) started there nest under ours.
        current = contextvars.copy_context()
        threading.Thread(target=current.run, args=(target,), name=f"call-{self.session_id}", daemon=True).start()
        while not done.wait(WAIT_SLICE_SECONDS):
            self.checkpoint()
        if "error" in box:
            raise box["error"]
        return box["value"]  # type: ignore[no-any-return]

    def _reject_interrupts(self, interrupts: list[SessionEvent]) -> None:
        """`code_harness` accepts (acknowledges) the interrupt, then answers it with `session.error`."""
        for interrupt in interrupts:
            kind = "unapplied_event" if interrupt.body.get(NATIVE_BETA_FIELD) else "unknown_error"
            self._emit_error(kind, UNAPPLIED_INTERRUPT, retry="exhausted")

    # -- writes (all fenced) ---------------------------------------------------------------------
    def _emit(
        self, event_type: str, body: dict[str, Any], event_id: str | None = None, *, flush: bool = True
    ) -> SessionEvent:
        return services.event_emit(
            session_id=self.session_id, type=event_type, body=body, event_id=event_id, fence=self.fence, flush=flush
        )

    def _emit_error(self, kind: str, message: str, *, retry: str, **fields: Any) -> None:
        self._emit("session.error", error_body(kind, message, retry, **fields))

    def _set_status(self, status: str, stop_reason: dict[str, Any] | None = None) -> None:
        """A transition; staying `running` writes nothing, so it costs no transaction either (an archive
        meanwhile is refused by the next fenced write, which comes before any side effect)."""
        if status == Status.RUNNING == self.status:
            return
        services.session_transition(
            session_id=self.session_id, status=status, stop_reason=stop_reason, fence=self.fence
        )
        self.status = status

    # -- the model -----------------------------------------------------------------------------
    def _request(self, messages: list[dict[str, Any]]) -> dict[str, Any]:
        """The messages request of the next step, with the agent's model settings and cache breakpoints."""
        catalog = self._tools()
        body: dict[str, Any] = {
            "model": self.model_id,
            "max_tokens": context.output_budget(self.window, self.config.max_tokens),
            **request_options(self.agent["model"] if isinstance(self.agent["model"], dict) else {}),
        }
        system = "\n\n".join(part for part in (self.agent.get("system"), *self.prompt_sections) if part)
        if system:
            body["system"] = [{"type": "text", "text": system, "cache_control": {"type": "ephemeral"}}]
        body["messages"] = with_cache_breakpoint(self.files.resolve(messages))
        if tools := catalog.model_tools():
            body["tools"] = tools
        return body

    def _model_step(self, request: dict[str, Any]) -> bool:
        """Let the model speak; False when it said nothing at all."""
        response = self._call_model(lambda: self._stream(request))
        if response.cut_in_tool_call():
            # Ask again with room to finish the call; a second cut ends the turn (the call never runs).
            retry = {**request, "max_tokens": min(request["max_tokens"] * 2, self.window // 2)}
            response = self._call_model(lambda: self._stream(retry))
            if response.cut_in_tool_call():
                raise ModelError("model_request_failed_error", CUT_TOOL_CALL, retryable=False)
        return self._emit_response(response, self._tools()) > 0

    def _stream(self, request: dict[str, Any]) -> ModelResponse:
        previews = PreviewPublisher(self.session_id, self.checkpoint)
        auth = self._auth()  # may read the signing key: before the connection is given back
        connection.close()  # no connection is held while the model writes
        response = self.model.stream(request, previews, auth)
        response.event_ids = previews.event_ids
        return response

    def _create(self, request: dict[str, Any]) -> ModelResponse:
        """A non-streaming model call that an interrupt abandons (compaction summaries, the grader)."""
        auth = self._auth()
        return self._wait_for(lambda: self.model.create(request, auth))

    def _auth(self) -> dict[str, str]:
        return self.identity.headers(workspace_id=self.workspace_id, session_id=self.session_id)

    def _call_model(self, attempt: Callable[[], ModelResponse]) -> ModelResponse:
        """One model call with retries and backoff (status `rescheduling` while waiting to retry)."""
        for number in range(1, self.config.model_attempts + 1):
            self.lease.check()
            start = self._emit("span.model_request_start", {}, flush=False)
            try:
                response = attempt()
            except TurnInterrupted:
                self._end_span(start, {}, is_error=True)
                raise
            except ModelError as failure:
                self._end_span(start, {}, is_error=True)
                if not failure.retryable or number == self.config.model_attempts:
                    raise
                self._emit_error(failure.kind, failure.message, retry="retrying")
                self._set_status(Status.RESCHEDULING)
                self._sleep(max(self.config.backoff(number), failure.retry_after or 0.0))
                continue
            self._end_span(start, response.usage, is_error=False)
            cost = self.budget.charge(self.model_id, response.usage)
            services.session_add_usage(
                session_id=self.session_id, usage=response.usage, list_cost_usd=cost, fence=self.fence
            )
            self._set_status(Status.RUNNING)
            return response
        raise AssertionError("unreachable: the last attempt returns or raises")

    def _end_span(self, start: SessionEvent, usage: dict[str, int], *, is_error: bool) -> None:
        body = {"model_request_start_id": start.id, "is_error": is_error, "model_usage": span_usage(usage)}
        self._emit("span.model_request_end", body)

    @transaction.atomic
    def _emit_response(self, response: ModelResponse, catalog: ToolCatalog) -> int:
        """The response's events in order, all or none; returns how many messages and calls it made."""
        spoken = 0
        for position, block in enumerate(response.content):
            event_id = response.event_ids.get(position)
            if block["type"] in ("thinking", "redacted_thinking"):
                self._emit("agent.thinking", {}, event_id)
            elif block["type"] == "text" and block.get("text"):
                self._emit("agent.message", {"content": [{"type": "text", "text": block["text"]}]}, event_id)
                spoken += 1
            elif block["type"] == "tool_use":
                self._emit_tool_use(block, catalog)
                spoken += 1
        return spoken

    def _emit_tool_use(self, block: dict[str, Any], catalog: ToolCatalog) -> None:
        """MCP and built-in tools are the runtime's (or the client's, see `client_runs_builtin`); a call of
        a disabled built-in tool is denied at once; any other name is a custom tool for the client."""
        call = {"name": block["name"], "input": block.get("input") or {}}
        entry: McpEntry | BuiltinEntry | None = catalog.mcp.get(block["name"]) or catalog.builtin.get(block["name"])
        if block["name"] in catalog.disabled_builtin:
            denied = self._emit("agent.tool_use", {**call, "evaluated_permission": "deny", "evaluation": None})
            message = f"The {block['name']} tool is disabled for this agent."
            self._emit("agent.tool_result", tool_result(denied, [{"type": "text", "text": message}], is_error=True))
            return
        if entry is None:
            self._emit("agent.custom_tool_use", call)
            return
        permission = {"evaluated_permission": entry.evaluated_permission, "evaluation": entry.evaluation()}
        if isinstance(entry, BuiltinEntry):
            self._emit("agent.tool_use", {**call, **permission})
        else:
            self._emit("agent.mcp_tool_use", {**call, "mcp_server_name": entry.tool.server_name, **permission})

    # -- context compaction ------------------------------------------------------------------
    def _compact(self, events: list[SessionEvent], compactions: int) -> None:
        """Summarise the older part of the transcript so the next request fits the window."""
        start = latest_compaction(events)
        first_kept = next(
            (
                i
                for i, e in enumerate(events)
                if start is not None and e.id == events[start].body.get("first_kept_event_id")
            ),
            -1,
        )
        cut = context.compaction_cut(events, max(first_kept, 0), self.window)
        if compactions > self.config.max_compactions or cut is None:
            message = "The transcript cannot be compacted to fit the model's context window."
            self._emit_error("compaction_limit_reached_error", message, retry="exhausted")
            raise TurnEnded({"type": "retries_exhausted"})
        older = build_messages(events[:cut], tool_result_limit=self.config.tool_result_max_chars)
        request = context.summary_request(
            model=self.model_id,
            messages=older,
            window=self.window,
            max_tokens=context.output_budget(self.window, self.config.max_tokens),
        )
        summary = self._call_model(lambda: self._create(request)).text()
        self._emit(context.COMPACTED_TYPE, {"summary": summary, "first_kept_event_id": events[cut].id})

    # -- tools ---------------------------------------------------------------------------------
    def _tools(self) -> ToolCatalog:
        """The turn's tools, listed once per turn; a server that fails to list is reported."""
        if self._catalog is None:
            timeout = self.config.mcp_timeout_seconds

            def list_tools(server_name: str, url: str) -> list[mcp_client.McpTool]:
                route = self._mcp_route(server_name, url)
                return self._wait_for(lambda: mcp_client.list_tools(route, timeout=timeout))

            self._catalog = build_catalog(self.agent, list_tools, builtin=self.sandboxes is not None)
            if self.sandboxes is None and wants_builtin_tools(self.agent):
                self._report_no_sandbox()
            for server_name, failure in self._catalog.failures:
                self._emit_error(failure.kind, failure.message, retry="exhausted", mcp_server_name=server_name)
        return self._catalog

    def _answer_tools(self, denied: list[tuple[SessionEvent, SessionEvent]], runnable: list[SessionEvent]) -> None:
        for call, confirmation in denied:
            message = confirmation.body.get("deny_message") or DENIED_RESULT
            self._emit_tool_result(call, [{"type": "text", "text": message}], is_error=True)
        for call in runnable:
            self.checkpoint()
            with tracing.child(f"tool.{call.body['name']}", service=tracing.RUNTIME_SERVICE) as span:
                outcome = self._run_builtin(call) if call.type == "agent.tool_use" else self._call_mcp(call)
                if outcome.is_error:
                    span.set_status(tracing.ERROR)
            self._emit_tool_result(call, outcome.content, is_error=outcome.is_error)

    def _run_builtin(self, call: SessionEvent) -> ToolOutcome:
        """A built-in tool call in the session's sandbox; an interrupt stops the sandbox's processes.
        Memory folders are synced with their stores around the call."""
        if self.provisioner is None:
            return ToolOutcome.text(NO_SANDBOX, is_error=True)
        self.lease.check()
        try:
            sandbox = self._sandbox_now()
            self.provisioner.before_tool()
            self._sandbox = sandbox
            try:
                outcome = self._wait_for(lambda: run_tool(sandbox, call.body["name"], call.body["input"]))
            except (TurnInterrupted, LeaseLost, WorkerStopping):
                sandbox.stop()
                raise
        except (SandboxUnavailable, OSError) as failure:
            self._sandbox_failed(call, str(failure))
        self.lease.check()
        memory = self.provisioner.after_tool()
        notes = [note for note in (memory.note() if memory.refused else None, sandbox.over_quota()) if note]
        if notes:
            return ToolOutcome([*outcome.content, *({"type": "text", "text": note} for note in notes)], is_error=True)
        return outcome

    def _sandbox_now(self) -> BwrapSandbox:
        """The sandbox with the session's resources as they are now (one added since is mounted)."""
        assert self.provisioner is not None
        current = Session.objects.filter(pk=self.session_id).values_list("resources", flat=True).first()
        if current is not None and current != self.resources:
            self.resources = list(current)
            self.prompt_sections = self.provisioner.prompt_sections(self.resources)
        try:
            return self.provisioner.sandbox(self.resources)
        except Unprovisioned as failure:
            raise SandboxUnavailable(failure.message) from None

    def _provision(self) -> None:
        """At a turn's start: the sandbox made ready, so its problems are reported before the model runs.
        Missing skills or a failed package build end the turn; a sandbox that cannot start is reported
        by the first tool call that needs it."""
        if self.provisioner is None:
            return
        self.lease.check()
        try:
            self.provisioner.sandbox(self.resources, catch_up=True)
        except Unprovisioned as failure:
            self._emit_error(failure.error_type, failure.message, retry="terminal")
            raise TurnEnded({"type": "error"}) from None
        except (SandboxUnavailable, OSError) as failure:
            logger.warning("session %s: sandbox not ready at turn start: %s", self.session_id, failure)

    def _sandbox_failed(self, call: SessionEvent, cause: str) -> NoReturn:
        """A sandbox that cannot start ends the turn with `session.error` naming the cause; the call gets
        an error result, so the transcript stays whole and the next turn can try again."""
        with transaction.atomic():
            self._emit_tool_result(call, [{"type": "text", "text": cause}], is_error=True)
            self._emit_error(NO_SANDBOX_ERROR, cause, retry="exhausted")
        raise TurnEnded({"type": "error"})

    def _snapshot_sandbox(self) -> None:
        """After a turn that used the sandbox: its workspace to storage, so any worker can go on."""
        if self._sandbox is None:
            return
        self.lease.check()
        try:
            self._sandbox.snapshot()
        except OSError as error:  # the files stay here; a worker elsewhere would miss this turn's changes
            logger.warning("snapshot of session %s failed: %s", self.session_id, error)
        self._sandbox = None

    def _report_no_sandbox(self) -> None:
        """Once per session: the agent has built-in tools but this runtime cannot run them."""
        already = SessionEvent.objects.filter(
            session_id=self.session_id, type="session.error", body__error__type=NO_SANDBOX_ERROR
        ).exists()
        if not already:
            self._emit_error(NO_SANDBOX_ERROR, NO_SANDBOX, retry="terminal")

    def _call_mcp(self, call: SessionEvent) -> mcp_client.McpToolOutcome:
        servers = {server["name"]: server["url"] for server in self.agent.get("mcp_servers") or []}
        server_name = call.body["mcp_server_name"]
        try:
            if server_name not in servers:
                raise mcp_client.McpUnavailable(f"The agent has no MCP server named {server_name!r}.")
            route = self._mcp_route(server_name, servers[server_name])
            self.lease.check()
            return self._wait_for(
                lambda: mcp_client.call_tool(
                    route, name=call.body["name"], arguments=call.body["input"], timeout=self.config.mcp_timeout_seconds
                )
            )
        except mcp_client.McpUnavailable as error:
            return mcp_client.McpToolOutcome(content=[{"type": "text", "text": str(error)}], is_error=True)

    def _mcp_route(self, server_name: str, url: str) -> mcp_client.McpRoute:
        """Direct (with the session's vault token) or through the gateway (with the session's token)."""
        via_gateway = bool(settings.REGISTRY_MCP_VIA_GATEWAY)
        bearer = (
            None
            if via_gateway
            else bearer_for(workspace_id=self.workspace_id, vault_ids=self.vault_ids, server_url=url)
        )
        auth = self._auth() if via_gateway else {}
        return mcp_client.McpRoute.of(server_name=server_name, url=url, bearer=bearer, gateway_auth=auth)

    def _emit_tool_result(self, call: SessionEvent, content: list[dict[str, Any]], *, is_error: bool) -> None:
        if call.type == "agent.tool_use":
            self._emit("agent.tool_result", tool_result(call, content, is_error=is_error))
        else:
            self._emit("agent.mcp_tool_result", {"mcp_tool_use_id": call.id, "content": content, "is_error": is_error})

    # -- outcomes ------------------------------------------------------------------------------
    def _grade(self, outcome: SessionEvent, messages: list[dict[str, Any]], events: list[SessionEvent]) -> str:
        """Grade the transcript against the outcome's rubric; returns the (labelled) verdict."""
        definition = outcome.body
        iteration = outcomes.iterations_done(events, definition["outcome_id"])
        self._record_evaluation(definition, iteration, "evaluating", None)
        start = self._emit(
            "span.outcome_evaluation_start", {"outcome_id": definition["outcome_id"], "iteration": iteration}
        )
        rubric = rubric_for_grader(self.workspace_id, definition["rubric"])
        request = outcomes.grading_request(
            model=self.model_id,
            outcome={**definition, "rubric": rubric},
            messages=messages,
            max_tokens=self.config.max_tokens,
        )
        response = self._call_model(lambda: self._create(request))
        verdict, explanation = outcomes.parse_verdict(response.text())
        result = outcomes.label(verdict, iteration=iteration + 1, max_iterations=definition["max_iterations"])
        end = {
            "outcome_evaluation_start_id": start.id,
            "outcome_id": definition["outcome_id"],
            "iteration": iteration,
            "result": result,
            "explanation": explanation,
            "usage": span_usage(response.usage),
        }
        with transaction.atomic():
            if result == "needs_revision":  # not a result: the outcome runs again, with the feedback
                self._record_evaluation(definition, iteration + 1, "running", explanation)
            else:
                self._record_evaluation(definition, iteration, result, explanation)
            self._emit("span.outcome_evaluation_end", end)
        return result

    def _record_evaluation(
        self, definition: dict[str, Any], iteration: int, result: str, explanation: str | None
    ) -> None:
        """The outcome's evaluation resource, in the reference client's shape."""
        evaluation = outcomes.evaluation_resource(
            definition, iteration=iteration, result=result, explanation=explanation
        )
        services.session_record_evaluation(session_id=self.session_id, evaluation=evaluation, fence=self.fence)

    def _interrupt_outcome(self) -> None:
        """An interrupted turn ends an outcome still in progress as `interrupted`."""
        evaluations = Session.objects.values_list("outcome_evaluations", flat=True).get(pk=self.session_id)
        for evaluation in evaluations:
            if evaluation.get("result") in outcomes.IN_PROGRESS:
                finished = {**evaluation, "result": "interrupted", "completed_at": timestamp(timezone.now())}
                services.session_record_evaluation(session_id=self.session_id, evaluation=finished, fence=self.fence)


def tool_result(call: SessionEvent, content: list[dict[str, Any]], *, is_error: bool) -> dict[str, Any]:
    """The body of `agent.tool_result` answering a built-in tool call."""
    return {"tool_use_id": call.id, "content": content, "is_error": is_error}


def with_cache_breakpoint(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The transcript with a prompt-cache breakpoint on the last block of its final message."""
    if not messages or not messages[-1]["content"]:
        return messages
    last = messages[-1]
    blocks = [*last["content"][:-1], {**last["content"][-1], "cache_control": {"type": "ephemeral"}}]
    return [*messages[:-1], {**last, "content": blocks}]
