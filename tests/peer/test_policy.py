"""A peer decides on a proposal by its policy, and says why."""

from __future__ import annotations

import re
from datetime import UTC, datetime

import pytest

from anonml.crypto import Identity
from anonml.errors import AnonMLError
from anonml.model import FeatureKind, FeatureSpec
from anonml.plugins import PluginRef
from anonml.protocol import MedianSettings, Problem, ProblemDraft, Schedule
from peer.policy import PeerPolicy, check_roster_floors, evaluate_problem, load_plugins
from tests.aggregator.helpers import signed_problem


def problem(**changes) -> Problem:
    values = dict(
        title="dropout",
        instancer=PluginRef(name="user_window", version="1.0"),
        featurizer=PluginRef(name="mooc_engagement", version="1.0", params={"weeks": 2}),
        features=(
            FeatureSpec(name="sessions", low=0, high=20),
            FeatureSpec(name="active_days", low=0, high=14),
        ),
        epsilon=1.0,
        schedule=Schedule(registration_deadline=datetime(2030, 1, 1, tzinfo=UTC)),
    )
    values.update(changes)
    aggregator = Identity.generate()
    return signed_problem(ProblemDraft(**values), aggregator, pid="p-policy", seed=bytes(32), round_id=7)


AUTO = PeerPolicy(
    require_witnesses=False, auto_accept=True, max_epsilon_per_problem=2.0, lifetime_epsilon_cap=5.0
)


def test_accepts_within_policy_and_maps_features_by_name():
    decision = evaluate_problem(problem(), AUTO, committed=0.0)
    assert decision.accept and decision.reason == "within policy"
    _, _, columns = load_plugins(problem())
    assert columns == [0, 1]  # sessions, active_days in the featurizer's order


def test_uninstalled_plugin_is_refused_naming_it():
    d = evaluate_problem(problem(featurizer=PluginRef(name="keylogger")), AUTO, committed=0.0)
    assert d.verdict == "refuse" and "keylogger" in d.reason and "mooc_engagement" in d.reason


def test_other_plugin_version_is_refused():
    d = evaluate_problem(problem(instancer=PluginRef(name="user_window", version="9.9")), AUTO, committed=0.0)
    assert d.verdict == "refuse" and "9.9" in d.reason


def test_bad_plugin_params_are_refused():
    d = evaluate_problem(
        problem(featurizer=PluginRef(name="mooc_engagement", params={"weeks": -3})), AUTO, 0.0
    )
    assert d.verdict == "refuse" and "weeks" in d.reason


def test_feature_the_featurizer_does_not_declare_is_refused():
    d = evaluate_problem(problem(features=(FeatureSpec(name="bank_balance", low=0, high=1),)), AUTO, 0.0)
    assert d.verdict == "refuse" and "bank_balance" in d.reason
    wrong_kind = (FeatureSpec(name="sessions", kind=FeatureKind.BOOL),)
    d = evaluate_problem(problem(features=wrong_kind), AUTO, 0.0)
    assert d.verdict == "refuse" and "bool in the proposal" in d.reason


def test_more_epsilon_than_the_policy_is_refused_unless_the_user_accepts():
    greedy = problem(epsilon=3.0)
    d = evaluate_problem(greedy, AUTO, committed=0.0)
    assert d.verdict == "refuse" and "exceeds this peer's maximum of 2" in d.reason
    assert evaluate_problem(greedy, AUTO, committed=0.0, manual=True).accept


def test_lifetime_cap_is_never_passed_even_by_the_user():
    d = evaluate_problem(problem(epsilon=1.5), AUTO, committed=4.0)
    assert d.verdict == "refuse" and "lifetime" in d.reason
    assert not evaluate_problem(problem(epsilon=1.5), AUTO, committed=4.0, manual=True).accept


def test_allow_lists_and_asking_first():
    strict = PeerPolicy(require_witnesses=False, auto_accept=True, allowed_featurizers=["declarative"])
    d = evaluate_problem(problem(), strict, 0.0)
    assert d.verdict == "refuse" and "allowed list" in d.reason
    pinned = PeerPolicy(
        require_witnesses=False, auto_accept=True, allowed_featurizers=["mooc_engagement==1.0"]
    )
    assert evaluate_problem(problem(), pinned, 0.0).accept
    ask = evaluate_problem(problem(), PeerPolicy(require_witnesses=False, auto_accept=False), 0.0)
    assert ask.verdict == "ask" and not ask.accept


def test_a_peer_that_trusts_no_witness_refuses_by_default_even_when_the_user_accepts():
    lone = PeerPolicy(auto_accept=True, max_epsilon_per_problem=2.0)  # default: witnesses required
    for manual in (False, True):
        decision = evaluate_problem(problem(), lone, 0.0, manual=manual)
        assert decision.verdict == "refuse" and "trusts 0 witness(es)" in decision.reason
    # A simulation without witness processes opts out explicitly; naming one turns the rule back on.
    assert evaluate_problem(problem(), PeerPolicy.for_simulation(auto_accept=True), 0.0).accept
    assert PeerPolicy.for_simulation(witnesses=["ab" * 64]).require_witnesses


