"""The person's dashboard (``/ui``) on a real peer daemon and a real aggregator: login, CSRF, escaping,
accept / decline, import from the page, the ledger and the models."""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
import requests

from anonml.crypto import Identity
from anonml.datasets.mooc import simulate_students, write_edx_logs
from anonml.plugins import create
from anonml.privacy import PrivacyLedger
from anonml.store import EventStore
from peer.app import PeerServer, start_peer_server
from peer.db import PeerDB
from peer.host import PeerHost
from peer.participant import PeerNode
from peer.phases import ParticipationPhase
from peer.policy import PeerPolicy
from tests.aggregator.helpers import propose
from tests.peer.test_host import _draft as draft
from tests.waiting import wait_until
from tests.webpages import csrf_of, login

LOCAL = "the-local-token-of-this-test"
HOSTILE = '<script>alert("pwned")</script><img src=x onerror=alert(1)>'


@dataclass
class Daemon:
    url: str
    server: PeerServer
    node: PeerNode

    @property
    def host(self) -> PeerHost:
        return self.server.host


def _node(root: Path, seed: int = 0) -> PeerNode:
    return PeerNode(
        Identity.generate(np.random.default_rng(seed)),
        EventStore(f"sqlite:///{root / 'events.db'}"),
        PrivacyLedger(f"sqlite:///{root / 'ledger.db'}"),
        user="me",
        rng=np.random.default_rng(seed),
    )


@pytest.fixture
def daemon(aggregator, tmp_path: Path) -> Iterator[Daemon]:  # noqa: F811
    node = _node(tmp_path)
    host = PeerHost(
        [node],
        PeerDB(f"sqlite:///{tmp_path / 'peer.db'}"),
        PeerPolicy.for_simulation(max_epsilon_per_problem=4.0),
        [aggregator.url],
        poll_seconds=0.1,
    )
    server = start_peer_server(host, LOCAL)
    try:
        yield Daemon(server.url, server, node)
    finally:
        server.stop()
        node.store.close()
        node.ledger.close()


def _seen(daemon: Daemon, problem_id: str, timeout: float = 30) -> None:
    wait_until(lambda: daemon.host.db.decision(problem_id, daemon.node.fingerprint) is not None, timeout,
               "the daemon to decide on the proposal")


def test_pages_need_the_local_token_and_an_api_poll_without_a_login_is_401(daemon):
    for path in ("/ui/", "/ui/proposals", "/ui/shared", "/ui/models"):
        reply = requests.get(f"{daemon.url}{path}", allow_redirects=False, timeout=30)
        assert reply.status_code == 303 and reply.headers["location"] == "/ui/login", path
    assert requests.get(f"{daemon.url}/ui/api/participations", timeout=30).status_code == 401
    http = requests.Session()
    pair = csrf_of(http.get(f"{daemon.url}/ui/login", timeout=30).text)
    assert (
        http.post(f"{daemon.url}/ui/login", data={"csrf": pair, "token": "guess"}, timeout=30).status_code
        == 401
    )
    bearer = requests.get(
        f"{daemon.url}/ui/", headers={"Authorization": f"Bearer {LOCAL}"}, allow_redirects=False, timeout=30
    )
    assert bearer.status_code == 303  # the pages take the session cookie, not the API's bearer header
    http, _ = login(daemon.url, "/ui", LOCAL)
    for path in ("/ui/", "/ui/proposals", "/ui/shared", "/ui/models"):
        page = http.get(f"{daemon.url}{path}", timeout=30)
        assert page.status_code == 200 and "Log out" in page.text, path
        assert page.headers["x-frame-options"] == "DENY" and page.headers["cache-control"] == "no-store"


def test_hostile_titles_are_escaped_and_decisions_need_the_csrf_token(daemon, aggregator):
    d = draft()
    problem = propose(aggregator.url, d.model_copy(update={"title": HOSTILE, "description": HOSTILE}))
    _seen(daemon, problem.id)
    http, csrf = login(daemon.url, "/ui", LOCAL)
    page = http.get(f"{daemon.url}/ui/proposals", timeout=30).text
    assert problem.id in page and HOSTILE not in page and "<script>alert" not in page
    # title, description, and the accessible names of its Accept and Decline buttons
    assert page.count("&lt;script&gt;alert(&#34;pwned&#34;)&lt;/script&gt;") == 4
    assert "at most 7.39 times" in page  # ε = 2 in one plain sentence: e^2
    fp = daemon.node.fingerprint
    assert daemon.host.db.decision(problem.id, fp).verdict == "ask"
    for fields in ({}, {"csrf": "forged"}):
        reply = http.post(f"{daemon.url}/ui/proposals/{problem.id}/decline", data=fields, timeout=30)
        assert reply.status_code == 403
    assert daemon.host.db.decision(problem.id, fp).verdict == "ask"
    stranger = requests.post(
        f"{daemon.url}/ui/proposals/{problem.id}/decline",
        data={"csrf": csrf},
        allow_redirects=False,
        timeout=30,
    )
    assert stranger.status_code == 303 and daemon.host.db.decision(problem.id, fp).verdict == "ask"
    declined = http.post(f"{daemon.url}/ui/proposals/{problem.id}/decline", data={"csrf": csrf}, timeout=30)
    assert declined.status_code == 200 and "Declined" in declined.text
    row = daemon.host.db.decision(problem.id, fp)
    assert (row.verdict, row.reason) == ("refuse", "declined by the user")


