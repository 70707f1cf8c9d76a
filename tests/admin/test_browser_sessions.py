"""A staff operator of one workspace drives a live session in Chromium: finds it by its agent's name, watches the
agent's reply stream in, allows a tool call its policy holds, interrupts a running turn and archives the session.

The registry runs under daphne with a `runsessions` worker on the test database, the scripted model (chunked,
delayed text) and the shop MCP server on loopback. Screenshots are kept in var/test-artifacts/.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from django.contrib.admin.models import LogEntry
from django.contrib.auth.models import User
from selenium import webdriver
from selenium.common.exceptions import StaleElementReferenceException
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webelement import WebElement
from selenium.webdriver.support import expected_conditions
from selenium.webdriver.support.ui import WebDriverWait

from fakes import model as replies
from registry.sessions.models import Session, SessionEvent
from tests.support.admin_pages import SESSIONS
from tests.support.admin_staff import staff_client
from tests.support.browser import log_in, screenshot, transcript_text
from tests.support.mcp_servers import ShopMcpServer
from tests.support.processes import Process, start_runsessions
from tests.support.runtime.sessions import MODEL, shop_agent
from tests.support.tenants import Tenant

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

AGENT = "Orchard Concierge"
STORY = "Once upon a time an orchard grew apples that answered questions, one careful word after another."
SHIPPING = "Order B2 ships tomorrow."
ENDLESS = "This answer goes on and on. " * 40
ASK = [{"name": "lookup_order", "permission_policy": {"type": "always_ask"}}]
WAIT_SECONDS = 30


@pytest.fixture
def worker(child_env: dict[str, str], tmp_path: Path) -> Iterator[Process]:
    process = start_runsessions(child_env, tmp_path / "worker.log")
    yield process
    process.stop()


@pytest.fixture
def operator(tenant: Tenant) -> User:
    staff_client("operator", {tenant.workspace: "operator"})
    return User.objects.get(username="operator")


@pytest.fixture
def session_id(tenant: Tenant, shop: ShopMcpServer) -> str:
    """A session of the agent AGENT (its shop lookups ask first), beside one of another agent."""
    api = tenant.client
    environment = api.post("/v1/environments", {"name": "box"}, format="json").json()["id"]
    opened = []
    for name in (AGENT, "Background Helper"):
        agent = api.post("/v1/agents", {"name": name, "model": MODEL, **shop_agent(shop, configs=ASK)}, format="json")
        body = {"agent": agent.json()["id"], "environment_id": environment, "title": f"With {name}"}
        opened.append(str(api.post("/v1/sessions", body, format="json").json()["id"]))
    return opened[0]


class Page:
    """The session's admin page as the operator sees it."""

    def __init__(self, browser: webdriver.Chrome) -> None:
        self.browser = browser
        # The live page replaces its parts as the session moves: an element found a moment ago may be gone.
        self.wait = WebDriverWait(
            browser, WAIT_SECONDS, poll_frequency=0.05, ignored_exceptions=(StaleElementReferenceException,)
        )

    def until(self, condition: Callable[[webdriver.Chrome], Any]) -> Any:
        return self.wait.until(condition)

    def find(self, selector: str) -> WebElement:
        return self.browser.find_element(By.CSS_SELECTOR, selector)

    def messages(self) -> str:
        return " ".join(element.text for element in self.browser.find_elements(By.CSS_SELECTOR, ".messagelist li"))

    def status(self) -> str:
        return str(self.find("#transcript-status").text)

    def preview(self) -> str:
        previews = self.browser.find_elements(By.CSS_SELECTOR, "#transcript-previews .is-preview .text")
        return str(previews[0].text) if previews else ""

    def submit(self, selector: str, said: str) -> None:
        """Click the submit button of a form, and wait for the page the action redirects to, saying `said`."""
        button = self.find(f"{selector} input[type=submit]")
        button.click()
        if said.startswith("Archived"):
            self.until(expected_conditions.alert_is_present()).accept()
        self.until(expected_conditions.staleness_of(button))
        self.until(lambda _: said in self.messages())

    def send(self, text: str) -> None:
        self.find("#send-message-text").send_keys(text)
        self.submit("#send-message", "Sent a message.")

    def partly_written(self, text: str) -> str:
        """The agent's message shown while it is still being written (a part of `text`)."""
        return str(self.until(lambda _: (shown := self.preview()) and len(shown) < len(text) and shown))


def test_an_operator_finds_watches_approves_interrupts_and_archives_a_session(
    browser, registry, worker, model, shop, operator, session_id
):
    page = Page(browser)
    log_in(browser, registry.url, SESSIONS, username="operator")
    page.until(lambda driver: driver.find_elements(By.ID, "searchbar"))[0].send_keys("orchard\n")
    page.until(lambda driver: "q=orchard" in driver.current_url)
    assert [link.text for link in browser.find_elements(By.CSS_SELECTOR, "#result_list tbody th a")] == [session_id]
    browser.find_element(By.LINK_TEXT, session_id).click()
    page.until(lambda driver: driver.find_elements(By.ID, "send-message-text"))

    # The reply appears as it is written, then as the complete message.
    model.add(replies.text(STORY, delay=1.5, chunks=12, chunk_delay=0.25))
    page.send("Tell me a story.")
    partial = page.partly_written(STORY)
    screenshot(browser, "admin-session-streaming.png")
    assert STORY.startswith(partial) and "Agent (writing…)" in page.find("#transcript-previews").text
    page.until(lambda driver: STORY in transcript_text(driver) and not page.preview())

    # A lookup its policy holds waits for the operator, who reads its input and allows it.
    model.add(replies.tool_call("lookup_order", {"order_id": "B2"}), replies.text(SHIPPING))
    page.send("Where is my order B2?")
    page.until(lambda _: page.status() == "Requires action")
    call = page.find(".pending-confirmation")
    assert "lookup_order" in call.text and '"order_id": "B2"' in call.text and shop.calls == []
    screenshot(browser, "admin-session-requires-action.png")
    page.submit(".pending-confirmation .confirm-allow", "Allowed tool call")
    page.until(lambda driver: SHIPPING in transcript_text(driver) and page.status() == "Idle")
    assert shop.calls == [("lookup_order", {"order_id": "B2"})]
    timeline = page.find("#tool-timeline-rows").text
    assert "lookup_order" in timeline and "done (allowed" in timeline

    # A long reply is cut short.
    model.add(replies.text(ENDLESS, chunks=200, chunk_delay=0.2))
    page.send("Now tell me everything.")
    page.until(lambda _: page.preview())
    page.submit("#interrupt-session", "Interrupted the session's turn.")
    page.until(lambda driver: "Interrupt" in transcript_text(driver) and page.status() == "Idle")
    assert ENDLESS.strip() not in transcript_text(browser)

    # Archived: terminated, nothing left to do on the page.
    page.submit("#archive-session", "Archived the session: it is terminated.")
    assert page.status() == "Terminated" and not browser.find_elements(By.ID, "send-message")
    screenshot(browser, "admin-session-archived.png")
    session = Session.objects.get(pk=session_id)
    assert session.status == "terminated" and session.archived_at is not None
    call_id = SessionEvent.objects.get(session=session, type="agent.mcp_tool_use").pk
    entries = LogEntry.objects.filter(object_id=session_id, user=operator).order_by("action_time", "id")
    assert [entry.get_change_message() for entry in entries] == [
        "Sent a message.",
        "Sent a message.",
        f"Allowed tool call {call_id}.",
        "Sent a message.",
        "Interrupted the session's turn.",
        "Archived the session: it is terminated.",
    ]
