"""Debiasing, predicted variances, eq. 7.2 and the consistency steps."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.optimize import minimize
from scipy.stats import chi2

from anonml.privacy import (
    CONSISTENCY_METHODS,
    OUE,
    RAPPOR,
    BinaryRandomizedResponse,
    PQPerturbation,
    RandomizedResponse,
    SubsetSelection,
    estimate_counts,
    project_to_simplex,
)
from tests.privacy.exact import report_covariance

KINDS = [PQPerturbation, RAPPOR, OUE, RandomizedResponse, SubsetSelection]
TRUE_COUNTS = np.array([700, 400, 300, 200, 150, 100, 100, 50])  # n = 2000, m = 8
REPEATS = 400


def _repeated_sums(mech, counts: np.ndarray, repeats: int, seed: int) -> np.ndarray:
    values = np.repeat(np.arange(counts.size), counts)
    reports = mech.perturb(np.tile(values, repeats), rng=np.random.default_rng(seed))
    return reports.reshape(repeats, values.size, counts.size).sum(axis=1)


@pytest.fixture(scope="module", params=KINDS, ids=lambda k: k.__name__)
def repeated(request):
    mech = request.param.from_epsilon(1.0, TRUE_COUNTS.size)
    return mech, _repeated_sums(mech, TRUE_COUNTS, REPEATS, seed=21)


def test_debiased_counts_are_unbiased(repeated):
    mech, sums = repeated
    n = int(TRUE_COUNTS.sum())
    raw = np.array([estimate_counts(s, mech, n).raw for s in sums])
    sd = np.sqrt(mech.count_variance(n, TRUE_COUNTS))
    # Mean of R repeats within 4 sd / sqrt(R) of the truth, value by value.
    assert np.all(np.abs(raw.mean(axis=0) - TRUE_COUNTS) < 4 * sd / math.sqrt(REPEATS))


def test_predicted_variance_matches_the_spread(repeated):
    mech, sums = repeated
    n = int(TRUE_COUNTS.sum())
    raw = np.array([estimate_counts(s, mech, n).raw for s in sums])
    var = mech.count_variance(n, TRUE_COUNTS)
    # Sample variance of R near-normal draws: s^2 / var ~ chi2(R-1);
    # two-sided 99.9% interval per value.
    stat = (REPEATS - 1) * raw.var(axis=0, ddof=1) / var
    assert np.all(stat > chi2.ppf(0.0005, REPEATS - 1))
    assert np.all(stat < chi2.ppf(0.9995, REPEATS - 1))


def test_total_l2_error_matches_eq_7_2_within_a_99_percent_chi2_interval(repeated):
    mech, sums = repeated
    n = int(TRUE_COUNTS.sum())
    raw = np.array([estimate_counts(s, mech, n).raw for s in sums])
    squared = ((raw - TRUE_COUNTS) ** 2).sum(axis=1)
    # Covariance of the raw counts, from the exact per-report covariances.
    cov = sum(c * report_covariance(mech, v) for v, c in enumerate(TRUE_COUNTS))
    cov /= (mech.p - mech.q) ** 2
    # Eq. 7.2 is the trace: E||n_hat - n||^2 = n^2 * error(n)^2.
    assert np.trace(cov) == pytest.approx((n * mech.expected_l2_error(n)) ** 2, rel=1e-10)
    # ||e||^2 of a normal vector ~ sum of eigenvalue-weighted chi2(1): use
    # Satterthwaite's a * chi2(nu), a = tr(C^2)/tr(C), nu = tr(C)^2/tr(C^2),
    # summed over R independent repeats.
    tr, tr2 = np.trace(cov), np.trace(cov @ cov)
    a, nu = tr2 / tr, tr**2 / tr2
    low, high = a * chi2.ppf([0.005, 0.995], REPEATS * nu)
    assert low < squared.sum() < high


@pytest.mark.parametrize("method", CONSISTENCY_METHODS)
@pytest.mark.parametrize("kind", KINDS, ids=lambda k: k.__name__)
def test_consistent_counts_are_non_negative_and_sum_to_n(method, kind):
    rng = np.random.default_rng(3)
    mech = kind.from_epsilon(0.5, 16)
    for n in (1, 30, 5000):
        counts = rng.multinomial(n, rng.dirichlet(np.full(16, 0.3)))
        values = np.repeat(np.arange(16), counts)
        sums = mech.perturb(values, rng=rng).sum(axis=0)
        est = estimate_counts(sums, mech, n, consistency=method)
        assert est.counts.min() >= 0.0
        assert est.counts.sum() == pytest.approx(n, rel=1e-9)
        assert est.consistency == method
        assert np.all(est.variance > 0)


def _is_projection(raw: np.ndarray, x: np.ndarray, total: float) -> None:
    # KKT of min ||x - raw||^2 s.t. x >= 0, sum x = total: raw - x is one
    # constant d on the support, and raw <= d off it.
    support = x > 0
    shift = raw[support] - x[support]
    assert np.ptp(shift) < 1e-9 * max(1.0, abs(shift).max())
    assert np.all(raw[~support] <= shift.mean() + 1e-9)
    assert x.sum() == pytest.approx(total, rel=1e-12)


def test_norm_sub_is_the_euclidean_projection_onto_the_simplex():
    rng = np.random.default_rng(8)
    for _ in range(200):
        m = int(rng.integers(1, 40))
        total = float(rng.uniform(1, 1000))
        raw = rng.normal(total / m, total / 3, size=m)
        x = project_to_simplex(raw, total)
        _is_projection(raw, x, total)
        # and no random feasible point is closer
        feasible = rng.dirichlet(np.ones(m), size=50) * total
        assert np.all(np.linalg.norm(feasible - raw, axis=1) >= np.linalg.norm(x - raw) - 1e-9)


def test_norm_sub_agrees_with_a_numeric_solver():
    rng = np.random.default_rng(9)
    raw = rng.normal(50, 80, size=12)
    x = project_to_simplex(raw, 600.0)
    numeric = minimize(
        lambda y: ((y - raw) ** 2).sum(),
        np.full(12, 50.0),
        jac=lambda y: 2 * (y - raw),
        constraints=[{"type": "eq", "fun": lambda y: y.sum() - 600.0}],
        bounds=[(0, None)] * 12,
        method="SLSQP",
        options={"ftol": 1e-14, "maxiter": 500},
    )
    assert np.abs(x - numeric.x).max() < 1e-5


def test_norm_sub_never_increases_the_error(repeated):
    mech, sums = repeated
    n = int(TRUE_COUNTS.sum())
    for s in sums[:100]:
        est = estimate_counts(s, mech, n, consistency="norm_sub")
        raw_error = np.linalg.norm(est.raw - TRUE_COUNTS)
        assert np.linalg.norm(est.counts - TRUE_COUNTS) <= raw_error + 1e-9


def test_norm_sub_is_identity_on_consistent_input():
    x = np.array([3.0, 0.0, 7.0])
    assert project_to_simplex(x, 10.0) == pytest.approx(x)


def test_norm_mul_and_base_cut_definitions():
    mech = OUE.from_epsilon(1.0, 4)
    n = 1000
    # Raw counts chosen through the bit sums: raw = (s - q n) / (p - q).
    raw_target = np.array([800.0, 300.0, -50.0, -50.0])
    sums = raw_target * (mech.p - mech.q) + mech.q * n
    mul = estimate_counts(sums, mech, n, consistency="norm_mul")
    assert mul.raw == pytest.approx(raw_target)
    assert mul.counts == pytest.approx([800 / 1.1, 300 / 1.1, 0, 0])
    # Base-Cut threshold: Phi^-1(1 - 0.05/4) * sd at zero count; the cut
    # vector is then projected onto the simplex.
    threshold = 2.2414027276049446 * math.sqrt(mech.count_variance(n, 0))
    raw_target = np.array([900.0, threshold * 0.9, threshold * 1.1, -30.0])
    sums = raw_target * (mech.p - mech.q) + mech.q * n
    cut = estimate_counts(sums, mech, n, consistency="base_cut")
    kept = np.array([900.0, 0.0, threshold * 1.1, 0.0])
    assert cut.counts == pytest.approx(project_to_simplex(kept, n))
    # survivors sum above n here, so the cut values stay at 0
    assert kept.sum() > n and cut.counts[1] == 0.0 and cut.counts[3] == 0.0
    # survivors short of n: the missing mass is spread evenly over all values
    raw_target = np.array([300.0, threshold * 0.5, 0.0, 0.0])
    sums = raw_target * (mech.p - mech.q) + mech.q * n
    cut = estimate_counts(sums, mech, n, consistency="base_cut")
    assert cut.counts == pytest.approx([300 + 175, 175, 175, 175])


def _ones_log_likelihood(f: np.ndarray, sums: np.ndarray, mech) -> float:
    return float((sums * np.log(mech.q + (mech.p - mech.q) * f)).sum())


@pytest.mark.parametrize("kind", [RandomizedResponse, OUE, SubsetSelection], ids=lambda k: k.__name__)
def test_ibu_maximises_the_likelihood_of_the_reported_ones(kind):
    rng = np.random.default_rng(12)
    m, n = 6, 3000
    mech = kind.from_epsilon(1.0, m)
    counts = np.array([1500, 900, 400, 150, 50, 0])
    sums = mech.perturb(np.repeat(np.arange(m), counts), rng=rng).sum(axis=0)
    f = estimate_counts(sums, mech, n, consistency="ibu").counts / n
    best = _ones_log_likelihood(f, sums, mech)
    # No point of the simplex does better: random points and a numeric solver.
    for g in rng.dirichlet(np.ones(m), size=2000):
        assert _ones_log_likelihood(g, sums, mech) <= best + 1e-9
    numeric = minimize(
        lambda z: -_ones_log_likelihood(np.exp(z) / np.exp(z).sum(), sums, mech),
        np.zeros(m),
        method="BFGS",
        options={"gtol": 1e-10},
    )
    assert -numeric.fun <= best + 1e-6
    # Plain IBU iterations climb towards the same point.
    g = np.full(m, 1.0 / m)
    w = sums / sums.sum()
    for _ in range(20_000):
        ratio = w / (mech.q + (mech.p - mech.q) * g)
        g = g * (mech.q * ratio.sum() + (mech.p - mech.q) * ratio)
        g /= g.sum()
    assert _ones_log_likelihood(g, sums, mech) <= best + 1e-9
    assert np.abs(g - f).sum() < 2e-3
    # KKT: the EM multiplier is 1 on the support and <= 1 off it.
    a_f = mech.q + (mech.p - mech.q) * f
    ratio = sums / sums.sum() / a_f
    multiplier = mech.q * ratio.sum() + (mech.p - mech.q) * ratio
    assert np.all(multiplier[f > 1e-6] == pytest.approx(1.0, abs=1e-5))
    assert np.all(multiplier <= 1 + 1e-5)


def test_estimate_accepts_a_descriptor_and_checks_its_input():
    mech = SubsetSelection.from_epsilon(1.0, 8)
    sums = np.array([40, 30, 20, 20, 20, 20, 20, 30])
    a = estimate_counts(sums, mech.descriptor(), 100, consistency="norm_sub")
    b = estimate_counts(sums, mech, 100, consistency="norm_sub")
    assert np.array_equal(a.counts, b.counts) and a.mechanism == mech
    with pytest.raises(ValueError, match="shape"):
        estimate_counts(sums[:4], mech, 100)
    with pytest.raises(ValueError, match=r"bit_sums\[2\]"):
        estimate_counts(np.array([1, 1, 101, 1, 1, 1, 1, 1]), mech, 100)
    with pytest.raises(ValueError, match=r"bit_sums\[0\]"):
        estimate_counts(np.array([-1, 1, 1, 1, 1, 1, 1, 1]), mech, 100)
    with pytest.raises(ValueError, match="consistency"):
        estimate_counts(sums, mech, 100, consistency="norm")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="n"):
        estimate_counts(sums, mech, 0)
    with pytest.raises(TypeError):
        estimate_counts(sums, "oue", 100)  # type: ignore[arg-type]
    est = estimate_counts(sums, mech, 100)
    assert est.consistency == "norm_sub"  # the benchmark-chosen default
    assert np.array_equal(est.counts, project_to_simplex(est.raw, 100))
    none = estimate_counts(sums, mech, 100, consistency=None)
    assert np.array_equal(none.counts, none.raw) and none.consistency is None
    assert not est.raw.flags.writeable
    assert est.frequencies.sum() == pytest.approx(est.counts.sum() / 100)


@pytest.mark.parametrize("population", [False, True])
def test_binary_randomized_response_is_unbiased_with_the_stated_variance(population):
    rr = BinaryRandomizedResponse(epsilon=0.8)
    p = rr.p
    assert p == pytest.approx(math.exp(0.8) / (1 + math.exp(0.8)))
    rng = np.random.default_rng(17)
    n, repeats, truth = 1000, 2000, 0.3
    fixed = np.arange(n) < truth * n
    estimates = []
    for _ in range(repeats):
        # Fixed peers, or peers drawn afresh from a population with fraction 0.3.
        bits = rng.random(n) < truth if population else fixed
        estimates.append(rr.estimate(int(rr.perturb(bits, rng).sum()), n).fraction)
    estimates = np.array(estimates)
    pi = (1 - p) + (2 * p - 1) * truth
    var = (pi * (1 - pi) if population else p * (1 - p)) / (n * (2 * p - 1) ** 2)
    # Mean within 4 sd / sqrt(R); variance within a 99.9% chi2 interval.
    assert abs(estimates.mean() - truth) < 4 * math.sqrt(var / repeats)
    stat = (repeats - 1) * estimates.var(ddof=1) / var
    assert chi2.ppf(0.0005, repeats - 1) < stat < chi2.ppf(0.9995, repeats - 1)
    assert var <= rr.max_standard_error(n) ** 2


def test_binary_randomized_response_margin_and_checks():
    rr = BinaryRandomizedResponse(epsilon=0.8)
    n = 1000
    assert rr.max_standard_error(n) == pytest.approx(1 / (2 * (2 * rr.p - 1) * math.sqrt(n)))
    assert rr.margin_of_error(n, 0.95) == pytest.approx(1.959963984540054 * rr.max_standard_error(n))
    est = rr.estimate(600, 1000)
    assert est.fraction == pytest.approx((0.6 - (1 - rr.p)) / (2 * rr.p - 1))
    assert est.variance == pytest.approx(0.24 / (1000 * (2 * rr.p - 1) ** 2))
    with pytest.raises(ValueError):
        rr.estimate(5, 4)
    with pytest.raises(ValueError):
        rr.perturb(np.array([0, 2]))
    with pytest.raises(ValueError):
        BinaryRandomizedResponse(epsilon=0.0)
