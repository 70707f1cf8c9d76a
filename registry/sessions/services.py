"""The public writes for sessions: create, update, archive (terminates), delete, append user events.

Every write of a session's log, status, lease or usage goes through `registry.sessions.log`; this
module decides what the API may ask (references, budgets, what a user event may answer). Creating,
updating, archiving and deleting a session write their webhook event (`session.*`) in their transaction;
the log writes those of its status changes.
"""

from __future__ import annotations

from collections.abc import Iterable
from decimal import Decimal
from functools import partial
from typing import Any

from django.db import transaction
from django.utils import timezone

from registry.agents.multiagent import session_multiagent
from registry.agents.selectors import usable_agent
from registry.core import tracing
from registry.core.errors import conflict, invalid_request
from registry.core.ids import new_id
from registry.core.selectors import require_live
from registry.core.services import apply_updates
from registry.environments.selectors import usable_environment
from registry.extensions.selectors import list_price
from registry.sessions import log, notify, resources, selectors, thread_log, work
from registry.sessions.events import MAX_ITERATIONS_DEFAULT, NATIVE_BETA_FIELD
from registry.sessions.models import Session, SessionEvent, primary_thread_id
from registry.vaults.models import Vault
from registry.webhooks import outbox
from registry.workspaces.models import Workspace


# -- creating a session -------------------------------------------------------------------------
def _check_references(workspace: Workspace, values: dict[str, Any]) -> None:
    """Vaults a session names must be live vaults of its workspace."""
    require_live(Vault, workspace=workspace, ids=list(values.get("vault_ids") or []), field="vault_ids", noun="vault")


BUDGET_PROVIDER = "vendor_b"  # the runtime speaks the messages shape


def _check_budgetable(spec: dict[str, Any]) -> None:
    """A budget needs a list price for the session's model (pricing group, provider `vendor_b`)."""
    model = spec["model"]["id"]
    if list_price(provider=BUDGET_PROVIDER, model=model) is None:
        raise invalid_request(
            f"budget: model_not_budgetable: model {model} has no list price, so no budget can measure it."
        )


@transaction.atomic
def session_create(*, workspace: Workspace, values: dict[str, Any]) -> Session:
    agent, pinned, spec = usable_agent(workspace_id=workspace.pk, reference=values["agent"])
    version = pinned or agent.version
    environment = usable_environment(workspace_id=workspace.pk, environment_id=values["environment_id"])
    _check_references(workspace, values)
    if values.get("budget"):
        _check_budgetable(spec)
    harness = values.get("harness") or work.default_harness(environment)
    on_worker = work.client_runs_builtin(harness, environment.config)
    records = resources.build_records(workspace, list(values.get("resources") or []), [], on_worker=on_worker)
    session = Session.objects.create(
        workspace=workspace,
        agent=agent,
        agent_version=version,
        # The roster as the session runs it: each predefined agent's definition at its pinned version.
        agent_snapshot={**spec, "multiagent": session_multiagent(workspace.pk, spec.get("multiagent"))},
        environment=environment,
        harness=harness,
        title=values.get("title"),
        metadata=values.get("metadata", {}),
        vault_ids=list(values.get("vault_ids") or []),
        resources=records,
        usage=log.EMPTY_USAGE,
        budget=values.get("budget"),
    )
    if work.needs_work(session):  # an environment worker runs its tools: queued in this transaction
        work.work_queue(session=session)
    outbox.emit("session.created", workspace_id=workspace.pk, object_id=session.pk)
    initial_events = values.get("initial_events") or []
    if initial_events:
        events_append(session=session, events=initial_events)
    return session


@transaction.atomic
def session_update(*, session: Session, values: dict[str, Any]) -> Session:
    locked = Session.objects.select_for_update().get(pk=session.pk)
    apply_updates(locked, values, ("title",))
    if "budget" in values:
        _update_budget(locked, values["budget"])
    locked.save(update_fields=["title", "metadata", "budget", "updated_at"])
    outbox.emit("session.updated", workspace_id=locked.workspace_id, object_id=locked.pk)
    return locked


