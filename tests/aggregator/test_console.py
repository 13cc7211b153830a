"""The operator's console (``/console``) against a real aggregator: login, CSRF, propose, escaping.

One aggregator serves the whole module: each test proposes its own problems and reads only those (a
test that must publish nothing compares the listing before and after, whatever ran before it).
"""

from __future__ import annotations

import json

import numpy as np
import pytest
import requests

from tests.aggregator.helpers import ADMIN, TOKEN, draft, propose, status, wait_phase
from tests.waiting import wait_until
from tests.webpages import csrf_of, login

HOSTILE = '<script>alert("pwned")</script><img src=x onerror=alert(1)>'


@pytest.fixture
def aggregator(module_aggregator):
    """The module's one real aggregator (``module_aggregator``) under the name the tests use."""
    return module_aggregator


def _listed(url: str) -> list[str]:
    """The ids of the problems the aggregator lists (what publishing would change)."""
    return [problem["id"] for problem in requests.get(f"{url}/problems", timeout=30).json()]


def test_every_page_needs_the_admin_token_and_a_login_sets_a_strict_httponly_cookie(aggregator):
    url = aggregator.url
    for path in ("/console/", "/console/propose", "/console/problems/p-0000"):
        reply = requests.get(f"{url}{path}", allow_redirects=False, timeout=30)
        assert reply.status_code == 303 and reply.headers["location"] == "/console/login", path
    assert requests.get(f"{url}/console/api/problems/p-0000", timeout=30).status_code == 401
    anonymous = requests.post(
        f"{url}/console/propose", data={"draft": "{}"}, allow_redirects=False, timeout=30
    )
    assert anonymous.status_code == 303  # to the login page; nothing published
    http = requests.Session()
    form = http.get(f"{url}/console/login", timeout=30)
    assert (
        "Content-Security-Policy" in form.headers
        and "default-src 'self'" in form.headers["Content-Security-Policy"]
    )
    pair = csrf_of(form.text)
    wrong = http.post(f"{url}/console/login", data={"csrf": pair, "token": "not-it"}, timeout=30)
    assert wrong.status_code == 401 and "anonml_console" not in http.cookies
    no_pair = requests.post(f"{url}/console/login", data={"csrf": pair, "token": TOKEN}, timeout=30)
    assert no_pair.status_code == 403  # the login form's own CSRF pair (cookie + field) is missing
    right = http.post(
        f"{url}/console/login", data={"csrf": pair, "token": TOKEN}, allow_redirects=False, timeout=30
    )
    assert right.status_code == 303
    cookie = right.headers["set-cookie"]
    assert "anonml_console=" in cookie and "HttpOnly" in cookie and "SameSite=strict" in cookie
    assert "Path=/console" in cookie and TOKEN not in cookie
    assert http.get(f"{url}/console/", timeout=30).status_code == 200
    page = http.get(f"{url}/console/", timeout=30)
    http.post(f"{url}/console/logout", data={"csrf": csrf_of(page.text)}, timeout=30)
    assert http.get(f"{url}/console/", allow_redirects=False, timeout=30).status_code == 303


def test_a_post_without_the_sessions_csrf_token_is_refused_and_publishes_nothing(aggregator):
    url = aggregator.url
    listed = _listed(url)
    http, csrf = login(url, "/console", TOKEN)
    body = draft().model_dump_json()
    for fields in ({"draft": body}, {"draft": body, "csrf": "forged"}, {"draft": body, "csrf": csrf + "x"}):
        reply = http.post(f"{url}/console/propose", data=fields, allow_redirects=False, timeout=30)
        assert reply.status_code == 403 and "CSRF" in reply.text
    assert _listed(url) == listed
    other, _ = login(url, "/console", TOKEN)  # another browser's token is not this one's
    reply = other.post(f"{url}/console/propose", data={"draft": body, "csrf": csrf}, timeout=30)
    assert reply.status_code == 403
    json_body = http.post(
        f"{url}/console/propose",
        data=json.dumps({"draft": body, "csrf": csrf}),
        headers={"content-type": "application/json"},
        timeout=30,
    )
    assert json_body.status_code == 415  # forms only


