"""Objective perturbation (Chaudhuri, Monteleoni & Sarwate 2011, Algorithm 2).

Used by the pooled central-DP reference (:class:`ObjectivePerturbationLR`), by
each party of Xie et al.'s feature method, and — its slack computation — by
Rajkumar & Agarwal's Gaussian variant.

The released classifier is

    w_priv = argmin_w (1/n) Σ l(y_i wᵀx_i) + (λ/2)‖w‖² + (1/n) bᵀw + (Δ/2)‖w‖²,

with ‖x_i‖ ≤ 1, |l'| ≤ 1, |l''| ≤ c, b drawn with density ∝ exp(-(ε'/2)‖b‖)
and (ε', Δ) from :func:`compute_slack`. It is ε-DP per record (Chaudhuri et al.
2011, Theorem 9): the noise term contributes ε' (two neighbouring data sets
need ‖b - b'‖ ≤ 2) and the Jacobian of the map b ↦ w_priv contributes at most
log(1 + c/(n(λ+Δ)))², which the slack keeps below ε - ε'.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np
from sklearn.utils.validation import validate_data

from anonml.learn.multiparty.base import MarginLossClassifier
from anonml.learn.multiparty.common import (
    MultipartyError,
    PrivacyGuarantee,
    PrivacyUnit,
    check_unit_ball,
    sample_norm_noise,
    to_pm1,
)
from anonml.learn.multiparty.erm import MarginLoss, fit_linear_erm, margin_loss
from anonml.learn.params import checked_fit
from anonml.randomness import generator_from, resolve_rng

__all__ = ["Slack", "compute_slack", "objective_perturbation", "ObjectivePerturbationLR"]


class Slack(NamedTuple):
    """Outcome of :func:`compute_slack`: the ε left for the noise term and the extra ridge Δ."""

    epsilon: float
    extra_reg: float


def compute_slack(epsilon: float, lam: float, n: int, curvature: float) -> Slack:
    """Split ε between the noise term and the Jacobian term (``computeSlack``).

    ε' = ε - log(1 + 2c/(nλ) + c²/(n²λ²)). If ε' > 0 the noise gets ε' and
    Δ = 0. Otherwise (the regulariser is too weak for this n) the objective
    gets an extra ridge Δ = c/(n(e^{ε/4} - 1)) - λ, which makes the Jacobian
    term exactly ε/2, and the noise gets ε' = ε/2.

    Parameters
    ----------
    epsilon : float
        Total ε > 0.
    lam : float
        λ > 0 of the (λ/2)‖w‖² regulariser.
    n : int
        Number of records in the objective.
    curvature : float
        c ≥ |l''| of the loss (1/4 logistic, 1/(2h) Huber).

    References
    ----------
    Chaudhuri, Monteleoni & Sarwate, JMLR 12 (2011), Algorithm 2, steps 1-2;
    Rajkumar & Agarwal, AISTATS 2012, ``computeSlack``.
    """
    if not (epsilon > 0 and math.isfinite(epsilon)):
        raise MultipartyError(f"epsilon must be positive and finite, got {epsilon}")
    if not (lam > 0 and n >= 1 and curvature > 0):
        raise MultipartyError(f"need lam > 0, n >= 1, curvature > 0 (got {lam}, {n}, {curvature})")
    ratio = curvature / (n * lam)
    eps_prime = epsilon - math.log1p(2.0 * ratio + ratio * ratio)
    if eps_prime > 0:
        return Slack(eps_prime, 0.0)
    extra = curvature / (n * math.expm1(epsilon / 4.0)) - lam
    return Slack(epsilon / 2.0, extra)


def objective_perturbation(
    X: np.ndarray,
    y: np.ndarray,
    epsilon: float,
    lam: float,
    loss: MarginLoss,
    rng: np.random.Generator | None = None,
) -> np.ndarray:
    """ε-DP linear classifier by objective perturbation (Chaudhuri et al. 2011, Alg. 2).

    Parameters
    ----------
    X : ndarray of shape (n, d)
        Rows with ‖x‖ ≤ 1 (checked).
    y : ndarray of shape (n,)
        Labels in {-1, +1}.
    epsilon, lam : float
    loss : MarginLoss
    rng : numpy.random.Generator, optional

    Returns
    -------
    ndarray of shape (d,)
    """
    X = check_unit_ball(X)
    n, d = X.shape
    slack = compute_slack(epsilon, lam, n, loss.curvature)
    b = sample_norm_noise(d, slack.epsilon / 2.0, rng=resolve_rng(rng))
    return fit_linear_erm(X, y, lam + slack.extra_reg, loss=loss, linear=b / n)


class ObjectivePerturbationLR(MarginLossClassifier):
    """Pooled central-DP reference: objective-perturbed regularised logistic regression.

    A trusted curator pools every party's records and runs
    :func:`objective_perturbation` once. ε-DP per record.

    Parameters
    ----------
    epsilon : float, default=1.0
    lam : float, default=1e-3
        λ of the (λ/2)‖w‖² regulariser.
    loss : {"logistic", "huber"}, default="logistic"
    huber_h : float, default=0.5
    random_state : int, Generator or None, default=None
        ``None`` seeds from the OS CSPRNG.

    Attributes
    ----------
    coef_ : ndarray of shape (1, d)
    classes_ : ndarray of shape (2,)
    privacy_ : PrivacyGuarantee
    n_features_in_ : int

    References
    ----------
    Chaudhuri, Monteleoni & Sarwate, "Differentially private empirical risk
    minimization", JMLR 12 (2011) 1069-1109.
    """

    @checked_fit
    def fit(self, X: np.ndarray, y: np.ndarray) -> ObjectivePerturbationLR:
        X, y = validate_data(self, X, y, dtype=np.float64)
        y_pm, classes = to_pm1(y)
        rng = generator_from(self.random_state)
        w = objective_perturbation(X, y_pm, self.epsilon, self.lam, margin_loss(self.loss, self.huber_h), rng)
        self._set_binary(
            w,
            classes,
            PrivacyGuarantee(
                PrivacyUnit.RECORD,
                float(self.epsilon),
                0.0,
                "objective perturbation (Chaudhuri et al. 2011, Alg. 2), pooled by a trusted curator",
            ),
        )
        return self
