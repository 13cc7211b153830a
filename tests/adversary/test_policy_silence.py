"""Data-dependent participation: conditions the aggregator picks must not decide who speaks.

The aggregator chooses the plugins and their params, so any condition they
compute on a person's events is its question. Three such conditions used to
make some peers refuse or fall silent (a leak no ledger recorded): an
instancer ``activity`` filter, a declarative ``last`` over a text field
(NaN), a category index beyond the proposal's categories. Now every peer that
joined registers and sends exactly its slot count; a value it cannot compute
goes as a stand-in (uniform through the same mechanism) recorded in its
ledger, the reason kept locally.

Each test runs the whole problem against the real aggregator and one real
peer host, and compares the peers the condition singles out with the others.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from anonml.model import FeatureKind, FeatureSpec
from anonml.plugins import PluginRef
from anonml.protocol import Problem, ProblemDraft, route_count
from featurizers.mooc_engagement import MoocEngagementFeaturizer
from peer.features import local_example
from peer.policy import PeerPolicy, load_plugins
from tests.adversary.malicious import (
    HonestPeers,
    MaliciousAggregator,
    hostile,
    mooc_draft,
    start_peers,
)
from tests.waiting import wait_until

POLICY = PeerPolicy.for_simulation(auto_accept=True, max_epsilon_per_problem=4.0)
N = 12
FIVE = ("0", "1", "2", "3", "4")


def _run(adversary: MaliciousAggregator, peers: HonestPeers, draft: ProblemDraft) -> Problem:
    """Propose, let every peer decide and register, close, and wait until the peers finished."""
    problem = adversary.propose(draft)
    peers.wait_decided(problem)
    wait_until(lambda: adversary.status(problem).registered == N, 60, "every peer to register")
    adversary.close(problem)
    adversary.wait_phase(problem, "done", "degraded", "failed", timeout=120)
    wait_until(lambda: peers.host.sessions[problem.id].finished, 60, "the peers to finish")
    return problem


def _behaviour(peers: HonestPeers, problem: Problem) -> dict[str, tuple]:
    """Per identity: what the aggregator could observe of it, and what its ledger recorded."""
    session = peers.host.sessions[problem.id]
    seen = {}
    for p in session.participants:
        releases = peers.releases(p.node)
        seen[p.node.fingerprint] = (
            peers.decision(problem, p.node)[0],  # joined?
            p.relay_key is not None,  # registered (a round relay key was certified)
            p.built,  # built its packets
            len(peers.releases(p.node)),  # releases recorded
            sum(r.epsilon for r in releases),  # ε spent
            p.status,
        )
    return seen


def _without_example(draft: ProblemDraft, peers: HonestPeers) -> set[str]:
    """Identities whose example the proposal's plugins cannot compute (or compute a bad value for)."""
    problem = Problem.model_construct(id="p-probe", draft=draft)
    plugins = load_plugins(problem)
    out = set()
    for node in peers.nodes:
        try:
            example = local_example(problem, node.store, node.user, plugins=plugins)
        except Exception:
            out.add(node.fingerprint)
            continue
        for j, spec in enumerate(draft.features):
            if spec.kind is FeatureKind.CATEGORICAL and example.x[j] >= len(spec.categories):
                out.add(node.fingerprint)
    return out