def _update_budget(session: Session, budget: dict[str, Any] | None) -> None:
    """Replace or remove a budget, by the reference client's rules."""
    if session.status == Session.Status.TERMINATED:
        raise conflict("session_terminated: a terminated session's budget cannot change.")
    if budget is not None and session.budget is None:
        raise invalid_request("budget: budget_create_only: a budget can only be set on a session created with one.")
    if budget is not None:
        if Decimal(budget["max_list_cost"]["amount"]) / 100 <= session.list_cost_usd:
            raise invalid_request(
                "budget: budget_not_raised: max_list_cost must exceed the list cost already consumed."
            )
        _check_budgetable(session.agent_snapshot)
    session.budget = budget


@transaction.atomic
def session_archive(*, session: Session) -> Session:
    """Archive and terminate: the runtime stops the session's work; its streams end."""
    locked = Session.objects.select_for_update().get(pk=session.pk)
    if locked.archived_at is None:
        locked.archived_at = timezone.now()
        locked.save(update_fields=["archived_at", "updated_at"])
        outbox.emit("session.archived", workspace_id=locked.workspace_id, object_id=locked.pk)
    if locked.status != Session.Status.TERMINATED:
        log.transition(session_id=locked.pk, status=Session.Status.TERMINATED)
        locked.refresh_from_db()
    return locked


@transaction.atomic
def session_delete(*, session: Session) -> None:
    work.work_stop_for_session(session_id=session.pk)
    deleted, _ = Session.objects.filter(pk=session.pk).delete()
    if deleted:  # not when a concurrent delete came first
        outbox.emit("session.deleted", workspace_id=session.workspace_id, object_id=session.pk)
    notify.wake_after_commit(session.pk)
    notify.wake_runtime(session.pk)


# -- user events ----------------------------------------------------------------------------------
def _pending_confirmations(session: Session) -> set[str]:
    """Tool calls paused by an `always_ask` policy that no confirmation has answered yet."""
    return set(selectors.calls_awaiting_confirmation(session.pk).values_list("id", flat=True))


def _open_calls(session: Session, call: str, results: tuple[str, ...], answers: str) -> set[str]:
    """The `call` events of the log that no event of `results` answers (its `answers` field names the call)."""
    used = set(SessionEvent.objects.filter(session=session, type=call).values_list("id", flat=True))
    answered = SessionEvent.objects.filter(session=session, type__in=results).values_list(f"body__{answers}", flat=True)
    return used - set(answered)


def _check_event(session: Session, index: int, event: dict[str, Any], state: dict[str, set[str]]) -> None:
    """Rules that depend on the session: what a confirmation or a tool result may answer."""
    kind = event["type"]
    where = f"events[{index}]"
    if kind == "user.interrupt":  # naming a thread: one of this session's
        thread_id = event.get("session_thread_id")
        known = thread_id in (None, primary_thread_id(session.pk)) or session.threads.filter(pk=thread_id).exists()
        if not known:
            raise invalid_request(f"{where}.session_thread_id: this session has no thread with this id.")
    elif kind == "user.tool_confirmation":
        if event["tool_use_id"] not in state["confirmations"]:
            raise invalid_request(f"{where}.tool_use_id: no tool call awaiting confirmation has this id.")
        state["confirmations"].discard(event["tool_use_id"])
    elif kind == "user.custom_tool_result":
        if event["custom_tool_use_id"] not in state["custom_tool_uses"]:
            raise invalid_request(f"{where}.custom_tool_use_id: no unanswered agent.custom_tool_use has this id.")
        state["custom_tool_uses"].discard(event["custom_tool_use_id"])
    elif kind == "user.tool_result":
        if not work.client_runs_builtin(session.harness, session.environment.config):
            raise invalid_request(
                f"{where}: user.tool_result needs the agent_sdk_harness in separate mode on a self_hosted environment."
            )
        if event["tool_use_id"] not in state["tool_uses"]:
            raise invalid_request(f"{where}.tool_use_id: no unanswered agent.tool_use has this id.")
        if event["tool_use_id"] in state["confirmations"]:  # an always_ask call runs only once allowed
            raise invalid_request(f"{where}.tool_use_id: this call awaits a user.tool_confirmation.")
        state["tool_uses"].discard(event["tool_use_id"])


