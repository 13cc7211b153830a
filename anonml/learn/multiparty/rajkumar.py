"""Private SGD and Gaussian objective perturbation (Rajkumar & Agarwal 2012).

Both work on the Gaussian-perturbed multiparty objective over all n = Σ n_k
records,

    F(w) = (1/n) Σ_i l(y_i wᵀx_i) + ((λ+Δ)/2)‖w‖² + (1/n) ηᵀw,   η ~ N(0, σ*² I_d),

with logistic loss (c = 1/4), (ε̃, Δ) from ``computeSlack``
(:func:`~anonml.learn.multiparty.objective.compute_slack`) and σ* from
:func:`gaussian_sigma`.

Derivation of σ* (re-derived from the privacy proof; it confirms the
mechanism). For neighbouring data sets D, D' (one record changed) the noise
vectors η, η' that make the same w the minimiser satisfy
η' - η = y x - y' x' (the first-order conditions differ by one record's
gradient), so ‖η' - η‖ ≤ 2 (|l'| ≤ 1, ‖x‖ ≤ 1). The Gaussian density ratio is

    p(η)/p(η') = exp((‖η'‖² - ‖η‖²)/(2σ²)) ≤ exp((4‖η‖ + 4)/(2σ²)) = exp((2‖η‖ + 2)/σ²),

which is ≤ exp(ε̃) exactly when ‖η‖ ≤ (σ²ε̃ - 2)/2; the Jacobian of η ↦ w
takes the rest of ε as in Chaudhuri et al. (2011, Theorem 9). ‖η‖²/σ² is
χ²_d, so with q the χ²_d quantile at 1 - δ the bound holds with probability
1 - δ when σ√q = (σ²ε̃ - 2)/2, i.e. ε̃σ² - 2√q σ - 2 = 0, whose positive root is

    σ* = (√q + √(q + 2ε̃))/ε̃.

Since ε̃ ≤ ε, σ* > 2√q/ε: at ε = 0.1, d = 30, δ = 0.05 (q = 43.77) σ* ≥ 132,
whatever λ, n or the feature normalisation (none of them enters σ*). On
breast cancer (n ≈ 455 training rows) the noise term's gradient ‖η‖/n ≈
σ*√d/n is then several times the data term's (at most 1/2), so the paper's
figure 2 errors at ε = 0.1 (0.11 GOP, 0.12–0.14 PSGD) are out of reach under
its Theorem 4.1. The condition as printed in the
paper's main text has a root near 1/√q (≈ 0.15 at d = 30, 31);
:func:`printed_condition_sigma` computes it and ``condition="printed"`` fits
with it, as a reproduction labelled NON-PRIVATE (no (ε, δ) holds).

* GOP (:class:`GaussianObjectivePerturbation`) computes the minimiser in one
  shot (a trusted curator, or the parties' sum of η_k).
* PSGD (:class:`PrivateSGD`) is the paper's Algorithm 1: party k draws once
  η_k ~ N(0, σ*²/K I) (so Σ η_k ~ N(0, σ*² I)); at step t a party j is picked
  with probability n_j/n and takes a step along the *full* gradient of its part
  of F, (1/n_j) Σ_{i∈j} ∇l_i(w) + (λ+Δ)w + η_j/n_j, plus a fresh ρ_t with
  density ∝ exp(-ε·n_j‖ρ‖/(2L)); the last iterate is released. The expected step
  is ∇F (Σ_j (n_j/n)(η_j/n_j) = η/n, E ρ_t = 0). ρ_t is calibrated to what the
  step releases: party j's *mean* gradient, which one of its records moves by at
  most 2L/n_j (‖∇l‖ ≤ L), so ρ_t's rate is ε·n_j/(2L). A rate of ε/(2L) — the
  sensitivity of a sum of gradients — made ρ_t n_j times too large (E‖ρ_t‖ = 2Ld/ε
  = 62 at ε = 1, d = 31, against a mean gradient of norm ≤ 1): breast cancer at
  ε = 1, K = 5, T = 2,000 erred 0.333 ± 0.033 instead of 0.126 ± 0.011, GOP's
  0.124 ± 0.007 (4 × 5 folds).
"""

