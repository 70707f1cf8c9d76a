"""Multi-agent sessions at run time: child threads, each a turn loop of its own over its own log, and the
tools a thread's model uses to start them, message them, wait for their replies and consult an advisor.

A child thread runs in a Python thread of the worker holding the session, inside its parent's turn: its
writes carry the session's fence, its built-in tools run in the session's sandbox, its model calls
count against the turn's limits and the session's budget (one meter for all threads). A thread that
goes idle sends its final answer to its parent (`agent.thread_message_sent` / `..._received`); the parent
reads it in the result of `wait_for_replies`. The parent's turn ends its children's: an interrupt, an
archive, a lost lease or the end of the turn halts every child at its next checkpoint. A worker that takes
over a session resumes the turn and the children still `running`, from their logs.
"""

from __future__ import annotations

import contextvars
import dataclasses
import logging
import threading
import time
from collections.abc import Callable
from decimal import Decimal
from typing import Any, Protocol

import orjson
from django.db import connection

from registry.agents.multiagent import MULTIAGENT
from registry.runtime.checkpoints import WAIT_SLICE_SECONDS, Checkpoints, TurnInterrupted
from registry.runtime.config import RuntimeSettings
from registry.runtime.lease import Fence
from registry.runtime.observer import TurnObserver
from registry.runtime.running import RunningSession
from registry.runtime.tools import WORKER_TOOLS, tool_config
from registry.runtime.transcript import TOOL_USE_TYPES, build_messages
from registry.runtime.writer import TurnLog, result_event
from registry.sandbox.toolset import ToolOutcome, offered_tools
from registry.sessions import log, selectors, thread_log
from registry.sessions.models import SessionEvent, SessionThread, ThreadEvent

logger = logging.getLogger(__name__)

Status = SessionThread.Status
SPAWN, SEND, WAIT, ADVISOR = "spawn_agent", "send_message", "wait_for_replies", "advisor"
HALT_JOIN_SECONDS = 5.0
NO_REPLY = "(The thread ended its turn without a message.)"
ADVISOR_SYSTEM = (
    "You are an advisor to an AI agent working on a task. The conversation so far is the agent's; answer its "
    "question with your best advice, briefly and concretely."
)


# -- the thread's log, writer and stops ------------------------------------------------------------------
class ThreadTurnLog(TurnLog):
    """The fenced writer of one child thread: events to its own log, usage to it and to the session."""

    def __init__(
        self, fence: Fence, observer: TurnObserver, thread: SessionThread, needs_client: Callable[[SessionEvent], bool]
    ) -> None:
        super().__init__(fence, observer, thread.status)
        self.thread = thread
        self.needs_client = needs_client  # a call the client answers or confirms: shown on the primary stream

    def emit(
        self, event_type: str, body: dict[str, Any], event_id: str | None = None, *, flush: bool = True
    ) -> SessionEvent:
        """The event in the thread's log (`event_id`, a preview's, is not kept: previews are the thread's own)."""
        shown = event_type in TOOL_USE_TYPES and self.needs_client(SessionEvent(type=event_type, body=body))
        event = thread_log.emit(thread=self.thread, type=event_type, body=body, fence=self.fence, cross_post=shown)
        self.observer.event_written(event_type, body)
        return event

    def tool_result(self, call: SessionEvent, content: list[dict[str, Any]], *, is_error: bool) -> None:
        """The answer of a call the primary stream shows is shown there too (it is answered, for the client)."""
        result_type, body = result_event(call, content, is_error=is_error)
        thread_log.emit(
            thread=self.thread, type=result_type, body=body, fence=self.fence, cross_post=self.needs_client(call)
        )
        self.observer.event_written(result_type, body)

    def set_status(
        self, status: str, stop_reason: dict[str, Any] | None = None, stop_details: dict[str, Any] | None = None
    ) -> None:
        if status == self.status:
            return
        thread_log.transition(thread=self.thread, status=status, stop_reason=stop_reason, fence=self.fence)
        self.status = status

    def acknowledge(self, events: list[SessionEvent]) -> None:
        """A thread's input is written processed: nothing to acknowledge."""

    def add_usage(
        self, usage: dict[str, int], *, active_seconds: float = 0.0, list_cost_usd: Decimal = log.ZERO
    ) -> None:
        thread_log.add_usage(
            thread=self.thread,
            usage=usage,
            active_seconds=active_seconds,
            list_cost_usd=list_cost_usd,
            fence=self.fence,
        )

    def record_evaluation(self, evaluation: dict[str, Any]) -> None:
        """Outcomes are the session's: a thread grades none."""


