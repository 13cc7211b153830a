"""The peer host's route contracts in process: the local token, the dashboard's login and CSRF, the
pages that answer only on this machine, the relay's body caps, unknown ids and the route listing —
every route the app serves, driven through FastAPI's TestClient over one app per module (a real socket
changes none of these answers; the real stack is served in ``test_dashboard.py`` and ``test_relay*.py``).

The routes are read from the app itself (its OpenAPI document, and ``app.routes`` for the dashboard's
pages, which the schema leaves out), so a route added later is held to the same contracts. The app
runs its own lifespan (the host's worker polls no aggregator). Each test records its own proposal and
reads only what concerns it, so the tests share the app whatever their order.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from anonml.crypto import PACKET_SIZE, Hop, Identity, Redemption, SphinxRelay, WindowSchedule, build_packet
from anonml.privacy import PrivacyLedger
from anonml.protocol import MAX_BATCH_ITEMS, PeerStatus
from anonml.store import EventStore
from anonml.web import FORM_LIMIT
from peer.app import create_app
from peer.db import PeerDB
from peer.host import PeerHost
from peer.participant import PeerNode
from peer.policy import PeerPolicy
from peer.relay import RelayRound, StoredReplayCache
from peer.relayauth import AUTH_SIZE, RELAY_POST_TYPE
from tests.aggregator.helpers import draft, signed_problem
from tests.route_contracts import DOC_ROUTES, openapi_operations, served_routes, takes_authorization
from tests.webpages import csrf_of

LOCAL = "the-local-token-of-the-route-contracts"
#: Where TestClient's requests come from: this machine, or an address on the network (TEST-NET-1).
LOOPBACK = ("127.0.0.1", 50000)
ELSEWHERE = ("192.0.2.7", 50000)
#: A body that is not a packet, a form or JSON: read as bytes only, never unpickled.
PICKLE = b"\x80\x04pickle"
ROUND = 7171
#: The dashboard's routes anyone on this machine may open without logging in.
PUBLIC_PAGES = {("GET", "/ui/login"), ("POST", "/ui/login"), ("GET", "/ui/static/{name}")}
#: The routes the app serves today (method, path): the enumeration below must find at least these.
KNOWN_ROUTES = {
    ("POST", "/relay/{node}"),
    ("POST", "/relay/{node}/batch"),
    ("GET", "/relay/{node}/roster/{problem_id}"),
    ("GET", "/relay/{node}/reachability/{challenge}"),
    ("GET", "/local/status"),
    ("GET", "/healthz"),
    ("GET", "/ui/login"),
    ("POST", "/ui/login"),
    ("POST", "/ui/logout"),
    ("GET", "/ui/static/{name}"),
    ("GET", "/ui/"),
    ("POST", "/ui/import"),
    ("GET", "/ui/api/imports/{job_id}"),
    ("GET", "/ui/proposals"),
    ("POST", "/ui/proposals/{problem_id}/{action}"),
    ("GET", "/ui/api/participations"),
    ("GET", "/ui/shared"),
    ("GET", "/ui/models"),
}



@dataclass
class InProcessPeer:
    """A peer host's app driven in process, its one identity relaying one round (which ends in hours)."""

    app: FastAPI
    client: TestClient  # from this machine, not logged in; runs the app's lifespan
    host: PeerHost
    node: PeerNode
    hop: Hop
    aggregator: Identity

    @property
    def node_hex(self) -> str:
        return self.node.node_id.hex()

    def held(self) -> int:
        """Packets this identity's relay holds in the state DB for release."""
        return len(self.host.db.held(self.node_hex))

    def packet(self, i: int) -> bytes:
        """A real one-hop onion packet for the round, to this node and on to the aggregator."""
        return build_packet(
            [self.hop],
            Redemption(b"p-x/r/0", bytes([i]) * 32, bytes(32)),
            b'{"n": %d}' % i,
            round_id=ROUND,
            destination=self.aggregator.public.node_id,
            intake_key=self.aggregator.public.relay_key,
        )

    def other(self, client: tuple[str, int] = LOOPBACK) -> TestClient:
        """Another client of the same app (no lifespan of its own), redirects not followed."""
        return TestClient(self.app, client=client, follow_redirects=False)

    def browser(self) -> tuple[TestClient, str]:
        """A client logged in with the local token, and the CSRF token of its session."""
        browser = self.other()
        form = browser.get("/ui/login")
        assert form.status_code == 200, form.text
        reply = browser.post("/ui/login", data={"csrf": csrf_of(form.text), "token": LOCAL})
        assert reply.status_code == 303 and reply.headers["location"] == "/ui/", reply.text
        page = browser.get("/ui/")
        assert page.status_code == 200, page.text
        return browser, csrf_of(page.text)

    def propose(self, problem_id: str) -> str:
        """Record a proposal this identity has seen and is asked about; its id."""
        problem = signed_problem(draft(), self.aggregator, pid=problem_id)
        assert self.host.db.record_proposal(problem.id, "http://127.0.0.1:9", problem.model_dump_json())
        self.host.db.decide(problem.id, self.node.fingerprint, "ask", "asked by the test", 2.0)
        return problem.id

    def verdict(self, problem_id: str) -> str | None:
        row = self.host.db.decision(problem_id, self.node.fingerprint)
        return None if row is None else row.verdict

    def imports_started(self) -> bool:
        jobs = getattr(self.app.state, "import_jobs", None)
        return jobs is not None and jobs.latest() is not None


