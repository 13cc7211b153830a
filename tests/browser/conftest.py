"""A real headless Chromium (the system's, driven by Playwright), or a skip saying why there is none.

Nothing is installed at run time: the browser is Debian's ``chromium`` package
(``.ci/run`` installs it with apt-get when it is missing), or the executable
named by ``ANONML_CHROMIUM``. Screenshots go to ``ANONML_SCREENSHOTS`` when it
is set (``docs/screenshots`` is made that way), else to the test's temp folder.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.aggregator.conftest import aggregator  # noqa: F401 - a fixture, registered by import

#: Flags for a quiet, offline, sandbox-free headless run (CI containers run as root).
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--disable-background-networking",
    "--disable-component-update",
    "--no-first-run",
    "--disable-sync",
]


def _chromium() -> str | None:
    named = os.environ.get("ANONML_CHROMIUM")
    if named:
        return named if Path(named).is_file() else None
    for candidate in ("/usr/bin/chromium", shutil.which("chromium"), shutil.which("chromium-browser")):
        if candidate and Path(candidate).is_file():
            return candidate
    return None


@pytest.fixture(scope="module")
def browser() -> Iterator[object]:
    executable = _chromium()
    if executable is None:
        pytest.skip("no Chromium installed (apt-get install chromium, or set ANONML_CHROMIUM)")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        pytest.skip("Playwright is not installed (pip install -e '.[dev]')")
    with sync_playwright() as p:
        chromium = p.chromium.launch(executable_path=executable, args=CHROMIUM_ARGS)
        try:
            yield chromium
        finally:
            chromium.close()


@pytest.fixture
def page(browser) -> Iterator[object]:
    context = browser.new_context(viewport={"width": 1200, "height": 860}, device_scale_factor=1)
    context.set_default_timeout(60_000)
    tab = context.new_page()
    dialogs: list[str] = []
    tab.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
    tab.dialogs = dialogs  # type: ignore[attr-defined]  # what a hostile title managed to open (nothing)
    try:
        yield tab
    finally:
        context.close()


@pytest.fixture
def screenshots(tmp_path: Path) -> Path:
    folder = Path(os.environ.get("ANONML_SCREENSHOTS") or tmp_path / "screenshots")
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def goto(page, url: str) -> None:
    """``page.goto(url)``, again (five tries in all) while the page being left navigates itself.

    The pages' poller reloads a page whose phase changed (``static/live.js``); a reload that
    starts as the test navigates away aborts the test's navigation (``net::ERR_ABORTED``),
    which says nothing about the page asked for. Under load the reload the poller queued can land
    on the retry too (a run at load ~20 failed so), hence more than one retry.
    """
    from playwright.sync_api import Error

    for attempt in range(5):
        try:
            page.goto(url)
            return
        except Error as exc:
            aborted = "ERR_ABORTED" in str(exc) or "interrupted by another navigation" in str(exc)
            if not aborted or attempt == 4:
                raise
