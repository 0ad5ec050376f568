"""Debian's headless Chromium, driven by Selenium through chromium-driver, and the demo chat page in it.

``.ci/run`` installs the packages chromium and chromium-driver; without them the browser tests fail and say so.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from streamscope_collector.config import CollectorConfig
from tests.support import wait_until

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"
CHROMIUM_FLAGS = (
    "--headless=new",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--disable-background-networking",  # this machine's closed network refuses Chromium's own calls home
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--disable-quic",
)


@contextmanager
def chromium(profile: Path) -> Iterator:
    """A headless Chromium with an empty profile in ``profile``."""
    from selenium import webdriver
    from selenium.webdriver.chrome.options import Options
    from selenium.webdriver.chrome.service import Service

    missing = [path for path in (CHROMIUM, CHROMEDRIVER) if not shutil.which(path)]
    if missing:
        pytest.fail(f"{', '.join(missing)} not found: apt-get install chromium chromium-driver (as .ci/run does)")
    options = Options()
    options.binary_location = CHROMIUM
    for flag in (*CHROMIUM_FLAGS, f"--user-data-dir={profile}"):
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    try:
        yield driver
    finally:
        driver.quit()


def collector_for_chat(storage_dsn: str, chat_port: int) -> CollectorConfig:
    """An in-process collector (HTTP only, attributed by hand) that lets exactly the chat page's origin in."""
    return CollectorConfig(
        storage_dsn=storage_dsn,
        http_port=0,
        grpc_port=None,
        attribution_interval_s=None,
        cors_origins=(f"http://127.0.0.1:{chat_port}",),
    )


def chat(driver, url: str) -> str:
    """Load the demo chat page, send its prompt, wait for the answer and the span's flush; returns the trace id."""
    driver.get(url)
    wait_for_script(driver, "return window.chatReady === true", "the page to load the snippet")
    driver.find_element("id", "send").click()
    wait_for_script(driver, "return Boolean(window.chat && window.chat.done)", "the answer")
    return driver.execute_script("return window.chat.traceId")


def wait_for_script(driver, script: str, what: str, timeout_s: float = 60.0) -> object:
    """Wait until ``script`` returns a truthy value in the page, and return that value."""
    return wait_until(lambda: driver.execute_script(script), what, timeout_s, interval_s=0.1)
