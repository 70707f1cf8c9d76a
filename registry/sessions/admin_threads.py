"""The threads of a session's admin page: a tree with the primary thread (the session, whose events are the page's
transcript) at its root and each child thread under its parent, each with its agent, status and usage; a child's
own transcript under it, followed live as the session's is (`live`: what changed after the page's last read)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal
from typing import Any

from django.template.loader import render_to_string

from registry.sessions import admin_list
from registry.sessions.admin_transcript import thread_transcript, usage_text
from registry.sessions.models import Session, SessionThread, primary_thread_id
from registry.sessions.selectors import child_threads

ENTRIES_TEMPLATE = "admin/agent_sessions/session/transcript_entries.html"
NODE_TEMPLATE = "admin/agent_sessions/session/thread_node.html"
SUMMARY_TEMPLATE = "admin/agent_sessions/session/thread_summary.html"


@dataclass
class Node:
    """A thread as the tree shows it; a child's `transcript` is its entries after the seq the page asked from."""

    id: str
    parent_id: str | None
    agent_name: str
    status: str
    status_label: str
    usage: str
    list_cost_usd: Decimal
    active_seconds: float
    created_at: datetime
    archived_at: datetime | None
    transcript: dict[str, Any] | None = None
    children: list[Node] = field(default_factory=list)

    @property
    def primary(self) -> bool:
        return self.parent_id is None


def _primary(session: Session) -> Node:
    return Node(
        id=primary_thread_id(session.pk),
        parent_id=None,
        agent_name=str(session.agent_snapshot.get("name") or session.agent_id),
        status=session.status,
        status_label=admin_list.status_label(session),
        usage=usage_text(session.usage),
        list_cost_usd=session.list_cost_usd,
        active_seconds=round(session.active_seconds, 1),
        created_at=session.created_at,
        archived_at=session.archived_at,
    )


def _child(thread: SessionThread, after_seq: int | None) -> Node:
    """The thread's node; with its entries after `after_seq` unless None (nothing new since the page read it)."""
    return Node(
        id=thread.pk,
        parent_id=thread.parent_thread_id,
        agent_name=thread.agent_name,
        status=thread.status,
        status_label=admin_list.status_label(thread),
        usage=usage_text(thread.usage) if thread.usage is not None else "",
        list_cost_usd=thread.list_cost_usd,
        active_seconds=round(thread.active_seconds, 1),
        created_at=thread.created_at,
        archived_at=thread.archived_at,
        transcript=None if after_seq is None else thread_transcript(thread, after_seq),
    )


def tree(session: Session) -> Node:
    """The primary thread with its descendants, each child's transcript from its start; a child whose parent is
    unknown hangs from the root."""
    root = _primary(session)
    nodes = {root.id: root}
    for thread in child_threads(session).order_by("created_at", "id"):
        nodes[thread.pk] = _child(thread, 0)
    for node in list(nodes.values())[1:]:
        nodes.get(node.parent_id or "", root).children.append(node)
    return root


def parse_known(values: list[str]) -> dict[str, int]:
    """The page's child threads and the last seq it shows of each, from `thread=<id>:<seq>` parameters."""
    known = {}
    for value in values:
        thread_id, _, seq = value.partition(":")
        if seq.isdigit():
            known[thread_id] = int(seq)
    return known


def live(session: Session, known: Mapping[str, int]) -> list[dict[str, Any]]:
    """What the page updates of each thread, in creation order (a parent before its children): the summary; for a
    child the page shows, its entries after its last seq; for one it does not, its whole node to insert."""
    updates = [_update(_primary(session))]
    for thread in child_threads(session).order_by("created_at", "id"):
        shown = known.get(thread.pk)
        if shown is None:
            node = _child(thread, 0)
            updates.append(_update(node, inserted=render_to_string(NODE_TEMPLATE, {"node": node})))
        else:
            updates.append(_update(_child(thread, shown if thread.last_seq > shown else None)))
    return updates


def _update(node: Node, *, inserted: str | None = None) -> dict[str, Any]:
    """A node's update: its `summary`, and either the HTML of the whole node to insert or its new entries."""
    read = node.transcript or {}
    return {
        "id": node.id,
        "parent_id": node.parent_id,
        "summary": render_to_string(SUMMARY_TEMPLATE, {"node": node}),
        "node": inserted,
        "html": render_to_string(ENTRIES_TEMPLATE, {"transcript": read}) if read and inserted is None else "",
        "last_seq": read.get("last_seq"),
        "more": bool(read.get("more")),
    }
