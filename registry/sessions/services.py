"""Writes for sessions and their event log.

Public API writes: create, update, archive (terminates), delete, append user events.
Runtime writes: acknowledge user events, emit events, change status, add usage and evaluations.
Every visible event gets the next `seq` under a lock on the session row.
"""

from __future__ import annotations

import secrets
from collections.abc import Iterable
from typing import Any

from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from registry.agents.models import Agent, AgentVersion
from registry.core.errors import invalid_request
from registry.core.fields import merge_metadata
from registry.core.secrets import seal
from registry.core.selectors import require_live
from registry.environments.models import Environment
from registry.files.selectors import check_file_resources
from registry.gitcreds.selectors import git_credential_for_url
from registry.memory.models import MemoryStore
from registry.sessions import notify
from registry.sessions.events import MAX_ITERATIONS_DEFAULT, NATIVE_BETA_FIELD
from registry.sessions.models import Session, SessionEvent
from registry.vaults.models import Vault
from registry.workspaces.models import Workspace

EMPTY_USAGE = {
    "input_tokens": 0,
    "output_tokens": 0,
    "cache_read_input_tokens": 0,
    "cache_creation": {"ephemeral_5m_input_tokens": 0, "ephemeral_1h_input_tokens": 0},
}


# -- creating a session -------------------------------------------------------------------------
def _resolve_agent(workspace: Workspace, reference: dict[str, Any]) -> tuple[Agent, int, dict[str, Any]]:
    agent = Agent.objects.filter(workspace=workspace, pk=reference["id"]).first()
    if agent is None:
        raise invalid_request(f"agent: no agent {reference['id']} in this workspace.")
    if agent.archived_at is not None:
        raise invalid_request(f"agent: agent {agent.id} is archived and cannot start new sessions.")
    version = reference.get("version") or agent.version
    if version == agent.version:
        return agent, version, agent.spec
    found = AgentVersion.objects.filter(agent=agent, version=version).first()
    if found is None:
        raise invalid_request(f"agent.version: agent {agent.id} has no version {version}.")
    return agent, version, found.spec


def _resolve_environment(workspace: Workspace, environment_id: str) -> Environment:
    environment = Environment.objects.filter(workspace=workspace, pk=environment_id).first()
    if environment is None:
        raise invalid_request(f"environment_id: no environment {environment_id} in this workspace.")
    if environment.archived_at is not None:
        raise invalid_request(f"environment_id: environment {environment_id} is archived.")
    return environment


def _check_references(workspace: Workspace, values: dict[str, Any]) -> None:
    """Vaults and memory stores a session names must be live resources of its workspace."""
    require_live(Vault, workspace=workspace, ids=list(values.get("vault_ids") or []), field="vault_ids", noun="vault")
    store_ids = [item["memory_store_id"] for item in values.get("resources") or [] if item["type"] == "memory_store"]
    require_live(MemoryStore, workspace=workspace, ids=store_ids, field="resources", noun="memory store")


def _repository_credential(workspace: Workspace, resource: dict[str, Any]) -> dict[str, Any]:
    """A repository without its own token clones with the workspace's git credential for its host."""
    if resource.get("authorization_token"):
        return {}
    credential = git_credential_for_url(workspace_id=workspace.pk, url=resource["url"])
    return {"git_credential_id": credential.id} if credential else {}


def _resource_record(resource: dict[str, Any], now: str) -> dict[str, Any]:
    """A session resource as stored: an id, timestamps, defaults, and any token sealed (never echoed)."""
    record = {key: value for key, value in resource.items() if key != "authorization_token"}
    record["id"] = f"sesrsc_{secrets.token_hex(12)}"
    record["created_at"] = record["updated_at"] = now
    if resource["type"] == "file":
        record.setdefault("mount_path", None)
        record["mount_path"] = record["mount_path"] or f"/mnt/session/uploads/{resource['file_id']}"
    elif resource["type"] == "memory_store":
        record["access"] = record.get("access") or "read_write"
        record.setdefault("instructions", None)
    else:
        repository = resource["url"].rstrip("/").rsplit("/", 1)[-1].removesuffix(".git")
        record["mount_path"] = record.get("mount_path") or f"/workspace/{repository}"
        record.setdefault("checkout", None)
        if resource.get("authorization_token"):
            record["sealed_authorization_token"] = seal(resource["authorization_token"], context=record["id"])
    return record


@transaction.atomic
def session_create(*, workspace: Workspace, values: dict[str, Any]) -> Session:
    agent, version, spec = _resolve_agent(workspace, values["agent"])
    environment = _resolve_environment(workspace, values["environment_id"])
    _check_references(workspace, values)
    check_file_resources(workspace_id=workspace.pk, resources=values.get("resources") or [])
    now = timezone.now().isoformat()
    session = Session.objects.create(
        workspace=workspace,
        agent=agent,
        agent_version=version,
        agent_snapshot=spec,
        environment=environment,
        harness=values.get("harness") or {"type": "default"},
        title=values.get("title"),
        metadata=values.get("metadata", {}),
        vault_ids=list(values.get("vault_ids") or []),
        resources=[
            {
                **_resource_record(item, now),
                **(_repository_credential(workspace, item) if item["type"] == "github_repository" else {}),
            }
            for item in values.get("resources") or []
        ],
        usage=EMPTY_USAGE,
    )
    initial_events = values.get("initial_events") or []
    if initial_events:
        events_append(session=session, events=initial_events)
    return session


