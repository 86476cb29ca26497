"""A real browser for the tests: Debian's chromium, driven through Debian's chromedriver by
selenium, headless, with a fresh profile and nothing that reaches past the machine.

One browser serves the whole session (``browser``); the driver and the browser are the
Debian packages ./dev installs, named by path, so selenium never runs Selenium Manager (which
would download a driver). Screenshots are kept in .lab/logs/test-browser/, beside the other
test logs, emptied at the start of each session.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from selenium import webdriver
from selenium.common.exceptions import WebDriverException
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webelement import WebElement
from selenium.webdriver.support import expected_conditions
from selenium.webdriver.support.ui import WebDriverWait

from lab import lab

CHROMIUM = Path("/usr/bin/chromium")
CHROMEDRIVER = Path("/usr/bin/chromedriver")
SCREENSHOT_DIR = lab.STATE_DIR / "logs" / "test-browser"
WINDOW = (1280, 900)
PHONE = (390, 844)
FLAGS = (
    "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
    "--disable-background-networking", "--disable-quic", "--no-first-run",
    "--disable-component-update", "--disable-sync", "--disable-extensions",
    "--disable-default-apps", f"--window-size={WINDOW[0]},{WINDOW[1]}",
    # Every name but loopback fails to resolve: a page that loaded anything from elsewhere
    # would show it broken, and the browser reaches nothing but the Coordinator under test.
    "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1",
)


@pytest.fixture(scope="session")
def browser(tmp_path_factory: pytest.TempPathFactory) -> Iterator[webdriver.Chrome]:
    """Headless chromium for the session; fails (never skips) where the packages are missing."""
    missing = [str(path) for path in (CHROMIUM, CHROMEDRIVER) if not path.is_file()]
    if missing:
        pytest.fail(f"{', '.join(missing)} missing: run ./dev (as root) to install the Debian "
                    "packages chromium and chromium-driver", pytrace=False)
    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    for flag in FLAGS:
        options.add_argument(flag)
    options.add_argument(f"--user-data-dir={tmp_path_factory.mktemp('chromium-profile')}")
    options.page_load_strategy = "normal"
    service = Service(executable_path=str(CHROMEDRIVER),
                      log_output=str(tmp_path_factory.mktemp("chromedriver") / "chromedriver.log"))
    driver = webdriver.Chrome(service=service, options=options)
    try:
        driver.implicitly_wait(0)
        yield driver
    finally:
        driver.quit()


@pytest.fixture(scope="session")
def screenshot_dir() -> Path:
    """.lab/logs/test-browser/ (git-ignored with the rest of .lab/), emptied for this session."""
    shutil.rmtree(SCREENSHOT_DIR, ignore_errors=True)
    SCREENSHOT_DIR.mkdir(parents=True)
    return SCREENSHOT_DIR


def wait_for_text(browser: webdriver.Chrome, selector: str, text: str,
                  timeout: float = 10.0) -> WebElement:
    """The first element matching the CSS selector once its text contains ``text``. A poll
    that lands while the page navigates (a form's POST) fails with WebDriverException
    ("aborted by navigation"); it is polled again, as a missing element is."""
    WebDriverWait(browser, timeout, ignored_exceptions=(WebDriverException,)).until(
        expected_conditions.text_to_be_present_in_element((By.CSS_SELECTOR, selector), text),
        f"no {selector!r} with text {text!r} after {timeout} s")
    return browser.find_element(By.CSS_SELECTOR, selector)


@contextmanager
def phone(browser: webdriver.Chrome, size: tuple[int, int] = PHONE) -> Iterator[None]:
    """The window at a phone's size (390×844 by default), restored to its size after."""
    before = browser.get_window_size()
    browser.set_window_size(*size)
    try:
        yield
    finally:
        browser.set_window_size(before["width"], before["height"])