def test_the_propose_form_validates_against_the_schema_and_publishes_with_the_api(aggregator):
    url = aggregator.url
    listed = _listed(url)
    http, csrf = login(url, "/console", TOKEN)
    form = http.get(f"{url}/console/propose", timeout=30)
    sample = json.loads(_textarea(form.text))
    assert sample["title"] and sample["schedule"]["registration_deadline"]
    bad = json.loads(draft().model_dump_json())
    bad["epsilon"] = 50
    bad["features"][0]["low"] = "ten"
    reply = http.post(f"{url}/console/propose", data={"draft": json.dumps(bad), "csrf": csrf}, timeout=30)
    assert reply.status_code == 422
    assert "epsilon: Input should be less than or equal to 20" in reply.text
    assert "features.0.low" in reply.text and _listed(url) == listed
    not_json = http.post(f"{url}/console/propose", data={"draft": "{nope", "csrf": csrf}, timeout=30)
    assert not_json.status_code == 422 and "Invalid JSON" in not_json.text
    good = json.loads(draft().model_dump_json())
    good["title"] = HOSTILE
    reply = http.post(
        f"{url}/console/propose",
        data={"draft": json.dumps(good), "csrf": csrf},
        allow_redirects=False,
        timeout=30,
    )
    assert reply.status_code == 303
    pid = reply.headers["location"].split("/")[-1].split("?")[0]
    assert status(url, pid).title == HOSTILE  # published as written, through the API's own route
    for page in (
        http.get(f"{url}{reply.headers['location']}", timeout=30),
        http.get(f"{url}/console/", timeout=30),
    ):
        assert page.status_code == 200
        assert HOSTILE not in page.text and "<script>alert" not in page.text
        assert "&lt;script&gt;alert(&#34;pwned&#34;)&lt;/script&gt;" in page.text


def test_close_and_train_buttons_call_the_admin_routes_and_show_their_refusals(aggregator):
    url = aggregator.url
    problem = propose(url, draft(min_peers=4))
    http, csrf = login(url, "/console", TOKEN)
    early = http.post(f"{url}/console/problems/{problem.id}/train", data={"csrf": csrf}, timeout=30)
    # POST/redirect/GET: the refusal is shown on the problem's page, reached by a GET
    assert early.status_code == 200 and early.history[0].status_code == 303
    assert early.url == f"{url}/console/problems/{problem.id}"
    assert "training needs the report round" in early.text
    assert "training needs" not in http.get(early.url, timeout=30).text  # shown once
    close = http.post(
        f"{url}/console/problems/{problem.id}/close", data={"csrf": csrf}, allow_redirects=False, timeout=30
    )
    assert close.status_code == 303
    # The phase machine acts at its next tick; with no registration the problem cannot go on.
    left = wait_phase(url, problem.id, ("witnessing", "medians", "reporting", "failed"))
    again = http.post(f"{url}/console/problems/{problem.id}/close", data={"csrf": csrf}, timeout=30)
    assert again.history[0].status_code == 303 and f"is in phase {left.phase}" in again.text
    live = http.get(f"{url}/console/api/problems/{problem.id}?phase=registration", timeout=30).json()
    assert live["items"]["counts"]["phase"] != "registration" and live["reload"] is True
    page = http.get(f"{url}/console/problems/{problem.id}", timeout=30)
    assert "Timeline" in page.text and "registration" in page.text
    assert (
        http.post(f"{url}/console/problems/{problem.id}/explode", data={"csrf": csrf}, timeout=30).status_code
        == 404
    )
    missing = http.get(f"{url}/console/problems/p-doesnotexist", timeout=30)
    assert missing.status_code == 404
    assert requests.post(f"{url}/problems/{problem.id}/close", headers=ADMIN, timeout=30).status_code == 409