def test_accepting_past_the_lifetime_cap_is_refused_on_the_page_with_the_reason(daemon, aggregator):
    """No Accept button for it; a forced POST redirects (POST/redirect/GET) to the page, which shows the
    reason once: reloading it neither decides again nor repeats the message."""
    daemon.node.ledger.set_lifetime_cap(daemon.node.fingerprint, 10.0)
    daemon.node.ledger.record(
        peer=daemon.node.fingerprint,
        problem="p-earlier",
        round=1,
        attributes=("x",),
        mechanism="rr",
        epsilon=9.5,
    )
    problem = propose(aggregator.url, draft())
    _seen(daemon, problem.id)
    http, csrf = login(daemon.url, "/ui", LOCAL)
    before = http.get(f"{daemon.url}/ui/proposals", timeout=30).text
    assert f"/ui/proposals/{problem.id}/accept" not in before and "No Accept button" in before
    reply = http.post(
        f"{daemon.url}/ui/proposals/{problem.id}/accept",
        data={"csrf": csrf},
        allow_redirects=False,
        timeout=30,
    )
    assert reply.status_code == 303 and reply.headers["location"] == "/ui/proposals"
    shown = http.get(f"{daemon.url}/ui/proposals", timeout=30)
    assert shown.status_code == 200
    assert "would bring the lifetime total to 11.5, past the cap of 10" in shown.text
    assert 'class="error"' in shown.text
    again = http.get(f"{daemon.url}/ui/proposals", timeout=30).text  # a reload: a GET, shown once
    assert 'class="error"' not in again
    assert daemon.host.db.decision(problem.id, daemon.node.fingerprint).verdict == "refuse"
    daemon.host.db.save_participation("p-earlier", daemon.node.fingerprint, "failed", "{}", None)
    shared = http.get(f"{daemon.url}/ui/shared", timeout=30).text
    assert shared.count("problem failed") == 2  # the problem's row and its release, marked
    assert "p-earlier" in shared and "ε = 9.5" in shared and "lifetime cap 10" in shared and "<svg" in shared


def test_a_file_imported_from_the_page_goes_through_the_import_path_with_its_errors(daemon, tmp_path):
    http, csrf = login(daemon.url, "/ui", LOCAL)
    missing = http.post(
        f"{daemon.url}/ui/import", data={"csrf": csrf, "paths": str(tmp_path / "nope.log")}, timeout=30
    )
    assert missing.status_code == 400 and "no such file or folder" in missing.text
    unknown = http.post(
        f"{daemon.url}/ui/import",
        data={"csrf": csrf, "paths": str(tmp_path), "importer": "nosuch"},
        timeout=30,
    )
    assert unknown.status_code == 400 and "nosuch" in unknown.text
    assert http.post(f"{daemon.url}/ui/import", data={"paths": str(tmp_path)}, timeout=30).status_code == 403
    (log,) = write_edx_logs(simulate_students(1, weeks=4, seed=5), tmp_path / "logs")
    gz = ".gz" if log.path.suffix == ".gz" else ""
    hostile = log.path.with_name(f"tracking.log-me<img src=x onerror=alert(1)>{gz}")
    log.path.rename(hostile)  # a file name is shown on the page too
    reply = http.post(
        f"{daemon.url}/ui/import",
        data={"csrf": csrf, "paths": str(hostile)},
        allow_redirects=False,
        timeout=30,
    )
    assert reply.status_code == 303
    job = reply.headers["location"].split("job=")[1]
    first = http.get(f"{daemon.url}{reply.headers['location']}", timeout=30).text
    # still running: the page polls until it ends; already ended: the page shows what it stored
    assert f"/ui/api/imports/{job}" in first or not re.search(r"[^\d,]0 in all", first), first
    progress = wait_until(
        lambda: (p := http.get(f"{daemon.url}/ui/api/imports/{job}", timeout=30).json())["reload"] and p,
        60, "the import to end",
    )
    assert progress["items"][job]["state"] == "done", progress
    stored = daemon.node.store.count()
    with EventStore("sqlite://") as reference:  # what `anonml import --user me` stores from the same file
        expected = reference.import_file(hostile, create("importer", "edx"), user="me").inserted
    assert stored == expected > 0
    page = http.get(f"{daemon.url}/ui/", timeout=30).text
    assert "edx" in page and f"{stored:,} in all" in page and "done" in page
    assert "<img src=x" not in page and page.count("&lt;img src=x onerror=alert(1)&gt;") >= 3
    assert {s.source for s in daemon.node.store.summary(user="me")} and daemon.node.store.users() == ["me"]


