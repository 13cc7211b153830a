"""Roster isolation and anonymity-free parameters: the honest peer refuses before releasing anything.

Each test plays the aggregator against one real peer host (its own relay,
worker, ledger and state files) and checks what the peer stored — its
decision and reason, its empty ledger — and what it asked the aggregator
(no token request, no median answer).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from anonml.protocol import Roster
from peer.policy import PeerPolicy
from tests.adversary.malicious import MaliciousAggregator, mooc_draft, start_peers
from tests.waiting import wait_until

POLICY = PeerPolicy(  # the default floors (no witness runs here: the floors alone refuse)
    auto_accept=True, max_epsilon_per_problem=4.0, allow_loopback_http=True, require_witnesses=False
)


def _released_nothing_to(adversary: MaliciousAggregator, tag: str) -> None:
    """The peer under ``tag`` asked for no token and posted no median answer."""
    for method, path in adversary.seen(tag):
        assert not (method == "POST" and path.endswith(("/tokens", "/medians/answers"))), (method, path)


def _register_then(adversary: MaliciousAggregator, problem, sybils: int) -> list[Any]:
    """Wait for the victim's registration, add ``sybils`` identities the aggregator controls, close."""
    wait_until(lambda: adversary.status(problem).registered >= 1, 60, "the victim to register")
    fakes = [adversary.register_sybil(problem) for _ in range(sybils)]
    adversary.close(problem)
    return fakes


def _isolate(adversary: MaliciousAggregator, problem, victim: bytes, fake: bytes) -> None:
    """Show the victim (tag ``victim``) a signed roster {victim, fake} and the matching assignment."""
    shown: dict[str, Roster] = {}

    def roster(honest: Roster) -> Roster:
        shown["roster"] = adversary.isolated_roster(problem, honest, [victim, fake])
        return shown["roster"]

    adversary.equivocate("victim", "roster", roster)
    adversary.equivocate(
        "victim", "assignment", lambda _: adversary.assignment_for(problem, shown["roster"], victim)
    )


@pytest.mark.slow
def test_roster_isolation_with_one_fake_is_refused(adversary, cohort, tmp_path: Path):
    victim = start_peers(tmp_path, adversary.url_for("victim"), cohort(3)[:1], POLICY)
    try:
        problem = adversary.propose(mooc_draft(min_peers=2, kp=1))
        fakes = _register_then(adversary, problem, sybils=5)
        key = bytes(victim.nodes[0].identity.public)
        _isolate(adversary, problem, key, fakes[0].public)
        said = victim.assert_refused(problem, "the roster has 2 members, fewer than 20")
        assert "refused before releasing anything" in said
        _released_nothing_to(adversary, "victim")
        # The honest roster had 6 members: the victim was shown another one, and refused it.
        assert len(adversary.roster(problem).entries) == 6
    finally:
        victim.stop()


@pytest.mark.slow
def test_the_problems_own_min_peers_holds_even_under_a_lower_personal_floor(
    adversary, cohort, tmp_path: Path
):
    lenient = PeerPolicy.for_simulation(auto_accept=True, max_epsilon_per_problem=4.0)
    victim = start_peers(tmp_path, adversary.url_for("victim"), cohort(3)[:1], lenient)
    try:
        problem = adversary.propose(mooc_draft(min_peers=10, kp=1))
        fakes = _register_then(adversary, problem, sybils=9)
        _isolate(adversary, problem, bytes(victim.nodes[0].identity.public), fakes[0].public)
        victim.assert_refused(problem, "fewer than 10 (the larger of the problem's min_peers=10")
        _released_nothing_to(adversary, "victim")
    finally:
        victim.stop()


@pytest.mark.slow
def test_singleton_partitions_are_refused_at_the_roster(adversary, cohort, tmp_path: Path):
    # k_p = n: 21 members in 21 partitions, each report attributed by its partition alone.
    victim = start_peers(tmp_path, adversary.url_for("victim"), cohort(3)[:1], POLICY)
    try:
        problem = adversary.propose(mooc_draft(min_peers=21, kp=21, kh=1))
        _register_then(adversary, problem, sybils=20)
        victim.assert_refused(problem, "the smallest report partition holds 1 peers")
        _released_nothing_to(adversary, "victim")
    finally:
        victim.stop()


@pytest.mark.slow
@pytest.mark.parametrize(
    ("changes", "reason"),
    [
        ({"hops": 1}, "routes of 1 hop(s) are shorter than this peer's floor of 3"),
        ({"pool_fraction": 0.99}, "median pool fraction 0.99 exceeds this peer's maximum of 0.5"),
    ],
)
def test_one_hop_routes_and_a_huge_median_pool_are_refused_on_the_proposal(
    adversary, cohort, tmp_path: Path, changes: dict, reason: str
):
    victim = start_peers(tmp_path, adversary.url_for("victim"), cohort(3)[:1], POLICY)
    try:
        problem = adversary.propose(mooc_draft(min_peers=20, **changes))
        victim.assert_refused(problem, reason)
        # Refused on the proposal: it never even registered.
        assert not any(path.endswith("/registrations") for _, path in adversary.seen("victim"))
        assert victim.participation(problem) is None
    finally:
        victim.stop()
