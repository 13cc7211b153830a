"""Host, worker, roster and dispatch, stepped by hand against the real aggregator (no relay served)."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import requests

from anonml.crypto import Identity, RelayKeyCertificate
from anonml.errors import ProtocolError
from anonml.model import FeatureSpec
from anonml.plugins import PluginRef
from anonml.privacy import PrivacyLedger
from anonml.store import EventStore
from peer.client import AggregatorClient
from peer.db import PeerDB
from peer.dispatch import Dispatcher
from peer.host import PeerHost
from peer.participant import PeerNode
from peer.phases import IllegalTransition, ParticipationPhase
from peer.roster import RosterView
from tests.aggregator.helpers import close_registration, draft, propose, roster_of, status, wait_phase
from tests.peer.helpers import non_loopback_address, peer_settings, simulation_host
from tests.waiting import wait_until

P = ParticipationPhase
N = 4


def _draft():
    """The helpers' small problem over features the MOOC featurizer computes (the policy checks)."""
    d = draft(min_peers=N, kp=1)
    features = (FeatureSpec(name="sessions", low=0, high=20), FeatureSpec(name="active_days", low=0, high=14))
    return d.model_copy(
        update={"features": features, "featurizer": PluginRef(name="mooc_engagement", params={"weeks": 2})}
    )


def _host(nodes: list[PeerNode], db: Path, url: str) -> PeerHost:
    host = simulation_host(nodes, db, url)
    host.relay_base = "http://127.0.0.1:9"  # never contacted: these tests do not serve the relay
    return host


def _close_registration(url: str, pid: str) -> None:
    """Close registration and wait until the roster is out (medians, or reporting with no pool)."""
    close_registration(url, pid)
    wait_phase(url, pid, ("medians", "reporting"), timeout=60)


@pytest.fixture
def nodes() -> list[PeerNode]:
    return [
        PeerNode(
            Identity.generate(),
            EventStore("sqlite://"),
            PrivacyLedger("sqlite://"),
            rng=np.random.default_rng(i),
        )
        for i in range(N)
    ]


@pytest.fixture
def registered(aggregator, nodes, tmp_path: Path) -> Iterator[tuple[PeerHost, str]]:  # noqa: F811
    problem = propose(aggregator.url, _draft())
    host = _host(nodes, tmp_path / "peer.db", aggregator.url)
    try:
        host.poll_once()  # discover, decide (auto-accept), one session that registers at once
        yield host, problem.id
    finally:
        host.close()


@pytest.fixture
def closed(registered) -> tuple[PeerHost, str, str]:
    """``registered`` once its registration closed and the roster is out: host, problem id, aggregator URL."""
    host, pid = registered
    url = host.sessions[pid].client.base_url
    _close_registration(url, pid)
    return host, pid, url


def test_the_worker_registers_every_identity_once_and_persists_the_phase_and_sealed_key(registered):
    host, pid = registered
    session = host.sessions[pid]
    assert {p.phase for p in session.participants} == {P.REGISTERED}
    assert status(session.client.base_url, pid).registered == N
    assert host.counters["registrations sent in batches"] == N  # one request for all of them
    host.poll_once()  # still registration: nothing registers twice
    assert status(session.client.base_url, pid).registered == N
    for p in session.participants:
        (row,) = host.db.states(p.node.fingerprint)
        assert row.phase == "registered"
        key = host.db.round_key(p.node.fingerprint, session.problem.round_id)
        assert key is not None and p.relay_key is not None
        assert p.relay_key.public_key not in key.sealed_key  # sealed: not even the public half shows
        assert RelayKeyCertificate.from_bytes(key.certificate).relay_key == p.relay_key.public_key
        assert host.db.participation(pid, p.node.fingerprint).phase == "registered"


def test_a_new_host_on_the_same_files_resumes_each_participation_with_its_round_key(
    registered, nodes, tmp_path: Path
):
    host, pid = registered
    before = {p.node.fingerprint: p.relay_key.public_key for p in host.sessions[pid].participants}
    url = host.sessions[pid].client.base_url
    host.close()
    again = _host(nodes, tmp_path / "peer.db", url)
    try:
        assert again.resume() == N
        resumed = again.sessions[pid].participants
        assert {p.phase for p in resumed} == {P.REGISTERED}
        assert {p.node.fingerprint: p.relay_key.public_key for p in resumed} == before
        again.poll_once()
        assert status(url, pid).registered == N  # taken up, not registered again
        assert again.resume() == 0  # already running: nothing taken up twice
    finally:
        again.close()