@pytest.fixture(scope="module")
def peer_app(tmp_path_factory: pytest.TempPathFactory) -> Iterator[InProcessPeer]:
    """One peer app per module: one identity (state DB, event store and ledger on files), no aggregator
    to poll, a proposal store the tests add to, and a relay round open until hours from now (so nothing
    it holds is released while the module runs)."""
    root = tmp_path_factory.mktemp("peer")
    rng = np.random.default_rng(30)
    node = PeerNode(
        Identity.generate(rng),
        EventStore(f"sqlite:///{root / 'events.db'}"),
        PrivacyLedger(f"sqlite:///{root / 'ledger.db'}"),
        user="me",
        rng=rng,
    )
    db = PeerDB(f"sqlite:///{root / 'peer.db'}")
    host = PeerHost([node], db, PeerPolicy.for_simulation(), [], poll_seconds=0.5)
    aggregator = Identity.generate()
    key, cert = node.identity.new_round_relay_key(ROUND)
    now = time.time()
    app = create_app(host, LOCAL)
    try:
        with TestClient(app, client=LOOPBACK, follow_redirects=False) as client:  # starts the worker
            host.relay.open_round(
                RelayRound(
                    node.node_id,
                    ROUND,
                    SphinxRelay(key, StoredReplayCache(db, node.node_id, ROUND)),
                    WindowSchedule(now, 3600.0, now + 7200.0),
                    {},
                    aggregator.public.node_id,
                    "http://127.0.0.1:9/intake",
                    vault=node.vault,
                    owner=node.fingerprint,
                )
            )
            yield InProcessPeer(app, client, host, node, Hop.from_certificate(cert, ROUND), aggregator)
    finally:  # the lifespan closed the host
        db.close()
        node.store.close()
        node.ledger.close()


def _dashboard(app: FastAPI) -> list[tuple[str, str]]:
    """The dashboard's routes that need a login, in a stable order."""
    served = served_routes(app)
    return sorted((m, p) for m, p in served if p.startswith("/ui/") and (m, p) not in PUBLIC_PAGES)


def _url(path: str, node: str, problem_id: str = "p-nope") -> str:
    """``path`` with its parameters filled: the node, a problem, an action, a job, a challenge, a file."""
    return path.format(
        node=node, problem_id=problem_id, action="decline", job_id="0" * 16, challenge="00" * 32, name="x.js"
    )


def test_the_routes_come_from_the_app_and_openapi_lists_every_api_route(peer_app: InProcessPeer) -> None:
    served = served_routes(peer_app.app)
    assert served >= KNOWN_ROUTES, KNOWN_ROUTES - served
    listed = {(m, p) for m, p, _ in openapi_operations(peer_app.client)}
    assert listed >= {r for r in KNOWN_ROUTES if not r[1].startswith("/ui/")}
    assert not any(p.startswith("/ui/") for _, p in listed)  # the person's pages are not an API
    # Whatever the schema leaves out is the dashboard or the docs: a new API route cannot hide there.
    unlisted = served - listed - DOC_ROUTES
    assert unlisted and all(p.startswith("/ui/") for _, p in unlisted), unlisted