from __future__ import annotations

import math
from numbers import Integral, Real

import numpy as np
from scipy.stats import chi2

from anonml.learn.multiparty.base import PRIVATE_ERM_CONSTRAINTS, LinearMultipartyClassifier
from anonml.learn.multiparty.common import (
    MultipartyError,
    PrivacyGuarantee,
    PrivacyUnit,
    check_parties,
    sample_norm_noise,
)
from anonml.learn.multiparty.erm import LOGISTIC, fit_linear_erm
from anonml.learn.multiparty.objective import Slack, compute_slack
from anonml.learn.params import Interval, Options, checked_fit, store_params
from anonml.randomness import generator_from

__all__ = [
    "CONDITIONS",
    "gaussian_sigma",
    "printed_condition_sigma",
    "GaussianObjectivePerturbation",
    "PrivateSGD",
]

#: How σ is chosen: "derived" (σ*, the (ε, δ) guarantee) or "printed" (the root of the
#: condition as printed in the paper's main text: a NON-PRIVATE reproduction).
CONDITIONS = ("derived", "printed")

#: Label carried by every result of the printed-condition reproduction.
NON_PRIVATE_LABEL = "NON-PRIVATE reproduction"


def _check_sigma_args(epsilon_tilde: float, delta: float, dim: int) -> float:
    """Validate (ε̃, δ, d) and return q, the χ²_d quantile at 1 - δ."""
    if not (epsilon_tilde > 0 and math.isfinite(epsilon_tilde)):
        raise MultipartyError(f"epsilon_tilde must be positive and finite, got {epsilon_tilde}")
    if not 0.0 < delta < 1.0:
        raise MultipartyError(f"delta must be in (0, 1), got {delta}")
    if dim < 1:
        raise MultipartyError(f"dim must be >= 1, got {dim}")
    return float(chi2.ppf(1.0 - delta, dim))


def gaussian_sigma(epsilon_tilde: float, delta: float, dim: int) -> float:
    """σ* = (√q + √(q + 2ε̃))/ε̃ with q = χ²_d quantile at 1 - δ.

    The positive root of σ√q = (σ²ε̃ - 2)/2: with η ~ N(0, σ*² I_d),
    P(‖η‖ ≤ (σ*²ε̃ - 2)/2) = 1 - δ, the condition of the privacy proof
    (derivation in the module docstring). Always > 2√q/ε̃.
    """
    q = _check_sigma_args(epsilon_tilde, delta, dim)
    return (math.sqrt(q) + math.sqrt(q + 2.0 * epsilon_tilde)) / epsilon_tilde


def printed_condition_sigma(epsilon_tilde: float, delta: float, dim: int) -> float:
    """The root of the condition as printed in the main text: NOT a privacy calibration.

    We read the printed condition as the derived one with the sign of its
    constant flipped, σ√q = (σ²ε̃ + 2)/2, i.e. ε̃σ² - 2√q σ + 2 = 0, and take its
    literal (smaller) root

        σ = (√q - √(q - 2ε̃))/ε̃ = 2/(√q + √(q - 2ε̃)) ≈ 1/√q,

    0.151 at d = 30 and 0.149 at d = 31 (δ = 0.05), nearly independent of ε̃.
    With this σ the density ratio of the proof is not bounded by e^ε̃ on any
    event of probability 1 - δ, so a model fitted with it has no (ε, δ)
    guarantee; it only shows that the paper's figure 2 errors are what such a
    small σ gives.
    """
    q = _check_sigma_args(epsilon_tilde, delta, dim)
    if q < 2.0 * epsilon_tilde:
        raise MultipartyError(
            f"the printed condition has no real root when 2*epsilon_tilde ({2 * epsilon_tilde:g}) > q ({q:g})"
        )
    return 2.0 / (math.sqrt(q) + math.sqrt(q - 2.0 * epsilon_tilde))