def test_a_host_of_many_identities_has_no_dashboard(aggregator, tmp_path):  # noqa: F811
    nodes = [_node(tmp_path / str(i), seed=i) for i in range(2)]
    for i in range(2):
        (tmp_path / str(i)).mkdir(exist_ok=True)
    host = PeerHost(
        nodes, PeerDB(f"sqlite:///{tmp_path / 'peer.db'}"), PeerPolicy.for_simulation(), [aggregator.url]
    )
    server = start_peer_server(host, LOCAL)
    try:
        http, _ = _login_only(server.url)
        reply = http.get(f"{server.url}/ui/", timeout=30)
        assert reply.status_code == 409 and "runs 2 identities" in reply.text
    finally:
        server.stop()


def _login_only(url: str) -> tuple[requests.Session, None]:
    http = requests.Session()
    pair = csrf_of(http.get(f"{url}/ui/login", timeout=30).text)
    reply = http.post(
        f"{url}/ui/login", data={"csrf": pair, "token": LOCAL}, allow_redirects=False, timeout=30
    )
    assert reply.status_code == 303
    return http, None


def test_the_dashboard_refuses_clients_that_are_not_on_this_machine():
    from fastapi import HTTPException
    from starlette.requests import Request

    from peer.deps import loopback_only

    def request(client: str) -> Request:
        return Request(
            {"type": "http", "method": "GET", "path": "/ui/", "headers": [], "client": (client, 5000)}
        )

    for local in ("127.0.0.1", "127.8.0.1", "::1"):
        loopback_only(request(local))  # allowed
    for remote in ("10.0.0.5", "192.168.1.20", "2001:db8::1", "testclient", ""):
        with pytest.raises(HTTPException) as refused:
            loopback_only(request(remote))
        assert refused.value.status_code == 403 and "only on this machine" in refused.value.detail


@pytest.mark.slow
def test_peer_start_prints_where_the_dashboard_is_and_its_token_file_opens_it(aggregator, tmp_path):
    import os
    import queue
    import re
    import subprocess
    import sys
    import threading

    from anonml.serving import free_port, wait_answering
    from tests.adversary.test_policy_cli import _env

    home = tmp_path / "home"
    home.mkdir(mode=0o700)
    port = free_port()
    daemon = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "anonml",
            "peer",
            "start",
            "-a",
            aggregator.url,
            "--port",
            str(port),
            "--quiet",
        ],
        env=_env(home),
        stderr=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        text=True,
    )
    lines: queue.Queue[str] = queue.Queue()
    threading.Thread(target=lambda: [lines.put(line) for line in daemon.stderr], daemon=True).start()
    try:
        deadline = time.monotonic() + 60
        said = ""
        while "dashboard at" not in said:
            assert time.monotonic() < deadline and daemon.poll() is None, said
            try:
                said = lines.get(timeout=1)
            except queue.Empty:
                continue
        found = re.search(
            r"dashboard at (http://127\.0\.0\.1:(\d+)/ui/) .*the local token is in (\S+)\)", said
        )
        assert found is not None, said
        assert int(found.group(2)) == port
        token_file = Path(found.group(3))
        assert token_file.parent == home / "peer" and os.stat(token_file).st_mode & 0o777 == 0o600
        base = found.group(1).removesuffix("/ui/")
        # the line is printed before uvicorn listens
        wait_answering(base, daemon, what="anonml peer start", timeout=deadline - time.monotonic())
        http, _ = login(base, "/ui", token_file.read_text().strip())
        assert "No events yet" in http.get(f"{base}/ui/", timeout=30).text
    finally:
        daemon.terminate()
        daemon.wait(timeout=30)


def test_an_accepted_problem_is_in_the_live_table_from_the_page_the_accept_redirects_to(daemon, aggregator):
    """The live rows change only when the person decides, so the page's poller never has to reload."""
    accepted, asked = propose(aggregator.url, draft()), propose(aggregator.url, draft())
    for problem in (accepted, asked):
        _seen(daemon, problem.id)
    http, csrf = login(daemon.url, "/ui", LOCAL)
    page = http.post(f"{daemon.url}/ui/proposals/{accepted.id}/accept", data={"csrf": csrf}, timeout=30)
    assert page.status_code == 200 and f"Accepted {accepted.id}" in page.text
    assert f'<tr data-key="{accepted.id}">' in page.text and f'data-key="{asked.id}"' not in page.text
    live = http.get(f"{daemon.url}/ui/api/participations", timeout=30).json()
    assert live["reload"] is False and list(live["items"]) == [accepted.id]
    row = live["items"][accepted.id]
    assert row["status"] in {phase.value for phase in ParticipationPhase}, row
    if row["status"] == "accepted":  # the daemon has not polled since: nothing registered yet
        assert row["meaning"] == "this peer accepted this problem and registers for it at its next poll"