@dataclasses.dataclass(kw_only=True)
class ThreadCheckpoints(Checkpoints):
    """A child's stops: the worker's, the lease's, its group halting it, and its own end (archived, or its
    session ended). Interrupts are the primary thread's to take: it halts the children (all, or one)."""

    thread_id: str
    halted: Callable[[], bool]

    def stop_if_halted(self) -> None:
        if self.halted():
            raise TurnInterrupted([])

    def look(self) -> None:
        if not selectors.thread_is_live(self.thread_id):
            raise thread_log.ThreadTerminated(f"thread {self.thread_id} was archived, or its session ended")


# -- the threads of one held session ---------------------------------------------------------------------
class ThreadGroup:
    """The child threads running for one held session, in Python threads of this worker."""

    def __init__(self, session_id: str, runner_for: Callable[[SessionThread, ThreadGroup], Callable[[], None]]) -> None:
        self.session_id = session_id
        self.runner_for = runner_for  # the function running a thread's pending turns (turns.ThreadRunner)
        self.lock = threading.Lock()
        self.running: dict[str, threading.Thread] = {}
        # Threads to stop at their next checkpoint (the turn ended or was interrupted, or one was named), until
        # they are started again.
        self.halting: set[str] = set()

    def start(self, thread: SessionThread) -> None:
        """Run the thread's pending turns, unless it runs already."""
        with self.lock:
            current = self.running.get(thread.pk)
            if current is not None and current.is_alive():
                return
            self.halting.discard(thread.pk)
            run = contextvars.copy_context().run
            target = self.runner_for(thread, self)
            worker = threading.Thread(target=run, args=(target,), name=f"thread-{thread.pk}", daemon=True)
            self.running[thread.pk] = worker
            worker.start()

    def halted(self, thread_id: str) -> bool:
        return thread_id in self.halting

    def interrupt(self, thread_ids: list[str]) -> None:
        """Halt these threads (the ones running here: one that is not is stopped already)."""
        with self.lock:
            self.halting.update(pk for pk in thread_ids if pk in self.running and self.running[pk].is_alive())

    def resume(self) -> None:
        """A turn taken over from another worker: its children that were running go on from their logs."""
        rows = SessionThread.objects.filter(
            session_id=self.session_id, status__in=[Status.RUNNING, Status.RESCHEDULING], archived_at=None
        )
        for thread in rows:
            self.start(thread)

    def wait(self, thread_ids: list[str], checkpoints: Checkpoints) -> None:
        """Until none of these threads runs here; the waiting thread's checkpoints stop the wait. No database
        connection is held while it waits (the children need the pool's)."""
        while True:
            with self.lock:
                alive = [self.running[pk] for pk in thread_ids if pk in self.running and self.running[pk].is_alive()]
            if not alive:
                return
            connection.close()
            alive[0].join(WAIT_SLICE_SECONDS)
            checkpoints.check()

    def stop_all(self) -> None:
        """Halt every child at its next checkpoint and wait (a bounded time) for them to leave; one that has
        not left by then stays halted."""
        self.interrupt(list(self.running))
        deadline = time.monotonic() + HALT_JOIN_SECONDS
        for worker in list(self.running.values()):
            worker.join(max(deadline - time.monotonic(), 0.0))
        with self.lock:
            self.running = {pk: worker for pk, worker in self.running.items() if worker.is_alive()}


