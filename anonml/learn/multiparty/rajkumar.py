"""Private SGD and Gaussian objective perturbation (Rajkumar & Agarwal 2012).

Both minimise the Gaussian-perturbed multiparty objective over all n = Σ n_k
records,

    F(w) = (1/n) Σ_i l(y_i wᵀx_i) + ((λ+Δ)/2)‖w‖² + (1/n) ηᵀw,   η ~ N(0, σ*² I_d),

with logistic loss (c = 1/4), (ε̃, Δ) from ``computeSlack``
(:func:`~anonml.learn.multiparty.objective.compute_slack`) and σ* from
:func:`gaussian_sigma`. The exact minimiser is (ε, δ)-DP per record: for
neighbouring data the noise vectors mapping to the same w differ by at most 2,
and exp((‖η'‖² - ‖η‖²)/(2σ²)) ≤ exp(ε̃) whenever ‖η‖ ≤ (σ²ε̃ - 2)/2; the
Jacobian takes the rest of ε as in Chaudhuri et al. (2011). Since
‖η‖²/σ² ~ χ²_d, the condition holds with probability 1 - δ when
σ√q = (σ²ε̃ - 2)/2, q the χ²_d quantile at 1 - δ, i.e.
σ* = (√q + √(q + 2ε̃))/ε̃, re-derived here from the Gaussian tail bound above.
Since ε̃ ≤ ε, σ* ≥ 2√q/ε: at ε = 0.1, d = 30, δ = 0.05 (q ≈ 43.8) σ* ≥ 132,
so the paper's figure 2 errors at small ε are out of reach under its
Theorem 4.1 at any λ, N or feature normalisation. The condition as printed in
the paper has a far smaller root; it is not the one the privacy proof needs.
Neither σ* nor the slack depends on the number of parties or their sizes.

* GOP (:class:`GaussianObjectivePerturbation`) computes the minimiser in one
  shot (a trusted curator, or the parties' sum of η_k).
* PSGD (:class:`PrivateSGD`) runs SGD across the parties: party k draws once
  η_k ~ N(0, σ*²/K I) (so Σ η_k ~ N(0, σ*² I)) and, whenever one of its records
  is sampled, adds η_k/n_k and a fresh zero-mean ρ_t to the record's gradient.
  Records are sampled uniformly over all n, so party k steps with probability
  n_k/n and E[η_k/n_k] summed that way is η/n: the expected step is ∇F.
"""

from __future__ import annotations

import math
from numbers import Integral, Real

import numpy as np
from scipy.stats import chi2
from sklearn.utils.validation import validate_data

from anonml.learn.multiparty.base import PRIVATE_ERM_CONSTRAINTS, LinearMultipartyClassifier
from anonml.learn.multiparty.common import (
    MultipartyError,
    PrivacyGuarantee,
    PrivacyUnit,
    check_parties,
    check_unit_ball,
    to_pm1,
)
from anonml.learn.multiparty.erm import LOGISTIC, fit_linear_erm
from anonml.learn.multiparty.objective import Slack, compute_slack
from anonml.learn.params import Interval, checked_fit
from anonml.randomness import generator_from

__all__ = ["gaussian_sigma", "GaussianObjectivePerturbation", "PrivateSGD"]


def gaussian_sigma(epsilon_tilde: float, delta: float, dim: int) -> float:
    """σ* = (√q + √(q + 2ε̃))/ε̃ with q = χ²_d quantile at 1 - δ.

    The positive root of σ√q = (σ²ε̃ - 2)/2: with η ~ N(0, σ*² I_d),
    P(‖η‖ ≤ (σ*²ε̃ - 2)/2) = 1 - δ (re-derived from Rajkumar & Agarwal 2012's proof).
    """
    if not (epsilon_tilde > 0 and math.isfinite(epsilon_tilde)):
        raise MultipartyError(f"epsilon_tilde must be positive and finite, got {epsilon_tilde}")
    if not 0.0 < delta < 1.0:
        raise MultipartyError(f"delta must be in (0, 1), got {delta}")
    if dim < 1:
        raise MultipartyError(f"dim must be >= 1, got {dim}")
    q = float(chi2.ppf(1.0 - delta, dim))
    return (math.sqrt(q) + math.sqrt(q + 2.0 * epsilon_tilde)) / epsilon_tilde


class _GaussianBase(LinearMultipartyClassifier):
    param_checks: dict = {
        **PRIVATE_ERM_CONSTRAINTS,
        "delta": [Interval(Real, 0, 1, closed="neither")],
    }

    def _prepare(
        self, X: np.ndarray, y: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, Slack, float]:
        X, y = validate_data(self, X, y, dtype=np.float64)
        X = check_unit_ball(X)
        y_pm, classes = to_pm1(y)
        n, d = X.shape
        slack = compute_slack(self.epsilon, self.lam, n, LOGISTIC.curvature)
        sigma = gaussian_sigma(slack.epsilon, self.delta, d)
        self.slack_ = slack
        self.sigma_ = sigma
        return X, y_pm, classes, slack, sigma

    def _privacy(self, how: str) -> PrivacyGuarantee:
        return PrivacyGuarantee(
            PrivacyUnit.RECORD,
            float(self.epsilon),
            float(self.delta),
            f"Gaussian objective perturbation, sigma*={self.sigma_:.4g} ({how}; Rajkumar & Agarwal 2012)",
        )


