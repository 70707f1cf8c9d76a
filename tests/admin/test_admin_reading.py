"""Reading stored content in the admin through Django's test client, as a staff member of the workspace: agent
specs pretty-printed with the diff between versions; the transcript's agent messages as safe markdown, tool input
and output in monospace, the recorded thinking (or why there is none); memory contents with their versions; when
an API key was last used. Every payload that would run in a browser is shown escaped."""

from __future__ import annotations

import pytest
from django.test import Client

from registry.agents.models import AgentVersion
from registry.runtime.model_step import kept_thinking
from registry.sessions import log
from registry.workspaces import services as workspace_services
from tests.support.admin_pages import SESSIONS, on, page
from tests.support.admin_staff import staff_client
from tests.support.admin_turns import THINKING, Turn, emit
from tests.support.tenants import Tenant

AGENTS = "/admin/agents/agent/"
VERSIONS = "/admin/agents/agentversion/"
STORES = "/admin/memory/memorystore/"
API_KEYS = "/admin/workspaces/apikey/"
SCRIPT = "<script>alert(1)</script>"
ONERROR = "<img src=x onerror=alert(1)>"


def assert_inert(html: str) -> None:
    """None of this file's payloads made it into the page as markup."""
    assert SCRIPT not in html and ONERROR not in html and 'href="javascript:' not in html
    assert "onerror=alert(1)" not in html.replace("&lt;img src=x onerror=alert(1)&gt;", "")


@pytest.fixture
def member(tenant: Tenant) -> Client:
    """A viewer of the tenant's workspace: reading takes no more."""
    return staff_client("reader", {tenant.workspace: "viewer"})


# -- agents ---------------------------------------------------------------------------------------------------
@pytest.fixture
def agent_id(tenant: Tenant) -> str:
    """An agent at version 2: its system prompt changed from a script to plain words."""
    api = tenant.client
    agent = api.post("/v1/agents", {"name": "helper", "model": "m", "system": SCRIPT}, format="json").json()
    changed = api.post(f"/v1/agents/{agent['id']}", {"system": "Be brief.", "version": 1}, format="json")
    assert changed.json()["version"] == 2
    return str(agent["id"])


def test_agent_page_shows_the_spec_pretty_and_the_diff_between_versions(member: Client, agent_id: str):
    html = page(member, on(AGENTS, agent_id))

    assert '<pre class="reading-json">{\n  &quot;' in html
    assert "\n  &quot;system&quot;: &quot;Be brief.&quot;" in html
    assert '<span class="diff-file">--- version 1</span><span class="diff-file">+++ version 2</span>' in html
    assert '<span class="diff-removed">-  &quot;system&quot;: &quot;&lt;script&gt;alert(1)&lt;/script&gt;&quot;' in html
    assert '<span class="diff-added">+  &quot;system&quot;: &quot;Be brief.&quot;' in html
    assert "compare with the previous version" in html
    assert "registry/admin_reading.css" in html
    assert_inert(html)


def test_a_version_is_compared_with_its_predecessor(member: Client, agent_id: str):
    first, second = AgentVersion.objects.filter(agent_id=agent_id).order_by("version")
    second_page = page(member, on(VERSIONS, second.pk))
    first_page = page(member, on(VERSIONS, first.pk))

    assert '<span class="diff-added">+  &quot;system&quot;: &quot;Be brief.&quot;' in second_page
    assert "&quot;system&quot;: &quot;&lt;script&gt;alert(1)&lt;/script&gt;&quot;" in first_page
    assert "The first version: nothing to compare with." in first_page
    assert_inert(first_page + second_page)


# -- the transcript -------------------------------------------------------------------------------------------
MARKDOWN = f"**Done.** See [the docs](https://example.com/docs) or [this](javascript:alert(1)).\n\n{SCRIPT} {ONERROR}"


@pytest.fixture
def written(turn: Turn) -> Turn:
    """The finished turn, then a tool result and an agent message carrying payloads, a redacted thinking and a
    thinking written before the runtime kept its text."""
    call = emit(turn.session_id, "agent.tool_use", name="bash", input={"command": SCRIPT}, evaluated_permission="allow")
    emit(turn.session_id, "agent.tool_result", tool_use_id=call, content=[{"type": "text", "text": ONERROR}])
    emit(turn.session_id, "agent.thinking", **{log.THINKING_FIELD: {"type": "redacted_thinking"}})
    emit(turn.session_id, "agent.thinking")
    emit(turn.session_id, "agent.message", content=[{"type": "text", "text": MARKDOWN}])
    return turn


def test_agent_messages_are_markdown_rendered_safely(member: Client, written: Turn):
    html = page(member, on(SESSIONS, written.session_id))

    assert "<strong>Done.</strong>" in html
    assert '<a href="https://example.com/docs" rel="noopener nofollow noreferrer">the docs</a>' in html
    assert "[this](javascript:alert(1))" in html  # not a link
    assert "&lt;script&gt;alert(1)&lt;/script&gt; &lt;img src=x onerror=alert(1)&gt;" in html
    assert_inert(html)


