"""Objective perturbation (Chaudhuri et al. 2011) and Rajkumar & Agarwal's Gaussian variant."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from anonml.learn.multiparty.common import MultipartyError, PrivacyUnit
from anonml.learn.multiparty.erm import fit_linear_erm, margin_loss
from anonml.learn.multiparty.objective import ObjectivePerturbationLR, compute_slack, objective_perturbation
from anonml.learn.multiparty.rajkumar import (
    GaussianObjectivePerturbation,
    PrivateSGD,
    gaussian_sigma,
    printed_condition_sigma,
)
from tests.learn.multiparty.helpers import labelled_ball


def _data(seed: int, n: int = 60, d: int = 4) -> tuple[np.ndarray, np.ndarray]:
    X, positive = labelled_ball(seed, n, d, shrink=1.5, on_sphere=True)
    return X, np.where(positive, 1.0, -1.0)


def _recovered_noise(X: np.ndarray, y: np.ndarray, w: np.ndarray, reg: float) -> np.ndarray:
    # First-order condition of (1/n)Σl + (reg/2)‖w‖² + (1/n)bᵀw: b = -n(∇L(w) + reg·w).
    loss = margin_loss("logistic")
    n = X.shape[0]
    grad = X.T @ (y * loss.derivative(y * (X @ w))) / n
    return -n * (grad + reg * w)


def test_compute_slack_positive_branch() -> None:
    # ε' = ε - log(1 + 2c/(nλ) + c²/(n²λ²)) > 0 ⇒ Δ = 0.
    eps, lam, n, c = 1.0, 0.01, 1000, 0.25
    slack = compute_slack(eps, lam, n, c)
    r = c / (n * lam)
    assert slack.epsilon == pytest.approx(eps - math.log(1 + 2 * r + r * r))
    assert slack.epsilon > 0 and slack.extra_reg == 0.0


def test_compute_slack_nonpositive_branch_makes_jacobian_term_eps_over_2() -> None:
    # ε' ≤ 0 ⇒ Δ = c/(n(e^{ε/4} - 1)) - λ, ε' = ε/2, and then the Jacobian term
    # log(1 + c/(n(λ+Δ)))² equals ε/2 exactly, so ε' + Jacobian = ε.
    eps, lam, n, c = 0.1, 1e-3, 100, 0.25
    assert eps - math.log1p(2 * c / (n * lam) + (c / (n * lam)) ** 2) <= 0
    slack = compute_slack(eps, lam, n, c)
    assert slack.epsilon == pytest.approx(eps / 2)
    assert slack.extra_reg == pytest.approx(c / (n * math.expm1(eps / 4)) - lam)
    assert 2 * math.log1p(c / (n * (lam + slack.extra_reg))) == pytest.approx(eps / 2)


def test_compute_slack_rejects_nonsense() -> None:
    with pytest.raises(MultipartyError, match="epsilon"):
        compute_slack(0.0, 0.1, 10, 0.25)


def test_objective_perturbation_noise_has_the_calibrated_law() -> None:
    # Recover b from each release; ‖b‖ ~ Gamma(d, 2/ε'). Mean over 150 releases is within
    # 4 standard errors (sd of ‖b‖ is √d·2/ε').
    X, y = _data(7)
    n, d = X.shape
    eps, lam = 2.0, 0.05
    slack = compute_slack(eps, lam, n, 0.25)
    rng = np.random.default_rng(8)
    norms = []
    for _ in range(150):
        w = objective_perturbation(X, y, eps, lam, margin_loss("logistic"), rng)
        norms.append(np.linalg.norm(_recovered_noise(X, y, w, lam + slack.extra_reg)))
    mean, expected, se = (
        np.mean(norms),
        2 * d / slack.epsilon,
        math.sqrt(d) * 2 / slack.epsilon / math.sqrt(150),
    )
    assert abs(mean - expected) < 4 * se


def test_sigma_star_solves_the_supplement_condition() -> None:
    # σ√q = (σ²ε̃ - 2)/2 with q = χ²_d(1-δ), so P(‖η‖ ≤ (σ²ε̃ - 2)/2) = 1 - δ exactly.
    for eps_t, delta, d in [(0.05, 0.05, 31), (0.5, 0.01, 3), (2.0, 0.1, 100)]:
        sigma = gaussian_sigma(eps_t, delta, d)
        q = stats.chi2.ppf(1 - delta, d)
        bound = (sigma**2 * eps_t - 2) / 2
        assert sigma * math.sqrt(q) == pytest.approx(bound, rel=1e-12)
        assert stats.chi2.cdf((bound / sigma) ** 2, d) == pytest.approx(1 - delta, rel=1e-9)
        # any smaller σ violates it
        smaller = 0.99 * sigma
        assert smaller * math.sqrt(q) > (smaller**2 * eps_t - 2) / 2


def test_sigma_star_condition_holds_with_probability_one_minus_delta_by_simulation() -> None:
    # Fraction of η ~ N(0, σ*² I) inside the bound: binomial, sd √(δ(1-δ)/n).
    eps_t, delta, d, n = 0.3, 0.05, 10, 20000
    sigma = gaussian_sigma(eps_t, delta, d)
    eta = np.random.default_rng(9).normal(0.0, sigma, size=(n, d))
    inside = np.mean(np.linalg.norm(eta, axis=1) <= (sigma**2 * eps_t - 2) / 2)
    assert abs(inside - (1 - delta)) < 4 * math.sqrt(delta * (1 - delta) / n)


def test_gop_noise_is_gaussian_with_sigma_star() -> None:
    # E‖η‖² = dσ*²; ‖η‖²/σ*² ~ χ²_d has sd √(2d): mean over 150 fits within 4 SE.
    X, y = _data(10)
    n, d = X.shape
    fits = [
        GaussianObjectivePerturbation(epsilon=3.0, delta=0.05, lam=0.05, random_state=s).fit(X, y)
        for s in range(150)
    ]
    sigma, reg = fits[0].sigma_, 0.05 + fits[0].slack_.extra_reg
    ratios = [np.sum(_recovered_noise(X, y, f.coef_[0], reg) ** 2) / sigma**2 for f in fits]
    assert abs(np.mean(ratios) - d) < 4 * math.sqrt(2 * d) / math.sqrt(150)
    assert fits[0].privacy_.unit is PrivacyUnit.RECORD
    assert (fits[0].privacy_.epsilon, fits[0].privacy_.delta) == (3.0, 0.05)


def _full_gradient(X: np.ndarray, y: np.ndarray, w: np.ndarray) -> np.ndarray:
    loss = margin_loss("logistic")
    return X.T @ (y * loss.derivative(y * (X @ w))) / X.shape[0]


def test_psgd_steps_along_the_full_gradient_and_releases_the_last_iterate() -> None:
    # One party, ε = 1e9 (E‖ρ_t‖ = 2d/ε ≈ 1e-8): three steps of Algorithm 1 are three steps of
    # gradient descent on F with α_t = 1/(1 + (λ+Δ)t). A per-record gradient or an average of
    # iterates gives a different w_3.
    X, y = _data(11, n=80)
    model = PrivateSGD(epsilon=1e9, lam=0.05, n_iter=3, random_state=0).fit(X, y, np.zeros(80))
    n = X.shape[0]
    reg = 0.05 + model.slack_.extra_reg
    w = np.zeros(X.shape[1])
    for t in range(3):
        w = w - (_full_gradient(X, y, w) + reg * w + model.eta_ / n) / (1 + reg * t)
    assert np.allclose(model.coef_[0], w, atol=1e-6)
    assert model.n_iter_ == 3 and model.rho_norms_.shape == (3,)


def test_psgd_last_iterate_reaches_the_minimiser_of_f() -> None:
    # One party, negligible ρ: T = 3000 full-gradient steps land on argmin F for the same η
    # (F is (λ+Δ)-strongly convex, so the distance shrinks like 1/(1 + λT)).
    X, y = _data(12, n=120)
    model = PrivateSGD(epsilon=1e7, lam=0.5, n_iter=3000, random_state=1).fit(X, y, np.zeros(120))
    reg = 0.5 + model.slack_.extra_reg
    exact = fit_linear_erm(X, y, reg, linear=model.eta_ / X.shape[0])
    assert np.linalg.norm(model.coef_[0] - exact) < 1e-3 * np.linalg.norm(exact)


def test_psgd_across_parties_approaches_the_pooled_minimiser() -> None:
    # Three parties picked with probability n_j/n: the expected step is ∇F, so the last
    # iterate of a long run sits near argmin F (the party sampling keeps some jitter).
    X, y = _data(13, n=300)
    parties = np.arange(300) % 3
    model = PrivateSGD(epsilon=1e7, lam=0.05, n_iter=20000, random_state=0).fit(X, y, parties)
    exact = fit_linear_erm(X, y, 0.05 + model.slack_.extra_reg, linear=model.eta_ / 300)
    assert np.linalg.norm(model.coef_[0] - exact) < 0.05 * np.linalg.norm(exact)


def test_psgd_step_noise_norm_is_gamma_d_2l_over_eps_n_j() -> None:
    # Party j releases its mean gradient (sensitivity 2L/n_j): density ∝ exp(-ε·n_j‖ρ‖/(2L)) in d
    # dimensions, so n_j‖ρ‖ ~ Gamma(d, θ = 2L/ε), mean dθ, variance dθ², and the sample variance has
    # variance ≈ (2d² + 6d)θ⁴/T. Both within 4 standard errors over T = 4000 seeded draws; unequal
    # parties (20 and 40 rows) tell a 1/n_j scale from none or from a common 1/n. A per-coordinate
    # Gaussian or Laplace of the same mean norm has a far smaller or larger variance.
    X, y = _data(14, n=60, d=5)
    eps, lipschitz, steps = 2.0, 1.5, 4000
    parties = (np.arange(60) >= 20).astype(int)
    model = PrivateSGD(epsilon=eps, lam=0.1, n_iter=steps, lipschitz=lipschitz, random_state=3).fit(
        X, y, parties
    )
    d, theta = X.shape[1], 2 * lipschitz / eps
    sizes = np.bincount(parties)
    assert set(np.unique(model.parties_picked_)) == {0, 1}
    norms = model.rho_norms_ * sizes[model.parties_picked_]
    assert norms.shape == (steps,)
    assert abs(norms.mean() - d * theta) < 4 * math.sqrt(d * theta**2 / steps)
    var_se = math.sqrt((2 * d**2 + 6 * d) * theta**4 / steps)
    assert abs(norms.var(ddof=1) - d * theta**2) < 4 * var_se


def test_printed_condition_root_is_tiny_and_labelled_non_private() -> None:
    # The printed condition read literally: ε̃σ² - 2√qσ + 2 = 0, smaller root ≈ 1/√q
    # (0.151 at d = 30); the derived σ* exceeds 2√q/ε̃ (≥ 132 at ε = 0.1).
    q = stats.chi2.ppf(0.95, 30)
    printed, derived = printed_condition_sigma(0.1, 0.05, 30), gaussian_sigma(0.1, 0.05, 30)
    assert 0.1 * printed**2 - 2 * math.sqrt(q) * printed + 2 == pytest.approx(0.0, abs=1e-12)
    assert printed == pytest.approx(0.1513, abs=1e-4) and derived > 2 * math.sqrt(q) / 0.1 > 132
    X, y = _data(15)
    for model in (
        GaussianObjectivePerturbation(epsilon=0.1, condition="printed", random_state=0).fit(X, y),
        PrivateSGD(epsilon=0.1, condition="printed", n_iter=50, random_state=0).fit(X, y, np.arange(60) % 2),
    ):
        assert model.sigma_ == pytest.approx(printed_condition_sigma(model.slack_.epsilon, 0.05, X.shape[1]))
        assert not model.privacy_.is_private and model.privacy_.unit is PrivacyUnit.NONE
        assert "NON-PRIVATE" in model.privacy_.mechanism
        assert model.privacy_.describe().startswith("non-private")
    with pytest.raises(MultipartyError, match="no real root"):
        printed_condition_sigma(100.0, 0.05, 30)


def test_central_reference_reports_record_unit_pure_dp() -> None:
    X, y = _data(12)
    model = ObjectivePerturbationLR(epsilon=0.7, lam=0.1, random_state=0).fit(X, y)
    assert model.privacy_.unit is PrivacyUnit.RECORD
    assert (model.privacy_.epsilon, model.privacy_.delta) == (0.7, 0.0)
    with pytest.raises(MultipartyError, match="row 0 has norm"):
        ObjectivePerturbationLR().fit(X * 10, y)


def test_psgd_at_eps_1_lands_near_the_minimiser_of_its_objective() -> None:
    # ε = 1, five parties of 90 rows, d = 10: the step noise ρ_t (rate ε·n_j/(2L), E‖ρ_t‖ = 2Ld/(ε·n_j)
    # ≈ 0.22) averages out over T = 4000 steps, so the last iterate sits near argmin F for the same η.
    # With ρ_t at rate ε/(2L) (E‖ρ_t‖ = 20, 90 times larger) it stays far off.
    X, y = _data(16, n=450, d=10)
    parties = np.arange(450) % 5
    model = PrivateSGD(epsilon=1.0, lam=0.05, n_iter=4000, random_state=2).fit(X, y, parties)
    exact = fit_linear_erm(X, y, 0.05 + model.slack_.extra_reg, linear=model.eta_ / 450)
    assert np.linalg.norm(model.coef_[0] - exact) < 0.1 * np.linalg.norm(exact)