@transaction.atomic
def session_update(*, session: Session, values: dict[str, Any]) -> Session:
    locked = Session.objects.select_for_update().get(pk=session.pk)
    if "title" in values:
        locked.title = values["title"]
    if "metadata" in values:
        locked.metadata = merge_metadata(locked.metadata, values["metadata"])
    locked.save(update_fields=["title", "metadata", "updated_at"])
    return locked


@transaction.atomic
def session_archive(*, session: Session) -> Session:
    """Archive and terminate: the runtime stops the session's work; its streams end."""
    locked = Session.objects.select_for_update().get(pk=session.pk)
    if locked.archived_at is None:
        locked.archived_at = timezone.now()
        locked.save(update_fields=["archived_at", "updated_at"])
    if locked.status != Session.Status.TERMINATED:
        session_transition(session_id=locked.pk, status=Session.Status.TERMINATED)
        locked.refresh_from_db()
    return locked


@transaction.atomic
def session_delete(*, session: Session) -> None:
    Session.objects.filter(pk=session.pk).delete()
    notify.wake_after_commit(session.pk)


# -- user events ----------------------------------------------------------------------------------
def _pending_confirmations(session: Session) -> set[str]:
    """Tool calls paused by an `always_ask` policy that no confirmation has answered yet."""
    asked = set(
        SessionEvent.objects.filter(
            session=session, type__in=("agent.mcp_tool_use", "agent.tool_use"), body__evaluated_permission="ask"
        ).values_list("id", flat=True)
    )
    answered = set(
        SessionEvent.objects.filter(session=session, type="user.tool_confirmation").values_list(
            "body__tool_use_id", flat=True
        )
    )
    return asked - answered


def _open_custom_tool_uses(session: Session) -> set[str]:
    used = set(SessionEvent.objects.filter(session=session, type="agent.custom_tool_use").values_list("id", flat=True))
    answered = set(
        SessionEvent.objects.filter(session=session, type="user.custom_tool_result").values_list(
            "body__custom_tool_use_id", flat=True
        )
    )
    return used - answered


def _check_event(session: Session, index: int, event: dict[str, Any], state: dict[str, set[str]]) -> None:
    """Rules that depend on the session: what a confirmation or a tool result may answer."""
    kind = event["type"]
    where = f"events[{index}]"
    if kind == "user.tool_confirmation":
        if event["tool_use_id"] not in state["confirmations"]:
            raise invalid_request(f"{where}.tool_use_id: no tool call awaiting confirmation has this id.")
        state["confirmations"].discard(event["tool_use_id"])
    elif kind == "user.custom_tool_result":
        if event["custom_tool_use_id"] not in state["custom_tool_uses"]:
            raise invalid_request(f"{where}.custom_tool_use_id: no unanswered agent.custom_tool_use has this id.")
        state["custom_tool_uses"].discard(event["custom_tool_use_id"])
    elif kind == "user.tool_result":
        harness = session.harness
        separate = harness.get("type") == "agent_sdk_harness" and harness.get("mode") == "separate"
        if not (separate and session.environment.config.get("type") == "self_hosted"):
            raise invalid_request(
                f"{where}: user.tool_result needs the agent_sdk_harness in separate mode on a self_hosted environment."
            )


def _stored_body(event: dict[str, Any], native: bool) -> dict[str, Any]:
    body = {key: value for key, value in event.items() if key != "type"}
    if native:
        body[NATIVE_BETA_FIELD] = True
    if event["type"] == "user.define_outcome":
        body["outcome_id"] = f"outcome_{secrets.token_hex(12)}"
        body["max_iterations"] = body.get("max_iterations") or MAX_ITERATIONS_DEFAULT
    return body


@transaction.atomic
def events_append(*, session: Session, events: Iterable[dict[str, Any]], native: bool = False) -> list[SessionEvent]:
    """Append user events, all or none. They become visible once the runtime acknowledges them."""
    locked = Session.objects.select_for_update().select_related("environment").get(pk=session.pk)
    if locked.status == Session.Status.TERMINATED:
        raise invalid_request("This session is terminated and accepts no more events.")
    events = list(events)
    kinds = {event["type"] for event in events}
    # Only batches that answer something pay for reading what is open (plain messages stay O(1)).
    state = {
        "confirmations": _pending_confirmations(locked) if "user.tool_confirmation" in kinds else set(),
        "custom_tool_uses": _open_custom_tool_uses(locked) if "user.custom_tool_result" in kinds else set(),
    }
    for index, event in enumerate(events):
        _check_event(locked, index, event, state)
    created = [SessionEvent(session=locked, type=event["type"], body=_stored_body(event, native)) for event in events]
    SessionEvent.objects.bulk_create(created)
    Session.objects.filter(pk=locked.pk).update(has_pending_events=True, updated_at=timezone.now())
    return created


