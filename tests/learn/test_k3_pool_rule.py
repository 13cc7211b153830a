"""benchmarks/k3_pool_rule.py: the choice half's detectable gain is the one its reports show."""

from __future__ import annotations

import math

import numpy as np
import pytest

from anonml.learn.calibration import CHOICE_SDS, CLASS_MAP_WEIGHTS, LOSS_CLIP, perturb_steps
from benchmarks.k3_pool_rule import detectable_gain


@pytest.mark.parametrize("epsilon", [0.5, 1.0, 2.0, 8.0])
def test_the_detectable_gain_is_the_spread_of_the_choice_reports(epsilon):
    # 40,000 pool peers: 20,000 choice reports of all-zero steps (the mechanism's worst case, t = 0);
    # choose_from_reports' s.e. of the last candidate's total is their per-peer sums' spread over √n.
    n_pool = 40_000
    rng = np.random.default_rng(5)
    reports = perturb_steps(np.zeros((n_pool // 2, len(CLASS_MAP_WEIGHTS))), LOSS_CLIP, epsilon, rng)
    totals = np.cumsum(reports * LOSS_CLIP, axis=1)[:, -1]
    measured = CHOICE_SDS * totals.std(ddof=1) / math.sqrt(totals.size)
    assert detectable_gain(n_pool, epsilon) == pytest.approx(measured, rel=0.03)


def test_a_pool_sized_to_its_information_detects_about_the_same_gain_at_every_low_epsilon():
    # Duchi et al.'s variance is 1/f, so n_c·f = 1500 fixes the choice half's s.e. below ε* (0.61);
    # the Hybrid mechanism's lower variance above it is all that moves the figure.
    def sized(e: float) -> int:
        return math.ceil(1500 / ((math.exp(e) - 1) / (math.exp(e) + 1)) ** 2)

    low = [detectable_gain(sized(e), e) for e in (0.2, 0.4, 0.6)]
    assert max(low) - min(low) < 0.002 and low[0] == pytest.approx(0.146, abs=0.001)
    assert detectable_gain(sized(1.0), 1.0) > 0.13 > detectable_gain(sized(2.0), 2.0)