def test_static_files_are_served_by_the_app_and_nothing_else_is(aggregator):
    url = aggregator.url
    js = requests.get(f"{url}/console/static/live.js", timeout=30)
    assert js.status_code == 200 and js.headers["content-type"].startswith("text/javascript")
    assert "textContent" in js.text and "innerHTML" not in js.text
    assert (
        requests.get(f"{url}/console/static/app.css", timeout=30)
        .headers["content-type"]
        .startswith("text/css")
    )
    for name in ("..%2Fweb.py", "base.html", "nope.js"):
        assert requests.get(f"{url}/console/static/{name}", timeout=30).status_code == 404, name


def _textarea(html: str) -> str:
    import html as html_lib

    start = html.index('<textarea name="draft"')
    start = html.index(">", start) + 1
    return html_lib.unescape(html[start : html.index("</textarea>", start)])



def _fields(**changes: str) -> dict[str, str]:
    from aggregator.console_form import form_of_draft
    from aggregator.routes.console import sample_draft

    return {**form_of_draft(sample_draft()), **changes}


def test_the_propose_fields_are_checked_beside_each_field_and_a_valid_draft_is_published(aggregator):
    import html

    from anonml.protocol import ProblemDraft

    url = aggregator.url
    listed = _listed(url)
    http, csrf = login(url, "/console", TOKEN)
    page = http.get(f"{url}/console/propose", timeout=30).text
    # The installed featurizer's features, the sample's chosen; the sentence a peer reads for ε = 1.
    assert 'name="feature.sessions" checked' in page and 'name="feature.video_seconds_watched">' in page
    assert "at most 2.72 times (e^1)" in page

    def err(text: str, name: str) -> str:
        start = text.index(f'id="err-{name}"')
        return html.unescape(text[text.index(">", start) + 1 : text.index("</p>", start)])

    typo = http.post(f"{url}/console/propose", data={**_fields(epsilon="one"), "csrf": csrf}, timeout=30)
    assert typo.status_code == 422 and err(typo.text, "epsilon") == "must be a number, not 'one'"
    no_features = {k: v for k, v in _fields().items() if not k.startswith("feature.")}
    none = http.post(f"{url}/console/propose", data={**no_features, "csrf": csrf}, timeout=30)
    assert none.status_code == 422 and err(none.text, "features") == "choose at least one feature"
    wide = http.post(
        f"{url}/console/propose", data={**_fields(epsilon="50", hops="9"), "csrf": csrf}, timeout=30
    )
    assert "less than or equal to 20" in err(wide.text, "epsilon")
    assert "less than or equal to 4" in err(wide.text, "hops")
    assert _listed(url) == listed
    # As you type: the same check, as JSON, with the sentence and the draft the fields make.
    check = f"{url}/console/api/propose/check"
    typed = http.post(check, data={**_fields(epsilon="2"), "csrf": csrf}, timeout=30)
    doc = typed.json()
    assert doc["ok"] and doc["errors"] == {} and "at most 7.39 times (e^2)" in doc["sentence"]
    assert ProblemDraft.model_validate_json(doc["json"]).epsilon == 2.0
    assert http.post(f"{url}/console/api/propose/check", data=_fields(), timeout=30).status_code == 403
    # Check validates without publishing; Publish publishes what the fields say.
    checked = http.post(
        f"{url}/console/propose", data={**_fields(), "action": "check", "csrf": csrf}, timeout=30
    )
    assert checked.status_code == 200 and "valid" in checked.text
    assert _listed(url) == listed
    chosen = _fields(title="Fields", epsilon="1.5", bins="3", kp="1", hops="2", min_peers="6")
    chosen["feature.video_seconds_watched"] = "on"
    done = http.post(f"{url}/console/propose", data={**chosen, "action": "publish", "csrf": csrf},
                     allow_redirects=False, timeout=30)
    assert done.status_code == 303
    pid = done.headers["location"].split("/")[-1].split("?")[0]
    published = requests.get(f"{url}/problems/{pid}", timeout=30).json()["draft"]
    assert (published["title"], published["epsilon"], published["bins"], published["kp"], published["hops"],
            published["min_peers"]) == ("Fields", 1.5, 3, 1, 2, 6)
    assert [f["name"] for f in published["features"]] == ["sessions", "active_days", "video_seconds_watched"]


