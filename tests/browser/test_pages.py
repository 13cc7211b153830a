"""A person and an operator follow a problem from proposal to model in a real browser.

The operator proposes through the console's form; the person logs in to their
peer's dashboard, imports their own edX log from the page, reads the proposal
and accepts it; seven simulated peers (another daemon, auto-accepting) make up
the roster; the operator closes registration from the console; the round runs
live over loopback relays; the person watches their participation reach
``done`` without reloading, sees the ledger record what they released and the
model predict on their own data. A hostile proposal title opens nothing.
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import pytest
import requests

from anonml.crypto import Identity
from anonml.demo import simulate_peers
from anonml.privacy import PrivacyLedger
from anonml.protocol import ModelDocument, Problem
from anonml.store import EventStore
from peer.app import start_peer_server
from peer.db import PeerDB
from peer.features import predict_locally
from peer.host import PeerHost
from peer.participant import PeerNode
from peer.policy import PeerPolicy
from tests.adversary.malicious import mooc_draft
from tests.aggregator.helpers import TOKEN, propose, status
from tests.peer.helpers import simulation_host as crowd_host
from tests.peer.test_host import _draft as small_draft

pytestmark = pytest.mark.slow

LOCAL = "local-token-typed-into-the-page"
FEATURES = ["time_on_site_minutes", "video_seconds_watched", "seq_navigations", "distinct_problems"]
HOSTILE = "<img src=x onerror=\"alert('pwned')\"><script>alert('pwned')</script>"


def _my_host(node: PeerNode, db: Path, url: str) -> PeerHost:
    """The person's daemon: one identity, asking before it joins anything."""
    return PeerHost(
        [node],
        PeerDB(f"sqlite:///{db}"),
        PeerPolicy.for_simulation(auto_accept=False, max_epsilon_per_problem=4.0),
        [url],
        poll_seconds=0.1,
    )


def _log_in(page, url: str, prefix: str, token: str) -> None:
    page.goto(f"{url}{prefix}/")
    assert page.url.endswith(f"{prefix}/login")  # not logged in: sent to the login form
    page.fill("input[name=token]", token)
    page.click("button[type=submit]")
    page.wait_for_url(f"{url}{prefix}/")


