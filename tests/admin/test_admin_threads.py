"""A session's threads on its admin page: a tree (the primary thread at the root, each child under its parent) with
each thread's agent, status and usage and each child's own events in order; the live read appends a child's new
events and inserts new threads, which Chromium shows without a reload (the registry under daphne); scoped to the
staff's workspaces as the page is. Threads are made as the runtime makes them, through `thread_log` (unfenced)."""

from __future__ import annotations

from decimal import Decimal
from html.parser import HTMLParser
from typing import Any

import pytest
from django.contrib.admin.utils import quote
from django.test import Client
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import WebDriverWait

from registry.sessions import thread_log
from registry.sessions.models import SessionThread, primary_thread_id
from tests.support.admin_pages import SESSIONS, on, page
from tests.support.admin_staff import staff_client
from tests.support.admin_turns import ANSWER, Turn
from tests.support.browser import WAIT_SECONDS, log_in, screenshot
from tests.support.live import live_registry
from tests.support.tenants import Tenant

USAGE = {"input_tokens": 321, "output_tokens": 54, "cache_read_input_tokens": 0, "cache_creation_input_tokens": 0}


def spawn(session_id: str, name: str, parent: str | None = None) -> SessionThread:
    return thread_log.create(
        session_id=session_id,
        parent_thread_id=parent or primary_thread_id(session_id),
        depth=1 if parent is None else 2,
        agent_name=name,
        agent={"type": "agent", "name": name},
        max_threads=100,
        fence=None,
    )


def say(thread: SessionThread, text: str) -> None:
    thread_log.emit(thread=thread, type="agent.message", body={"content": [{"type": "text", "text": text}]}, fence=None)


class Threads:
    """The turn's session with `researcher` and `writer` under its primary thread and `checker` under
    `researcher`; the researcher ran a turn that used the model."""

    def __init__(self, session_id: str) -> None:
        self.session_id = session_id
        self.primary = primary_thread_id(session_id)
        self.researcher = spawn(session_id, "researcher")
        self.writer = spawn(session_id, "writer")
        self.checker = spawn(session_id, "checker", self.researcher.pk)
        thread_log.transition(thread=self.researcher, status="running", fence=None)
        say(self.researcher, "Found three sources.")
        thread_log.add_usage(
            thread=self.researcher, usage=USAGE, active_seconds=3.0, list_cost_usd=Decimal("0.02"), fence=None
        )
        thread_log.transition(thread=self.researcher, status="idle", stop_reason={"type": "end_turn"}, fence=None)


@pytest.fixture
def threads(turn: Turn) -> Threads:
    return Threads(turn.session_id)


class ThreadTree(HTMLParser):
    """The thread nodes of a page: each node's parent node, and the text inside each (its descendants' too)."""

    def __init__(self) -> None:
        super().__init__()
        self.parents: dict[str, str | None] = {}
        self.text: dict[str, str] = {}
        self.open: list[str | None] = []  # the node each open <li> is (None: another list item)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag != "li":
            return
        found = dict(attrs)
        node = found.get("data-thread-id") if "thread-node" in (found.get("class") or "") else None
        if node is not None:
            self.parents[node] = next((open_node for open_node in reversed(self.open) if open_node), None)
            self.text[node] = ""
        self.open.append(node)

    def handle_endtag(self, tag: str) -> None:
        if tag == "li" and self.open:
            self.open.pop()

    def handle_data(self, data: str) -> None:
        for node in filter(None, self.open):
            self.text[node] += data


def tree_of(html: str) -> ThreadTree:
    parsed = ThreadTree()
    parsed.feed(html[html.index('id="thread-tree"') :])
    return parsed


def test_the_page_shows_the_threads_as_a_tree_with_each_childs_events(console: Client, threads: Threads):
    html = page(console, on(SESSIONS, threads.session_id))
    tree = tree_of(html)
    assert tree.parents == {
        threads.primary: None,
        threads.researcher.pk: threads.primary,
        threads.checker.pk: threads.researcher.pk,
        threads.writer.pk: threads.primary,
    }
    assert list(tree.parents) == [threads.primary, threads.researcher.pk, threads.checker.pk, threads.writer.pk]
    researcher = tree.text[threads.researcher.pk].replace(tree.text[threads.checker.pk], "")
    order = ["researcher", "Idle", "input 321 · output 54", "0.02000000 USD", "3.0 s active", "Thread created: checker"]
    order += ["Thread researcher: running", "Found three sources.", "Thread researcher: idle", "end_turn"]
    positions = [researcher.index(text) for text in order]
    assert positions == sorted(positions)
    assert "no model requests yet" in tree.text[threads.writer.pk] and "Found" not in tree.text[threads.writer.pk]
    primary = tree.text[threads.primary].split("checker")[0]
    assert "helper" in primary and "(primary)" in primary and "input 1521" in primary  # the session's totals
    assert "Its events are the transcript below" in primary
    transcript = html[html.index('id="transcript-events"') :]
    assert ANSWER in transcript and "Thread created: researcher" in transcript  # the primary thread's own log
    assert "Found three sources." not in transcript


