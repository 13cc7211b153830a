"""ERM objectives: gradients against finite differences, optimality of the solver."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.optimize import approx_fprime

from anonml.learn.multiparty.common import MultipartyError
from anonml.learn.multiparty.erm import (
    fit_linear_erm,
    fit_soft_label_erm,
    fit_softmax_erm,
    margin_loss,
    soft_label_objective,
    softmax_objective,
)
from tests.learn.multiparty.helpers import ball_rows


@pytest.mark.parametrize("loss_name", ["logistic", "huber"])
def test_soft_label_gradient_matches_finite_differences(loss_name: str) -> None:
    rng = np.random.default_rng(3)
    X = ball_rows(rng, 40, 5)
    alpha = rng.uniform(size=40)
    loss = margin_loss(loss_name, huber_h=0.5)
    for _ in range(5):
        w = rng.normal(scale=2.0, size=5)
        analytic = soft_label_objective(w, X, alpha, 0.1, loss)[1]
        numeric = approx_fprime(w, lambda v: soft_label_objective(v, X, alpha, 0.1, loss)[0], 1e-7)
        # forward-difference error ≈ h·|J"|/2 + eps_mach·|J|/h ≈ 1e-7 for h = 1e-7
        np.testing.assert_allclose(analytic, numeric, atol=2e-6)


def test_softmax_gradient_matches_finite_differences() -> None:
    rng = np.random.default_rng(4)
    X = ball_rows(rng, 30, 4)
    targets = rng.dirichlet(np.ones(3), size=30)
    W = rng.normal(size=(3, 4))
    analytic = softmax_objective(W, X, targets, 0.05)[1].ravel()
    numeric = approx_fprime(
        W.ravel(), lambda v: softmax_objective(v.reshape(3, 4), X, targets, 0.05)[0], 1e-7
    )
    np.testing.assert_allclose(analytic, numeric, atol=2e-6)


def test_soft_labels_of_zero_and_one_equal_hard_label_erm() -> None:
    rng = np.random.default_rng(5)
    X = ball_rows(rng, 60, 3)
    y = np.where(rng.uniform(size=60) < 0.5, 1.0, -1.0)
    hard = fit_linear_erm(X, y, 0.01)
    soft = fit_soft_label_erm(X, (y + 1) / 2, 0.01)
    np.testing.assert_allclose(soft, hard, atol=1e-7)


def test_linear_erm_satisfies_first_order_condition_with_linear_term() -> None:
    # ∇J(w*) = (1/n) Σ l'(y wᵀx) y x + λw + b = 0 at the minimiser.
    rng = np.random.default_rng(6)
    X = ball_rows(rng, 80, 4)
    y = np.where(X[:, 0] + 0.3 * rng.normal(size=80) > 0, 1.0, -1.0)
    b = rng.normal(size=4)
    w = fit_linear_erm(X, y, 0.02, linear=b)
    loss = margin_loss("logistic")
    grad = X.T @ (y * loss.derivative(y * (X @ w))) / 80 + 0.02 * w + b
    assert np.linalg.norm(grad) < 1e-8


def test_softmax_erm_rejects_targets_that_are_not_distributions() -> None:
    with pytest.raises(MultipartyError, match="probability distribution"):
        fit_softmax_erm(np.eye(3), np.full((3, 2), 0.7), 0.1)
    w = fit_softmax_erm(np.eye(3) / 2, np.eye(3), 0.1)
    assert w.shape == (3, 3) and np.all(np.argmax(np.eye(3) @ w.T, axis=1) == [0, 1, 2])


def test_unknown_loss_is_named() -> None:
    with pytest.raises(MultipartyError, match="unknown loss 'hinge'"):
        margin_loss("hinge")
    assert margin_loss("huber", huber_h=0.25).curvature == 2.0
    assert margin_loss("logistic").curvature == 0.25