def last_reply(thread: SessionThread) -> str | None:
    """The text of the last message the thread sent its parent, if any."""
    row = ThreadEvent.objects.filter(thread=thread, type="agent.thread_message_sent").order_by("-seq").first()
    return text_of(row.body.get("content") or []) if row is not None else None


def text_of(blocks: list[dict[str, Any]]) -> str:
    """The text blocks of a message's content, joined."""
    return "\n\n".join(block.get("text", "") for block in blocks)


# -- the tools of a thread that may spawn ----------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class Roster:
    """What the session's agent lets its threads start (its resolved `multiagent`), and its advisor."""

    predefined: dict[str, dict[str, Any]]
    inline: bool
    advisor_model: str | None

    @classmethod
    def of(cls, agent: dict[str, Any]) -> Roster | None:
        multiagent = agent.get("multiagent") or {}
        if multiagent.get("type") != MULTIAGENT:
            return None
        subagents = multiagent.get("subagents") or {}
        advisor = multiagent.get("advisor") or {}
        enabled = subagents.get("type") == "enabled"
        predefined = {entry["name"]: entry for entry in subagents.get("predefined_agents") or []} if enabled else {}
        inline = enabled and (subagents.get("inline_agents") or {}).get("type") == "enabled"
        advisor_model = advisor.get("model") if advisor.get("type") == "enabled" else None
        return cls(predefined=predefined, inline=inline, advisor_model=advisor_model)

    @property
    def spawns(self) -> bool:
        return bool(self.predefined) or self.inline


class ToolHost(Protocol):
    """The turn a thread tool is called from (a session's or a child thread's runner)."""

    session: RunningSession
    config: RuntimeSettings
    checkpoints: Checkpoints
    group: ThreadGroup
    thread_id: str
    depth: int
    agent_name: str | None

    def events(self) -> list[SessionEvent]: ...

    def consult(self, request: dict[str, Any]) -> str: ...


def _schema(properties: dict[str, Any], required: list[str]) -> dict[str, Any]:
    return {"type": "object", "properties": properties, "required": required, "additionalProperties": False}


TEXT = {"type": "string"}