def _wait(what: str, until, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not until():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


def test_a_person_follows_a_problem_from_proposal_to_model_in_the_browser(
    aggregator, page, screenshots, tmp_path
):
    simulated, _ = simulate_peers(8, tmp_path / "sim", weeks=4, history_weeks=2, seed=3, features=FEATURES)
    crowd_nodes = [
        PeerNode(p.identity, p.store, p.ledger, user=p.username, rng=np.random.default_rng(i))
        for i, p in enumerate(simulated[:7])
    ]
    me_sim = simulated[7]
    my_log = next((tmp_path / "sim" / "logs").glob(f"tracking.log-{me_sim.username}*"))
    (tmp_path / "me").mkdir()
    me = PeerNode(
        Identity.generate(np.random.default_rng(99)),
        EventStore(f"sqlite:///{tmp_path / 'me' / 'events.db'}"),  # empty: imported from the page
        PrivacyLedger(f"sqlite:///{tmp_path / 'me' / 'ledger.db'}"),
        user=me_sim.username,
        rng=np.random.default_rng(99),
    )
    me.ledger.set_lifetime_cap(me.fingerprint, 10.0)
    crowd = start_peer_server(crowd_host(crowd_nodes, tmp_path / "crowd.db", aggregator.url))
    mine = start_peer_server(_my_host(me, tmp_path / "me" / "peer.db", aggregator.url), LOCAL)
    agg, ui = aggregator.url, mine.url
    try:
        # -- the operator proposes from the console --------------------------------------------
        _log_in(page, agg, "/console", TOKEN)
        page.click("nav >> text=Propose")
        page.fill("textarea[name=draft]", '{"title": ""}')
        page.click("button:text('Validate and publish')")
        assert page.locator("#draft-errors").is_visible()  # refused by the schema, nothing published
        assert requests.get(f"{agg}/problems", timeout=30).json() == []
        draft = mooc_draft(min_peers=4, title="Who drops out of the course?")
        page.fill("textarea[name=draft]", draft.model_dump_json(indent=2))
        page.screenshot(path=str(screenshots / "console-propose.png"), full_page=True)
        page.click("button:text('Validate and publish')")
        page.wait_for_url("**/console/problems/p-*")
        pid = page.url.split("/problems/")[1].split("?")[0]
        assert status(agg, pid).phase == "registration"
        hostile = propose(agg, small_draft().model_copy(update={"title": HOSTILE}))

        # -- the person logs in and imports their own data ------------------------------------
        dash = page.context.new_page()
        dash.on("dialog", lambda d: (page.dialogs.append(d.message), d.dismiss()))
        _log_in(dash, ui, "/ui", LOCAL)
        assert "No events yet" in dash.inner_text("main")
        dash.fill("textarea[name=paths]", str(my_log))
        dash.click("button:text('Import')")
        dash.wait_for_selector("#import-job [data-field=state]:text('done')")
        sources = dash.locator("#sources").inner_text()
        assert "edx" in sources and me.store.count() > 0
        assert f"{me.store.count():,} in all" in dash.inner_text("main")
        dash.screenshot(path=str(screenshots / "peer-data.png"), full_page=True)

        # -- reads the proposal and accepts it ------------------------------------------------
        dash.click("nav >> text=Proposals")
        _wait(
            "the proposal on the page", lambda: dash.reload() or dash.locator(f"section[id='{pid}']").count()
        )
        card = dash.locator(f"section[id='{pid}']")
        text = card.inner_text()
        for seen in (
            "time_on_site_minutes",
            "[0, 600], 2 bins",
            f"{draft.hops} relays per report",
            "open: anyone may register",
            "waiting for 'anonml peer accept'",
            f"at most {np.exp(2.0):.3g} times",
        ):
            assert seen in text, seen
        hostile_card = dash.locator(f"section[id='{hostile.id}']")
        assert HOSTILE in hostile_card.inner_text()  # shown as text, never run
        card.locator("button:text('Accept')").click()
        dash.wait_for_selector("p.notice:text('Accepted')")
        # the page the accept redirects to already lists the problem, so its poller never reloads
        # it; reloading here as well would race a navigation against the marker below
        live = dash.locator(f"tr[data-key='{pid}']")
        assert live.locator("[data-field=status]").inner_text() in ("accepted", "registered")
        assert mine.host.db.accepted_epsilon(me.fingerprint) == {pid: 2.0}
        dash.evaluate("window.__noReload = 42")
        _wait("8 registrations", lambda: status(agg, pid).registered == 8)
        dash.screenshot(path=str(screenshots / "peer-proposals.png"), full_page=True)

        # -- the operator closes registration; the round runs live ----------------------------
        page.reload()
        page.click("button:text('Close registration')")
        page.wait_for_selector("p.notice:text('Registration closes')")
        page.wait_for_selector("#counts [data-field=phase]:text-matches('^(done|degraded)$')", timeout=90_000)
        live.locator("[data-field=status]:text-matches('^(done|degraded)$')").wait_for(timeout=90_000)
        assert dash.evaluate("window.__noReload") == 42  # the status changed in place
        final = live.locator("[data-field=status]").inner_text()
        page.screenshot(path=str(screenshots / "console-problem.png"), full_page=True)
        page.click("nav >> text=Problems")
        assert pid in page.inner_text("#problems")
        page.screenshot(path=str(screenshots / "console-problems.png"), full_page=True)

        # -- what I shared, and the model -----------------------------------------------------
        dash.click("nav >> text=What I shared")
        releases = me.ledger.releases(peer=me.fingerprint, problem=pid)
        assert releases and dash.locator("#releases tbody tr").count() == len(releases)
        spent = sum(r.epsilon for r in releases)
        assert f"ε = {spent:.3g}" in dash.inner_text("#lifetime-total")
        assert dash.locator("svg.chart path").count() >= 1
        assert pid in dash.inner_text("#per-problem")
        dash.screenshot(path=str(screenshots / "peer-shared.png"), full_page=True)
        dash.click("nav >> text=Models")
        model = dash.locator(f"#model-{pid}")
        shown = model.locator("p.prediction").inner_text()
        assert shown.startswith("P(label = 1) = ") and final in model.inner_text()
        document = ModelDocument.model_validate_json(
            mine.host.db.participation(pid, me.fingerprint).model_json
        )
        expected = predict_locally(
            Problem.model_validate_json(mine.host.db.proposal(pid).problem_json), document, me.store, me.user
        )
        assert shown == f"P(label = 1) = {expected.probability:.3f} → predicted label {expected.label}"
        dash.screenshot(path=str(screenshots / "peer-models.png"), full_page=True)
        assert page.dialogs == []  # the hostile title opened nothing
    finally:
        mine.stop()
        crowd.stop()
        for p in simulated:
            p.store.close()
            p.ledger.close()
        me.store.close()
        me.ledger.close()