def _check_indistinguishable(
    adversary: MaliciousAggregator,
    peers: HonestPeers,
    draft: ProblemDraft,
    why: str,
    feature: str | None = None,
) -> None:
    """Both kinds of peers behave alike; singled-out ones sent stand-ins saying ``why``.

    With ``feature``, only the reports whose subset holds that feature are
    stand-ins (the peer's other reports are computed from its valid values).
    """
    singled_out = _without_example(draft, peers)
    assert 0 < len(singled_out) < N, f"the cohort must hold both kinds of peers ({len(singled_out)} of {N})"
    told: list[str] = []
    peers.host.notify = told.append
    problem = _run(adversary, peers, draft)
    # The person is told what each identity did (locally): the same story for every one.
    steps = ("joined", "registered for", "is sending its randomised reports", "downloaded the signed model")
    for step in steps:
        assert sum(step in line for line in told) == N, (step, told)
    seen = _behaviour(peers, problem)
    kh = problem.draft.kh
    # Identical observable behaviour: joined, registered, sent exactly k_h packets, recorded k_h
    # releases at ε, whether or not the condition holds for the peer.
    expected = ("accept", True, True, kh, pytest.approx(problem.draft.epsilon))
    for fingerprint, row in seen.items():
        assert row[:5] == expected, (fingerprint in singled_out, row)
    packets = N * kh * route_count(problem.draft.routes, problem.draft.hops, N)  # r copies per slot
    assert peers.host.counters["packets sent"] + peers.host.counters["packets not sent"] == packets
    st = adversary.status(problem)
    assert st.registered == st.roster_size == N and st.tokens_issued == N * kh
    # The singled-out peers sent stand-ins and know why (locally); the others did not.
    session = peers.host.sessions[problem.id]
    column = None if feature is None else [f.name for f in draft.features].index(feature)
    replaced = 0
    for p in session.participants:
        touches = column is None or any(column in subset for subset in p.assignment.subsets)
        if p.node.fingerprint in singled_out and touches:
            assert p.standins and any(why in s for s in p.standins), p.standins
            replaced += 1
        else:
            assert not p.standins, p.standins
    assert replaced > 0


@pytest.fixture
def peers(adversary: MaliciousAggregator, cohort: Callable, tmp_path: Path):
    running = start_peers(tmp_path, adversary.url, cohort(N + 4)[:N], POLICY)
    assert len(running.nodes) == N
    try:
        yield running
    finally:
        running.stop()


@pytest.mark.slow
def test_an_activity_filter_does_not_decide_who_registers_or_sends(adversary, peers):
    base = mooc_draft(min_peers=N, kp=2)
    params = {**base.instancer.params, "activity": {"type": "forum_thread_created"}}
    draft = hostile(base, instancer=PluginRef(name="user_window", version="1.0", params=params))
    _check_indistinguishable(adversary, peers, draft, "no example")


@pytest.mark.slow
def test_a_nan_feature_gets_a_stand_in_not_silence(adversary, peers):
    definitions = [
        # `last` over a text field: NaN for a peer with a browser problem_check in its last
        # three days, 0 for one without.
        {"name": "last_page", "type": "problem_check", "aggregation": "last", "field": "page",
         "window_days": 3, "high": 10},
        {"name": "pages", "type": "page_view", "aggregation": "count", "high": 400},
    ]
    featurizer = PluginRef(name="declarative", version="1.0", params={"features": definitions})
    features = tuple(FeatureSpec(name=d["name"], low=0.0, high=float(d["high"])) for d in definitions)
    draft = hostile(mooc_draft(min_peers=N), featurizer=featurizer, features=features, kp=2)
    _check_indistinguishable(adversary, peers, draft, "not finite")


@pytest.mark.slow
def test_a_category_beyond_the_proposals_categories_gets_a_stand_in(adversary, peers, monkeypatch):
    # A featurizer that declares `distinct_problems` as one of five categories "0"…"4" but
    # emits the count itself: a peer that attempted five or more problems has an index ≥ 5.
    def declared(self):
        return [
            FeatureSpec(name=s.name, kind=FeatureKind.CATEGORICAL, categories=FIVE)
            if s.name == "distinct_problems"
            else s
            for s in self._specs
        ]

    monkeypatch.setattr(MoocEngagementFeaturizer, "features", declared)
    base = mooc_draft(min_peers=N)
    features = tuple(
        FeatureSpec(name=f.name, kind=FeatureKind.CATEGORICAL, categories=FIVE)
        if f.name == "distinct_problems"
        else f
        for f in base.features
    )
    column = [f.name for f in features].index("distinct_problems")
    # Every partition reports that feature (subsets chosen by the proposal, not drawn from the seed).
    draft = hostile(base, features=features, kp=2, subsets=((column,),))
    _check_indistinguishable(
        adversary, peers, draft, "is not one of its 5 categories", feature="distinct_problems"
    )
