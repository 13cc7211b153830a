"""What a report peer sends when its value cannot be computed: a uniform stand-in, never silence."""

from __future__ import annotations

import math

import numpy as np
import pytest

from anonml.learn import PeerAssignment
from anonml.model import FeatureKind, FeatureSpec
from anonml.privacy import best_mechanism
from anonml.protocol import unpack_bits
from peer.features import LocalExample, invalid_features
from peer.reports import make_reports
from tests.aggregator.helpers import bins_document
from tests.peer.test_policy import problem

#: Reports per estimate. The smallest fault the rates must catch is a stand-in drawn from all but one
#: value of the domain (its bit at q = 0.175 instead of 1/m = 0.25, a shift of (p − q)/m = 0.075):
#: 2,000 reports put that at 7.7 SE against the 4 SE tolerance (6,000 spent 3× the time for 13 SE).
N = 2000
MEDIAN_N = 6000  # median answers per estimate: cheap (0.3 s), so kept at the old size
PROBLEM = problem()  # sessions on [0, 20], active_days on [0, 14]; ε = 1
BINS = bins_document(PROBLEM.id, ((5.0,), (7.0,)))
MECHANISM = best_mechanism(PROBLEM.draft.report_epsilon, 4, 10)  # 2 bins × label


def _bit_rates(example: LocalExample | None, seed: int) -> tuple[np.ndarray, list[str]]:
    """Per output bit, the fraction of N reports (subset = feature 0) with that bit set."""
    assignment = PeerAssignment("report", 0, ((0,),) * N)
    reports, specs, why = make_reports(
        PROBLEM, assignment, example, BINS, 10, "alice", np.random.default_rng(seed)
    )
    assert len(reports) == len(specs) == N  # exactly the slot count, whatever happened
    assert {s.epsilon for s in specs} == {MECHANISM.epsilon}
    assert {r.mechanism.kind for r in reports} == {MECHANISM.kind}  # the same mechanism
    bits = np.stack([unpack_bits(bytes(r.bits), MECHANISM.descriptor().m) for r in reports])
    return bits.mean(axis=0), why


def _within(rates: np.ndarray, expected: np.ndarray) -> None:
    se = np.sqrt(expected * (1 - expected) / N)
    assert np.all(np.abs(rates - expected) <= 4 * se), (rates, expected)


@pytest.mark.parametrize(
    ("example", "reason"),
    [
        (None, "no example"),
        (LocalExample(np.array([math.nan, 3.0]), 1), "sessions is nan"),
        (LocalExample(np.array([math.inf, 3.0]), 0), "sessions is inf"),
        (LocalExample(np.array([25.0, 3.0]), 0), "outside [0, 20]"),
        (LocalExample(np.array([2.0, 3.0]), 7), "label 7 is not a class index 0..1"),
    ],
)
def test_stand_ins_are_uniform_values_through_the_same_mechanism(example, reason):
    rates, why = _bit_rates(example, seed=1)
    assert all(reason in w for w in why)
    # A uniform value v in a domain of m: every bit is set with probability (p + (m − 1) q) / m.
    m, p, q = MECHANISM.descriptor().m, MECHANISM.p, MECHANISM.q
    _within(rates, np.full(m, (p + (m - 1) * q) / m))


def test_a_valid_value_is_reported_as_itself():
    rates, why = _bit_rates(LocalExample(np.array([2.0, 3.0]), 1), seed=2)
    assert why == [""] * N
    # sessions = 2 falls in bin 0, label 1: value index 0·2 + 1 = 1 holds its bit with probability p.
    m, p, q = MECHANISM.descriptor().m, MECHANISM.p, MECHANISM.q
    _within(rates, np.array([p if j == 1 else q for j in range(m)]))


def test_only_reports_touching_a_bad_value_are_replaced():
    assignment = PeerAssignment("report", 0, ((0,), (1,)))
    example = LocalExample(np.array([math.nan, 3.0]), 1)
    reports, specs, why = make_reports(PROBLEM, assignment, example, BINS, 10, "alice")
    assert len(reports) == 2 and why[0] == "sessions is nan" and why[1] == ""


def test_invalid_features_names_each_kind_of_bad_value():
    specs = (
        FeatureSpec(name="n", low=0, high=1),
        FeatureSpec(name="b", kind=FeatureKind.BOOL),
        FeatureSpec(name="c", kind=FeatureKind.CATEGORICAL, categories=("x", "y")),
    )
    assert invalid_features(np.array([0.5, 1.0, 1.0]), specs) == {}
    bad = invalid_features(np.array([2.0, 0.5, 2.0]), specs)
    assert bad == {
        0: "n = 2 is outside [0, 1]",
        1: "b = 0.5 is not a bit",
        2: "c = 2 is not one of its 2 categories",
    }
    assert invalid_features(np.array([0.5, 1.0, 0.5]), specs) == {2: "c = 0.5 is not one of its 2 categories"}


def _median_truths(example: LocalExample | None, n: int = MEDIAN_N) -> tuple[np.ndarray, list[str]]:
    """What a median-pool identity holding ``example`` feeds randomised response for sessions > 5."""
    from anonml.crypto import Identity
    from anonml.protocol import MedianQuery
    from peer.median_answer import median_truth
    from peer.participant import Participant, PeerNode

    node = PeerNode(identity=Identity.generate(), store=None, ledger=None)  # type: ignore[arg-type]
    p = Participant(node, PROBLEM, client=None, relay=None, relay_base="", example=example)  # type: ignore[arg-type]
    query = MedianQuery.model_construct(feature=0, threshold=5.0)
    gen = np.random.default_rng(3)
    return np.array([median_truth(p, query, gen) for _ in range(n)]), p.standins


@pytest.mark.parametrize(
    ("example", "reason"),
    [(None, "no example"), (LocalExample(np.array([math.nan, 3.0]), 1), "sessions is nan")],
)
def test_a_median_answer_without_a_value_is_a_uniform_bit(example, reason):
    truths, why = _median_truths(example)
    assert abs(truths.mean() - 0.5) <= 4 * math.sqrt(0.25 / MEDIAN_N)
    assert len(why) == MEDIAN_N and all(reason in w for w in why)


def test_a_median_answer_with_a_value_compares_it():
    assert _median_truths(LocalExample(np.array([7.0, 3.0]), 1), 20)[0].all()
    truths, why = _median_truths(LocalExample(np.array([2.0, 3.0]), 1), 20)
    assert not truths.any() and why == []
