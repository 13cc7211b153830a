"""Objective perturbation (Chaudhuri et al. 2011) and Rajkumar & Agarwal's Gaussian variant."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from anonml.learn.multiparty.common import MultipartyError, PrivacyUnit
from anonml.learn.multiparty.erm import margin_loss
from anonml.learn.multiparty.objective import ObjectivePerturbationLR, compute_slack, objective_perturbation
from anonml.learn.multiparty.rajkumar import GaussianObjectivePerturbation, PrivateSGD, gaussian_sigma


def _data(seed: int, n: int = 60, d: int = 4) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d))
    X = X / (1.5 * np.linalg.norm(X, axis=1, keepdims=True))
    y = np.where(X[:, 0] + 0.2 * rng.normal(size=n) > 0, 1.0, -1.0)
    return X, y


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


def test_psgd_converges_to_the_pooled_minimiser_when_noise_is_negligible() -> None:
    # With ε huge the perturbation vanishes; suffix-averaged SGD lands near argmin J.
    X, y = _data(11, n=300)
    parties = np.arange(300) % 3
    exact = GaussianObjectivePerturbation(epsilon=1e7, lam=0.05, random_state=0).fit(X, y).coef_[0]
    sgd = PrivateSGD(epsilon=1e7, lam=0.05, epochs=40, random_state=0).fit(X, y, parties).coef_[0]
    assert np.linalg.norm(sgd - exact) < 0.05 * np.linalg.norm(exact)


def test_central_reference_reports_record_unit_pure_dp() -> None:
    X, y = _data(12)
    model = ObjectivePerturbationLR(epsilon=0.7, lam=0.1, random_state=0).fit(X, y)
    assert model.privacy_.unit is PrivacyUnit.RECORD
    assert (model.privacy_.epsilon, model.privacy_.delta) == (0.7, 0.0)
    with pytest.raises(MultipartyError, match="row 0 has norm"):
        ObjectivePerturbationLR().fit(X * 10, y)