def test_the_worker_checks_the_roster_publishes_witnesses_and_keeps_the_fingerprint(closed):
    host, pid, _ = closed
    session = host.sessions[pid]
    checked = (P.REGISTERED, P.ROSTER_CHECKED)
    wait_until(lambda: all(p.phase not in checked for p in session.participants) or host.poll_once(), 30,
               lambda: f"every roster checked and compared: {[p.phase for p in session.participants]}",
               every=0.0)
    # No relay is served here (a request to one is refused), yet every identity got past the
    # fingerprint comparison: each member drawn is hosted by this process, shares its one verified
    # view and agrees without a request. (The round then fails for want of relays.)
    assert all(len(p.comparisons.confirmed) == 2 for p in session.participants)
    assert host.counters["assignments fetched in batches"] == N  # one request, each checked by its own
    for p in session.participants:
        assert host.witness(p.node.node_id, pid) == p.witness
        facts = json.loads(host.db.states(p.node.fingerprint)[0].facts_json)
        assert facts["roster_fingerprint"] == session.view.fingerprint
        if p.phase != P.RELAYING:
            with pytest.raises(IllegalTransition, match=f"phase {p.phase}"):
                p.build_packets()  # packets are built while relaying, never before


def test_a_roster_is_refused_when_altered_or_shown_for_another_problem(aggregator, nodes, tmp_path):  # noqa: F811
    host = _host(nodes, tmp_path / "peer.db", aggregator.url)
    try:
        problem = propose(aggregator.url, _draft())
        other = propose(aggregator.url, _draft())
        host.poll_once()
        _close_registration(aggregator.url, problem.id)
        roster = roster_of(aggregator.url, problem.id)
        view = RosterView.verify(roster, problem)
        assert len(view.keys) == N and set(view.node_ids) == {n.node_id for n in nodes}
        with pytest.raises(ProtocolError, match="not signed"):
            RosterView.verify(roster.model_copy(update={"median_pool_size": 1}), problem)
        with pytest.raises(ProtocolError):
            RosterView.verify(roster, other)
        assert AggregatorClient(aggregator.url).roster(problem.id) == roster
    finally:
        host.close()


def test_the_dispatcher_runs_work_in_time_order_and_refuses_work_once_closed():
    dispatcher = Dispatcher(workers=1)
    ran: list[int] = []
    done = threading.Event()
    try:
        now = time.time()
        for i in (3, 1, 2):
            dispatcher.at(now + 0.05 * i, lambda i=i: ran.append(i))
        dispatcher.at(now + 0.2, done.set)
        assert done.wait(30)
        assert ran == [1, 2, 3]
        wait_until(dispatcher.idle, 60, "the dispatcher to be idle")
    finally:
        dispatcher.close()
    with pytest.raises(RuntimeError, match="closed"):
        dispatcher.at(time.time(), lambda: None)


def test_an_app_built_from_settings_serves_the_relay_and_a_token_guarded_status(tmp_path: Path):
    from aggregator.app import start_server
    from peer.app import create_app
    settings = peer_settings(tmp_path, "a-local-token-of-the-settings")
    server = start_server(create_app(settings))
    try:
        host = server.app.state.host
        node = host.sole_node()
        status_url = f"{server.url}/local/status"
        assert requests.get(status_url, timeout=30).status_code == 401
        wrong = {"Authorization": "Bearer not-it"}
        assert requests.get(status_url, headers=wrong, timeout=30).status_code == 401
        right = {"Authorization": "Bearer a-local-token-of-the-settings"}
        reply = requests.get(status_url, headers=right, timeout=30)
        assert reply.status_code == 200 and reply.json()["identities"] == 1
        unknown = requests.get(f"{server.url}/relay/{'00' * 16}/roster/p-x", timeout=30)
        assert unknown.status_code == 404 and unknown.json()["detail"] == "no such node"
        none_yet = requests.get(f"{server.url}/relay/{node.node_id.hex()}/roster/p-x", timeout=30)
        assert none_yet.status_code == 404 and "no checked roster" in none_yet.json()["detail"]
        too_big = requests.post(f"{server.url}/relay/{node.node_id.hex()}", data=b"x" * 5000, timeout=30)
        assert too_big.status_code == 413
    finally:
        server.stop()


def test_the_local_api_and_the_pages_refuse_clients_on_other_machines_even_with_the_token(tmp_path: Path):
    from aggregator.app import start_server
    from peer.app import create_app
    address = non_loopback_address()
    if address is None:
        pytest.skip("this machine has no non-loopback IPv4 address to connect from")
    settings = peer_settings(tmp_path)
    # The relay listens on every interface, as a peer reachable by others does.
    server = start_server(create_app(settings), host="0.0.0.0")
    try:
        port = server.url.rsplit(":", 1)[1]
        right = {"Authorization": "Bearer a-local-token"}
        remote = requests.get(f"http://{address}:{port}/local/status", headers=right, timeout=30)
        assert remote.status_code == 403 and "only on this machine" in remote.json()["detail"]
        assert requests.get(f"http://{address}:{port}/ui/login", timeout=30).status_code == 403
        assert requests.get(f"http://{address}:{port}/healthz", timeout=30).status_code == 200
        local = requests.get(f"http://127.0.0.1:{port}/local/status", headers=right, timeout=30)
        assert local.status_code == 200 and local.json()["identities"] == 1
    finally:
        server.stop()


