"""Mechanisms: privacy loss, per-bit marginals, exact output law, eq. 7.2/7.3."""

from __future__ import annotations

import math

import numpy as np
import pytest
from pydantic import ValidationError
from scipy.optimize import minimize_scalar
from scipy.stats import chisquare

from anonml.privacy import (
    OUE,
    RAPPOR,
    Mechanism,
    MechanismDescriptor,
    PQPerturbation,
    RandomizedResponse,
    SubsetSelection,
    optimal_pq_p,
)
from tests.privacy.exact import all_outputs, encode, pmf

KINDS = [PQPerturbation, RAPPOR, OUE, RandomizedResponse, SubsetSelection]
DOMAINS = [2, 4, 16, 64]
EPSILONS = [0.5, 1.0, 2.0, 4.0]


def _pair_ratio_closed_form(mech: Mechanism) -> float:
    """Worst-case likelihood ratio of two neighbouring inputs, from the definitions."""
    p, q = mech.p, mech.q
    if mech.kind in ("pq", "rappor", "oue"):
        # Only the two differing positions matter; best output is (1, 0) there.
        return (p / q) * ((1 - q) / (1 - p))
    if mech.kind == "krr":
        return p / q
    # Subset selection: P(S | v) = lam / Z if v in S else 1 / Z; the ratio of the
    # two inputs on a subset with v but not v' is P(v in S, v' not in S | v) /
    # P(v in S, v' not in S | v'), computed from the marginals alone:
    w, m = mech.omega, mech.m
    with_v = p * (m - w) / (m - 1)  # v in S (w.p. p), v' among the m-w left out
    without = (1 - p) * w / (m - 1)  # v' not in S, v among the w chosen of m-1
    return with_v / without


@pytest.mark.parametrize("kind", KINDS, ids=lambda k: k.__name__)
@pytest.mark.parametrize("m", DOMAINS)
@pytest.mark.parametrize("epsilon", EPSILONS)
def test_worst_case_likelihood_ratio_is_e_to_epsilon(kind, m, epsilon):
    mech = kind.from_epsilon(epsilon, m)
    assert mech.epsilon == pytest.approx(epsilon, rel=1e-12)
    assert math.log(_pair_ratio_closed_form(mech)) == pytest.approx(epsilon, rel=1e-9)
    if m <= 16:
        # Enumerate every output for every pair of inputs.
        outputs = all_outputs(m)
        laws = np.array([pmf(mech, outputs, v) for v in range(m)])
        assert laws.sum(axis=1) == pytest.approx(np.ones(m), abs=1e-12)
        # An output impossible under one input must be impossible under all
        # (else the ratio is infinite); the worst pair for each output is its
        # largest over its smallest probability.
        possible = laws.max(axis=0) > 0
        assert (laws[:, possible] > 0).all()
        worst = (laws[:, possible].max(axis=0) / laws[:, possible].min(axis=0)).max()
        assert math.log(worst) == pytest.approx(epsilon, rel=1e-9)


@pytest.mark.parametrize("kind", KINDS, ids=lambda k: k.__name__)
@pytest.mark.parametrize("m", [2, 4, 8])
def test_stated_p_q_are_the_marginals_of_the_definition(kind, m):
    mech = kind.from_epsilon(1.3, m)
    outputs = all_outputs(m)
    law = pmf(mech, outputs, value=1)
    marginals = law @ outputs
    expected = np.full(m, mech.q)
    expected[1] = mech.p
    assert marginals == pytest.approx(expected, rel=1e-12)


@pytest.mark.parametrize("kind", KINDS, ids=lambda k: k.__name__)
@pytest.mark.parametrize("epsilon", [0.5, 2.0])
def test_perturb_draws_exactly_the_defined_law(kind, epsilon):
    # Goodness of fit of 200,000 reports of value 2 over all 16 outputs (m=4);
    # impossible outputs must never appear. Seeded; p-value floor 1e-4.
    m, n, value = 4, 200_000, 2
    mech = kind.from_epsilon(epsilon, m)
    reports = mech.perturb(np.full(n, value), rng=np.random.default_rng(11))
    assert reports.shape == (n, m) and reports.dtype == bool
    observed = np.bincount(encode(reports), minlength=2**m)
    law = pmf(mech, all_outputs(m), value)
    assert observed[law == 0].sum() == 0
    possible = law > 0
    result = chisquare(observed[possible], n * law[possible])
    assert result.pvalue > 1e-4


def test_subset_selection_floyd_path_draws_the_defined_law(monkeypatch):
    from anonml.privacy import _sampling

    monkeypatch.setattr(_sampling, "_TABLE_BYTES", 0)  # force Floyd's algorithm
    m, n, value = 6, 200_000, 5
    mech = SubsetSelection(epsilon=0.7, m=m, omega=3)
    reports = mech.perturb(np.full(n, value), rng=np.random.default_rng(12))
    observed = np.bincount(encode(reports), minlength=2**m)
    law = pmf(mech, all_outputs(m), value)
    assert observed[law == 0].sum() == 0
    assert chisquare(observed[law > 0], n * law[law > 0]).pvalue > 1e-4


