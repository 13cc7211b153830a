"""Regularised empirical risk minimisation for linear classifiers.

Every multiparty method releases (a perturbation of) the minimiser of a
strongly convex objective; the sensitivity bounds hold only for the *exact*
minimiser, so the solver runs L-BFGS (scipy) to a gradient norm of about 1e-10
and warns (scikit-learn's ``ConvergenceWarning``) when it stops short. An
approximate minimiser with gradient norm g is within g/λ of the exact one
(strong convexity), far below any noise we add.

Objectives (x the unit-ball feature rows, the intercept inside x):

* hard labels y ∈ {-1, +1}, weights s:
  J(w) = Σ s_i l(y_i wᵀx_i) / Σ s_i + (λ/2)‖w‖² + bᵀw;
* soft labels α ∈ [0, 1] (Hamm, Cao & Belkin 2016, eq. 7):
  J(w) = (1/N) Σ [α_i l(wᵀx_i) + (1-α_i) l(-wᵀx_i)] + (λ/2)‖w‖²;
* multiclass (softmax) with target distributions A (rows sum to 1):
  J(W) = (1/N) Σ_i Σ_c A_ic (-log softmax(W x_i)_c) + (λ/2)‖W‖_F².

Margin losses: logistic l(z) = log(1 + e^{-z}) (|l'| ≤ 1, |l''| ≤ 1/4) and the
Huberised hinge of Chaudhuri, Monteleoni & Sarwate (2011, sec. 3.4.2) with
width h (|l'| ≤ 1, |l''| ≤ 1/(2h)).
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from scipy.optimize import minimize
from scipy.special import expit, log_softmax, softmax
from sklearn.exceptions import ConvergenceWarning

from anonml.learn.multiparty.common import MultipartyError

__all__ = [
    "MarginLoss",
    "margin_loss",
    "fit_linear_erm",
    "soft_label_objective",
    "fit_soft_label_erm",
    "softmax_objective",
    "fit_softmax_erm",
]

_GTOL = 1e-10
_MAXITER = 20_000
# Gradient norm past which we tell the caller the minimiser is not exact. At gradient
# norm g the distance to the exact minimiser is at most g/λ, a small fraction of every
# sensitivity bound here (2/(nλ) and up); L-BFGS stalls near 1e-6 on flat objectives,
# at the limit of double precision, which is why the threshold is not lower.
_WARN_GRAD = 1e-5


@dataclass(frozen=True)
class MarginLoss:
    """A convex margin loss l(z), z = y·wᵀx, with |l'| ≤ 1 and |l''| ≤ ``curvature``."""

    name: str
    curvature: float
    value: Callable[[np.ndarray], np.ndarray]
    derivative: Callable[[np.ndarray], np.ndarray]


def _logistic_value(z: np.ndarray) -> np.ndarray:
    return np.logaddexp(0.0, -z)


def _logistic_derivative(z: np.ndarray) -> np.ndarray:
    return -expit(-z)


def _huber_value(h: float) -> Callable[[np.ndarray], np.ndarray]:
    def value(z: np.ndarray) -> np.ndarray:
        middle = (1.0 + h - z) ** 2 / (4.0 * h)
        return np.where(z > 1.0 + h, 0.0, np.where(z < 1.0 - h, 1.0 - z, middle))

    return value


def _huber_derivative(h: float) -> Callable[[np.ndarray], np.ndarray]:
    def derivative(z: np.ndarray) -> np.ndarray:
        middle = -(1.0 + h - z) / (2.0 * h)
        return np.where(z > 1.0 + h, 0.0, np.where(z < 1.0 - h, -1.0, middle))

    return derivative


def margin_loss(name: str, huber_h: float = 0.5) -> MarginLoss:
    """The named margin loss: ``"logistic"`` or ``"huber"`` (Huberised hinge, width h).

    The curvature bound c (1/4 for logistic, 1/(2h) for Huber) enters the
    Jacobian term of objective perturbation (:func:`compute_slack`).
    """
    if name == "logistic":
        return MarginLoss("logistic", 0.25, _logistic_value, _logistic_derivative)
    if name == "huber":
        if not 0.0 < huber_h <= 1.0:
            raise MultipartyError(f"huber_h must be in (0, 1], got {huber_h}")
        return MarginLoss("huber", 1.0 / (2.0 * huber_h), _huber_value(huber_h), _huber_derivative(huber_h))
    raise MultipartyError(f"unknown loss {name!r}; choose 'logistic' or 'huber'")


LOGISTIC = margin_loss("logistic")


def _solve(fun: Callable[[np.ndarray], tuple[float, np.ndarray]], w0: np.ndarray) -> np.ndarray:
    result = minimize(
        fun,
        w0,
        jac=True,
        method="L-BFGS-B",
        options={"maxiter": _MAXITER, "gtol": _GTOL, "ftol": 1e-15, "maxcor": 30},
    )
    grad_norm = float(np.linalg.norm(fun(result.x)[1]))
    if grad_norm > _WARN_GRAD:
        warnings.warn(
            f"ERM stopped with gradient norm {grad_norm:.2e} ({result.message}); the released "
            "model is then only approximately the minimiser the privacy analysis assumes",
            ConvergenceWarning,
            stacklevel=3,
        )
    return np.asarray(result.x, dtype=np.float64)


