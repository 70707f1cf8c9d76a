"""The admin's list of sessions through Django's test client: "Requires action" as a status and a filter, the
search by agent name, title, metadata and event text (PostgreSQL full text), newest first, and the columns for
tokens, cost, duration and last activity."""

from __future__ import annotations

from django.db import connection
from django.test.utils import CaptureQueriesContext

from registry.sessions import log, services
from registry.sessions.models import Session
from registry.sessions.selectors import sessions_matching
from tests.support.admin_pages import SESSIONS, listed, listed_in_order, page
from tests.support.admin_turns import Turn, write_pending_confirmation
from tests.support.tenants import Tenant


def open_session(tenant: Tenant, agent_name: str, **fields: object) -> str:
    """A session of a new agent called `agent_name` (and a new environment), with these fields."""
    api = tenant.client
    agent = api.post("/v1/agents", {"name": agent_name, "model": "m"}, format="json").json()
    environment = api.post("/v1/environments", {"name": "box"}, format="json").json()
    body = {"agent": agent["id"], "environment_id": environment["id"], **fields}
    return str(api.post("/v1/sessions", body, format="json").json()["id"])


def say(session_id: str, text: str) -> None:
    log.emit(session_id=session_id, type="agent.message", body={"content": [{"type": "text", "text": text}]})


def test_requires_action_is_a_status_and_a_filter(console, turn: Turn, tenant: Tenant):
    idle = open_session(tenant, "idle one")
    running = open_session(tenant, "busy one")
    log.transition(session_id=running, status="running")
    write_pending_confirmation(turn.session_id)
    html = page(console, SESSIONS)
    row = html[html.index(f">{turn.session_id}</a>") :].split("</tr>")[0]
    assert "Requires action" in row
    assert "?status__exact=requires_action" in html and ">Requires action</a>" in html
    assert listed(console, "status__exact=requires_action") == {turn.session_id}
    assert listed(console, "status__exact=idle") == {idle}
    assert listed(console, "status__exact=running") == {running}


def test_search_finds_sessions_by_agent_name_title_metadata_and_event_text(console, turn: Turn, tenant: Tenant):
    orchard = open_session(tenant, "Orchard Concierge")
    titled = open_session(tenant, "plain", title="Quarterly billing review")
    tagged = open_session(tenant, "plain", metadata={"customer": "acme-europe"})
    chatty = open_session(tenant, "plain")
    say(chatty, "The invoices were reconciled yesterday.")
    assert listed(console, "q=orchard") == {orchard}
    assert listed(console, "q=billing+review") == {titled}
    assert listed(console, "q=acme-europe") == {tagged}
    assert listed(console, f"q={orchard}") == {orchard}
    assert listed(console, "q=nothing+like+this") == set()
    assert listed(console, "q=reconciled") == {chatty}
    # Full text: words, stemmed ("invoice" finds "invoices"), in any order; "files" finds the turn's "Which files".
    assert listed(console, "q=invoice+reconcile") == {chatty}
    assert listed(console, "q=file") == {turn.session_id}
    assert listed(console, "q=ciled") == set()  # a word's inside is not a word


def test_event_text_search_uses_the_full_text_index(turn: Turn):
    with connection.cursor() as cursor:
        cursor.execute("SET enable_seqscan = off")
        try:
            with CaptureQueriesContext(connection) as captured:
                list(sessions_matching(Session.objects.all(), "files"))
            cursor.execute("EXPLAIN " + captured.captured_queries[-1]["sql"])
            plan = "\n".join(row[0] for row in cursor.fetchall())
        finally:
            cursor.execute("SET enable_seqscan = on")
    assert "session_event_text_idx" in plan


def test_the_newest_session_comes_first(console, turn: Turn, tenant: Tenant):
    second, third = open_session(tenant, "later"), open_session(tenant, "latest")
    assert listed_in_order(console, "") == [third, second, turn.session_id]


def test_columns_for_tokens_cost_duration_and_last_activity(console, turn: Turn):
    services.session_archive(session=Session.objects.get(pk=turn.session_id))
    html = page(console, SESSIONS)
    for header in ("tokens", "list cost", "duration", "last activity"):
        assert f">{header.capitalize()}<" in html, header
    row = html[html.index(f">{turn.session_id}</a>") :].split("</tr>")[0]
    assert "1,200 in · 345 out" in row and "0.0000 USD" in row and ">0 s<" in row and "Terminated" in row