def test_the_local_api_refuses_a_missing_or_wrong_bearer_token_and_answers_the_right_one(
    peer_app: InProcessPeer,
) -> None:
    protected = [(m, p) for m, p, op in openapi_operations(peer_app.client) if takes_authorization(op)]
    assert protected == [("GET", "/local/status")]
    refused: list[dict[str, str]] = [
        {},
        {"Authorization": ""},
        {"Authorization": "Bearer not-the-token"},
        {"Authorization": f"Bearer {LOCAL}x"},
        {"Authorization": LOCAL},  # no scheme
        {"Authorization": f"Basic {LOCAL}"},
    ]
    before = peer_app.host.status()
    for method, path in protected:
        for headers in refused:
            answer = peer_app.client.request(method, path, headers=headers)
            assert answer.status_code == 401, (path, headers, answer.text)
            assert answer.json()["detail"] == "local token required"
            assert answer.headers["www-authenticate"] == "Bearer"
        browser, _ = peer_app.browser()  # a dashboard login is not the API's token either
        assert browser.request(method, path).status_code == 401
        for scheme in ("Bearer", "bearer"):  # the scheme is case-insensitive (RFC 6750 §2.1)
            answer = peer_app.client.request(method, path, headers={"Authorization": f"{scheme} {LOCAL}"})
            assert answer.status_code == 200, answer.text
    status = PeerStatus.model_validate_json(peer_app.client.get("/local/status", headers={
        "Authorization": f"Bearer {LOCAL}"}).content)
    assert status.identities == 1 and status == before


def test_every_dashboard_route_needs_a_login_and_a_refused_request_changes_nothing(
    peer_app: InProcessPeer,
) -> None:
    problem_id = peer_app.propose("p-login")
    routes = _dashboard(peer_app.app)
    assert {("POST", "/ui/import"), ("POST", "/ui/proposals/{problem_id}/{action}"),
            ("GET", "/ui/api/participations"), ("POST", "/ui/logout")} <= set(routes)
    anonymous = peer_app.other()
    refused: list[tuple[dict[str, str], dict[str, str]]] = [
        ({}, {}),  # no session at all
        ({"anonml_peer": "a-guessed-session-id"}, {}),  # a session nobody was given
        ({}, {"Authorization": f"Bearer {LOCAL}"}),  # the API's token is not a login for the pages
    ]
    for method, path in routes:
        url = _url(path, peer_app.node_hex, problem_id)
        for cookies, headers in refused:
            anonymous.cookies.clear()
            anonymous.cookies.update(cookies)
            form = {"csrf": "x", "paths": "/etc/passwd"} if method == "POST" else None
            answer = anonymous.request(method, url, headers=headers, data=form)
            said = (method, path, cookies, headers, answer.status_code, answer.text[:200])
            if path.startswith("/ui/api/"):  # a poller gets an answer it can read
                assert answer.status_code == 401 and "local token" in answer.json()["detail"], said
            else:
                assert answer.status_code == 303 and answer.headers["location"] == "/ui/login", said
    assert peer_app.verdict(problem_id) == "ask" and not peer_app.imports_started()