def test_tool_input_and_output_are_monospace_and_escaped(member: Client, written: Turn):
    html = page(member, on(SESSIONS, written.session_id))

    assert (
        '<pre class="detail">{\n  &quot;command&quot;: &quot;&lt;script&gt;alert(1)&lt;/script&gt;&quot;\n}</pre>'
        in html
    )
    assert '<pre class="output">&lt;img src=x onerror=alert(1)&gt;</pre>' in html
    assert '<pre class="output">notes.txt</pre>' in html
    assert_inert(html)


def test_thinking_is_shown_or_why_it_is_not(member: Client, written: Turn):
    html = page(member, on(SESSIONS, written.session_id))

    assert f'<summary>Show thinking</summary><div class="text">{THINKING}</div>' in html
    assert "Thinking not kept by the provider: it returned this thinking encrypted (redacted)." in html
    assert "Not recorded: this event was written before the runtime kept the thinking&#x27;s text." in html
    assert "(the thinking itself is not recorded)" not in html


def test_the_live_read_renders_entries_the_same_way(member: Client, written: Turn):
    read = member.get(f"{SESSIONS}{written.session_id}/transcript/?after=0").json()["html"]

    assert "<strong>Done.</strong>" in read and THINKING in read
    assert '<pre class="output">&lt;img src=x onerror=alert(1)&gt;</pre>' in read
    assert_inert(read)


def test_the_runtime_keeps_the_thinking_text_or_that_it_was_redacted():
    thinking = {"type": "thinking", "thinking": "Plan: list it.", "signature": "c2ln"}

    assert kept_thinking(thinking) == {"type": "thinking", "text": "Plan: list it."}
    assert kept_thinking({"type": "thinking", "thinking": "", "signature": "c2ln"}) == {"type": "thinking", "text": ""}
    assert kept_thinking({"type": "redacted_thinking", "data": "ZW5j"}) == {"type": "redacted_thinking"}


def test_the_api_never_shows_the_kept_thinking(tenant: Tenant, written: Turn):
    events = tenant.client.get(f"/v1/sessions/{written.session_id}/events", {"limit": 100}).json()["data"]
    thinking = [event for event in events if event["type"] == "agent.thinking"]

    assert thinking and all(set(event) == {"id", "type", "processed_at"} for event in thinking)


# -- memory stores ------------------------------------------------------------------------------------------
def test_memory_store_page_lists_memories_with_contents_and_versions(member: Client, tenant: Tenant):
    api = tenant.client
    store = api.post("/v1/memory_stores", {"name": "notes"}, format="json").json()
    memories = f"/v1/memory_stores/{store['id']}/memories"
    memory = api.post(memories, {"path": "/plans/today.md", "content": SCRIPT}, format="json").json()
    api.post(f"{memories}/{memory['id']}", {"content": f"{ONERROR} done"}, format="json")

    html = page(member, on(STORES, store["id"]))

    assert "<code>/plans/today.md</code>" in html
    assert f"<td>{len(ONERROR) + 5} bytes</td>" in html
    assert '<pre class="reading-text memory-content">&lt;img src=x onerror=alert(1)&gt; done</pre>' in html
    assert "Versions (2)" in html
    assert "<strong>modified</strong>" in html and "<strong>created</strong>" in html
    assert '<pre class="reading-text">&lt;script&gt;alert(1)&lt;/script&gt;</pre>' in html
    assert_inert(html)


def test_an_empty_store_says_so_and_the_add_page_has_no_memories(member: Client, tenant: Tenant):
    store = tenant.client.post("/v1/memory_stores", {"name": "empty"}, format="json").json()
    admin = staff_client("writer", {tenant.workspace: "admin"})

    assert "<p>No memories.</p>" in page(member, on(STORES, store["id"]))
    assert "No memories." not in page(admin, f"{STORES}add/")


# -- API keys -------------------------------------------------------------------------------------------------
def test_api_keys_show_when_they_were_last_used(member: Client, tenant: Tenant):
    tenant.client.get("/v1/agents")  # the tenant's key authenticates a request
    unused = workspace_services.api_key_issue(workspace=tenant.workspace, name="spare").api_key
    used = tenant.workspace.api_keys.exclude(pk=unused.pk).get()

    listing = page(member, API_KEYS)
    assert "<th>never</th>" not in listing  # a column of the list, not its heading
    assert listing.count("(to the minute)") == 1 and ">never<" in listing
    assert "(to the minute)" in page(member, on(API_KEYS, used.pk))
    assert "never" in page(member, on(API_KEYS, unused.pk))
    assert ">Last used<" in listing
