"""A malicious aggregator's median questions, naming members the plan put in a report partition.

A member of a report partition spends its ε on its reports; a median question asked of it would
spend a second release on the same person (and, answered, tie a median bit to a member the
aggregator picked). The aggregator here serves everyone validly signed questions that name every
member of the roster. Each member checks its own signed assignment before it answers: the median
pool's members answer, every other member aborts without releasing anything.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from anonml.protocol import MedianQuery
from peer.policy import PeerPolicy
from tests.adversary.malicious import mooc_draft, start_peers
from tests.waiting import wait_until

POLICY = PeerPolicy.for_simulation(auto_accept=True, max_epsilon_per_problem=4.0)
MEMBERS = 12


@pytest.mark.slow
def test_a_median_question_naming_a_report_member_is_refused_and_the_pool_still_answers(
    adversary, cohort, tmp_path: Path
):
    peers = start_peers(tmp_path, adversary.url, cohort(MEMBERS), POLICY)
    try:
        problem = adversary.propose(mooc_draft(min_peers=MEMBERS, pool_fraction=0.5))

        def everyone(queries: list[MedianQuery]) -> list[MedianQuery]:
            return [q.model_copy(update={"members": tuple(range(MEMBERS))}) for q in queries]

        adversary.equivocate(None, "medians", everyone)
        peers.wait_decided(problem)
        wait_until(lambda: adversary.status(problem).registered == MEMBERS, 60, "every peer to register")
        adversary.close(problem)
        roster = adversary.roster(problem)
        roles = {
            bytes(e.identity): adversary.assignment_for(problem, roster, bytes(e.identity)).role
            for e in roster.entries
        }
        assert 0 < sum(role == "median" for role in roles.values()) < MEMBERS
        for node in peers.nodes:
            if roles[bytes(node.identity.public)] == "median":
                continue
            said = peers.assert_refused(
                problem, "asked a median query, but the plan puts this identity in a report partition",
                node, timeout=120,
            )  # fmt: skip
            assert peers.participation(problem, node)[0] == "aborted", said
        # The pool's members were asked the same rewritten questions and answered them: one
        # median release each, its attribute the question's feature.
        pool = [n for n in peers.nodes if roles[bytes(n.identity.public)] == "median"]
        wait_until(lambda: all(peers.releases(n) for n in pool), 120, "the median pool to answer")
        for node in pool:
            assert [r.pool for r in peers.releases(node)][:1] == ["median"]
        assert any(method == "GET" and path.endswith("/medians") for method, path in adversary.seen(None))
    finally:
        peers.stop()