def test_the_live_read_appends_a_childs_new_events_and_inserts_new_threads(console: Client, threads: Threads):
    url = on(SESSIONS, threads.session_id, "transcript")
    first = console.get(url).json()
    shown = {update["id"]: update for update in first["threads"]}
    assert list(shown) == [threads.primary, threads.researcher.pk, threads.writer.pk, threads.checker.pk]
    assert all(update["node"] for update in first["threads"][1:])  # the page showed none: whole nodes
    researcher_seq = SessionThread.objects.get(pk=threads.researcher.pk).last_seq

    say(threads.researcher, "A fourth source.")
    critic = spawn(threads.session_id, "critic", threads.writer.pk)
    cursors = [f"{threads.researcher.pk}:{researcher_seq}", f"{threads.writer.pk}:0", f"{threads.checker.pk}:0"]
    later = console.get(url, {"after": first["last_seq"], "thread": cursors}).json()
    updates = {update["id"]: update for update in later["threads"]}
    assert list(updates) == [threads.primary, threads.researcher.pk, threads.writer.pk, threads.checker.pk, critic.pk]
    researcher = updates[threads.researcher.pk]
    assert researcher["node"] is None and "A fourth source." in researcher["html"]
    assert "Found three sources." not in researcher["html"] and researcher["last_seq"] == researcher_seq + 1
    assert updates[threads.checker.pk]["html"] == "" and updates[threads.checker.pk]["last_seq"] is None
    assert "Thread created: critic" in updates[threads.writer.pk]["html"]
    inserted = updates[critic.pk]
    assert inserted["parent_id"] == threads.writer.pk and f'id="thread-{critic.pk}"' in inserted["node"]
    assert inserted["html"] == "" and "critic" in inserted["summary"]
    assert "Thread created: critic" not in later["html"]  # the writer's log, not the primary thread's
    assert later["more"] is False


def test_the_live_read_refreshes_each_threads_status(console: Client, threads: Threads):
    url = on(SESSIONS, threads.session_id, "transcript")
    cursors = [f"{thread.pk}:{thread.last_seq}" for thread in SessionThread.objects.filter(session=threads.session_id)]
    thread_log.archive(SessionThread.objects.get(pk=threads.writer.pk))
    updates = {update["id"]: update for update in console.get(url, {"thread": cursors}).json()["threads"]}
    assert "Terminated" in updates[threads.writer.pk]["summary"] and "archived" in updates[threads.writer.pk]["summary"]
    assert "Thread writer: terminated" in updates[threads.writer.pk]["html"]
    assert "Idle" in updates[threads.researcher.pk]["summary"] and updates[threads.researcher.pk]["html"] == ""


def thread_texts(client: Client, session_id: str) -> Any:
    return client.get(on(SESSIONS, session_id)), client.get(on(SESSIONS, session_id, "transcript"))


def test_threads_are_shown_to_whoever_may_view_the_session_only(tenant: Tenant, other_tenant: Tenant, threads):
    viewer = staff_client("viewer", {tenant.workspace: "viewer"})
    html = page(viewer, on(SESSIONS, threads.session_id))
    assert "Found three sources." in html and f'id="thread-{threads.checker.pk}"' in html
    assert [update["id"] for update in viewer.get(on(SESSIONS, threads.session_id, "transcript")).json()["threads"]]
    outsider = staff_client("outsider", {other_tenant.workspace: "admin"})
    for response in thread_texts(outsider, threads.session_id):
        assert response.status_code in (302, 403, 404)
        assert b"Found three sources." not in response.content
    for response in thread_texts(Client(), threads.session_id):  # not logged in
        assert response.status_code == 302 and b"Found three sources." not in response.content


def shown(browser: Any, selector: str) -> str:
    """The text of the elements `selector` finds (none yet: empty)."""
    return "".join(element.text for element in browser.find_elements(By.CSS_SELECTOR, selector))


@pytest.mark.e2e
@pytest.mark.django_db(transaction=True)
def test_chromium_follows_the_threads_live(browser, live_staff, threads: Threads):
    with live_registry() as url:
        log_in(browser, url, f"/admin/agent_sessions/session/{quote(threads.session_id)}/change/")
        wait = WebDriverWait(browser, WAIT_SECONDS)
        wait.until(lambda driver: driver.find_elements(By.ID, "thread-tree"))
        checker = browser.find_element(By.CSS_SELECTOR, f"#thread-{threads.researcher.pk} #thread-{threads.checker.pk}")
        assert "checker" in checker.text
        assert "Found three sources." in browser.find_element(By.ID, f"thread-events-{threads.researcher.pk}").text
        browser.execute_script("window.notReloaded = true")

        say(threads.researcher, "A source found live.")
        critic = spawn(threads.session_id, "critic", threads.writer.pk)
        say(critic, "The critic speaks.")
        wait.until(lambda driver: "A source found live." in shown(driver, f"#thread-events-{threads.researcher.pk}"))
        nested = f"#thread-{threads.writer.pk} #thread-{critic.pk} #thread-events-{critic.pk}"
        wait.until(lambda driver: "The critic speaks." in shown(driver, nested))
        thread_log.archive(SessionThread.objects.get(pk=threads.writer.pk))
        wait.until(lambda driver: "Terminated" in shown(driver, f"#thread-summary-{threads.writer.pk}"))
        text = shown(browser, f"#thread-events-{threads.researcher.pk}")
        assert text.count("A source found live.") == 1 and text.count("Found three sources.") == 1  # no repeats
        assert browser.execute_script("return window.notReloaded") is True
        screenshot(browser, "admin-session-threads.png")
