"""Headless Chromium for the tests of pages, driven by Selenium with the system chromedriver
(Debian's ``chromium`` and ``chromium-driver``; ``make test`` installs them when missing, as root).

Without them (or without selenium) a local run skips the page tests and says why; under
``CI=true`` a missing browser is a failure, so CI always proves the page in a real browser.
"""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path

import pytest

CHROMEDRIVER = "/usr/bin/chromedriver"
FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--window-size=1400,1700")


def _missing() -> str | None:
    try:
        import selenium  # noqa: F401
    except ImportError:
        return "selenium is not installed (pip install -e '.[test]')"
    if not Path(CHROMEDRIVER).is_file():
        return f"{CHROMEDRIVER} not found (apt-get install chromium chromium-driver)"
    if shutil.which("chromium") is None and not Path("/usr/bin/chromium").is_file():
        return "chromium not found (apt-get install chromium chromium-driver)"
    return None


def chromium(user_data_dir: Path):
    """A headless Chromium session (fresh profile in ``user_data_dir``) that records the
    console and the network log; skips, or fails under CI, without the browser."""
    why = _missing()
    if why is not None:
        if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
            pytest.fail(f"CI: the page tests need headless Chromium: {why}")
        pytest.skip(f"page tests skipped: {why}")
    os.environ.setdefault("SE_AVOID_STATS", "true")
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    for flag in (*FLAGS, f"--user-data-dir={user_data_dir}"):
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL", "performance": "ALL"})
    return webdriver.Chrome(service=Service(executable_path=CHROMEDRIVER), options=options)


def wait_for(driver, script: str, timeout: float = 30.0):
    """Poll ``script`` (a JS expression) until it is truthy; its value."""
    end = time.monotonic() + timeout
    while True:
        value = driver.execute_script(f"return {script};")
        if value or time.monotonic() > end:
            assert value, f"timed out waiting for {script}"
            return value
        time.sleep(0.05)