def test_routes_and_tokens_against_the_real_roster_and_issuer(closed):
    from anonml.crypto import CryptoError, TokenKey
    from peer.reports import choose_path, fetch_tokens

    host, pid, url = closed
    session = host.sessions[pid]
    view = RosterView.verify(roster_of(url, pid), session.problem)
    rng = np.random.default_rng(0)
    for me in range(N):
        for _ in range(20):
            path = choose_path(view, me, 3, session.problem.round_id, rng)
            members = [view.node_ids.index(h.node_id) for h in path]
            assert len(set(members)) == 3 and me not in members  # distinct, never itself
    with pytest.raises(ProtocolError, match="needs 4 other relaying roster members"):
        choose_path(view, 0, 4, session.problem.round_id, rng)
    def partition(node: PeerNode) -> int:
        notice = requests.get(f"{url}/problems/{pid}/assignments/{node.fingerprint}", timeout=30)
        return notice.json()["index"]

    # The issuer answers with proofs under the roster's key: a peer pinning another key refuses them
    # (and its slots are spent: issuance is once per slot).
    other = session.participants[1].node
    forged_key = bytes(TokenKey.generate().public_key)
    with pytest.raises(CryptoError):
        fetch_tokens(session.problem, other.identity, forged_key, partition(other), session.client.tokens)
    node = session.participants[0].node
    key = bytes(view.roster.token_key)
    tokens = fetch_tokens(session.problem, node.identity, key, partition(node), session.client.tokens)
    assert len(tokens) == session.problem.draft.kh
    assert len({t.nonce for t in tokens}) == len(tokens)


def test_a_dead_aggregator_does_not_keep_the_peer_from_a_live_one(aggregator, tmp_path):  # noqa: F811
    from peer.discovery import discover

    problem = propose(aggregator.url, _draft())
    db = PeerDB(f"sqlite:///{tmp_path / 'peer.db'}")
    dead = "http://127.0.0.1:9"  # nothing listens there
    assert [p.id for p in discover(db, [dead, aggregator.url])] == [problem.id]
    assert db.proposal(problem.id) is not None


def test_a_dead_aggregator_is_asked_with_backoff_and_said_once(aggregator, tmp_path, caplog):  # noqa: F811
    import logging

    from peer.discovery import AggregatorBackoff, discover, poll_backoff

    clock = [0.0]
    backoff = AggregatorBackoff(0.5, now=lambda: clock[0])
    db = PeerDB(f"sqlite:///{tmp_path / 'peer.db'}")
    dead = "http://127.0.0.1:9"
    tries: list[str] = []
    with caplog.at_level(logging.INFO, logger="anonml.peer"):
        for _ in range(40):  # 40 polls 0.5 s apart: 20 s
            discover(db, [dead, aggregator.url], backoff, tries.append)
            clock[0] += 0.5
    # Asked at 0, then after 1, 2, 4, 8 s (poll · 2^failures): 5 times in 20 s, not 40.
    waits = [poll_backoff(0.5, k) for k in range(1, 5)]
    assert waits == [1.0, 2.0, 4.0, 8.0] and len(tries) == 5
    lines = [r.getMessage() for r in caplog.records if dead in r.getMessage()]
    assert len(lines) == 1 and "unreachable" in lines[0] and caplog.records[0].exc_info is None
    with caplog.at_level(logging.INFO, logger="anonml.peer"):
        backoff.answered(dead)  # it came back: said once, and asked at every poll again
    assert backoff.due(dead) and "answers again after 5 failed polls" in caplog.records[-1].getMessage()


def test_a_malformed_problem_in_the_listing_hides_none_of_the_others(aggregator, tmp_path: Path, caplog):
    """One entry the peer cannot parse is left out (and logged); the signed ones are still found."""
    from fastapi import FastAPI
    from fastapi.responses import JSONResponse

    from aggregator.app import start_server
    from peer.discovery import discover

    good = propose(aggregator.url, draft())
    listing = requests.get(f"{aggregator.url}/problems?phase=registration", timeout=30).json()
    assert [p["id"] for p in listing] == [good.id]
    broken = {**listing[0], "id": "NOT AN ID", "draft": {"title": 7}}
    shown = FastAPI()
    shown.get("/problems")(lambda: JSONResponse([broken, listing[0], "not even an object"]))
    server = start_server(shown)
    try:
        with caplog.at_level("WARNING", logger="anonml.peer"):
            problems = AggregatorClient(server.url).problems(phase="registration")
        assert [p.id for p in problems] == [good.id]
        assert "2 malformed problem(s) left out" in caplog.text and "entry 0" in caplog.text
        db = PeerDB(f"sqlite:///{tmp_path / 'peer.db'}")
        try:
            assert [p.id for p in discover(db, [server.url])] == [good.id]  # recorded, signature checked
        finally:
            db.close()
    finally:
        server.stop()