def test_a_round_is_sampled_over_time_and_its_page_charts_it_counts_down_and_states_the_bound(aggregator):
    from sqlalchemy import select

    from aggregator.db import SampleRow
    from tests.aggregator.test_report_account import _send_all
    from tests.aggregator.test_tokens_intake import _open_round

    round_ = _open_round(aggregator, n=6, kh=2)
    url, pid = round_.url, round_.problem.id
    http, _ = login(url, "/console", TOKEN)
    def samples() -> list[int]:
        with aggregator.state.sessions() as s:
            return [r.registered for r in s.scalars(select(SampleRow).where(SampleRow.problem_id == pid))]

    # the driver samples at most once a second: wait for the registrations' sample
    seen = wait_until(lambda: 6 in (found := samples()) and found, 30,
                      lambda: f"a sample of 6 registrations: {samples()}")
    assert seen == sorted(seen)  # counts only grow
    page = http.get(f"{url}/console/problems/{pid}", timeout=30).text
    for title in ("Registrations", "Median answers", "Reports received", "Refusals and losses by reason"):
        assert f"<b>{title}</b>" in page
    assert "Refused by reason: none." in page
    # Each chart an image of this server, reloaded by the page's poller when a count changes.
    version = http.get(f"{url}/console/api/problems/{pid}?phase=reporting", timeout=30).json()["charts"]
    for slug in ("registrations", "median-answers", "reports", "refusals"):
        src = f"/console/problems/{pid}/charts/{slug}.svg?v={version}"
        assert f'src="{src}"' in page, slug
        image = http.get(f"{url}{src}", timeout=30)
        assert image.status_code == 200 and image.headers["content-type"] == "image/svg+xml"
        assert image.text.startswith('<svg xmlns="http://www.w3.org/2000/svg"'), image.text[:80]
        assert "default-src 'none'" in image.headers["content-security-policy"]
    reports = http.get(f"{url}/console/problems/{pid}/charts/reports.svg", timeout=30).text
    assert ">expected</text>" in reports and ">received</text>" in reports  # the cap and the series
    assert "Nothing to chart yet." in http.get(f"{url}/console/problems/{pid}/charts/refusals.svg").text
    assert http.get(f"{url}/console/problems/{pid}/charts/nope.svg", timeout=30).status_code == 404
    assert requests.get(f"{url}/console/problems/{pid}/charts/reports.svg", allow_redirects=False,
                        timeout=30).status_code == 303  # the login first
    assert "6 registered; at least 4 needed." in page
    bins = round_.bins
    shown = (("tokens and sending open (t_s)", bins.t_s), ("the relays&#39; releases end (t_r)", bins.t_r))
    for what, at in shown:
        assert what in page and f'data-deadline="{at:.3f}"' in page
    assert "12 expected; 12 pending, 0 lost." in page  # nothing sent yet, the window open
    # The captions come with the poller's counts (static/live.js writes them in place) and follow them.
    live_url = f"{url}/console/api/problems/{pid}?phase=reporting"
    said = http.get(live_url, timeout=30).json()["items"]["captions"]
    assert f'<span data-field="reports">{said["reports"]}</span>' in page
    assert said["reports"] == "0 received of 12 expected; 12 pending, 0 lost."
    _send_all(round_, 1, np.random.default_rng(3))
    said = http.get(live_url, timeout=30).json()["items"]["captions"]
    assert said["reports"] == "2 received of 12 expected; 10 pending, 0 lost."
    assert said["registrations"] == "6 registered; at least 4 needed."
    st = status(url, pid)
    assert st.shuffle is not None and st.shuffle.assumptions[:40] in page
    count = len(_listed(url))  # the page's count of problems: a reload only when it changed
    live = http.get(f"{url}/console/api/problems?count={count}", timeout=30).json()
    assert live["reload"] is False and live["items"][pid]["phase"] == "reporting"
    assert live["items"][pid]["reports"] == "2 / 12" and live["items"][pid]["pending"] == 10
    assert http.get(f"{url}/console/api/problems?count={count - 1}", timeout=30).json()["reload"] is True