@pytest.mark.parametrize("kind", KINDS, ids=lambda k: k.__name__)
def test_per_bit_marginals_at_large_domain(kind):
    # m = 64, 50,000 mixed values: true-bit and other-bit frequencies within
    # 5 standard errors sqrt(P(1-P)/count) of p and q.
    m, n = 64, 50_000
    rng = np.random.default_rng(5)
    values = rng.integers(0, m, n)
    mech = kind.from_epsilon(1.0, m)
    reports = mech.perturb(values, rng=rng)
    true_bits = reports[np.arange(n), values]
    other = (reports.sum() - true_bits.sum()) / (n * (m - 1))
    assert abs(true_bits.mean() - mech.p) < 5 * math.sqrt(mech.p * (1 - mech.p) / n)
    # Other bits of one report may be dependent: bound with the variance of
    # their count, at most (m-1)^2 / 4 per report.
    assert abs(other - mech.q) < 5 * math.sqrt((m - 1) ** 2 / 4 / n) / (m - 1)


def test_one_hot_input_equals_index_input():
    mech = OUE.from_epsilon(1.0, 5)
    values = np.array([0, 4, 2, 2])
    onehot = np.eye(5, dtype=bool)[values]
    a = mech.perturb(values, rng=np.random.default_rng(3))
    b = mech.perturb(onehot, rng=np.random.default_rng(3))
    assert np.array_equal(a, b)


def test_seeded_perturbation_is_reproducible_and_default_is_not():
    mech = RAPPOR.from_epsilon(1.0, 16)
    values = np.arange(16).repeat(100)
    a = mech.perturb(values, rng=np.random.default_rng(9))
    b = mech.perturb(values, rng=np.random.default_rng(9))
    assert np.array_equal(a, b)
    # Two OS-seeded draws of 25,600 bits coincide with probability ~0.
    assert not np.array_equal(mech.perturb(values), mech.perturb(values))


@pytest.mark.parametrize(
    ("values", "error"),
    [
        (np.array([0, 5]), ValueError),  # outside [0, 5)
        (np.array([-1]), ValueError),
        (np.array([0.5, 1.0]), TypeError),
        (np.array([[1, 1, 0, 0, 0]]), ValueError),  # not one-hot
        (np.zeros((2, 3)), ValueError),  # wrong width
        (np.zeros((2, 2, 2), dtype=int), ValueError),
    ],
)
def test_perturb_refuses_bad_values(values, error):
    with pytest.raises(error):
        OUE.from_epsilon(1.0, 5).perturb(values, rng=np.random.default_rng(0))


def test_empty_input_gives_empty_reports():
    assert OUE.from_epsilon(1.0, 3).perturb(np.array([], dtype=int)).shape == (0, 3)


@pytest.mark.parametrize(
    "build",
    [
        lambda: PQPerturbation(p=0.3, q=0.4, m=4),  # q >= p
        lambda: PQPerturbation(p=1.0, q=0.2, m=4),
        lambda: OUE(epsilon=0.0, m=4),
        lambda: OUE(epsilon=float("inf"), m=4),
        lambda: RAPPOR(epsilon=1.0, m=1),
        lambda: SubsetSelection(epsilon=1.0, m=4, omega=4),
    ],
)
def test_bad_parameters_are_refused(build):
    with pytest.raises(ValueError):
        build()


@pytest.mark.parametrize("m", [2, 3, 4, 16, 64, 128])
@pytest.mark.parametrize("epsilon", EPSILONS)
def test_eq_7_3_minimises_eq_7_2_at_fixed_epsilon(m, epsilon):
    lam = math.exp(epsilon)

    def error(p: float) -> float:
        q = p / (p + lam * (1 - p))  # keeps epsilon fixed
        return PQPerturbation(p=p, q=q, m=m).expected_l2_error(1000)

    numeric = minimize_scalar(error, bounds=(1e-6, 1 - 1e-6), method="bounded", options={"xatol": 1e-10})
    p_star = optimal_pq_p(epsilon, m)
    assert p_star == pytest.approx(numeric.x, abs=1e-5)
    assert error(p_star) <= numeric.fun * (1 + 1e-12)
    assert PQPerturbation.from_epsilon(epsilon, m).epsilon == pytest.approx(epsilon)


@pytest.mark.parametrize("epsilon", EPSILONS)
def test_eq_7_3_at_m_2_is_rappor_and_tends_to_oue(epsilon):
    assert optimal_pq_p(epsilon, 2) == pytest.approx(RAPPOR.from_epsilon(epsilon, 2).p, rel=1e-12)
    assert optimal_pq_p(epsilon, 10**6) == pytest.approx(0.5, abs=1e-2)


def test_expected_error_formula_eq_7_2():
    mech = PQPerturbation(p=0.6, q=0.2, m=10)
    assert mech.expected_l2_error(400) == pytest.approx(
        math.sqrt(9 * 0.2 * 0.8 + 0.6 * 0.4) / (0.4 * 20), rel=1e-12
    )
    assert mech.count_variance(100, 30) == pytest.approx((30 * 0.24 + 70 * 0.16) / 0.16)
    with pytest.raises(ValueError):
        mech.expected_l2_error(0)


