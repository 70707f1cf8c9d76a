"""The admin console in a real browser: Debian's Chromium driven by Selenium through chromedriver, logging in,
and screenshots kept in var/test-artifacts/."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By

from tests.support.admin_turns import STAFF_PASSWORD
from tests.support.live import ROOT

ARTIFACTS = ROOT / "var" / "test-artifacts"
CHROMIUM = "chromium"
CHROMEDRIVER = "chromedriver"
WAIT_SECONDS = 15


def installed(name: str) -> str:
    found = shutil.which(name)
    if found is None:
        pytest.fail(
            f"{name} is not installed: `make test` installs Debian's chromium and chromium-driver "
            "(or run `apt-get install -y chromium chromium-driver`)",
            pytrace=False,
        )
    return found


def chromium() -> webdriver.Chrome:
    """A headless Chromium (quit it when done)."""
    options = webdriver.ChromeOptions()
    options.binary_location = installed(CHROMIUM)
    for argument in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--window-size=1280,2000"):
        options.add_argument(argument)
    return webdriver.Chrome(options=options, service=Service(executable_path=installed(CHROMEDRIVER)))


def log_in(browser: webdriver.Chrome, registry_url: str, next_path: str, username: str = "staff") -> None:
    browser.get(f"{registry_url}/admin/login/?next={next_path}")
    browser.find_element(By.NAME, "username").send_keys(username)
    browser.find_element(By.NAME, "password").send_keys(STAFF_PASSWORD)
    browser.find_element(By.CSS_SELECTOR, "input[type=submit]").click()


def transcript_text(browser: webdriver.Chrome) -> str:
    return str(browser.find_element(By.ID, "transcript-events").text)


def screenshot(browser: webdriver.Chrome, name: str) -> Path:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    path = ARTIFACTS / name
    browser.save_screenshot(str(path))
    return path