class ThreadTools:
    """`spawn_agent`, `send_message`, `wait_for_replies` (a thread that may spawn) and `advisor` (the
    primary thread, when the agent has one): tools the runtime answers itself."""

    def __init__(self, host: ToolHost, roster: Roster, *, spawns: bool, advises: bool) -> None:
        self.host = host
        self.roster = roster
        self.handlers = {}
        if spawns and roster.spawns:
            self.handlers.update({SPAWN: self._spawn, SEND: self._send, WAIT: self._wait})
        if advises and roster.advisor_model:
            self.handlers[ADVISOR] = self._advise

    def definitions(self) -> list[dict[str, Any]]:
        return [self._definition(name) for name in self.handlers]

    def _definition(self, name: str) -> dict[str, Any]:
        if name == SPAWN:
            names = "; ".join(
                f"{key}: {entry.get('description') or 'no description'}"
                for key, entry in self.roster.predefined.items()
            )
            inline = (
                " Or define an inline agent with `inline_agent` (a name, a system prompt, optionally a model and the "
                "names of built-in tools it may use, among yours)."
                if self.roster.inline
                else ""
            )
            description = (
                "Start a session thread that runs another agent concurrently with you, and send it `message` as "
                f"its task. Name a predefined agent in `agent` ({names or 'none'}).{inline} Returns the new "
                "thread's id at once; collect its answer with wait_for_replies."
            )
            inline_schema = _schema(
                {"name": TEXT, "system": TEXT, "model": TEXT, "tools": {"type": "array", "items": TEXT}},
                ["name", "system"],
            )
            schema = _schema({"agent": TEXT, "inline_agent": inline_schema, "message": TEXT}, ["message"])
        elif name == SEND:
            description = "Send a message to one of the threads you started; it works on it and replies."
            schema = _schema({"thread_id": TEXT, "message": TEXT}, ["thread_id", "message"])
        elif name == WAIT:
            description = (
                "Wait until the threads you started (all of them, or those in `thread_ids`) have finished their "
                "work, and read their replies."
            )
            schema = _schema({"thread_ids": {"type": "array", "items": TEXT}}, [])
        else:
            description = "Ask a stronger advisor model for advice; it sees the conversation so far."
            schema = _schema({"question": TEXT}, ["question"])
        return {"name": name, "description": description, "input_schema": schema}

    def run(self, call: SessionEvent) -> ToolOutcome:
        arguments = call.body.get("input") or {}
        try:
            return ToolOutcome.text(self.handlers[call.body["name"]](arguments), is_error=False)
        except ThreadToolError as error:
            return ToolOutcome.text(str(error), is_error=True)

    # -- spawning and messaging ---------------------------------------------------------------------------
    def _spawn(self, arguments: dict[str, Any]) -> str:
        host = self.host
        message = _text(arguments, "message")
        name, agent = self._agent_for(arguments)
        depth = host.depth + 1
        if depth > host.config.thread_max_depth:
            raise ThreadToolError(f"Threads may nest {host.config.thread_max_depth} deep; this one may not spawn.")
        try:
            thread = thread_log.create(
                session_id=host.session.session_id,
                parent_thread_id=host.thread_id,
                depth=depth,
                agent_name=name,
                agent=agent,
                max_threads=host.config.session_max_threads,
                fence=host.checkpoints.lease.fence,
                task=((host.thread_id, host.agent_name), [{"type": "text", "text": message}]),
            )
        except (thread_log.ThreadLimit, thread_log.ThreadTerminated) as error:
            raise ThreadToolError(str(error)) from None
        host.group.start(thread)
        return orjson.dumps({"thread_id": thread.pk, "agent_name": name, "status": thread.status}).decode()

    def _agent_for(self, arguments: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        named, inline = arguments.get("agent"), arguments.get("inline_agent")
        if (named is None) == (inline is None):
            raise ThreadToolError("Give exactly one of `agent` (a predefined agent's name) and `inline_agent`.")
        if named is not None:
            agent = self.roster.predefined.get(str(named))
            if agent is None:
                known = sorted(self.roster.predefined)
                raise ThreadToolError(f"No predefined agent is named {named!r}; there are: {known}.")
            return str(named), agent
        if not self.roster.inline:
            raise ThreadToolError("This agent may not define inline agents.")
        if not isinstance(inline, dict):
            raise ThreadToolError("`inline_agent` must be an object.")
        return inline_agent(inline, self.host.session.agent)

    def _send(self, arguments: dict[str, Any]) -> str:
        thread = self._child(_text(arguments, "thread_id"))
        if thread.status == Status.TERMINATED:
            raise ThreadToolError(f"Thread {thread.pk} is terminated.")
        self._deliver(thread, _text(arguments, "message"))
        return f"Sent to {thread.pk}."

    def _deliver(self, thread: SessionThread, message: str) -> None:
        """The message in both logs and the thread running (so a takeover resumes it), its turn started here."""
        host = self.host
        content = [{"type": "text", "text": message}]
        sender = (host.thread_id, host.agent_name)
        try:
            thread_log.deliver(thread=thread, sender=sender, content=content, fence=host.checkpoints.lease.fence)
        except thread_log.ThreadTerminated as error:  # archived since it was read
            raise ThreadToolError(str(error)) from None
        host.group.start(thread)

    def _child(self, thread_id: str) -> SessionThread:
        thread = SessionThread.objects.filter(
            pk=thread_id, session_id=self.host.session.session_id, parent_thread_id=self.host.thread_id
        ).first()
        if thread is None or thread.archived_at is not None:
            raise ThreadToolError(f"{thread_id!r} is not a live thread you started.")
        return thread

    def _wait(self, arguments: dict[str, Any]) -> str:
        host = self.host
        asked = arguments.get("thread_ids")
        if asked is not None and not (isinstance(asked, list) and all(isinstance(item, str) for item in asked)):
            raise ThreadToolError("`thread_ids` must be a list of thread ids.")
        children = SessionThread.objects.filter(
            session_id=host.session.session_id, parent_thread_id=host.thread_id, archived_at=None
        ).order_by("created_at", "id")
        ids = [self._child(pk).pk for pk in asked] if asked else list(children.values_list("pk", flat=True))
        if not ids:
            raise ThreadToolError("You have started no threads to wait for.")
        host.group.wait(ids, host.checkpoints)
        threads = SessionThread.objects.in_bulk(ids)
        replies = [
            {
                "thread_id": pk,
                "agent_name": threads[pk].agent_name,
                "status": threads[pk].status,
                "stop_reason": (threads[pk].stop_reason or {}).get("type"),
                "reply": last_reply(threads[pk]),
            }
            for pk in ids
        ]
        return orjson.dumps(replies).decode()

    # -- the advisor -------------------------------------------------------------------------------------
    def _advise(self, arguments: dict[str, Any]) -> str:
        question = _text(arguments, "question")
        messages = build_messages(self.host.events())[:-1]  # without the assistant message asking
        if messages and messages[-1]["role"] == "user":
            messages[-1] = {**messages[-1], "content": [*messages[-1]["content"], {"type": "text", "text": question}]}
        else:
            messages.append({"role": "user", "content": [{"type": "text", "text": question}]})
        assert self.roster.advisor_model is not None
        request = {"model": self.roster.advisor_model, "system": ADVISOR_SYSTEM, "messages": messages}
        return self.host.consult(request)


class ThreadToolError(Exception):
    """A thread tool call that cannot be done: its error result says why."""


def _text(arguments: dict[str, Any], name: str) -> str:
    value = arguments.get(name)
    if not isinstance(value, str) or not value.strip():
        raise ThreadToolError(f"`{name}` must be a non-empty string.")
    return value


def inline_agent(spec: dict[str, Any], spawner: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """An inline agent's definition (`BetaManagedAgentsInlineAgent`): its built-in tools are among the
    spawner's, with the spawner's permission policies; no MCP servers or skills of its own."""
    name, system = _text(spec, "name"), _text(spec, "system")
    wanted = spec.get("tools") or []
    if not isinstance(wanted, list) or not all(isinstance(tool, str) for tool in wanted):
        raise ThreadToolError("`inline_agent.tools` must be a list of built-in tool names.")
    toolsets = [tool for tool in spawner.get("tools") or [] if tool["type"] == "agent_toolset_20260401"]
    known = set(WORKER_TOOLS) | set(offered_tools())
    allowed = {tool for toolset in toolsets for tool in known if tool_config(toolset, tool).get("enabled") is not False}
    refused = sorted(set(wanted) - allowed)
    if refused:
        raise ThreadToolError(f"An inline agent may use only built-in tools you have: not {refused}.")
    tools = []
    if wanted and toolsets:
        base = toolsets[0]
        configs = [{**tool_config(base, tool), "name": tool, "enabled": True} for tool in wanted]
        tools = [{"type": "agent_toolset_20260401", "default_config": {"enabled": False}, "configs": configs}]
    model = spec.get("model") or spawner["model"]
    agent = {
        "type": "inline",
        "name": name,
        "description": None,
        "system": system,
        "model": model if isinstance(model, dict) else {"id": str(model)},
        "tools": tools,
        "mcp_servers": [],
        "skills": [],
        "execution_identity": spawner.get("execution_identity") or {"type": "service_account"},
    }
    return name, agent