def test_subset_selection_default_omega_and_krr_equivalence():
    assert SubsetSelection.from_epsilon(1.0, 64).omega == round(64 / (math.e + 1))
    assert SubsetSelection.from_epsilon(4.0, 4).omega == 1
    ss = SubsetSelection(epsilon=1.0, m=6, omega=1)
    rr = RandomizedResponse.from_epsilon(1.0, 6)
    assert (ss.p, ss.q) == pytest.approx((rr.p, rr.q), rel=1e-12)


@pytest.mark.parametrize("kind", KINDS, ids=lambda k: k.__name__)
def test_descriptor_round_trips_through_json(kind):
    mech = kind.from_epsilon(1.7, 12)
    wire = mech.descriptor().model_dump_json()
    back = MechanismDescriptor.model_validate_json(wire)
    assert back.to_mechanism() == mech
    assert (back.p, back.q) == (mech.p, mech.q)


def test_descriptor_refuses_inconsistent_numbers():
    good = OUE.from_epsilon(1.0, 8).descriptor().model_dump()
    with pytest.raises(ValidationError, match="disagrees"):
        MechanismDescriptor.model_validate({**good, "q": good["q"] * 1.01})
    with pytest.raises(ValidationError, match="omega"):
        MechanismDescriptor.model_validate({**good, "omega": 2})
    with pytest.raises(ValidationError):
        MechanismDescriptor.model_validate({**good, "kind": "laplace"})
    with pytest.raises(ValidationError):
        MechanismDescriptor.model_validate({**good, "extra": 1})
    subset = SubsetSelection.from_epsilon(1.0, 16).descriptor().model_dump()
    with pytest.raises(ValidationError):
        MechanismDescriptor.model_validate({**subset, "omega": subset["omega"] + 1})


@pytest.mark.parametrize(
    ("good", "change", "message"),
    [
        # Each defining parameter is refused with the message its mechanism's constructor gives.
        (OUE.from_epsilon(1.0, 8), {"epsilon": 31.0, "q": 1.0 / (math.exp(31.0) + 1.0)}, "at most 30"),
        (PQPerturbation(p=0.6, q=0.2, m=5), {"p": 0.2, "q": 0.6}, r"need 0 < q < p < 1, got p=0\.2, q=0\.6"),
        (SubsetSelection.from_epsilon(1.0, 16), {"omega": 16}, r"omega must lie in \[1, m-1=15\], got 16"),
        # Derived numbers are recomputed from the defining ones: p, q for ε-kinds, ε for (p, q).
        (PQPerturbation(p=0.6, q=0.2, m=5), {"epsilon": 1.0}, "epsilon=1.0 disagrees"),
        (RandomizedResponse.from_epsilon(2.0, 5), {"m": 6}, "krr descriptor: p=.* disagrees"),
        (SubsetSelection.from_epsilon(1.0, 16), {"omega": 3}, "subset descriptor: p=.* disagrees"),
        (RAPPOR.from_epsilon(1.0, 4), {"q": 0.3}, "rappor descriptor: q=0.3 disagrees"),
    ],
)
def test_descriptor_refusals_say_which_parameter(good, change, message):
    with pytest.raises(ValidationError, match=message):
        MechanismDescriptor.model_validate({**good.descriptor().model_dump(), **change})


def test_to_mechanism_names_the_missing_registration(monkeypatch):
    # The descriptor never imports the mechanisms; a kind nobody registered must say what to import.
    from anonml.privacy import MECHANISMS

    descriptor = OUE.from_epsilon(1.0, 8).descriptor()
    monkeypatch.delitem(MECHANISMS, "oue")
    with pytest.raises(LookupError, match="import anonml.privacy.mechanisms"):
        descriptor.to_mechanism()


def test_epsilon_past_the_arithmetic_limit_is_refused():
    from anonml.privacy import RandomizedResponse

    assert 0.999 < RandomizedResponse.from_epsilon(30.0, 4).p < 1.0
    with pytest.raises(ValueError, match="at most 30"):
        RandomizedResponse.from_epsilon(1e5, 4)


@pytest.mark.parametrize("kind", ["pq", "rappor", "oue", "krr", "subset"])
def test_epsilon_below_the_arithmetic_limit_is_refused_by_name(kind):
    # e^ε − 1 rounds to 0 near 1e-16: best_mechanism(1e-20, ...) raised ZeroDivisionError.
    import anonml.privacy.mechanisms  # noqa: F401 - registers the kinds in MECHANISMS
    from anonml.privacy import MECHANISMS, best_mechanism

    at_floor = MECHANISMS[kind].from_epsilon(1e-6, 8)
    assert 0.0 < at_floor.q < at_floor.p < 1.0
    for tiny in (1e-7, 1e-20, 5e-324):
        with pytest.raises(ValueError, match="at least 1e-06"):
            MECHANISMS[kind].from_epsilon(tiny, 8)
    with pytest.raises(ValueError, match="at least 1e-06"):
        best_mechanism(1e-20, 16, 1000)