def test_median_epsilon_above_the_budget_is_not_even_a_valid_proposal():
    with pytest.raises(ValueError, match="median.epsilon"):
        problem(median=MedianSettings(epsilon=2.0))


# -- anonymity floors ------------------------------------------------------------------------


def test_short_routes_and_a_large_median_pool_are_refused_even_when_the_user_accepts():
    one_hop = problem(hops=1)
    for manual in (False, True):
        d = evaluate_problem(one_hop, AUTO, 0.0, manual=manual)
        assert d.verdict == "refuse" and "routes of 1 hop(s) are shorter than" in d.reason
    pooled = problem(median=MedianSettings(pool_fraction=0.6))
    d = evaluate_problem(pooled, AUTO, 0.0, manual=True)
    assert d.verdict == "refuse" and "median pool fraction 0.6 exceeds this peer's maximum of 0.5" in d.reason
    assert evaluate_problem(problem(median=MedianSettings(pool_fraction=0.5)), AUTO, 0.0).accept


def test_median_epsilon_has_its_own_limit():
    costly = problem(median=MedianSettings(epsilon=0.8))
    strict = AUTO.model_copy(update={"max_median_epsilon": 0.5})
    d = evaluate_problem(costly, strict, 0.0)
    assert d.verdict == "refuse" and "median ε=0.8 exceeds this peer's maximum of 0.5" in d.reason
    assert evaluate_problem(costly, AUTO, 0.0).accept  # default: the per-problem maximum (2)
    no_pool = problem(median=MedianSettings(pool_fraction=0.0, epsilon=0.8))
    assert evaluate_problem(no_pool, strict, 0.0).accept  # nobody answers median queries


@pytest.mark.parametrize(
    ("n", "pool", "changes", "reason"),
    [
        (19, 0, {}, "the roster has 19 members, fewer than 20"),
        (30, 0, {"min_peers": 40}, "fewer than 40 (the larger of the problem's min_peers=40"),
        (20, 0, {"kp": 20}, "the smallest report partition holds 1 peers"),
        (40, 10, {"kp": 3}, "holds 10 peers"),  # passes: (40 − 10) // 3 = 10
        (41, 12, {"kp": 3}, "holds 9 peers ((n=41 − pool 12) / k_p=3)"),
    ],
)
def test_roster_floors(n, pool, changes, reason):
    p = problem(**changes)
    if reason == "holds 10 peers":
        check_roster_floors(p, n, pool, PeerPolicy())
        return
    with pytest.raises(AnonMLError, match=re.escape(reason)):
        check_roster_floors(p, n, pool, PeerPolicy())


def test_a_roster_too_small_for_the_routes_is_refused_not_routed_shorter():
    lenient = PeerPolicy.for_simulation()
    check_roster_floors(problem(min_peers=4), 4, 0, lenient)
    with pytest.raises(AnonMLError, match="too few for routes of 3 distinct other members"):
        check_roster_floors(problem(min_peers=2), 3, 0, lenient)


def test_simulation_policy_lowers_only_the_scale_floors():
    sim = PeerPolicy.for_simulation(auto_accept=True)
    assert (sim.min_roster_size, sim.min_anonymity_set) == (2, 1)
    assert (sim.min_hops, sim.max_pool_fraction, sim.auto_accept) == (3, 0.5, True)
    assert "roster ≥ 20, anonymity set ≥ 10, hops ≥ 3" in PeerPolicy().floors_text()


def test_categories_must_match_the_featurizers(monkeypatch: pytest.MonkeyPatch):
    # The featurizer declares no categorical feature: a proposal calling one categorical is refused.
    wrong = (FeatureSpec(name="sessions", kind=FeatureKind.CATEGORICAL, categories=("a", "b")),)
    d = evaluate_problem(problem(features=wrong), AUTO, 0.0)
    assert d.verdict == "refuse" and "categorical in the proposal" in d.reason
    # One that does: the proposal must list the same categories (a report's domain is the proposal's).
    from featurizers.mooc_engagement import MoocEngagementFeaturizer

    declared = FeatureSpec(name="sessions", kind=FeatureKind.CATEGORICAL, categories=("a", "b", "c"))
    monkeypatch.setattr(MoocEngagementFeaturizer, "features", lambda self: [declared])
    d = evaluate_problem(problem(features=wrong), AUTO, 0.0)
    assert d.verdict == "refuse" and "categories ['a', 'b'] in the proposal but ['a', 'b', 'c']" in d.reason
    assert evaluate_problem(problem(features=(declared,)), AUTO, 0.0).accept
