"""The pages on a desktop and a phone, against hostile strings, in a real headless Chromium.

One aggregator publishes five proposals: a 200-character unbroken title over a
4,000-character unbroken description, a title that a right-to-left override
would turn into "Student_file.exe", a 3-class label, one whose features the
installed featurizer does not compute (the peer cannot run it), and a plain
one. A person's peer daemon sees them all and has imported a log from a deeply
nested folder with long names. Every page of both roles is then read at
1,280 × 800 and 390 × 844: none is wider than its window, none loads anything
from another origin (nor does ``/docs``), the bidi control reaches neither a
page nor a tab title, the label row says what the label is, every Accept and
Decline button names its proposal, axe-core finds no critical or serious
violation on any page, the console's draft box has a label, an
unrunnable proposal has no Accept button, and reloading the page an accept
redirected to sends nothing again.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pytest

from anonml.crypto import Identity
from anonml.datasets.mooc import simulate_students, write_edx_logs
from anonml.plugins import create
from anonml.privacy import PrivacyLedger
from anonml.protocol import LabelSpec
from anonml.store import EventStore
from peer.app import start_peer_server
from peer.db import PeerDB
from peer.host import PeerHost
from peer.participant import PeerNode
from peer.policy import PeerPolicy
from tests.aggregator.helpers import TOKEN, propose
from tests.aggregator.helpers import draft as unrunnable_draft
from tests.browser.conftest import goto
from tests.browser.test_pages import LOCAL, _log_in
from tests.peer.test_host import _draft as small_draft
from tests.waiting import wait_until

if TYPE_CHECKING:
    from playwright.sync_api import Page

pytestmark = pytest.mark.slow

LONG_TITLE = "W" * 200
LONG_DESCRIPTION = "d" * 4000
BIDI = "\u202eexe.elif_tnedutS"
#: The viewports every page must fit: a laptop and a phone (CSS pixels).
SIZES = {"desktop": (1280, 800), "phone": (390, 844)}


def width_of(page: Page) -> tuple[int, int]:
    """The document's scroll width and the window's: the page scrolls sideways when the first is larger."""
    return tuple(page.evaluate("[document.documentElement.scrollWidth, window.innerWidth]"))


def assert_fits(page: Page, url: str) -> None:
    goto(page, url)
    page.wait_for_load_state("load")
    scroll, window = width_of(page)
    assert scroll <= window, f"{url} is {scroll} px wide in a {window} px window"


def _my_daemon(root: Path, agg: str):
    """The person's peer: one identity, asking before it joins, with a log imported from a long path."""
    node = PeerNode(
        Identity.generate(np.random.default_rng(7)),
        EventStore(f"sqlite:///{root / 'events.db'}"),
        PrivacyLedger(f"sqlite:///{root / 'ledger.db'}"),
        user="me",
        rng=np.random.default_rng(7),
    )
    nested = root / ("exports-of-" + "a" * 90) / ("takeout-" + "b" * 90) / "edx"
    (log,) = write_edx_logs(simulate_students(1, weeks=4, seed=5), nested)
    node.store.import_file(log.path, create("importer", "edx"), user="me")
    host = PeerHost(
        [node],
        PeerDB(f"sqlite:///{root / 'peer.db'}"),
        PeerPolicy.for_simulation(auto_accept=False, max_epsilon_per_problem=4.0),
        [agg],
        poll_seconds=0.1,
    )
    return node, start_peer_server(host, LOCAL)


