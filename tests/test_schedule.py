"""Timing model: release times strictly inside (t_s + δ, t_r), send times inside (t_s, t_s + δ)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from anonml.errors import ProtocolError
from anonml.schedule import WindowSchedule, release_time, send_time


@given(
    t_s=st.floats(-1e9, 2e9, allow_nan=False),
    delta=st.floats(1e-3, 1e5),
    gap=st.floats(1e-3, 1e5),
    seed=st.integers(0, 2**32 - 1),
)
def test_every_release_time_is_inside_the_release_window(t_s, delta, gap, seed) -> None:
    schedule = WindowSchedule(t_s, delta, t_s + delta + gap)
    rng = np.random.default_rng(seed)
    lo, hi = schedule.release_window
    for _ in range(50):
        assert lo < release_time(schedule, rng) < hi
        assert schedule.t_s < send_time(schedule, rng) < lo


def test_windows_one_float_step_wide_still_give_the_only_interior_value() -> None:
    lo = 1000.0
    hi = math.nextafter(math.nextafter(lo, math.inf), math.inf)
    schedule = WindowSchedule(lo - 1.0, 1.0, hi)
    rng = np.random.default_rng(0)
    assert {release_time(schedule, rng) for _ in range(20)} == {math.nextafter(lo, math.inf)}


def test_release_times_are_uniform_over_the_window() -> None:
    """Mean of n uniform draws on (a, b): (a+b)/2 with standard error (b-a)/sqrt(12 n).

    With n = 20,000 and (a, b) = (110, 170): SE = 60/sqrt(240,000) = 0.1225; we allow 4 SE.
    The variance (b-a)^2/12 = 300 has relative SE sqrt(0.8/n) = 0.63%; we allow 4 of those.
    """
    schedule = WindowSchedule(100.0, 10.0, 170.0)
    rng = np.random.default_rng(2024)
    n = 20_000
    draws = np.array([release_time(schedule, rng) for _ in range(n)])
    se = 60 / math.sqrt(12 * n)
    assert abs(draws.mean() - 140.0) < 4 * se
    assert abs(draws.var() / 300.0 - 1) < 4 * math.sqrt(0.8 / n)


def test_seeded_draws_repeat() -> None:
    schedule = WindowSchedule(0.0, 5.0, 30.0)
    a = [release_time(schedule, np.random.default_rng(9)) for _ in range(2)]
    assert a[0] == a[1]
    assert 5.0 < release_time(schedule) < 30.0  # OS-seeded default


@pytest.mark.parametrize(
    ("t_s", "delta", "t_r"),
    [
        (0.0, 0.0, 10.0),
        (0.0, -1.0, 10.0),
        (0.0, 10.0, 10.0),
        (0.0, 10.0, 5.0),
        (math.nan, 1.0, 5.0),
        (0.0, 1.0, math.inf),
        ("0", 1.0, 5.0),
        (True, 1.0, 5.0),
    ],
)
def test_invalid_schedules_are_rejected(t_s, delta, t_r) -> None:
    with pytest.raises(ProtocolError):
        WindowSchedule(t_s, delta, t_r)
