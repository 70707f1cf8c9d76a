"""The admin console through Django's test client: the session transcript and its live reads, links
between the pages, list filters and search, secrets never shown, static files served by WhiteNoise."""

from __future__ import annotations

import gzip

from django.contrib.auth.models import User
from django.core.management import call_command
from django.test import Client

from registry.agents.models import AgentVersion
from registry.sessions import log, services
from registry.vaults.models import VaultCredential
from tests.support.admin_pages import SESSIONS, listed, on, page
from tests.support.admin_turns import ANSWER, QUESTION, REPOSITORY_TOKEN, VAULT_TOKEN, Turn, emit


def test_session_page_reads_as_a_transcript(console, turn: Turn):
    html = page(console, on(SESSIONS, turn.session_id))
    transcript = html[html.index('id="transcript-events"') :]
    order = [QUESTION, "Thinking", "Tool call: bash", "ls /srv", "Tool result: bash", "notes.txt"]
    order += ["Error: model_overloaded_error", "input 1200 · output 345", ANSWER, "Status: idle", "end_turn"]
    positions = [transcript.index(text) for text in order]
    assert positions == sorted(positions)
    assert 'class="transcript-entry kind-error is-error"' in transcript
    assert "<details><summary>Show thinking</summary>" in transcript
    assert "span.model_request_start" not in transcript
    assert 'data-following="true"' in html
    assert "Save" not in html  # a view-only page: sessions change through the API and the runtime


def test_live_read_returns_only_later_events_with_totals(console, turn: Turn):
    url = on(SESSIONS, turn.session_id, "transcript")
    first = console.get(url).json()
    assert QUESTION in first["html"] and first["following"] is True and first["more"] is False
    emit(turn.session_id, "agent.message", content=[{"type": "text", "text": "One more thing."}])
    later = console.get(url, {"after": first["last_seq"]}).json()
    assert "One more thing." in later["html"] and QUESTION not in later["html"]
    assert later["last_seq"] == first["last_seq"] + 1
    assert "input 1200" in later["summary"] and "idle" in later["summary"]
    assert console.get(url, {"after": later["last_seq"]}).json()["html"].strip() == ""


def test_live_read_stops_following_a_terminated_session(console, turn: Turn):
    log.transition(session_id=turn.session_id, status="terminated")
    assert console.get(on(SESSIONS, turn.session_id, "transcript")).json()["following"] is False


def test_live_read_is_for_staff_only(client, db, turn: Turn):
    url = on(SESSIONS, turn.session_id, "transcript")
    assert client.get(url).status_code == 302
    User.objects.create_user("visitor", password="pw", is_staff=True)  # staff, without permission on sessions
    client.login(username="visitor", password="pw")
    assert client.get(url).status_code in (403, 404)


def test_secrets_are_never_shown(console, turn: Turn):
    credential = VaultCredential.objects.get(vault_id=turn.vault_id)
    for path in (
        on(SESSIONS, turn.session_id),
        on(SESSIONS, turn.session_id, "transcript"),
        on("/admin/vaults/vault/", turn.vault_id),
        on("/admin/vaults/vaultcredential/", credential.pk),
    ):
        html = page(console, path)
        assert REPOSITORY_TOKEN not in html and VAULT_TOKEN not in html, path
        assert "sealed" not in html, path
    assert "github.com/acme/tool.git" in page(console, on(SESSIONS, turn.session_id))


def test_pages_link_agents_versions_sessions_environments_and_vaults(console, turn: Turn, tenant):
    session = page(console, on(SESSIONS, turn.session_id))
    version = AgentVersion.objects.get(agent_id=turn.agent_id, version=1)
    for target in (
        on("/admin/agents/agent/", turn.agent_id),
        on("/admin/agents/agentversion/", version.pk),
        on("/admin/environments/environment/", turn.environment_id),
        on("/admin/vaults/vault/", turn.vault_id),
        on("/admin/workspaces/workspace/", tenant.workspace.id),
    ):
        assert f'href="{target}"' in session, target
    agent = page(console, on("/admin/agents/agent/", turn.agent_id))
    assert f"{SESSIONS}?agent={turn.agent_id}" in agent and "1 sessions" in agent
    assert on("/admin/agents/agentversion/", version.pk) in agent
    versions = page(console, on("/admin/agents/agentversion/", version.pk))
    assert f"{SESSIONS}?agent={turn.agent_id}&amp;agent_version=1" in versions
    environment = page(console, on("/admin/environments/environment/", turn.environment_id))
    assert f"{SESSIONS}?environment={turn.environment_id}" in environment
    vault = page(console, on("/admin/vaults/vault/", turn.vault_id))
    assert f"{SESSIONS}?vault_ids__icontains={turn.vault_id}" in vault and "static_bearer" in vault
    workspace = page(console, on("/admin/workspaces/workspace/", tenant.workspace.id))
    assert f"{SESSIONS}?workspace={tenant.workspace.id}" in workspace


def test_session_links_and_filters_narrow_the_list(console, turn: Turn, tenant):
    other = tenant.client.post(
        "/v1/sessions", {"agent": turn.agent_id, "environment_id": turn.environment_id, "title": "Other"}, format="json"
    ).json()["id"]
    services.session_archive(session=services.Session.objects.get(pk=other))
    both = {turn.session_id, other}
    assert listed(console, f"agent={turn.agent_id}") == both
    assert listed(console, f"agent={turn.agent_id}&agent_version=1") == both
    assert listed(console, f"environment={turn.environment_id}") == both
    assert listed(console, f"workspace={tenant.workspace.id}") == both
    assert listed(console, f"vault_ids__icontains={turn.vault_id}") == {turn.session_id}
    assert listed(console, "status__exact=terminated") == {other}
    assert listed(console, "archived=no") == {turn.session_id}
    assert listed(console, "archived=yes") == {other}
    assert listed(console, f"agent__id__exact={turn.agent_id}") == both
    assert listed(console, "created_at__gte=2000-01-01+00%3A00%3A00%2B00%3A00") == both
    assert listed(console, "q=Listing") == {turn.session_id}
    assert listed(console, f"q={other}") == {other}


def test_every_console_page_renders(console, turn: Turn):
    for path in (
        SESSIONS,
        "/admin/agents/agent/",
        "/admin/agents/agentversion/",
        "/admin/environments/environment/",
        "/admin/vaults/vault/",
        "/admin/vaults/vaultcredential/",
        "/admin/agents/agent/?archived=yes",
        "/admin/environments/environment/?archived=no",
    ):
        page(console, path)


def test_static_files_are_served_from_the_apps(client, db):
    response = client.get("/static/admin/css/base.css")
    assert response.status_code == 200 and response["Content-Type"].startswith("text/css")
    assert b"--body-fg" in response.getvalue()
    response.close()


def test_collected_static_files_are_served_compressed(settings, tmp_path, db):
    """The image's way: `collectstatic` at build, WhiteNoise serving only that tree."""
    settings.STATIC_ROOT = tmp_path
    call_command("collectstatic", interactive=False, verbosity=0)
    assert (tmp_path / "admin" / "css" / "base.css.gz").exists()
    settings.WHITENOISE_USE_FINDERS = settings.WHITENOISE_AUTOREFRESH = False
    response = Client().get("/static/admin/css/base.css", headers={"accept-encoding": "gzip"})
    assert response.status_code == 200 and response["Content-Encoding"] == "gzip"
    assert b"--body-fg" in gzip.decompress(response.getvalue())
    response.close()
