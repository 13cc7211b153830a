"""Tagging tokens: an aggregator that evaluates one peer's tokens under a key of its own.

Tokens are what make reports unlinkable: the aggregator evaluates a blinded
nonce, so the token it later redeems cannot be tied to the request. An
aggregator that evaluates one person's requests under a *per-peer* key could
recognise that person's reports at the intake (only that key's evaluations
verify). The answer to a token request carries one DLEQ proof; the peer checks
it against the key the signed roster pins before it unblinds anything.

Here the victim (one real peer host, its own aggregator URL, beside an honest
host, through the project's own aggregator) has its token requests answered
under a tagging key with a proof that is valid *for that key*: it aborts before
it releases anything. The other form — the victim shown a roster, validly
re-signed, that pins another key so that such a proof verifies — is caught by
the roster comparison (``tests/peer/test_participant.py``).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from anonml.crypto import TokenKey
from anonml.protocol import Problem
from peer.policy import PeerPolicy
from tests.adversary.malicious import HonestPeers, MaliciousAggregator, mooc_draft, start_peers
from tests.waiting import wait_until

POLICY = PeerPolicy.for_simulation(auto_accept=True, max_epsilon_per_problem=4.0)
HONEST = 7  # beside the one victim: the roster has 8 members, every one a report peer (no median pool)


def _start(
    adversary: MaliciousAggregator, cohort: Callable, tmp_path: Path
) -> tuple[HonestPeers, HonestPeers]:
    people = cohort(HONEST + 1)
    victim = start_peers(tmp_path, adversary.url_for("victim"), people[:1], POLICY, name="victim", seed=50)
    honest = start_peers(tmp_path, adversary.url, people[1:], POLICY, name="honest", seed=60)
    return victim, honest


def _register_everyone(
    adversary: MaliciousAggregator, victim: HonestPeers, honest: HonestPeers
) -> Problem:
    problem = adversary.propose(mooc_draft(min_peers=HONEST + 1, kp=2))
    victim.wait_decided(problem)
    honest.wait_decided(problem)
    wait_until(lambda: adversary.status(problem).registered == HONEST + 1, 60, "every peer to register")
    return problem


def _token_requests(adversary: MaliciousAggregator, tag: str) -> int:
    return sum(method == "POST" and path.endswith("/tokens") for method, path in adversary.seen(tag))


@pytest.mark.slow
def test_tokens_evaluated_under_a_per_peer_key_are_refused_before_anything_is_released(
    adversary: MaliciousAggregator, cohort: Callable, tmp_path: Path
):
    victim, honest = _start(adversary, cohort, tmp_path)
    try:
        tagging = TokenKey.generate(np.random.default_rng(7))
        adversary.issue_tokens_with("victim", tagging)
        problem = _register_everyone(adversary, victim, honest)
        adversary.close(problem)
        said = victim.assert_refused(
            problem, "token proof does not verify against the pinned key", timeout=120
        )
        assert victim.participation(problem)[0] == "aborted", said
        # The forged answer was served (the attack ran), and the victim asked once and never again.
        assert _token_requests(adversary, "victim") == 1
        adversary.wait_phase(problem, "done", "degraded", "failed", timeout=180)
        wait_until(lambda: honest.host.sessions[problem.id].finished, 120, "the honest peers to finish")
        st = adversary.status(problem)
        kh = problem.draft.kh
        # The honest members were served by the real issuer; the victim's slots are counted lost
        # (not arrived), not silently missing, and the problem says so.
        assert st.tokens_issued == HONEST * kh
        assert st.reports is not None and st.reports.expected == (HONEST + 1) * kh
        assert st.reports.received == st.reports_accepted <= HONEST * kh
        assert st.reports.lost == st.reports.expected - st.reports.received
        assert st.reports.not_arrived >= kh
        assert st.phase == "degraded" and "lost" in st.message  # 1 of 8 is over the 10 % threshold
        for node in honest.nodes:
            assert honest.participation(problem, node)[0] == st.phase
            assert len(honest.releases(node)) == kh
    finally:
        victim.stop()
        honest.stop()