def test_every_page_fits_a_desktop_and_a_phone_and_neutralises_hostile_text(aggregator, browser, tmp_path):
    agg = aggregator.url
    base = small_draft()
    long = propose(agg, base.model_copy(update={"title": LONG_TITLE, "description": LONG_DESCRIPTION}))
    bidi = propose(agg, base.model_copy(update={"title": BIDI}))
    three = propose(
        agg,
        base.model_copy(update={
            "title": "Does a student stay, drop or pause?",
            "label": LabelSpec(kind="classes", classes=("stay", "drop", "pause")),
        }),
    )
    nobody = unrunnable_draft().model_copy(update={"title": "Over features nobody computes"})
    unrunnable = propose(agg, nobody)
    plain = propose(agg, base.model_copy(update={"title": "Who drops out of the course?"}))
    root = tmp_path / "me"
    root.mkdir()
    node, mine = _my_daemon(root, agg)
    ui = mine.url
    try:
        ids = [p.id for p in (long, bidi, three, unrunnable, plain)]
        wait_until(lambda: all(mine.host.db.decision(pid, node.fingerprint) is not None for pid in ids), 60,
                   "the daemon to see every proposal")
        context = browser.new_context(viewport={"width": 1280, "height": 800}, device_scale_factor=1)
        context.set_default_timeout(60_000)
        requests_seen: list[tuple[str, str]] = []
        context.on("request", lambda r: requests_seen.append((r.method, r.url)))
        page = context.new_page()
        try:
            _log_in(page, agg, "/console", TOKEN)
            _log_in(page, ui, "/ui", LOCAL)
            pages = [
                f"{ui}/ui/", f"{ui}/ui/proposals", f"{ui}/ui/shared", f"{ui}/ui/models",
                f"{agg}/console/", f"{agg}/console/problems/{long.id}", f"{agg}/console/problems/{bidi.id}",
                f"{agg}/console/propose",
            ]
            for width, height in SIZES.values():
                page.set_viewport_size({"width": width, "height": height})
                for url in pages:
                    assert_fits(page, url)
            _bidi_is_neutralised(page, agg, ui, bidi.id)
            _cards_say_what_they_are(page, ui, three.id, unrunnable.id)
            _buttons_and_boxes_are_named(page, agg, ui, plain.id, plain.draft.title)
            _accept_then_reload_sends_nothing_again(page, ui, plain.id, requests_seen)
            _docs_load_nothing_from_elsewhere(page, agg, ui)
            _charts_follow_the_counts(page, agg, three)
            outside = [u for _, u in requests_seen if not u.startswith((agg + "/", ui + "/"))]
            assert outside == [], outside
        finally:
            context.close()
        _every_page_is_accessible(browser, agg, ui, pages + [f"{agg}/console/problems/{three.id}"])
    finally:
        mine.stop()
        node.store.close()
        node.ledger.close()


def _charts_follow_the_counts(page: Page, agg: str, problem) -> None:
    """The problem page's charts are images of the server, drawn, and reloaded by the page's poller
    when a count changes — here a registration — without reloading the page."""
    from tests.aggregator.helpers import WirePeer

    page.set_viewport_size({"width": 1280, "height": 800})
    goto(page, f"{agg}/console/problems/{problem.id}")
    images = page.locator("img[data-chart]")
    assert images.count() == 4
    page.wait_for_function("[...document.querySelectorAll('img[data-chart]')].every(i => i.complete)")
    assert all(w > 0 for w in images.evaluate_all("l => l.map(i => i.naturalWidth)"))  # each one drawn
    before = images.first.get_attribute("src")
    page.evaluate("window.__stay = 1")
    assert WirePeer().register(agg, problem).status_code == 201
    page.wait_for_function(
        "src => document.querySelector('img[data-chart]').getAttribute('src') !== src", arg=before
    )
    assert page.evaluate("window.__stay") == 1  # the same page: only the images were reloaded
    assert page.locator("#counts [data-field=registered]").inner_text() == "1"


def _every_page_is_accessible(browser, agg: str, ui: str, pages: list[str]) -> None:
    """axe-core (from the npm registry) finds no critical or serious violation on any page, the
    login pages included. Its own context lets the injected script past the pages' CSP."""
    from tests.browser.axe import assert_accessible, violations

    context = browser.new_context(viewport={"width": 1280, "height": 800}, bypass_csp=True)
    context.set_default_timeout(60_000)
    page = context.new_page()
    try:
        # The check can fail: a page with an unnamed image and button has critical violations.
        page.set_content('<html lang="en"><title>t</title><img src="x.png"><button></button></html>')
        found = {v["id"]: v["impact"] for v in violations(page)}
        assert found.get("image-alt") == "critical" and found.get("button-name") == "critical", found
        for login in (f"{agg}/console/login", f"{ui}/ui/login"):
            assert_accessible(page, login)
        _log_in(page, agg, "/console", TOKEN)
        _log_in(page, ui, "/ui", LOCAL)
        for url in pages:
            assert_accessible(page, url)
    finally:
        context.close()


