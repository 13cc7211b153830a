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
from typing import TYPE_CHECKING

import numpy as np
import pytest
import requests

from anonml.crypto import Identity
from anonml.demo import SimulatedPeer, dropout_draft, simulate_peers
from anonml.plugins import PluginRef, create
from anonml.privacy import PrivacyLedger
from anonml.protocol import ModelDocument, Problem, ProblemDraft
from anonml.store import EventStore
from peer.app import start_peer_server
from peer.dashboard import instancer_params, label_words, prediction_text
from peer.db import PeerDB
from peer.features import predict_locally
from peer.host import PeerHost
from peer.participant import PeerNode
from peer.policy import PeerPolicy
from tests.adversary.malicious import mooc_draft
from tests.aggregator.helpers import TOKEN, propose, status
from tests.peer.helpers import simulation_host as crowd_host
from tests.peer.test_host import _draft as small_draft
from tests.waiting import wait_until

if TYPE_CHECKING:
    from playwright.sync_api import Locator, Page

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


def _follow(page: Page, link: str, path: str) -> None:
    """Click the nav link ``link`` and wait until its page (``path``) is parsed.

    The click returns once the navigation commits: a locator count read then can see a page not
    parsed yet, and a field typed into then fires its input event before the page's deferred
    script listens (propose.js checks a form edited that early, on DOMContentLoaded).
    """
    page.click(f"nav >> text={link}")
    page.wait_for_url(f"**{path}", wait_until="domcontentloaded")


def _me(sim: Path, me_sim: SimulatedPeer) -> tuple[PeerNode, Path]:
    """The person: a fresh identity with an empty store (imported from the page), a ledger with a
    lifetime cap of ε = 10, and the path of their own edX log among the simulated ones."""
    home = sim.parent / "me"
    home.mkdir()
    me = PeerNode(
        Identity.generate(np.random.default_rng(99)),
        EventStore(f"sqlite:///{home / 'events.db'}"),  # empty: imported from the page
        PrivacyLedger(f"sqlite:///{home / 'ledger.db'}"),
        user=me_sim.username,
        rng=np.random.default_rng(99),
    )
    me.ledger.set_lifetime_cap(me.fingerprint, 10.0)
    return me, next((sim / "logs").glob(f"tracking.log-{me_sim.username}*"))


def _operator_proposes(page: Page, agg: str, draft: ProblemDraft) -> tuple[str, ProblemDraft, Problem]:
    """From the console: the form's fields are checked as the operator types; a refused draft
    publishes nothing; ``draft`` is published from the raw JSON box, and a hostile title beside it.
    Returns the published problem's id, its draft, the hostile one."""
    _log_in(page, agg, "/console", TOKEN)
    _follow(page, "Propose", "/console/propose")
    page.fill("#f-epsilon", "50")
    page.wait_for_selector("#err-epsilon:text('less than or equal to 20')")  # as typed, before any submit
    assert page.inner_text("#check-state") == "not valid yet"
    page.fill("#f-epsilon", "3")
    page.wait_for_selector("#eps-sentence:text('at most 20.1 times (e^3)')")
    assert page.locator("#err-epsilon").is_hidden() and page.inner_text("#check-state") == "valid"
    assert '"epsilon": 3.0' in page.locator("#draft-json").text_content()
    page.click("#raw summary")
    page.fill("textarea[name=draft]", '{"title": ""}')
    page.click("button:text('Validate and publish')")
    page.locator("#draft-errors").wait_for()  # refused by the schema (the page it answers), nothing published
    assert requests.get(f"{agg}/problems", timeout=30).json() == []
    page.fill("textarea[name=draft]", draft.model_dump_json(indent=2))
    page.click("button:text('Validate and publish')")
    page.wait_for_url("**/console/problems/p-*")
    pid = page.url.split("/problems/")[1].split("?")[0]
    assert status(agg, pid).phase == "registration"
    return pid, draft, propose(agg, small_draft().model_copy(update={"title": HOSTILE}))


def _person_imports(page: Page, ui: str, me: PeerNode, my_log: Path) -> Page:
    """The person logs in to their dashboard (a new tab) and imports their own log from the page."""
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
    return dash


