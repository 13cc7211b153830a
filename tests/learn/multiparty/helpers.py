"""Synthetic rows for the multiparty tests: Gaussian rows shrunk into a ball, a noisy linear label."""

from __future__ import annotations

import numpy as np


def ball_rows(
    rng: np.random.Generator, n: int, d: int, *, shrink: float = 1.0, on_sphere: bool = False
) -> np.ndarray:
    """``n`` rows of N(0, I_d) divided by ``shrink·max(1, ‖x‖)`` (by ``shrink·‖x‖`` with ``on_sphere``).

    So every row lies in the ball of radius ``1/shrink`` (on its sphere with
    ``on_sphere``), as the privacy calibrations assume for ``shrink ≥ 1``.
    """
    X = rng.normal(size=(n, d))
    norms = np.linalg.norm(X, axis=1, keepdims=True)
    return X / (shrink * (norms if on_sphere else np.maximum(1.0, norms)))


def labelled_ball(
    seed: int, n: int, d: int, *, shrink: float, on_sphere: bool = False
) -> tuple[np.ndarray, np.ndarray]:
    """:func:`ball_rows` from ``default_rng(seed)`` and whether ``x_0 + N(0, 0.2²) > 0`` for each row."""
    rng = np.random.default_rng(seed)
    X = ball_rows(rng, n, d, shrink=shrink, on_sphere=on_sphere)
    return X, X[:, 0] + 0.2 * rng.normal(size=n) > 0
