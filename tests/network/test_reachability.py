"""Detecting an unreachable relay (issue 27): the aggregator's probe and what a peer host does with it.

On loopback, against the real aggregator under uvicorn: ``POST /reachability`` brings back the
answer a relay drew for the challenge (a relay that does not answer, or answered once already, is
unreachable with the reason), and refuses a request that is unsigned, for another aggregator, for
another node's URL or stale. A host whose relay URL the aggregator cannot reach registers its
identities sender-only (or refuses, by its policy; an always-on relay always refuses) and says why;
a host it reaches registers relays. The same across network namespaces, with a namespace whose
server nobody outside reaches, is in ``test_namespaces.py``.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path

import numpy as np
import pytest
import requests
from sqlalchemy import select

from aggregator.db import RegistrationRow
from aggregator.routes import reachability as reachability_route
from aggregator.routes.reachability import BUSY_RETRY_SECONDS, PROBE_CONCURRENCY
from anonml.crypto import Identity
from anonml.outbound import OutboundError
from anonml.privacy import PrivacyLedger
from anonml.protocol import ReachabilityRequest, ReachabilityResult, sign_message, verify_message
from anonml.serving import free_port
from anonml.store import EventStore
from peer.app import start_peer_server
from peer.client import HTTPRefusal
from peer.db import PeerDB
from peer.host import PeerHost
from peer.participant import PeerNode
from peer.policy import PeerPolicy
from peer.reachability import ProbeChallenges, Reachability, check_reachability
from tests.aggregator.conftest import (
    RunningAggregator,
    aggregator,  # noqa: F401 - a fixture, registered by import
)
from tests.aggregator.helpers import propose
from tests.faults.helpers import fault_draft
from tests.waiting import wait_until


def _nodes(n: int, seed: int) -> list[PeerNode]:
    return [
        PeerNode(Identity.generate(), EventStore("sqlite://"), PrivacyLedger("sqlite://"),
                 rng=np.random.default_rng(seed + i))
        for i in range(n)
    ]


def _host(tmp_path: Path, name: str, url: str, n: int = 2, **policy: object) -> PeerHost:
    fields = {"auto_accept": True, "max_epsilon_per_problem": 4.0, "check_reachability": True, **policy}
    return PeerHost(
        _nodes(n, seed=len(name)), PeerDB(f"sqlite:///{tmp_path / f'{name}.db'}"),
        PeerPolicy.for_simulation(**fields), [url], poll_seconds=0.1,
    )


def _closed_port_url() -> str:
    """A loopback base URL nothing listens on (connections to it are refused)."""
    return f"http://127.0.0.1:{free_port()}"


def _request(member: Identity, aggregator_key: bytes, relay_url: str, challenge: bytes,
             *, issued_at: float | None = None, signer: Identity | None = None) -> ReachabilityRequest:
    return sign_message(
        ReachabilityRequest(
            aggregator=aggregator_key, identity=bytes(member.public), relay_url=relay_url,
            challenge=challenge, issued_at=time.time() if issued_at is None else issued_at,
            signature=bytes(64),
        ),
        signer or member,
    )


def _probe(url: str, request: ReachabilityRequest) -> requests.Response:
    return requests.post(f"{url}/reachability", data=request.model_dump_json(),
                         headers={"content-type": "application/json"}, timeout=30)


def test_the_probe_brings_back_the_relays_answer_once_and_says_why_when_there_is_none(
    aggregator: RunningAggregator, tmp_path: Path  # noqa: F811
):
    host = _host(tmp_path, "served", aggregator.url, n=1)
    server = start_peer_server(host)
    try:
        node = next(iter(host.nodes.values()))
        key = aggregator.state.public_identity
        relay_url = f"{server.url}/relay/{node.node_id.hex()}"
        challenge, answer = host.challenges.expect(node.node_id)
        reply = _probe(aggregator.url, _request(node.identity, key, relay_url, challenge))
        assert reply.status_code == 200, reply.text
        result = ReachabilityResult.model_validate_json(reply.content)
        assert result.reachable and bytes(result.answer) == answer and result.relay_url == relay_url
        # the answer was taken: the same challenge again finds nothing to answer
        again = ReachabilityResult.model_validate_json(
            _probe(aggregator.url, _request(node.identity, key, relay_url, challenge)).content
        )
        assert not again.reachable and again.answer is None
        assert again.reason == "the relay answered HTTP 404, not the challenge's answer"
        # a challenge the relay never drew is not answered either
        stranger = _probe(aggregator.url, _request(node.identity, key, relay_url, bytes(32)))
        never_drawn = ReachabilityResult.model_validate_json(stranger.content)
        assert never_drawn.reason.startswith("the relay answered HTTP 404")
    finally:
        server.stop()

    # nothing listens at the URL: unreachable, and the reason says the connection failed
    closed = f"{_closed_port_url()}/relay/{node.node_id.hex()}"
    reply = _probe(aggregator.url, _request(node.identity, key, closed, challenge))
    result = ReachabilityResult.model_validate_json(reply.content)
    assert not result.reachable and result.reason.startswith("no connection from the aggregator:"), result


def test_a_probe_request_is_refused_unsigned_misaddressed_for_another_node_or_stale(
    aggregator: RunningAggregator,  # noqa: F811
):
    member, other = Identity.generate(), Identity.generate()
    key = aggregator.state.public_identity
    url = f"http://127.0.0.1:9/relay/{member.public.node_id.hex()}"
    challenge = bytes(range(32))
    forged = _probe(aggregator.url, _request(member, key, url, challenge, signer=other))
    assert forged.status_code == 403 and "signature rejected" in forged.json()["detail"]
    elsewhere = _probe(aggregator.url, _request(member, bytes(other.public), url, challenge))
    assert elsewhere.status_code == 422 and "another aggregator" in elsewhere.json()["detail"]
    not_its_own = f"http://127.0.0.1:9/relay/{other.public.node_id.hex()}"
    foreign = _probe(aggregator.url, _request(member, key, not_its_own, challenge))
    assert foreign.status_code == 422 and "/relay/<the registrant's node id>" in foreign.json()["detail"]
    inside = f"https://10.1.2.3:9/relay/{member.public.node_id.hex()}"  # a private address: never probed
    private = _probe(aggregator.url, _request(member, key, inside, challenge))
    assert private.status_code == 422 and "private" in private.json()["detail"]
    stale = _probe(aggregator.url, _request(member, key, url, challenge, issued_at=time.time() - 3600))
    assert stale.status_code == 422 and "check this machine's clock" in stale.json()["detail"]


def _registrations(aggregator: RunningAggregator, problem_id: str) -> dict[bytes, str | None]:  # noqa: F811
    with aggregator.state.sessions() as session:
        rows = session.scalars(select(RegistrationRow).where(RegistrationRow.problem_id == problem_id))
        return {bytes(r.identity): r.relay_url for r in rows}


def test_a_host_nobody_reaches_registers_sender_only_and_a_reachable_one_relays(
    aggregator: RunningAggregator, tmp_path: Path, caplog: pytest.LogCaptureFixture  # noqa: F811
):
    problem = propose(aggregator.url, fault_draft())
    reachable = _host(tmp_path, "reachable", aggregator.url)
    server = start_peer_server(reachable)  # serves its relay (and starts its worker)
    hidden = _host(tmp_path, "hidden", aggregator.url)
    hidden.relay_base = _closed_port_url()  # it claims a relay URL nothing answers at: as behind NAT
    told: list[str] = []
    hidden.notify = told.append
    try:
        with caplog.at_level(logging.WARNING, logger="anonml.peer"):
            hidden.start()
            everyone = {bytes(n.identity.public) for h in (reachable, hidden) for n in h.nodes.values()}
            wait_until(lambda: set(_registrations(aggregator, problem.id)) == everyone, 60, "all registered")
        stored = _registrations(aggregator, problem.id)
    finally:
        hidden.close()
        server.stop()
    for node in reachable.nodes.values():
        assert stored[bytes(node.identity.public)] == f"{server.url}/relay/{node.node_id.hex()}"
    for node in hidden.nodes.values():
        assert stored[bytes(node.identity.public)] is None  # sender-only: no relay URL, no certificate
    assert reachable.reachability[aggregator.url].reachable is True
    verdict = hidden.reachability[aggregator.url]
    assert verdict.reachable is False and verdict.reason.startswith("no connection from the aggregator:")
    assert hidden.counters["reachability checks: unreachable"] == 1  # one check for both identities
    logged = [r.getMessage() for r in caplog.records if "register sender-only" in r.getMessage()]
    assert logged and verdict.reason in logged[0] and hidden.relay_base in logged[0], caplog.text
    joined = "joined sender-only (its relay cannot be reached from the aggregator)"
    assert any(joined in text for text in told), told
    assert all(not p.relays for p in hidden.sessions[problem.id].participants)
    # what was decided is kept: a host restarted on the same state DB (its policy still says relay)
    # takes its participations up sender-only, as they registered
    same_db = PeerDB(f"sqlite:///{tmp_path / 'hidden.db'}")
    again = PeerHost(list(hidden.nodes.values()), same_db, hidden.policy, [aggregator.url],
                     relay_base=hidden.relay_base)
    try:
        assert again.resume() == 2 and again.policy.relay
        assert [p.relays for p in again.sessions[problem.id].participants] == [False, False]
    finally:
        again.close()


@pytest.mark.parametrize("policy", [{"unreachable": "refuse"}, {"relay_only": True}])
def test_an_unreachable_host_refuses_when_its_policy_says_so_or_it_only_relays(
    aggregator: RunningAggregator, tmp_path: Path, policy: dict  # noqa: F811
):
    problem = propose(aggregator.url, fault_draft())
    hidden = _host(tmp_path, "hidden", aggregator.url, n=1, **policy)
    hidden.relay_base = _closed_port_url()
    try:
        hidden.poll_once()
        (node,) = hidden.nodes.values()
        decision = hidden.db.decision(problem.id, node.fingerprint)
    finally:
        hidden.close()
    assert decision is not None and decision.verdict == "refuse"
    assert "cannot be reached from the aggregator: no connection from the aggregator:" in decision.reason
    refuses = "the policy refuses rather than register sender-only"
    assert ("cannot take part" if policy.get("relay_only") else refuses) in decision.reason
    assert _registrations(aggregator, problem.id) == {}


def test_every_probe_slot_taken_is_a_503_with_retry_after(aggregator: RunningAggregator):  # noqa: F811
    member = Identity.generate()
    url = f"http://127.0.0.1:9/relay/{member.public.node_id.hex()}"
    request = _request(member, aggregator.state.public_identity, url, bytes(32))
    taken = [reachability_route._slots.acquire(blocking=False) for _ in range(PROBE_CONCURRENCY)]
    try:
        assert all(taken)
        busy = _probe(aggregator.url, request)
    finally:
        for _ in taken:
            reachability_route._slots.release()
    assert busy.status_code == 503 and busy.headers["Retry-After"] == str(BUSY_RETRY_SECONDS)
    assert _probe(aggregator.url, request).status_code == 200  # a slot free again: probed (unreachable)


class _Aggregator:
    """Stands in for an :class:`~peer.client.AggregatorClient`: answers each ask with the next of ``answers``
    (a result, a function of the request giving one, or an exception to raise)."""

    base_url = "http://aggregator.test"

    def __init__(self, *answers: object) -> None:
        self.answers = list(answers)
        self.asked: list[ReachabilityRequest] = []

    def reachability(self, request: ReachabilityRequest) -> ReachabilityResult:
        self.asked.append(request)
        answer = self.answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer(request) if callable(answer) else answer


def _check(client: _Aggregator, challenges: ProbeChallenges | None = None) -> tuple[Reachability, str]:
    node = _nodes(1, seed=1)[0]
    url = f"https://relay.example.org/relay/{node.node_id.hex()}"
    verdict = check_reachability(node, url, bytes(64), client, challenges or ProbeChallenges(),  # type: ignore[arg-type]
                                 ask_seconds=0.0, confirm_seconds=0.0)
    return verdict, url


def test_the_peer_believes_reachable_only_with_its_own_answer_and_unreachable_only_twice():
    challenges = ProbeChallenges()

    def honest(request: ReachabilityRequest) -> ReachabilityResult:  # what a real probe brings back
        node_id = bytes.fromhex(request.relay_url.rsplit("/", 1)[1])
        answer = challenges.answer(node_id, bytes(request.challenge))
        assert answer is not None
        return ReachabilityResult(relay_url=request.relay_url, reachable=True, answer=answer)

    verdict, url = _check(_Aggregator(honest), challenges)
    assert verdict.reachable is True and verdict.relay_url == url
    # a verdict about another URL than the one asked about says nothing
    other = ReachabilityResult(relay_url="https://elsewhere.example.org/relay/" + "ab" * 16, reachable=False)
    verdict, _ = _check(_Aggregator(other))
    assert verdict.reachable is None and verdict.reason == "the aggregator answered about another relay URL"
    # an answer the relay never gave (made up, or from something else at that URL) is not reachability
    def made_up(request: ReachabilityRequest) -> ReachabilityResult:
        return ReachabilityResult(relay_url=request.relay_url, reachable=True, answer=bytes(32))

    verdict, _ = _check(_Aggregator(made_up, made_up))
    assert verdict.reachable is False
    assert verdict.reason == "the aggregator's probe brought back an answer this relay never gave"
    # a first "unreachable" (a server not listening yet) is asked again; the second word stands

    def refused(request: ReachabilityRequest) -> ReachabilityResult:
        return ReachabilityResult(relay_url=request.relay_url, reachable=False, reason="refused")

    client = _Aggregator(refused, honest)
    verdict, _ = _check(client, challenges)
    assert verdict.reachable is True and len(client.asked) == 2
    client = _Aggregator(refused, refused)
    verdict, _ = _check(client)
    assert verdict.reachable is False and verdict.reason == "refused" and len(client.asked) == 2
    # each request is signed by the node for its own URL and a fresh challenge
    first, second = client.asked
    assert first.challenge != second.challenge and first.relay_url == second.relay_url
    verify_message(first, bytes(first.identity))
    # an aggregator without the route, or one that cannot be asked: the check cannot tell
    verdict, _ = _check(_Aggregator(HTTPRefusal("x", 404, "Not Found")))
    assert verdict.reachable is None and "offers no reachability check" in verdict.reason
    verdict, _ = _check(_Aggregator(OutboundError("connection refused")))
    assert verdict.reachable is None and verdict.reason.startswith("the aggregator could not be asked")
