"""The session thread object (`SessionThreadSerializer`): a child thread rendered from its row, the primary
thread from its session (it has no row of its own)."""

from __future__ import annotations

from decimal import ROUND_HALF_UP, Decimal
from typing import Any

from rest_framework import serializers

from registry.core.serialization import ArchivableObjectSerializer, ConstantField, timestamp
from registry.sessions.models import Session, SessionThread, primary_thread_id
from registry.sessions.selectors import duration_seconds
from registry.sessions.serializers import session_agent, session_stats

CENT = Decimal("0.01")


def list_cost(usd: Decimal) -> dict[str, str]:
    """A list cost as the API shows money: whole cents (rounded to the nearest) as a decimal string."""
    cents = int((usd / CENT).quantize(Decimal(1), rounding=ROUND_HALF_UP))
    return {"amount": str(cents), "currency": "USD"}


def thread_usage(usage: dict[str, Any], active_seconds: float, list_cost_usd: Decimal) -> dict[str, Any]:
    """Token totals as the session renders its own, with the active time and the list cost."""
    return {**usage, "active_seconds": active_seconds, "list_cost": list_cost(list_cost_usd)}


class SessionThreadSerializer(ArchivableObjectSerializer):
    """A thread of a session. The primary thread is the session: its status, usage and stats are the session's,
    and its agent is the session's without the multiagent roster (a thread does not repeat it)."""

    type = ConstantField("session_thread")
    agent = serializers.DictField()
    session_id = serializers.CharField()
    parent_thread_id = serializers.CharField(allow_null=True)
    status = serializers.ChoiceField(choices=SessionThread.Status.choices)
    stats = serializers.DictField(allow_null=True)
    usage = serializers.DictField(allow_null=True)
    workflow_run_id = serializers.CharField(allow_null=True)

    @classmethod
    def render(cls, thread: Session | SessionThread) -> dict[str, Any]:
        fields = cls.primary(thread) if isinstance(thread, Session) else cls.child(thread)
        return {
            **fields,
            "type": "session_thread",
            "workflow_run_id": None,
            "created_at": timestamp(thread.created_at),
            "updated_at": timestamp(thread.updated_at),
            "archived_at": timestamp(thread.archived_at),
        }

    @staticmethod
    def primary(session: Session) -> dict[str, Any]:
        agent = {key: value for key, value in session_agent(session).items() if key != "multiagent"}
        return {
            "id": primary_thread_id(session.pk),
            "agent": agent,
            "session_id": session.pk,
            "parent_thread_id": None,
            "status": session.status,
            "stats": {**session_stats(session), "startup_seconds": None},
            "usage": thread_usage(session.usage, session.active_seconds, session.list_cost_usd),
        }

    @staticmethod
    def child(thread: SessionThread) -> dict[str, Any]:
        """Stats once the thread first ran (a child starts at once: no startup time); usage once it has some."""
        stats = None
        if thread.started_at is not None:
            stats = {
                "active_seconds": thread.active_seconds,
                "duration_seconds": duration_seconds(thread),
                "startup_seconds": 0.0,
            }
        usage = None
        if thread.usage is not None:
            usage = thread_usage(thread.usage, thread.active_seconds, thread.list_cost_usd)
        return {
            "id": thread.pk,
            "agent": thread.agent,
            "session_id": thread.session_id,
            "parent_thread_id": thread.parent_thread_id,
            "status": thread.status,
            "stats": stats,
            "usage": usage,
        }