class GaussianObjectivePerturbation(_GaussianBase):
    """GOP: the exact minimiser of the Gaussian-perturbed pooled objective.

    Parameters
    ----------
    epsilon : float, default=1.0
    delta : float, default=0.05
    lam : float, default=1e-3
    random_state : int, Generator or None, default=None

    Attributes
    ----------
    coef_ : ndarray of shape (1, d)
    sigma_ : float
        σ*.
    slack_ : Slack
        (ε̃, Δ) from ``computeSlack``.
    classes_, privacy_

    References
    ----------
    Rajkumar & Agarwal, "A differentially private stochastic gradient descent
    algorithm for multiparty classification", AISTATS 2012, and its supplement.
    """

    def __init__(
        self,
        epsilon: float = 1.0,
        delta: float = 0.05,
        lam: float = 1e-3,
        random_state: int | np.random.Generator | None = None,
    ) -> None:
        self.epsilon = epsilon
        self.delta = delta
        self.lam = lam
        self.random_state = random_state

    @checked_fit
    def fit(
        self, X: np.ndarray, y: np.ndarray, parties: np.ndarray | None = None
    ) -> GaussianObjectivePerturbation:
        """Minimise F(w) with one draw η ~ N(0, σ*² I) (``parties`` is accepted and unused:
        the sum of the parties' η_k has the same law)."""
        X, y_pm, classes, slack, sigma = self._prepare(X, y)
        n, d = X.shape
        eta = generator_from(self.random_state).normal(0.0, sigma, size=d)
        w = fit_linear_erm(X, y_pm, self.lam + slack.extra_reg, linear=eta / n)
        self._set_binary(w, classes, self._privacy("single-shot minimiser"))
        return self


class PrivateSGD(_GaussianBase):
    """PSGD: SGD on F(w) with each party's once-drawn η_k and fresh ρ_t.

    Parameters
    ----------
    epsilon : float, default=1.0
    delta : float, default=0.05
    lam : float, default=1e-3
    epochs : int, default=50
        T = epochs · n single-record steps.
    rho_scale : float, default=1.0
        ρ_t ~ N(0, (rho_scale · σ*/(√K n_k))² I): fresh noise of the same
        per-coordinate scale as the party's η_k/n_k term. ρ_t has mean zero, so
        it leaves the optimum of F unchanged; it masks the difference of two
        successive steps of one party (which would otherwise cancel η_k and
        expose a gradient difference to whoever sees the iterates). The scale
        is our choice: the paper leaves it a parameter.
    random_state : int, Generator or None, default=None

    Attributes
    ----------
    coef_ : ndarray of shape (1, d)
        The average of the iterates of the second half of the run
        (suffix averaging, Rakhlin, Shamir & Sridharan 2012).
    sigma_, slack_, classes_, privacy_

    Notes
    -----
    Step size α_t = 1/(1 + (λ+Δ)t), the 1/(λt) schedule for a strongly convex
    objective started at a step of 1 (the logistic loss is 1/4-smooth on the
    unit ball). Iterates are projected on the ball of radius
    (1 + σ*√q/n)/(λ+Δ), public and containing argmin F whenever ‖η‖ ≤ σ*√q
    (probability 1 - δ). The (ε, δ) statement is that of the exact minimiser
    of F, which PSGD approaches.

    References
    ----------
    Rajkumar & Agarwal, AISTATS 2012, Algorithm 1 (PSGD).
    """

    param_checks: dict = {
        **_GaussianBase.param_checks,
        "epochs": [Interval(Integral, 1, None, closed="left")],
        "rho_scale": [Interval(Real, 0, None, closed="left")],
    }

    def __init__(
        self,
        epsilon: float = 1.0,
        delta: float = 0.05,
        lam: float = 1e-3,
        epochs: int = 50,
        rho_scale: float = 1.0,
        random_state: int | np.random.Generator | None = None,
    ) -> None:
        self.epsilon = epsilon
        self.delta = delta
        self.lam = lam
        self.epochs = epochs
        self.rho_scale = rho_scale
        self.random_state = random_state

    @checked_fit
    def fit(self, X: np.ndarray, y: np.ndarray, parties: np.ndarray | None = None) -> PrivateSGD:
        """Run T = epochs · n noisy SGD steps across the parties."""
        X, y_pm, classes, slack, sigma = self._prepare(X, y)
        parties, ids = check_parties(parties, X.shape[0])
        n, d = X.shape
        k = ids.size
        rng = generator_from(self.random_state)
        party_of_row = np.searchsorted(ids, parties)
        sizes = np.bincount(party_of_row, minlength=k).astype(np.float64)
        # Each party's fixed term η_k/n_k, η_k ~ N(0, σ*²/K I).
        fixed = rng.normal(0.0, sigma / math.sqrt(k), size=(k, d)) / sizes[:, None]
        rho_sd = self.rho_scale * sigma / (math.sqrt(k) * sizes)
        lam = self.lam + slack.extra_reg
        q = float(chi2.ppf(1.0 - self.delta, d))
        radius = (1.0 + sigma * math.sqrt(q) / n) / lam
        steps = int(self.epochs) * n
        rows = rng.integers(0, n, size=steps)
        rho = rng.standard_normal(size=(steps, d))
        w = np.zeros(d)
        total = np.zeros(d)
        start = steps // 2
        xs, ys, owner = X[rows], y_pm[rows], party_of_row[rows]
        for t in range(steps):
            x = xs[t]
            margin = ys[t] * float(x @ w)
            # d/dw log(1 + e^{-m}) = -y x / (1 + e^{m})
            grad = (-ys[t] / (1.0 + math.exp(margin)) if margin < 700 else 0.0) * x
            p = owner[t]
            grad = grad + lam * w + fixed[p] + rho_sd[p] * rho[t]
            w = w - grad / (1.0 + lam * (t + 1))
            norm = math.sqrt(float(w @ w))
            if norm > radius:
                w *= radius / norm
            if t >= start:
                total += w
        self.n_steps_ = steps
        self._set_binary(total / (steps - start), classes, self._privacy("private SGD across parties"))
        return self