def _stored_body(event: dict[str, Any], native: bool) -> dict[str, Any]:
    body = {key: value for key, value in event.items() if key != "type"}
    if native:
        body[NATIVE_BETA_FIELD] = True
    if event["type"] == "user.define_outcome":
        body["outcome_id"] = new_id("outc")
        body["max_iterations"] = body.get("max_iterations") or MAX_ITERATIONS_DEFAULT
    return body


# Kinds whose acceptance no session state decides (what a confirmation or a tool result may answer
# depends on the log; these depend only on the session being there and not terminated).
UNCONDITIONAL_KINDS = frozenset({"user.message", "user.interrupt", "user.define_outcome"})


def events_append(
    *,
    session: Session | None = None,
    session_id: str | None = None,
    workspace_id: str | None = None,
    events: Iterable[dict[str, Any]],
    native: bool = False,
) -> list[SessionEvent]:
    """Append user events, all or none. They become visible once the runtime acknowledges them.

    The API passes `session_id` and `workspace_id`: the write is also the tenancy check. A batch of
    unconditional kinds needs no look at the log (one statement on PostgreSQL); any other batch is
    checked under the session's lock against what is open.
    """
    events = list(events)
    target = session.pk if session else session_id
    assert target is not None
    created = _new_events(target, events, native)
    unconditional = all(event["type"] in UNCONDITIONAL_KINDS and not event.get("session_thread_id") for event in events)
    check = None if unconditional else partial(_check_and_route, events, created)
    log.append(session_id=target, workspace_id=workspace_id, events=created, check=check)
    return created


def _new_events(session_id: str, events: list[dict[str, Any]], native: bool) -> list[SessionEvent]:
    """The rows to store, each stamped as `auto_now_add` would, carrying the request's trace context."""
    traceparent = tracing.current_traceparent()  # the appending request's span: the turn continues it
    created = []
    for event in events:
        body = _stored_body(event, native)
        if traceparent:
            body[tracing.TRACEPARENT_FIELD] = traceparent
        created.append(SessionEvent(session_id=session_id, type=event["type"], body=body, created_at=timezone.now()))
    return created


def _check_and_route(events: list[dict[str, Any]], created: list[SessionEvent], locked: Session) -> None:
    """Under the session's lock: what the batch answers is open, and answers to a child thread's call reach it."""
    _check_events(events, locked)
    thread_log.route_answers(locked, created)


def _check_events(events: list[dict[str, Any]], locked: Session) -> None:
    """What the batch answers must be open in the locked session's log (plain messages read nothing)."""
    kinds = {event["type"] for event in events}
    state = {
        "confirmations": _pending_confirmations(locked)
        if kinds & {"user.tool_confirmation", "user.tool_result"}
        else set(),
        "custom_tool_uses": (
            _open_calls(locked, "agent.custom_tool_use", ("user.custom_tool_result",), "custom_tool_use_id")
            if "user.custom_tool_result" in kinds
            else set()
        ),
        "tool_uses": (
            # the runtime answers a denied or abandoned call itself (`agent.tool_result`)
            _open_calls(locked, "agent.tool_use", ("user.tool_result", "agent.tool_result"), "tool_use_id")
            if "user.tool_result" in kinds
            else set()
        ),
    }
    for index, event in enumerate(events):
        _check_event(locked, index, event, state)
