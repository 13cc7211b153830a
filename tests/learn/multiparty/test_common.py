"""Shared pieces: the exp(-β‖η‖) sampler, unit-ball scaling, labels, guarantees."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from anonml.errors import AnonMLError
from anonml.learn.multiparty.common import (
    MultipartyError,
    NormBallScaler,
    PrivacyGuarantee,
    PrivacyUnit,
    check_unit_ball,
    sample_norm_noise,
    to_pm1,
)


@pytest.mark.parametrize(("dim", "beta"), [(1, 2.0), (5, 0.5), (31, 10.0)])
def test_noise_norm_follows_gamma_d_scale_1_over_beta(dim: int, beta: float) -> None:
    # p(η) ∝ exp(-β‖η‖) ⇒ ‖η‖ ~ Gamma(d, 1/β). KS test at n = 4000: the 1% critical value of
    # the statistic is 1.63/√n ≈ 0.026; a Laplace-per-coordinate or Gaussian sampler fails it.
    n = 4000
    draws = sample_norm_noise(dim, beta, size=n, rng=np.random.default_rng(11))
    norms = np.linalg.norm(draws, axis=1)
    statistic = stats.kstest(norms, stats.gamma(a=dim, scale=1.0 / beta).cdf).statistic
    assert statistic < 1.63 / math.sqrt(n)
    # E‖η‖ = d/β with sd √d/β: the sample mean is within 4 standard errors.
    assert abs(norms.mean() - dim / beta) < 4 * math.sqrt(dim) / beta / math.sqrt(n)


def test_noise_direction_is_uniform_on_the_sphere() -> None:
    # Unit vectors uniform on S^{d-1}: each coordinate has mean 0 and variance 1/d, so the
    # mean over n draws of each coordinate has sd 1/√(nd); all 6 lie within 4 of those.
    dim, n = 6, 5000
    draws = sample_norm_noise(dim, 1.0, size=n, rng=np.random.default_rng(12))
    units = draws / np.linalg.norm(draws, axis=1, keepdims=True)
    assert np.all(np.abs(units.mean(axis=0)) < 4 / math.sqrt(n * dim))
    # and E[u_j²] = 1/d for each coordinate (sd of u_j² is about √2/d)
    assert np.all(np.abs((units**2).mean(axis=0) - 1 / dim) < 4 * math.sqrt(2) / dim / math.sqrt(n))


def test_noise_single_draw_shape_and_bad_rate() -> None:
    assert sample_norm_noise(4, 1.0, rng=np.random.default_rng(0)).shape == (4,)
    with pytest.raises(MultipartyError, match="beta"):
        sample_norm_noise(4, 0.0)
    with pytest.raises(MultipartyError, match="dimension"):
        sample_norm_noise(0, 1.0)


def test_norm_ball_scaler_bounds_rows_and_puts_the_intercept_inside() -> None:
    rng = np.random.default_rng(1)
    X = rng.normal(scale=3.0, size=(200, 4))
    scaler = NormBallScaler(bound=2.0).fit(X)
    Z = scaler.transform(X)
    assert Z.shape == (200, 5)
    assert np.all(np.linalg.norm(Z, axis=1) <= 1.0 + 1e-12)
    np.testing.assert_allclose(Z[:, -1], 1 / math.sqrt(2))
    inside = np.linalg.norm(X, axis=1) <= 2.0
    # rows within the bound keep their values (scaled by 1/(B√2)); clipped rows keep direction
    np.testing.assert_allclose(Z[inside, :4], X[inside] / (2.0 * math.sqrt(2)))
    clipped = ~inside
    np.testing.assert_allclose(np.linalg.norm(Z[clipped], axis=1), 1.0)
    cos = np.sum(Z[clipped, :4] * X[clipped], axis=1) / (
        np.linalg.norm(Z[clipped, :4], axis=1) * np.linalg.norm(X[clipped], axis=1)
    )
    np.testing.assert_allclose(cos, 1.0)


def test_norm_ball_scaler_never_looks_at_the_data_values() -> None:
    # The bound is fixed in advance: fitting on other rows gives the same map.
    rng = np.random.default_rng(2)
    X = rng.normal(size=(50, 3))
    a = NormBallScaler(bound=1.5).fit(X).transform(X)
    b = NormBallScaler(bound=1.5).fit(100 * rng.normal(size=(7, 3))).transform(X)
    np.testing.assert_array_equal(a, b)


def test_norm_ball_scaler_rejects_bad_bound() -> None:
    with pytest.raises(MultipartyError, match="bound"):
        NormBallScaler(bound=-1.0).fit(np.ones((2, 2)))


def test_to_pm1_maps_larger_class_to_plus_one_and_names_bad_input() -> None:
    y, classes = to_pm1(np.array(["b", "a", "b"]))
    np.testing.assert_array_equal(y, [1.0, -1.0, 1.0])
    np.testing.assert_array_equal(classes, ["a", "b"])
    with pytest.raises(MultipartyError, match="exactly two classes"):
        to_pm1(np.array([0, 1, 2]))


def test_check_unit_ball_names_the_offending_row() -> None:
    X = np.array([[0.1, 0.2], [0.9, 0.9]])
    with pytest.raises(MultipartyError, match="row 1 has norm 1.273") as info:
        check_unit_ball(X)
    assert isinstance(info.value, AnonMLError) and isinstance(info.value, ValueError)


def test_guarantee_reports_unit_eps_delta_and_the_caveat() -> None:
    g = PrivacyGuarantee(PrivacyUnit.PARTY, 0.5, 0.0, "output perturbation")
    text = g.describe()
    assert "(0.5, 0)-DP per party" in text and "not a like-for-like" in text
    assert g.to_dict() == {"unit": "party", "epsilon": 0.5, "delta": 0.0, "mechanism": "output perturbation"}
    none = PrivacyGuarantee(PrivacyUnit.NONE, math.inf, 0.0, "no noise")
    assert not none.is_private and none.to_dict()["epsilon"] is None