def test_every_dashboard_post_refuses_a_missing_or_forged_csrf_token_and_changes_nothing(
    peer_app: InProcessPeer,
) -> None:
    problem_id = peer_app.propose("p-csrf")
    browser, csrf = peer_app.browser()
    posts = [p for m, p in _dashboard(peer_app.app) if m == "POST"]
    assert posts == ["/ui/import", "/ui/logout", "/ui/proposals/{problem_id}/{action}"]
    for path in posts:
        for form in ({}, {"csrf": ""}, {"csrf": "forged"}, {"csrf": csrf + "x"}):
            answer = browser.post(_url(path, peer_app.node_hex, problem_id), data={**form, "paths": "/etc"})
            assert answer.status_code == 403 and "CSRF" in answer.json()["detail"], (path, form, answer.text)
        other, _ = peer_app.browser()  # another session's token is not this one's
        answer = other.post(_url(path, peer_app.node_hex, problem_id), data={"csrf": csrf, "paths": "/etc"})
        assert answer.status_code == 403, (path, answer.text)
    # The login form has its own token, from the cookie its page set.
    stranger = peer_app.other()
    assert stranger.post("/ui/login", data={"csrf": "forged", "token": LOCAL}).status_code == 403
    assert "anonml_peer" not in stranger.cookies
    # Nothing changed: not decided, no import, and the session the refused logout named still holds.
    assert peer_app.verdict(problem_id) == "ask" and not peer_app.imports_started()
    assert browser.get("/ui/").status_code == 200
    # The same post with the session's token goes through: the refusals were the token's.
    declined = browser.post(f"/ui/proposals/{problem_id}/decline", data={"csrf": csrf})
    assert declined.status_code == 303 and "done=declined" in declined.headers["location"]
    assert peer_app.verdict(problem_id) == "refuse"


def test_the_pages_and_the_local_api_answer_only_on_this_machine(peer_app: InProcessPeer) -> None:
    problem_id = peer_app.propose("p-remote")
    remote = peer_app.other(ELSEWHERE)
    bearer = {"Authorization": f"Bearer {LOCAL}"}
    local_only = [(m, p) for m, p in served_routes(peer_app.app) if p.startswith(("/ui/", "/local/"))]
    assert set(local_only) >= {r for r in KNOWN_ROUTES if r[1].startswith(("/ui/", "/local/"))}
    for method, path in local_only:
        answer = remote.request(method, _url(path, peer_app.node_hex, problem_id), headers=bearer,
                                data={"csrf": "x"} if method == "POST" else None)
        assert answer.status_code == 403, (method, path, answer.text)
        assert "only on this machine" in answer.json()["detail"]
    assert peer_app.verdict(problem_id) == "ask"
    # The relay faces the network: it answers there (a node it does not host is 404, not 403).
    assert remote.get("/healthz").json() == {"status": "ok"}
    assert remote.get(f"/relay/{'00' * 16}/roster/{problem_id}").status_code == 404


def test_every_relay_post_refuses_a_body_over_its_cap_and_a_body_that_is_not_a_packet(
    peer_app: InProcessPeer,
) -> None:
    posts = sorted(p for m, p, _ in openapi_operations(peer_app.client) if m == "POST")
    assert posts == ["/relay/{node}", "/relay/{node}/batch"]
    over = b"\x00" * (AUTH_SIZE + MAX_BATCH_ITEMS * PACKET_SIZE + 1)  # over the largest cap of either

    def streamed() -> Iterator[bytes]:  # no Content-Length: refused once the bytes read pass the cap
        for start in range(0, len(over), 65536):
            yield over[start : start + 65536]

    held, counters = peer_app.held(), dict(peer_app.host.relay.counters)
    refusals = 0
    for path in posts:
        url = _url(path, peer_app.node_hex)
        for kind in ("application/octet-stream", RELAY_POST_TYPE, "application/json"):
            headers = {"content-type": kind}
            for body in (over, streamed()):
                answer = peer_app.client.post(url, content=body, headers=headers)
                assert answer.status_code == 413, (path, kind, answer.text)
                assert f"{PACKET_SIZE} bytes" in answer.json()["detail"]
            for body in (PICKLE, b"{}", b"", peer_app.packet(0)[:-1]):
                answer = peer_app.client.post(url, content=body, headers=headers)
                assert answer.status_code in (400, 422), (path, kind, body[:8], answer.text)
                assert f"{PACKET_SIZE} bytes" in answer.json()["detail"]
            refusals += 6
    assert peer_app.held() == held  # nothing of any of them was kept for release
    now = dict(peer_app.host.relay.counters)
    assert now.get("rejected: wrong size", 0) - counters.get("rejected: wrong size", 0) == refusals
    assert now.get("rejected: invalid", 0) == counters.get("rejected: invalid", 0)  # refused before crypto
    # A real packet to the same route is taken and held: the refusals were the bodies'.
    assert peer_app.client.post(_url(posts[0], peer_app.node_hex), content=peer_app.packet(1),
                                headers={"content-type": "application/octet-stream"}).status_code == 202
    assert peer_app.held() == held + 1