def _bidi_is_neutralised(page: Page, agg: str, ui: str, pid: str) -> None:
    """The override is gone from the text and the tab title; the letters stay in their order."""
    where = ((f"{agg}/console/problems/{pid}", "h1"), (f"{ui}/ui/proposals", f"section[id='{pid}'] h2"))
    for url, heading in where:
        goto(page, url)
        assert page.locator(heading).inner_text().startswith("exe.elif_tnedutS")
        assert page.evaluate("document.body.textContent.includes('\\u202e')") is False, url
        assert "\u202e" not in page.title()
    goto(page, f"{agg}/console/problems/{pid}")
    assert page.title().startswith("exe.elif_tnedutS")


def _cards_say_what_they_are(page: Page, ui: str, three: str, unrunnable: str) -> None:
    goto(page, f"{ui}/ui/proposals")
    label = page.locator(f"section[id='{three}'] tr.label-row").inner_text()
    assert re.search(r"label\s+classes\s+stay, drop, pause \(user_window\)", label), label
    card = page.locator(f"section[id='{unrunnable}']")
    assert "cannot run this problem" in card.inner_text()
    assert card.get_by_role("button", name=re.compile("^Accept")).count() == 0
    assert card.locator("form[action$='/accept']").count() == 0
    assert "No Accept button" in card.inner_text()


def _buttons_and_boxes_are_named(page: Page, agg: str, ui: str, pid: str, title: str) -> None:
    goto(page, f"{agg}/console/propose")
    box = page.get_by_label("Draft (JSON, a ProblemDraft)", exact=True)
    assert box.evaluate("e => e.tagName") == "TEXTAREA"
    goto(page, f"{ui}/ui/proposals")
    assert page.get_by_role("button", name=f"Accept {title} ({pid})", exact=True).count() == 1
    assert page.get_by_role("button", name=f"Decline {title} ({pid})", exact=True).count() == 1
    names = [b.get_attribute("aria-label") for b in page.get_by_role("button").all()]
    decisions = [n for n in names if n and n.startswith(("Accept ", "Decline "))]
    assert len(decisions) >= 4 and len(set(decisions)) == len(decisions)  # no two alike


def _accept_then_reload_sends_nothing_again(
    page: Page, ui: str, pid: str, seen: list[tuple[str, str]]
) -> None:
    goto(page, f"{ui}/ui/proposals")
    posts = len([1 for method, _ in seen if method == "POST"])
    page.get_by_role("button", name=re.compile(f"^Accept .*\\({pid}\\)$")).click()
    page.wait_for_selector("p.notice:text('Accepted')")
    assert page.url.startswith(f"{ui}/ui/proposals?")  # the POST redirected to a GET
    assert len([1 for method, _ in seen if method == "POST"]) == posts + 1
    page.reload()
    page.wait_for_load_state("load")
    assert len([1 for method, _ in seen if method == "POST"]) == posts + 1  # the reload sent nothing


def _docs_load_nothing_from_elsewhere(page: Page, agg: str, ui: str) -> None:
    """Swagger UI draws each server's API from files that server serves."""
    for origin, title in ((agg, "AnonML aggregator"), (ui, "AnonML peer")):
        goto(page, f"{origin}/docs")
        page.locator(".swagger-ui .info .title").filter(has_text=title).wait_for()
        assert page.locator(".opblock").count() > 0  # the operations were read from /openapi.json


def test_every_committed_screenshot_has_its_outline_at_both_sizes():
    """docs/screenshots: each page at 1,280 and 390 px wide, each PNG beside the outline it is checked by."""
    import json

    from tests.browser.screenshots import COMMITTED, SIZES, png_size

    pages = {"peer-data", "peer-proposals", "peer-shared", "peer-models", "console-problems",
             "console-problem", "console-propose"}
    for name in pages:
        for suffix, (width, height) in SIZES.items():
            record = json.loads((COMMITTED / f"{name}{suffix}.json").read_text())
            assert record["page"] == name and record["viewport"] == [width, height]
            assert png_size(COMMITTED / f"{name}{suffix}.png")[0] == width
            outline = record["outline"]
            assert outline and not any("p-" in item and "p-…" not in item for item in outline)
    assert {p.stem.removesuffix("-phone") for p in COMMITTED.glob("*.png")} == pages
