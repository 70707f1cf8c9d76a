"""Running a claimed session: acknowledge its pending events and run turns until nothing is left.

A turn is a loop over the log: answer tool calls the runtime can answer (MCP), pause for the ones the
client must answer, let the model speak while the transcript ends with user content, then grade the
outcome. Every state is derived from the stored events, so a turn whose worker died is resumed by
running the same loop again. `code_harness` runs the same loop but does not honor `user.interrupt`.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from django.db import transaction
from django.utils import timezone

from registry.core.serialization import timestamp
from registry.runtime import mcp_client, outcomes
from registry.runtime.config import RuntimeSettings
from registry.runtime.credentials import bearer_for
from registry.runtime.lease import Lease, LeaseLost
from registry.runtime.model import ModelClient, ModelError, ModelResponse
from registry.runtime.previews import PreviewPublisher
from registry.runtime.tools import ToolCatalog, build_catalog
from registry.runtime.transcript import (
    awaits_model,
    build_messages,
    latest_outcome,
    tool_work,
    turn_graded,
)
from registry.sessions import services
from registry.sessions.events import NATIVE_BETA_FIELD
from registry.sessions.models import Session, SessionEvent

logger = logging.getLogger(__name__)

Status = Session.Status
HARNESSES_IGNORING_INTERRUPT = ("code_harness",)
DENIED_RESULT = "The user denied this tool call."
UNAPPLIED_INTERRUPT = "user.interrupt is not applied on code_harness: the turn in flight runs to completion."


class TurnInterrupted(Exception):
    """A `user.interrupt` arrived during a turn of a harness that honors it."""

    def __init__(self, interrupts: list[SessionEvent]) -> None:
        super().__init__("interrupted")
        self.interrupts = interrupts


class WorkerStopping(Exception):
    """The worker was asked to stop: leave the turn to the next worker without writing."""


def span_usage(usage: dict[str, int]) -> dict[str, int]:
    keys = ("input_tokens", "output_tokens", "cache_read_input_tokens", "cache_creation_input_tokens")
    return {key: int(usage.get(key) or 0) for key in keys}


class SessionRunner:
    """Works through one leased session's pending events, one turn boundary at a time."""

    def __init__(
        self, *, session_id: str, lease: Lease, model: ModelClient, config: RuntimeSettings, stopping: threading.Event
    ) -> None:
        self.session_id = session_id
        self.lease = lease
        self.model = model
        self.config = config
        self.stopping = stopping
        session = Session.objects.get(pk=session_id)
        self.agent: dict[str, Any] = session.agent_snapshot
        self.workspace_id = session.workspace_id
        self.vault_ids: list[str] = list(session.vault_ids)
        self.status = session.status
        self.honors_interrupts = session.harness.get("type") not in HARNESSES_IGNORING_INTERRUPT
        self._catalog: ToolCatalog | None = None
        self._last_check = 0.0

    # -- the outer loop: turn boundaries ---------------------------------------------------------
    def run(self) -> None:
        if self.status in (Status.RUNNING, Status.RESCHEDULING):
            self._run_turn()  # a turn whose worker went away: carry on from the log
        while batch := self._pending():
            self._apply(batch)

    def _pending(self) -> list[SessionEvent]:
        return list(
            SessionEvent.objects.filter(session_id=self.session_id, seq__isnull=True).order_by("created_at", "id")
        )

    def _apply(self, batch: list[SessionEvent]) -> None:
        """Acknowledge the batch; an interrupt after the last input cancels the turn it would start."""
        services.events_acknowledge(session_id=self.session_id, event_ids=[event.id for event in batch])
        interrupts = [event for event in batch if event.type == "user.interrupt"]
        if interrupts and not self.honors_interrupts:
            self._reject_interrupts(interrupts)
        elif interrupts and batch[-1].type == "user.interrupt":
            self._set_status(Status.IDLE, {"type": "interrupted"})
            return
        if any(event.type != "user.interrupt" for event in batch):
            self._run_turn()

    def _run_turn(self) -> None:
        started = time.monotonic()
        self._catalog = None
        if self.status != Status.RUNNING:
            self._set_status(Status.RUNNING)
        try:
            stop_reason = self._advance()
        except TurnInterrupted as interrupted:
            services.events_acknowledge(session_id=self.session_id, event_ids=[e.id for e in interrupted.interrupts])
            stop_reason = {"type": "interrupted"}
        except ModelError as failure:
            self._emit_error(failure.kind, failure.message, retry="exhausted")
            stop_reason = {"type": "retries_exhausted" if failure.retryable else "error"}
        services.session_add_usage(session_id=self.session_id, usage={}, active_seconds=time.monotonic() - started)
        self._set_status(Status.IDLE, stop_reason)

    def _advance(self) -> dict[str, Any]:
        """Step until the turn ends or waits on the client; returns the idle stop reason."""
        while True:
            self.checkpoint(force=True)
            events = self._visible_events()
            work = tool_work(events)
            if work.denied or work.runnable:
                self._answer_tools(work.denied, work.runnable)
                continue
            if work.blocking:
                return {"type": "requires_action", "event_ids": work.blocking}
            messages = build_messages(events)
            if awaits_model(messages):
                if self._model_step(messages):
                    continue
                return {"type": "end_turn"}  # an empty answer: asking again would loop
            outcome = latest_outcome(events)
            if outcome is not None and not turn_graded(events) and self._grade(outcome, messages) == "needs_revision":
                continue
            return {"type": "end_turn"}

    def _visible_events(self) -> list[SessionEvent]:
        return list(SessionEvent.objects.filter(session_id=self.session_id, seq__isnull=False).order_by("seq"))

    # -- checkpoints: interrupts, archival, lease, shutdown ---------------------------------------
    def checkpoint(self, force: bool = False) -> None:
        """Between stream chunks and steps: stop for shutdown, a lost lease, or an interrupt."""
        if self.stopping.is_set():
            raise WorkerStopping()
        if self.lease.lost.is_set():
            raise LeaseLost(self.session_id)
        now = time.monotonic()
        if not force and now - self._last_check < self.config.check_seconds:
            return
        self._last_check = now
        if Session.objects.filter(pk=self.session_id, status=Status.TERMINATED).exists():
            raise LeaseLost(self.session_id)
        interrupts = list(
            SessionEvent.objects.filter(session_id=self.session_id, seq__isnull=True, type="user.interrupt")
        )
        if interrupts and self.honors_interrupts:
            raise TurnInterrupted(interrupts)
        if interrupts:
            services.events_acknowledge(session_id=self.session_id, event_ids=[event.id for event in interrupts])
            self._reject_interrupts(interrupts)

    def _sleep(self, seconds: float) -> None:
        deadline = time.monotonic() + seconds
        while (remaining := deadline - time.monotonic()) > 0:
            self.stopping.wait(min(remaining, self.config.check_seconds))
            self.checkpoint(force=True)

    def _reject_interrupts(self, interrupts: list[SessionEvent]) -> None:
        """`code_harness` accepts (acknowledges) the interrupt, then answers it with `session.error`."""
        for interrupt in interrupts:
            kind = "unapplied_event" if interrupt.body.get(NATIVE_BETA_FIELD) else "unknown_error"
            self._emit_error(kind, UNAPPLIED_INTERRUPT, retry="exhausted")

    # -- writes --------------------------------------------------------------------------------
    def _emit(self, event_type: str, body: dict[str, Any], event_id: str | None = None) -> SessionEvent:
        return services.event_emit(session_id=self.session_id, type=event_type, body=body, event_id=event_id)

    def _emit_error(self, kind: str, message: str, *, retry: str, **fields: Any) -> None:
        error = {"type": kind, "message": message, "retry_status": {"type": retry}, **fields}
        self._emit("session.error", {"error": error})

    def _set_status(self, status: str, stop_reason: dict[str, Any] | None = None) -> None:
        services.session_transition(session_id=self.session_id, status=status, stop_reason=stop_reason)
        self.status = status

    # -- the model -----------------------------------------------------------------------------
    def _model_step(self, messages: list[dict[str, Any]]) -> bool:
        """Let the model speak; False when it said nothing at all."""
        catalog = self._tools()
        body: dict[str, Any] = {"model": self.agent["model"]["id"], "max_tokens": self.config.max_tokens}
        if self.agent.get("system"):
            body["system"] = self.agent["system"]
        body["messages"] = messages
        if tools := catalog.model_tools():
            body["tools"] = tools

        def attempt() -> ModelResponse:
            previews = PreviewPublisher(self.session_id, self.checkpoint)
            response = self.model.stream(body, previews)
            response.event_ids = previews.event_ids
            return response

        return self._emit_response(self._call_model(attempt), catalog) > 0

    def _call_model(self, attempt: Callable[[], ModelResponse]) -> ModelResponse:
        """One model call with retries and backoff (status `rescheduling` while waiting to retry)."""
        for number in range(1, self.config.model_attempts + 1):
            start = self._emit("span.model_request_start", {})
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
                if self.status != Status.RESCHEDULING:
                    self._set_status(Status.RESCHEDULING)
                self._sleep(self.config.backoff(number))
                continue
            self._end_span(start, response.usage, is_error=False)
            services.session_add_usage(session_id=self.session_id, usage=response.usage)
            if self.status != Status.RUNNING:
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
        """A call of a known MCP tool is the runtime's; any other name is for the client to answer."""
        call = {"name": block["name"], "input": block.get("input") or {}}
        entry = catalog.mcp.get(block["name"])
        if entry is None:
            self._emit("agent.custom_tool_use", call)
            return
        permission = {"evaluated_permission": entry.evaluated_permission, "evaluation": entry.evaluation()}
        self._emit("agent.mcp_tool_use", {**call, "mcp_server_name": entry.tool.server_name, **permission})

    # -- tools ---------------------------------------------------------------------------------
    def _tools(self) -> ToolCatalog:
        """The turn's tools, listed once per turn; a server that fails to list is reported."""
        if self._catalog is None:
            timeout = self.config.mcp_timeout_seconds

            def list_tools(server_name: str, url: str) -> list[mcp_client.McpTool]:
                return mcp_client.list_tools(
                    server_name=server_name, url=url, timeout=timeout, bearer=self._bearer(url)
                )

            self._catalog = build_catalog(self.agent, list_tools)
            for server_name, message in self._catalog.failures:
                self._emit_error("mcp_connection_failed_error", message, retry="exhausted", mcp_server_name=server_name)
        return self._catalog

    def _answer_tools(self, denied: list[tuple[SessionEvent, SessionEvent]], runnable: list[SessionEvent]) -> None:
        for call, confirmation in denied:
            message = confirmation.body.get("deny_message") or DENIED_RESULT
            self._emit_tool_result(call, [{"type": "text", "text": message}], is_error=True)
        for call in runnable:
            self.checkpoint()
            outcome = self._call_mcp(call)
            self._emit_tool_result(call, outcome.content, is_error=outcome.is_error)

    def _call_mcp(self, call: SessionEvent) -> mcp_client.McpToolOutcome:
        servers = {server["name"]: server["url"] for server in self.agent.get("mcp_servers") or []}
        server_name = call.body["mcp_server_name"]
        try:
            if server_name not in servers:
                raise mcp_client.McpUnavailable(f"The agent has no MCP server named {server_name!r}.")
            return mcp_client.call_tool(
                server_name=server_name,
                url=servers[server_name],
                name=call.body["name"],
                arguments=call.body["input"],
                timeout=self.config.mcp_timeout_seconds,
                bearer=self._bearer(servers[server_name]),
            )
        except mcp_client.McpUnavailable as error:
            return mcp_client.McpToolOutcome(content=[{"type": "text", "text": str(error)}], is_error=True)

    def _bearer(self, server_url: str) -> str | None:
        return bearer_for(workspace_id=self.workspace_id, vault_ids=self.vault_ids, server_url=server_url)

    def _emit_tool_result(self, call: SessionEvent, content: list[dict[str, Any]], *, is_error: bool) -> None:
        self._emit("agent.mcp_tool_result", {"mcp_tool_use_id": call.id, "content": content, "is_error": is_error})

    # -- outcomes ------------------------------------------------------------------------------
    def _grade(self, outcome: SessionEvent, messages: list[dict[str, Any]]) -> str:
        """Grade the transcript against the outcome's rubric; returns the (labelled) verdict."""
        definition = outcome.body
        evaluations = Session.objects.values_list("outcome_evaluations", flat=True).get(pk=self.session_id)
        iteration = 1 + sum(1 for item in evaluations if item.get("outcome_id") == definition["outcome_id"])
        start = self._emit(
            "span.outcome_evaluation_start", {"outcome_id": definition["outcome_id"], "iteration": iteration - 1}
        )
        request = outcomes.grading_request(
            model=self.agent["model"]["id"], outcome=definition, messages=messages, max_tokens=self.config.max_tokens
        )
        response = self._call_model(lambda: self.model.create(request))
        verdict, explanation = outcomes.parse_verdict(response.text())
        result = outcomes.label(verdict, iteration=iteration, max_iterations=definition["max_iterations"])
        evaluation = {
            "type": "outcome_evaluation",
            "outcome_id": definition["outcome_id"],
            "description": definition["description"],
            "verdict": result,
            "explanation": explanation,
            "iteration": iteration,
            "max_iterations": definition["max_iterations"],
            "evaluated_at": timestamp(timezone.now()),
        }
        end = {
            "outcome_evaluation_start_id": start.id,
            "outcome_id": definition["outcome_id"],
            "iteration": iteration - 1,
            "result": result,
            "explanation": explanation,
            "usage": span_usage(response.usage),
        }
        with transaction.atomic():
            services.session_add_evaluation(session_id=self.session_id, evaluation=evaluation)
            self._emit("span.outcome_evaluation_end", end)
        return result
