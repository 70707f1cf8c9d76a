"""Workspace staff roles in Chromium: a viewer of workspace A reads A's sessions and transcripts, is offered no
action, and meets the admin's HTML error pages (never the API's JSON) when posting an action or opening B's
session; an operator archives a session and finds it in the audit log.

Each test has its own registry under daphne on the test database (no session worker: nothing here runs a turn):
the database is emptied between tests, content types included, and a server kept across them would go on with
the content type ids it cached (writing admin log entries against rows that are gone)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from selenium import webdriver
from selenium.webdriver.common.by import By
from selenium.webdriver.support import expected_conditions
from selenium.webdriver.support.ui import WebDriverWait

from tests.support.admin_pages import SESSIONS, on
from tests.support.admin_staff import staff_client
from tests.support.admin_turns import ANSWER, QUESTION, Turn
from tests.support.browser import WAIT_SECONDS, log_in, screenshot, transcript_text
from tests.support.live import live_registry
from tests.support.tenants import Tenant, open_session

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

AUDIT = "/admin/admin/logentry/"
ACTION_FORMS = ("#send-message", "#archive-session", "#interrupt-session", ".confirm-allow", ".confirm-deny")
ARCHIVED = "Archived the session: it is terminated."


def wait_for(browser: webdriver.Chrome, selector: str) -> None:
    WebDriverWait(browser, WAIT_SECONDS).until(lambda driver: driver.find_elements(By.CSS_SELECTOR, selector))


def error_status(browser: webdriver.Chrome) -> str:
    """The status of the admin error page the browser shows (its header proves the admin's look)."""
    assert browser.find_elements(By.ID, "header"), browser.page_source[:500]
    return str(browser.find_element(By.ID, "error-page").get_attribute("data-status"))


def post_from_page(browser: webdriver.Chrome, url: str) -> None:
    """Submit a form to `url` with the page's CSRF token, as a crafted form on the page would."""
    browser.execute_script(
        """const form = document.createElement("form");
        form.method = "post"; form.action = arguments[0];
        form.appendChild(document.querySelector("input[name=csrfmiddlewaretoken]").cloneNode());
        document.body.appendChild(form); form.submit();""",
        url,
    )


@pytest.fixture
def registry_url() -> Iterator[str]:
    with live_registry(DJANGO_SETTINGS_MODULE="tests.support.subprocess_settings") as url:
        yield url


@pytest.fixture
def foreign_session(other_tenant: Tenant) -> str:
    return open_session(other_tenant.client)


def test_a_viewer_reads_but_cannot_act_and_meets_html_error_pages(
    browser, registry_url, tenant, turn: Turn, foreign_session
):
    staff_client("viewer", {tenant.workspace: "viewer"})
    log_in(browser, registry_url, SESSIONS, username="viewer")
    wait_for(browser, "#result_list")
    listed = [link.text for link in browser.find_elements(By.CSS_SELECTOR, "#result_list tbody th a")]
    assert listed == [turn.session_id]
    assert "View site" not in browser.find_element(By.ID, "user-tools").text

    browser.find_element(By.LINK_TEXT, turn.session_id).click()
    wait_for(browser, "#transcript-events")
    assert QUESTION in transcript_text(browser) and ANSWER in transcript_text(browser)
    assert not browser.find_elements(By.CSS_SELECTOR, ", ".join(ACTION_FORMS))

    post_from_page(browser, f"{registry_url}{on(SESSIONS, turn.session_id, 'actions/archive')}")
    wait_for(browser, "#error-page")
    assert error_status(browser) == "403" and "Permission denied" in browser.title
    screenshot(browser, "admin-viewer-403.png")

    browser.get(f"{registry_url}{on(SESSIONS, foreign_session, 'transcript')}")
    wait_for(browser, "#error-page")
    assert error_status(browser) == "404" and "Page not found" in browser.title
    browser.get(f"{registry_url}{on(SESSIONS, foreign_session)}")
    wait_for(browser, "#header")  # the admin's page (its index, saying so), never the session's
    assert not browser.find_elements(By.ID, "transcript-events")
    assert (
        browser.find_elements(By.ID, "error-page")
        or "Perhaps it was deleted" in browser.find_element(By.ID, "main").text
    )


def test_an_operator_finds_their_archive_in_the_audit_log(browser, registry_url, tenant, turn: Turn):
    staff_client("operator", {tenant.workspace: "operator"})
    log_in(browser, registry_url, on(SESSIONS, turn.session_id), username="operator")
    wait_for(browser, "#archive-session")
    button = browser.find_element(By.CSS_SELECTOR, "#archive-session input[type=submit]")
    button.click()
    WebDriverWait(browser, WAIT_SECONDS).until(expected_conditions.alert_is_present()).accept()
    wait = WebDriverWait(browser, WAIT_SECONDS)
    wait.until(expected_conditions.staleness_of(button))
    wait.until(lambda driver: ARCHIVED in driver.find_element(By.CSS_SELECTOR, ".messagelist").text)

    browser.get(f"{registry_url}{AUDIT}")
    wait_for(browser, "#result_list")
    [row] = browser.find_elements(By.CSS_SELECTOR, "#result_list tbody tr")
    for shown in ("operator", "Change", turn.session_id, ARCHIVED):
        assert shown in row.text
    row.find_element(By.LINK_TEXT, turn.session_id).click()
    wait_for(browser, "#transcript-events")
    screenshot(browser, "admin-operator-audit.png")