class _GaussianBase(LinearMultipartyClassifier):
    """Hyperparameters (ε, δ, λ, σ condition, seed) and data checks of the Rajkumar-Agarwal estimators."""

    param_checks: dict = {
        **PRIVATE_ERM_CONSTRAINTS,
        "delta": [Interval(Real, 0, 1, closed="neither")],
        "condition": [Options(frozenset(CONDITIONS))],
    }

    def __init__(
        self,
        epsilon: float = 1.0,
        delta: float = 0.05,
        lam: float = 1e-3,
        condition: str = "derived",
        random_state: int | np.random.Generator | None = None,
    ) -> None:
        store_params(self, locals())

    def _prepare(
        self, X: np.ndarray, y: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, Slack, float]:
        X, y_pm, classes = self._binary_training_data(X, y)
        n, d = X.shape
        slack = compute_slack(self.epsilon, self.lam, n, LOGISTIC.curvature)
        chooser = printed_condition_sigma if self.condition == "printed" else gaussian_sigma
        sigma = chooser(slack.epsilon, self.delta, d)
        self.slack_ = slack
        self.sigma_ = sigma
        return X, y_pm, classes, slack, sigma

    def _privacy(self, how: str) -> PrivacyGuarantee:
        if self.condition == "printed":
            return PrivacyGuarantee(
                PrivacyUnit.NONE,
                math.inf,
                0.0,
                f"{NON_PRIVATE_LABEL}: sigma={self.sigma_:.4g} from the condition as printed in "
                f"Rajkumar & Agarwal 2012 at nominal eps={self.epsilon:g}, delta={self.delta:g} "
                f"({how}); no (eps, delta) guarantee holds",
            )
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
    condition : {"derived", "printed"}, default="derived"
        "derived": σ = σ*, (ε, δ)-DP per record. "printed": σ from
        :func:`printed_condition_sigma`, a NON-PRIVATE reproduction
        (``privacy_.unit`` is ``none``).
    random_state : int, Generator or None, default=None

    Attributes
    ----------
    coef_ : ndarray of shape (1, d)
    sigma_ : float
        σ* (or the printed condition's root).
    slack_ : Slack
        (ε̃, Δ) from ``computeSlack``.
    classes_, privacy_

    References
    ----------
    Rajkumar & Agarwal, "A differentially private stochastic gradient descent
    algorithm for multiparty classification", AISTATS 2012, Theorem 4.1; σ*
    re-derived in this module's docstring.
    """

    @checked_fit
    def fit(
        self, X: np.ndarray, y: np.ndarray, parties: np.ndarray | None = None
    ) -> GaussianObjectivePerturbation:
        """Minimise F(w) with one draw η ~ N(0, σ² I) (``parties`` is accepted and unused:
        the sum of the parties' η_k has the same law)."""
        X, y_pm, classes, slack, sigma = self._prepare(X, y)
        n, d = X.shape
        eta = generator_from(self.random_state).normal(0.0, sigma, size=d)
        w = fit_linear_erm(X, y_pm, self.lam + slack.extra_reg, linear=eta / n)
        self._set_binary(w, classes, self._privacy("single-shot minimiser"))
        return self


class PrivateSGD(_GaussianBase):
    """PSGD (Algorithm 1): full-gradient steps of randomly picked parties, last iterate.

    Parameters
    ----------
    epsilon, delta, lam, condition, random_state
        As for :class:`GaussianObjectivePerturbation`; ``condition`` gives σ of the parties' η_k.
    n_iter : int, default=2000
        T, the number of steps (each one party's full local gradient).
    lipschitz : float, default=1.0
        L, a bound on ‖∇_w l(y wᵀx)‖; 1 for the logistic loss on the unit ball.
        The step noise ρ_t of party j's step has density ∝ exp(-ε·n_j‖ρ‖/(2L))
        (its mean gradient's sensitivity is 2L/n_j), so
        ‖ρ_t‖ ~ Gamma(d, 2L/(ε·n_j)) and E‖ρ_t‖ = 2Ld/(ε·n_j).

    Attributes
    ----------
    coef_ : ndarray of shape (1, d)
        w_T, the last iterate.
    eta_ : ndarray of shape (d,)
        η = Σ_k η_k, the objective's Gaussian term (simulation only).
    rho_norms_ : ndarray of shape (T,)
        ‖ρ_t‖ of every step's noise.
    parties_picked_ : ndarray of shape (T,)
        The index (in sorted party id order) of the party that took each step.
    n_iter_ : int
    sigma_, slack_, classes_, privacy_

    Notes
    -----
    Party j (picked with probability n_j/n) steps along
    g_t = (1/n_j) Σ_{i∈j} ∇l_i(w_t) + (λ+Δ)w_t + η_j/n_j + ρ_t, so E g_t = ∇F(w_t).
    Step size α_t = 1/(1 + (λ+Δ)t), t = 0, 1, …: the 1/(λt) schedule of a
    strongly convex objective started at a step of 1 (the logistic loss is
    1/4-smooth on the unit ball); the paper leaves the schedule open, this one
    is ours. Iterates are projected on the ball of radius (1 + σ√q/n)/(λ+Δ),
    public and containing argmin F whenever ‖η‖ ≤ σ√q (probability 1 - δ).
    The (ε, δ) statement is the paper's (Theorem 4.1, for the minimiser of F);
    the last iterate approaches that minimiser only as T grows and the ρ_t
    average out.

    References
    ----------
    Rajkumar & Agarwal, AISTATS 2012, Algorithm 1 (PSGD).
    """

    param_checks: dict = {
        **_GaussianBase.param_checks,
        "n_iter": [Interval(Integral, 1, None, closed="left")],
        "lipschitz": [Interval(Real, 0, None, closed="neither")],
    }

    def __init__(
        self,
        epsilon: float = 1.0,
        delta: float = 0.05,
        lam: float = 1e-3,
        n_iter: int = 2000,
        lipschitz: float = 1.0,
        condition: str = "derived",
        random_state: int | np.random.Generator | None = None,
    ) -> None:
        store_params(self, locals())

    @checked_fit
    def fit(self, X: np.ndarray, y: np.ndarray, parties: np.ndarray | None = None) -> PrivateSGD:
        """Run T steps of Algorithm 1 across the parties and keep the last iterate."""
        X, y_pm, classes, slack, sigma = self._prepare(X, y)
        parties, ids = check_parties(parties, X.shape[0])
        n, d = X.shape
        k = ids.size
        rng = generator_from(self.random_state)
        party_of_row = np.searchsorted(ids, parties)
        blocks = [(X[party_of_row == j], y_pm[party_of_row == j]) for j in range(k)]
        sizes = np.array([b[1].size for b in blocks], dtype=np.float64)
        # Each party's once-drawn η_j ~ N(0, σ²/K I); the step uses η_j/n_j.
        eta = rng.normal(0.0, sigma / math.sqrt(k), size=(k, d))
        fixed = eta / sizes[:, None]
        lam = self.lam + slack.extra_reg
        q = float(chi2.ppf(1.0 - self.delta, d))
        radius = (1.0 + sigma * math.sqrt(q) / n) / lam
        steps = int(self.n_iter)
        picked = rng.choice(k, size=steps, p=sizes / n)
        # Party j releases its mean gradient, whose sensitivity to one of its records is 2L/n_j:
        # ρ_t ∝ exp(-ε·n_j‖ρ‖/(2L)), a unit-rate draw scaled by 1/n_j (module docstring).
        rho = sample_norm_noise(d, self.epsilon / (2.0 * self.lipschitz), size=steps, rng=rng)
        rho /= sizes[picked][:, None]
        w = np.zeros(d)
        for t in range(steps):
            j = picked[t]
            Xj, yj = blocks[j]
            grad = Xj.T @ (yj * LOGISTIC.derivative(yj * (Xj @ w))) / sizes[j]
            w = w - (grad + lam * w + fixed[j] + rho[t]) / (1.0 + lam * t)
            norm = math.sqrt(float(w @ w))
            if norm > radius:
                w *= radius / norm
        self.eta_ = eta.sum(axis=0)
        self.rho_norms_ = np.linalg.norm(rho, axis=1)
        self.parties_picked_ = picked
        self.n_iter_ = steps
        self._set_binary(w, classes, self._privacy("Algorithm 1 across parties, last iterate"))
        return self
