"""The operator's console (``/console``) against a real aggregator: login, CSRF, propose, escaping."""

from __future__ import annotations

import json

import requests

from tests.aggregator.helpers import ADMIN, TOKEN, draft, propose, status, wait_phase
from tests.webpages import csrf_of, login

HOSTILE = '<script>alert("pwned")</script><img src=x onerror=alert(1)>'


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
    http, csrf = login(url, "/console", TOKEN)
    body = draft().model_dump_json()
    for fields in ({"draft": body}, {"draft": body, "csrf": "forged"}, {"draft": body, "csrf": csrf + "x"}):
        reply = http.post(f"{url}/console/propose", data=fields, allow_redirects=False, timeout=30)
        assert reply.status_code == 403 and "CSRF" in reply.text
    assert requests.get(f"{url}/problems", timeout=30).json() == []
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
    assert "features.0.low" in reply.text and requests.get(f"{url}/problems", timeout=30).json() == []
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