def _person_accepts(dash: Page, pid: str, draft: ProblemDraft, hostile: Problem) -> Locator:
    """The person reads the proposal (and the hostile title, as text) and accepts it; returns the
    problem's row of the live participation table."""
    _follow(dash, "Proposals", "/ui/proposals")
    wait_until(lambda: dash.reload() or dash.locator(f"section[id='{pid}']").count(), 60,
               "the proposal on the page", every=0.2)  # each poll reloads the page
    card = dash.locator(f"section[id='{pid}']")
    text = card.inner_text()
    for seen in (
        "time_on_site_minutes",
        "[0, 600], 2 bins",
        f"{draft.hops} relays per report",
        "open: anyone may register",
        "as many fake peers as it likes",
        "only your local ε = 2 protects you",
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
    return live


def _operator_closes(page: Page, dash: Page, live: Locator, agg: str, pid: str, hosts: list[PeerHost]) -> str:
    """The operator closes registration; the round runs live and the person's row changes in place.
    Returns the participation's final status; a round that fails or does not end fails the test with
    its account (:func:`_round_account`)."""
    from playwright.sync_api import TimeoutError as PlaywrightTimeout

    page.reload()
    page.click("button:text('Close registration')")
    page.wait_for_selector("p.notice:text('Registration closes')")
    _loss_is_not_reported_mid_round(page)
    ended = "#counts [data-field=phase]:text-matches('^(done|degraded|failed)$')"
    try:
        page.wait_for_selector(ended, timeout=90_000)
    except PlaywrightTimeout:
        pytest.fail(f"the round did not end within 90 s\n{_round_account(agg, pid, hosts)}")
    if page.inner_text("#counts [data-field=phase]") == "failed":
        pytest.fail(f"the round failed\n{_round_account(agg, pid, hosts)}")
    live.locator("[data-field=status]:text-matches('^(done|degraded)$')").wait_for(timeout=90_000)
    assert dash.evaluate("window.__noReload") == 42  # the status changed in place
    final = live.locator("[data-field=status]").inner_text()
    _follow(page, "Problems", "/console/")
    assert pid in page.inner_text("#problems")
    return final


def _round_account(agg: str, pid: str, hosts: list[PeerHost]) -> str:
    """Where a round that did not end well stands: the aggregator's status (phase, message, report
    and median accounts) and, per host, every identity's phase and reason and the relay's counters."""
    lines = [status(agg, pid).model_dump_json(exclude={"schedule", "shuffle"})]
    for host in hosts:
        lines.append(f"host counters: {host.status().relay}")
        for session in host.sessions.values():
            lines.extend(f"  {p.node.fingerprint[:12]} {p.phase}: {p.reason}" for p in session.participants)
    return "\n".join(lines)


def _loss_is_not_reported_mid_round(page: Page) -> None:
    """While the round runs, reports not received yet are pending, not lost (nothing was refused).

    The row is read in one go (the poller rewrites it in one go too), while its phase is one in
    which reports may still arrive.
    """
    from playwright.sync_api import Error as PlaywrightError

    page.wait_for_selector("#counts [data-field=phase]:text-matches('^(medians|reporting)$')", timeout=90_000)
    deadline = time.monotonic() + 60
    while True:
        try:
            row = page.evaluate(
                "Object.fromEntries([...document.querySelectorAll('#counts [data-field]')]"
                ".map(e => [e.dataset.field, e.textContent.trim()]))"
            )
            break
        except PlaywrightError:  # the poller reloaded the page as the phase changed: read it again
            assert time.monotonic() < deadline, "the problem page never settled"
            page.wait_for_load_state("load")
    if row["phase"] in ("medians", "reporting"):
        expected, received = int(row["expected"]), int(row["received"])
        assert expected > 0 and row["lost"] == "0", row
        assert int(row["pending"]) == expected - received, row
    else:  # the round ended between the two reads: the account is final, nothing pending
        assert row["pending"] == "0", row


def _every_page_fits(page: Page, dash: Page, agg: str, ui: str, pid: str, screenshots: Path) -> None:
    """Each page, with the content of a real round, fits 1,280 × 800 and 390 × 844; shot at both, and
    each shows what its committed screenshot shows (:mod:`tests.browser.screenshots`)."""
    from tests.browser.screenshots import shoot
    from tests.browser.test_layout import SIZES, assert_fits

    shots = {
        "peer-data": (dash, f"{ui}/ui/"), "peer-proposals": (dash, f"{ui}/ui/proposals"),
        "peer-shared": (dash, f"{ui}/ui/shared"), "peer-models": (dash, f"{ui}/ui/models"),
        "console-problems": (page, f"{agg}/console/"),
        "console-problem": (page, f"{agg}/console/problems/{pid}"),
        "console-propose": (page, f"{agg}/console/propose"),
    }
    for width, height in SIZES.values():
        for tab, url in shots.values():
            tab.set_viewport_size({"width": width, "height": height})
            assert_fits(tab, url)
    for name, (tab, url) in shots.items():
        shoot(tab, name, url, screenshots)


def _person_reads_shares_and_model(
    dash: Page, host: PeerHost, me: PeerNode, pid: str, final: str
) -> None:
    """What I shared matches the ledger; the model's prediction is the one on my own data."""
    _follow(dash, "What I shared", "/ui/shared")
    releases = me.ledger.releases(peer=me.fingerprint, problem=pid)
    assert releases and dash.locator("#releases tbody tr").count() == len(releases)
    spent = sum(r.epsilon for r in releases)
    assert f"ε = {spent:.3g}" in dash.inner_text("#lifetime-total")
    assert dash.locator("svg.chart path").count() >= 1
    assert pid in dash.inner_text("#per-problem")
    _follow(dash, "Models", "/ui/models")
    model = dash.locator(f"#model-{pid}")
    shown = model.locator("p.prediction").inner_text()
    assert final in model.inner_text() and "P(label = 1)" not in model.inner_text()
    document = ModelDocument.model_validate_json(host.db.participation(pid, me.fingerprint).model_json)
    problem = Problem.model_validate_json(host.db.proposal(pid).problem_json)
    expected = predict_locally(problem, document, me.store, me.user)
    # The binary label in its own words (the instancer's name for it), both values with their P̂.
    assert shown == f"binary label: {prediction_text(problem, expected).headline}"
    words = label_words(problem.draft.label, instancer_params(problem))
    assert words == ("inactive: no (0)", "inactive: yes (1)")  # user_window's label, its default
    rows = model.locator("table.label-probabilities tbody tr").all_inner_texts()
    assert [r.split("\t")[0] for r in rows] == list(words)
    assert float(rows[1].split("\t")[1]) == pytest.approx(expected.probability, abs=5e-4)


def _pages_are_accessible_with_a_finished_round(browser, agg: str, ui: str, pid: str) -> None:
    """axe-core on the pages a round fills: the problem page (charts, schedule, bound), the models
    page (a prediction in the label's words), what I shared (its chart), the problems list."""
    from tests.browser.axe import assert_accessible

    context = browser.new_context(viewport={"width": 1280, "height": 800}, bypass_csp=True)
    context.set_default_timeout(60_000)
    tab = context.new_page()
    try:
        _log_in(tab, agg, "/console", TOKEN)
        _log_in(tab, ui, "/ui", LOCAL)
        for url in (f"{agg}/console/problems/{pid}", f"{agg}/console/", f"{ui}/ui/models", f"{ui}/ui/shared"):
            assert_accessible(tab, url)
    finally:
        context.close()


def _round_of(regenerating: bool) -> tuple[int, ProblemDraft]:
    """The crowd's size and the draft: a fast round for the test; for the README's screenshots a
    realistic one — 19 peers and me, the draft's default fewest peers, median pool and the
    schedule's default windows, the aggregator's floors on (as always)."""
    title = "Who drops out of the course?"
    if not regenerating:
        return 7, mooc_draft(min_peers=4, title=title)
    featurizer = create("featurizer", PluginRef(name="mooc_engagement", params={"weeks": 2}))
    fewest = ProblemDraft.model_fields["min_peers"].default
    d = dropout_draft(
        featurizer.features(), history_weeks=2, weeks=4, epsilon=2.0, min_peers=fewest,
        median_step_seconds=10.0, report_delay_seconds=5.0, send_window_seconds=5.0,
        release_window_seconds=5.0, registration_seconds=600.0,
    )
    return 19, d.model_copy(update={"title": title})


def test_a_person_follows_a_problem_from_proposal_to_model_in_the_browser(
    aggregator, browser, page, screenshots, tmp_path
):
    from tests.browser.screenshots import regenerating

    crowd_size, draft = _round_of(regenerating() is not None)
    simulated, _ = simulate_peers(
        crowd_size + 1, tmp_path / "sim", weeks=4, history_weeks=2, seed=3, features=FEATURES
    )
    crowd_nodes = [
        PeerNode(p.identity, p.store, p.ledger, user=p.username, rng=np.random.default_rng(i))
        for i, p in enumerate(simulated[:crowd_size])
    ]
    me, my_log = _me(tmp_path / "sim", simulated[crowd_size])
    crowd = start_peer_server(crowd_host(crowd_nodes, tmp_path / "crowd.db", aggregator.url))
    mine = start_peer_server(_my_host(me, tmp_path / "me" / "peer.db", aggregator.url), LOCAL)
    agg, ui = aggregator.url, mine.url
    seen: list[str] = []
    page.context.on("request", lambda r: seen.append(r.url))
    try:
        pid, draft, hostile = _operator_proposes(page, agg, draft)
        dash = _person_imports(page, ui, me, my_log)
        live = _person_accepts(dash, pid, draft, hostile)
        assert mine.host.db.accepted_epsilon(me.fingerprint) == {pid: 2.0}
        dash.evaluate("window.__noReload = 42")
        wait_until(lambda: status(agg, pid).registered == crowd_size + 1, 60,
                   f"{crowd_size + 1} registrations")
        final = _operator_closes(page, dash, live, agg, pid, [mine.host, crowd.host])
        _person_reads_shares_and_model(dash, mine.host, me, pid, final)
        assert page.dialogs == []  # the hostile title opened nothing
        _every_page_fits(page, dash, agg, ui, pid, screenshots)
        outside = [u for u in seen if not u.startswith((agg + "/", ui + "/"))]
        assert outside == [], outside  # nothing loaded from anywhere but the two servers
        _pages_are_accessible_with_a_finished_round(browser, agg, ui, pid)
    finally:
        mine.stop()
        crowd.stop()
        for p in simulated:
            p.store.close()
            p.ledger.close()
        me.store.close()
        me.ledger.close()
