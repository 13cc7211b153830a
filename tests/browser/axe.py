"""axe-core, from the npm registry, run inside the pages: zero critical or serious violations.

The test set-up fetches the pinned ``axe-core`` release once into a cache
folder (``ANONML_AXE_CACHE``, else ``~/.cache/anonml``): with ``npm pack`` when
npm is installed, else the same tarball from ``registry.npmjs.org`` over
HTTPS. Either way the tarball must match the registry's published sha512
integrity pinned here, so a changed release is refused, never run. Without
the registry (offline, no cache) the test FAILS with the reason: an
accessibility check that skips itself would pass CI while checking nothing.

The script is injected into each page of a browser context made with
``bypass_csp=True`` (the pages' Content-Security-Policy rightly refuses inline
scripts, the injected axe among them); the pages' own CSP is checked by the
other tests, in contexts that keep it.
"""

from __future__ import annotations

import base64
import hashlib
import io
import os
import shutil
import subprocess
import tarfile
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
import requests

from tests.browser.conftest import goto

if TYPE_CHECKING:
    from playwright.sync_api import Page

#: The axe-core release the pages are checked with, and its registry integrity (``npm view``).
AXE_VERSION = "4.14.1"
AXE_INTEGRITY = (
    "sha512-FHfa+lmNjQZfJz1q8wKqIDwC6DExcHt/pkjNQb09a3NPjCKg2rhu5qb2S4r76ASyFNNtuFooJpZe37OgudVGtQ=="
)
TARBALL = f"https://registry.npmjs.org/axe-core/-/axe-core-{AXE_VERSION}.tgz"
#: The impacts that fail a page (axe's scale: minor, moderate, serious, critical).
FAILING = ("critical", "serious")


def _cache() -> Path:
    folder = Path(os.environ.get("ANONML_AXE_CACHE") or Path.home() / ".cache" / "anonml")
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def _integrity_ok(blob: bytes) -> bool:
    algorithm, _, digest = AXE_INTEGRITY.partition("-")
    return base64.b64encode(hashlib.new(algorithm, blob).digest()).decode() == digest


def _fetch_tarball(folder: Path) -> bytes:
    """The release tarball: ``npm pack`` when npm is here, else an HTTPS download; its integrity checked."""
    errors = []
    npm = shutil.which("npm")
    if npm is not None:
        try:
            subprocess.run(
                [npm, "pack", f"axe-core@{AXE_VERSION}", "--pack-destination", str(folder), "--silent"],
                check=True, capture_output=True, timeout=180, cwd=folder,
            )
            return (folder / f"axe-core-{AXE_VERSION}.tgz").read_bytes()
        except (subprocess.SubprocessError, OSError) as exc:
            detail = getattr(exc, "stderr", b"") or b""
            errors.append(f"npm pack: {exc} {detail.decode(errors='replace')[-300:]}")
    try:
        reply = requests.get(TARBALL, timeout=120)
        reply.raise_for_status()
        return reply.content
    except requests.RequestException as exc:
        errors.append(f"GET {TARBALL}: {exc}")
    pytest.fail(
        f"axe-core {AXE_VERSION} could not be installed from the npm registry (the accessibility "
        f"check needs it; set ANONML_AXE_CACHE to a folder holding axe.min.js to run offline): "
        + "; ".join(errors)
    )


@cache
def axe_source() -> str:
    """``axe.min.js`` of the pinned release, from the cache or fetched (and cached) now."""
    script = _cache() / f"axe-core-{AXE_VERSION}.min.js"
    if script.is_file():
        return script.read_text(encoding="utf-8")
    blob = _fetch_tarball(_cache())
    if not _integrity_ok(blob):
        pytest.fail(f"axe-core {AXE_VERSION}: the tarball does not match the registry's integrity")
    with tarfile.open(fileobj=io.BytesIO(blob), mode="r:gz") as tar:
        member = tar.extractfile("package/axe.min.js")
        assert member is not None, "the axe-core tarball has no package/axe.min.js"
        text = member.read().decode("utf-8")
    script.write_text(text, encoding="utf-8")
    return text


def violations(page: Page) -> list[dict[str, Any]]:
    """axe's violations of the page as loaded (WCAG 2.x A and AA rules and best practices)."""
    if not page.evaluate("typeof window.axe !== 'undefined'"):
        page.add_script_tag(content=axe_source())
    return page.evaluate(
        "async () => (await axe.run(document, {resultTypes: ['violations']})).violations"
        ".map(v => ({id: v.id, impact: v.impact, help: v.help,"
        " nodes: v.nodes.slice(0, 3).map(n => n.target.join(' '))}))"
    )


def assert_accessible(page: Page, url: str) -> None:
    """Load ``url`` and fail on any critical or serious axe violation, naming each and where.

    The pages' poller reloads a page whose phase changed (``static/live.js``); a reload while
    axe is injected or running destroys its context, which says nothing about the page: the
    page is loaded and checked again (five tries in all; a full .ci/run met one).
    """
    from playwright.sync_api import Error

    for attempt in range(5):
        goto(page, url)
        page.wait_for_load_state("load")
        try:
            found = violations(page)
            break
        except Error as exc:
            if "Execution context was destroyed" not in str(exc) or attempt == 4:
                raise
    bad = [v for v in found if v["impact"] in FAILING]
    said = "; ".join(f"{v['impact']} {v['id']} ({v['help']}) at {v['nodes']}" for v in bad)
    assert bad == [], f"{url}: {said}"