def test_unknown_nodes_problems_challenges_and_imports_are_404(peer_app: InProcessPeer) -> None:
    stranger = Identity.generate().public.node_id.hex()
    held = peer_app.held()
    relay_routes = sorted((m, p) for m, p in served_routes(peer_app.app) if "{node}" in p)
    assert len(relay_routes) == 4
    for method, path in relay_routes:
        for node in (stranger, "not-hex", "00"):
            answer = peer_app.client.request(method, _url(path, node), content=peer_app.packet(2),
                                             headers={"content-type": "application/octet-stream"})
            assert answer.status_code == 404 and answer.json()["detail"] == "no such node", (path, node)
    assert peer_app.held() == held  # the packet for a node it does not host was not taken
    me = peer_app.node_hex
    answer = peer_app.client.get(f"/relay/{me}/roster/p-nope")
    assert answer.status_code == 404 and "no checked roster" in answer.json()["detail"]
    for challenge in ("00" * 32, "zz", "00" * 31):  # unknown, not hex, not 32 bytes
        answer = peer_app.client.get(f"/relay/{me}/reachability/{challenge}")
        assert answer.status_code == 404 and "no such reachability challenge" in answer.json()["detail"]
    browser, csrf = peer_app.browser()
    answer = browser.get("/ui/api/imports/0123456789abcdef")
    assert answer.status_code == 404 and "no import" in answer.json()["detail"]
    assert browser.get("/ui/static/nope.js").status_code == 404
    problem_id = peer_app.propose("p-action")
    answer = browser.post(f"/ui/proposals/{problem_id}/frobnicate", data={"csrf": csrf})
    assert answer.status_code == 404 and "accept or decline" in answer.json()["detail"]
    assert peer_app.verdict(problem_id) == "ask"
    # A decision on a proposal never seen: POST/redirect/GET to the proposals page, which says why once.
    for action in ("accept", "decline"):
        answer = browser.post(f"/ui/proposals/p-nope/{action}", data={"csrf": csrf})
        assert answer.status_code == 303 and answer.headers["location"] == "/ui/proposals"
        page = browser.get("/ui/proposals").text
        assert "no proposal &#39;p-nope&#39; seen yet" in page, page
        assert "p-nope" not in browser.get("/ui/proposals").text  # said once
    assert peer_app.verdict("p-nope") is None


def test_every_dashboard_form_refuses_a_body_over_the_form_cap_and_a_body_that_is_not_a_form(
    peer_app: InProcessPeer,
) -> None:
    problem_id = peer_app.propose("p-forms")
    browser, csrf = peer_app.browser()
    posts = sorted({p for m, p in served_routes(peer_app.app) if m == "POST" and p.startswith("/ui/")})
    assert posts == ["/ui/import", "/ui/login", "/ui/logout", "/ui/proposals/{problem_id}/{action}"]
    over = f"csrf={csrf}&paths=".encode() + b"a" * FORM_LIMIT
    form = {"content-type": "application/x-www-form-urlencoded"}
    for path in posts:
        url = _url(path, peer_app.node_hex, problem_id)
        answer = browser.post(url, content=over, headers=form)
        assert answer.status_code == 413, (path, answer.text)
        assert f"{FORM_LIMIT} bytes" in answer.json()["detail"]
        as_json = b'{"csrf": "%s"}' % csrf.encode()
        for kind, body in (("application/octet-stream", PICKLE), ("application/json", as_json)):
            answer = browser.post(url, content=body, headers={"content-type": kind})
            assert answer.status_code == 415, (path, kind, answer.text)
            assert "application/x-www-form-urlencoded" in answer.json()["detail"]
        twice = browser.post(url, content=f"csrf={csrf}&csrf={csrf}".encode(), headers=form)
        assert twice.status_code == 400 and "given twice" in twice.json()["detail"], (path, twice.text)
    assert peer_app.verdict(problem_id) == "ask" and not peer_app.imports_started()
    assert browser.get("/ui/").status_code == 200  # the refused logouts logged nothing out