# -- runtime writes -------------------------------------------------------------------------------
def _next_seq(session_id: str) -> int:
    """The next sequence number; the caller holds the session row lock until commit."""
    session = Session.objects.select_for_update().only("last_seq").get(pk=session_id)
    return session.last_seq + 1


@transaction.atomic
def events_acknowledge(*, session_id: str, event_ids: Iterable[str]) -> list[SessionEvent]:
    """Mark user events processed: each gets `processed_at` and the next `seq`, in append order."""
    seq = _next_seq(session_id)
    now = timezone.now()
    pending = list(
        SessionEvent.objects.filter(session_id=session_id, pk__in=list(event_ids), seq__isnull=True).order_by(
            "created_at", "id"
        )
    )
    for event in pending:
        event.seq, event.processed_at = seq, now
        seq += 1
    SessionEvent.objects.bulk_update(pending, ["seq", "processed_at"])
    remaining = SessionEvent.objects.filter(session_id=session_id, seq__isnull=True).exists()
    Session.objects.filter(pk=session_id).update(last_seq=seq - 1, has_pending_events=remaining, updated_at=now)
    notify.wake_after_commit(session_id)
    return pending


@transaction.atomic
def event_emit(*, session_id: str, type: str, body: dict[str, Any], event_id: str | None = None) -> SessionEvent:
    """Append a visible event produced by the session (`agent.*`, `session.*`, `span.*`)."""
    seq = _next_seq(session_id)
    now = timezone.now()
    event = SessionEvent(session_id=session_id, seq=seq, type=type, body=body, processed_at=now)
    if event_id:
        event.id = event_id
    event.save(force_insert=True)
    Session.objects.filter(pk=session_id).update(last_seq=seq, updated_at=now)
    notify.wake_after_commit(session_id)
    return event


STATUS_EVENTS = {
    Session.Status.RUNNING: "session.status_running",
    Session.Status.RESCHEDULING: "session.status_rescheduled",
    Session.Status.IDLE: "session.status_idle",
    Session.Status.TERMINATED: "session.status_terminated",
}


@transaction.atomic
def session_transition(*, session_id: str, status: str, stop_reason: dict[str, Any] | None = None) -> SessionEvent:
    """Set the status and emit its `session.status_*` event in the same transaction."""
    _next_seq(session_id)  # take the row lock first, so status and event change together
    fields: dict[str, Any] = {"status": status, "stop_reason": stop_reason if status == Session.Status.IDLE else None}
    if status == Session.Status.TERMINATED:
        fields.update(lease_owner=None, lease_expires_at=None)
    Session.objects.filter(pk=session_id).update(**fields)
    body = {"stop_reason": stop_reason} if status == Session.Status.IDLE else {}
    return event_emit(session_id=session_id, type=STATUS_EVENTS[Session.Status(status)], body=body)


@transaction.atomic
def session_add_usage(*, session_id: str, usage: dict[str, int], active_seconds: float = 0.0) -> None:
    """Accumulate a model call's token usage and the turn's active time."""
    session = Session.objects.select_for_update().get(pk=session_id)
    totals = {**EMPTY_USAGE, **session.usage}
    for key in ("input_tokens", "output_tokens", "cache_read_input_tokens"):
        totals[key] = totals.get(key, 0) + int(usage.get(key) or 0)
    creation = dict(totals.get("cache_creation") or {})
    creation["ephemeral_5m_input_tokens"] = creation.get("ephemeral_5m_input_tokens", 0) + int(
        usage.get("cache_creation_input_tokens") or 0
    )
    totals["cache_creation"] = creation
    session.usage = totals
    session.active_seconds += active_seconds
    session.save(update_fields=["usage", "active_seconds", "updated_at"])


@transaction.atomic
def session_add_evaluation(*, session_id: str, evaluation: dict[str, Any]) -> None:
    session = Session.objects.select_for_update().get(pk=session_id)
    session.outcome_evaluations = [*session.outcome_evaluations, evaluation]
    session.save(update_fields=["outcome_evaluations", "updated_at"])


def sessions_with_work() -> Q:
    """Sessions the runtime should run: pending user events, or a running turn whose lease ran out."""
    now = timezone.now()
    lease_free = Q(lease_expires_at__isnull=True) | Q(lease_expires_at__lt=now)
    orphaned_turn = Q(status__in=(Session.Status.RUNNING, Session.Status.RESCHEDULING))
    return (Q(has_pending_events=True) | orphaned_turn) & lease_free & ~Q(status=Session.Status.TERMINATED)