def _check_lam(lam: float) -> None:
    if not (lam > 0 and np.isfinite(lam)):
        raise MultipartyError(f"regularisation lam must be positive and finite, got {lam}")


def fit_linear_erm(
    X: np.ndarray,
    y: np.ndarray,
    lam: float,
    *,
    loss: MarginLoss = LOGISTIC,
    sample_weight: np.ndarray | None = None,
    linear: np.ndarray | None = None,
) -> np.ndarray:
    """Minimise Σ s_i l(y_i wᵀx_i)/Σ s_i + (λ/2)‖w‖² + bᵀw over w ∈ R^d.

    Parameters
    ----------
    X : ndarray of shape (n, d)
    y : ndarray of shape (n,), values in {-1, +1}
    lam : float
        λ > 0; the objective is λ-strongly convex.
    loss : MarginLoss, default=logistic
    sample_weight : ndarray of shape (n,), optional
        Non-negative weights s (default all ones).
    linear : ndarray of shape (d,), optional
        The linear term b of objective perturbation (already divided by n).

    Returns
    -------
    ndarray of shape (d,)
    """
    _check_lam(lam)
    n, d = X.shape
    s = np.ones(n) if sample_weight is None else np.asarray(sample_weight, dtype=np.float64)
    total = float(s.sum())
    if total <= 0:
        raise MultipartyError("sample weights must have a positive sum")
    b = np.zeros(d) if linear is None else np.asarray(linear, dtype=np.float64)
    ys = y * s / total

    def fun(w: np.ndarray) -> tuple[float, np.ndarray]:
        z = y * (X @ w)
        value = float(s @ loss.value(z)) / total + 0.5 * lam * float(w @ w) + float(b @ w)
        grad = X.T @ (ys * loss.derivative(z)) + lam * w + b
        return value, grad

    return _solve(fun, np.zeros(d))


def soft_label_objective(
    w: np.ndarray, X: np.ndarray, alpha: np.ndarray, lam: float, loss: MarginLoss = LOGISTIC
) -> tuple[float, np.ndarray]:
    """Value and gradient of Hamm et al.'s soft-label risk (their eq. 7).

    J(w) = (1/N) Σ_i [α_i l(wᵀx_i) + (1-α_i) l(-wᵀx_i)] + (λ/2)‖w‖², with
    ∇J = (1/N) Σ_i [α_i l'(wᵀx_i) - (1-α_i) l'(-wᵀx_i)] x_i + λw.
    """
    t = X @ w
    n = X.shape[0]
    value = float(alpha @ loss.value(t) + (1.0 - alpha) @ loss.value(-t)) / n
    coef = alpha * loss.derivative(t) - (1.0 - alpha) * loss.derivative(-t)
    grad = X.T @ coef / n + lam * w
    return value + 0.5 * lam * float(w @ w), grad


def fit_soft_label_erm(
    X: np.ndarray, alpha: np.ndarray, lam: float, loss: MarginLoss = LOGISTIC
) -> np.ndarray:
    """The minimiser of :func:`soft_label_objective` (α the fraction of +1 votes)."""
    _check_lam(lam)
    alpha = np.asarray(alpha, dtype=np.float64)
    if alpha.shape != (X.shape[0],) or np.any((alpha < 0) | (alpha > 1)):
        raise MultipartyError("alpha must hold one vote fraction in [0, 1] per row of X")
    return _solve(lambda w: soft_label_objective(w, X, alpha, lam, loss), np.zeros(X.shape[1]))


def softmax_objective(
    W: np.ndarray, X: np.ndarray, targets: np.ndarray, lam: float
) -> tuple[float, np.ndarray]:
    """Value and gradient (shape (C, d)) of the λ-regularised softmax cross-entropy.

    J(W) = (1/N) Σ_i Σ_c A_ic (-log softmax(W x_i)_c) + (λ/2)‖W‖_F², with
    ∇J = (1/N) (softmax(X Wᵀ) - A)ᵀ X + λW.
    """
    scores = X @ W.T
    n = X.shape[0]
    value = -float(np.sum(targets * log_softmax(scores, axis=1))) / n
    grad = (softmax(scores, axis=1) - targets).T @ X / n + lam * W
    return value + 0.5 * lam * float(np.sum(W * W)), grad


def fit_softmax_erm(X: np.ndarray, targets: np.ndarray, lam: float) -> np.ndarray:
    """The minimiser W (shape (C, d)) of :func:`softmax_objective`.

    ``targets`` rows are distributions over the C classes: one-hot for hard
    labels, vote fractions for soft labels.
    """
    _check_lam(lam)
    targets = np.asarray(targets, dtype=np.float64)
    if targets.ndim != 2 or targets.shape[0] != X.shape[0]:
        raise MultipartyError("targets must have shape (n_samples, n_classes)")
    if not np.allclose(targets.sum(axis=1), 1.0) or np.any(targets < 0):
        raise MultipartyError("each row of targets must be a probability distribution")
    shape = (targets.shape[1], X.shape[1])

    def fun(flat: np.ndarray) -> tuple[float, np.ndarray]:
        value, grad = softmax_objective(flat.reshape(shape), X, targets, lam)
        return value, grad.ravel()

    return _solve(fun, np.zeros(shape[0] * shape[1])).reshape(shape)