def test_countdowns_read_the_same_in_the_page_and_in_its_script():
    from anonml.web import countdown

    assert [countdown(1000 + d, 1000) for d in (0, 5, 65, 3725, -12, -130)] == [
        "now", "in 5 s", "in 1 min 05 s", "in 1 h 02 min", "12 s ago", "2 min 10 s ago"
    ]


def test_the_schedule_lists_every_deadline_known_and_each_witness_per_stage():
    from datetime import UTC, datetime

    from aggregator.routes.console import deadlines, witness_rows
    from anonml.crypto import Identity
    from anonml.protocol import Bins, Cosignature, CosignatureBundle, Problem, Schedule, WitnessRef

    w1, w2 = (bytes(Identity.generate().public) for _ in range(2))
    d = draft().model_copy(update={"witnesses": (WitnessRef(identity=w1, url="http://127.0.0.1:1"),
                                                 WitnessRef(identity=w2, url="http://127.0.0.1:2"))})
    problem = Problem.model_construct(id="p-1", draft=d, created_at=datetime.now(UTC))
    before = deadlines(problem, None, 1.0, None, None)
    assert [(x.what, x.at, x.signed) for x in before] == [
        ("registration closes", d.schedule.registration_deadline.timestamp(), True)
    ]
    sched = Schedule(registration_deadline=d.schedule.registration_deadline, roster_seconds=2.0,
                     witness_seconds=10.0)
    bins = Bins.model_construct(problem_id="p-1", edges=(), t_s=1000.0, delta=5.0, t_r=1010.0,
                                slots_per_peer=1, signature=bytes(64))
    after = deadlines(problem, bins, 0.5, 900.0, sched)
    assert [(x.what, x.at) for x in after] == [
        ("registration closed", 900.0),
        ("the witnesses cosign the roster by", 912.0),
        ("tokens and sending open (t_s)", 1000.0),
        ("sending ends (t_s + δ)", 1005.0),
        ("the relays' releases end (t_r)", 1010.0),
        ("the intake closes: what is missing is lost", 1010.5),
    ]
    signed = Cosignature.model_construct(witness=w1, signature=b"\x07" * 64)
    bundle = CosignatureBundle.model_construct(problem_id="p-1", stage="roster", cosignatures=(signed,))
    rows = witness_rows(problem, [bundle], ["roster", "bins"])
    assert [(r.stage, r.witness, r.signature) for r in rows] == [
        ("roster", w1.hex(), "07" * 64), ("roster", w2.hex(), None), ("bins", w1.hex(), None),
        ("bins", w2.hex(), None),
    ]


def test_a_model_without_a_shuffle_bound_says_so_instead_of_promising_one(aggregator):
    """One sender's reports alone in their groups: no (partition, subset) shuffles 2 reports, so the
    model carries no bound, and the page says why instead of "known once the roster fixes…"."""
    from tests.aggregator.test_report_account import _send_all, _train
    from tests.aggregator.test_tokens_intake import _open_round

    round_ = _open_round(aggregator, n=6, kh=2)
    url, pid = round_.url, round_.problem.id
    http, _ = login(url, "/console", TOKEN)
    planned = http.get(f"{url}/console/problems/{pid}", timeout=30).text
    assert "planned from the roster&#39;s partitions" in planned  # 6 report peers: groups of ≥ 2
    _send_all(round_, 1, np.random.default_rng(4))
    _train(round_)
    wait_phase(url, pid, ("done", "degraded"), 60)
    st = status(url, pid)
    assert st.shuffle is None, st.shuffle  # one peer's reports: no group received 2
    page = http.get(f"{url}/console/problems/{pid}", timeout=30).text
    assert "No shuffle bound: a (partition, subset) group received fewer than 2 reports" in page
    assert "known once the roster fixes" not in page and "<dt>shuffle bound</dt>" not in page
