"""The admin console in a real browser: Debian's Chromium (driven by Selenium through chromedriver) against
the registry under daphne. A staff member logs in, opens a session with a finished turn, reads its styled
transcript, and sees an event appended meanwhile appear without a reload. The screenshot is kept in
var/test-artifacts/."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest
from django.contrib.admin.utils import quote
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import WebDriverWait

from tests.support.admin_turns import ANSWER, QUESTION, Turn, emit
from tests.support.browser import WAIT_SECONDS, log_in, screenshot, transcript_text
from tests.support.live import live_registry

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def registry_url() -> Iterator[str]:
    with live_registry() as url:
        yield url


def test_staff_reads_a_styled_transcript_that_follows_the_session(browser, registry_url, live_staff, turn: Turn):
    session_page = f"/admin/agent_sessions/session/{quote(turn.session_id)}/change/"
    log_in(browser, registry_url, session_page)
    wait = WebDriverWait(browser, WAIT_SECONDS)
    wait.until(lambda driver: driver.find_elements(By.ID, "transcript-events"))
    text = transcript_text(browser)
    for expected in (QUESTION, ANSWER, "Tool call: bash", "notes.txt", "Error: model_overloaded_error"):
        assert expected in text
    assert "input 1200 · output 345" in text and "Status: idle" in text
    assert browser.find_element(By.CSS_SELECTOR, ".kind-thinking details").get_attribute("open") is None

    header = browser.execute_script("return getComputedStyle(document.getElementById('header')).backgroundColor")
    assert header not in ("", "transparent", "rgba(0, 0, 0, 0)"), "the admin's stylesheet did not apply"
    stylesheet = httpx.get(f"{registry_url}/static/admin/css/base.css", timeout=5)
    assert stylesheet.status_code == 200 and stylesheet.headers["content-type"].startswith("text/css")
    assert screenshot(browser, "admin-session-transcript.png").stat().st_size > 10_000

    browser.execute_script("window.notReloaded = true")
    emit(turn.session_id, "agent.message", content=[{"type": "text", "text": "A follow-up arrived live."}])
    wait.until(lambda driver: "A follow-up arrived live." in transcript_text(driver))
    assert browser.execute_script("return window.notReloaded") is True
    screenshot(browser, "admin-session-transcript-followed.png")
