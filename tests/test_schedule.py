"""Timing model: release times strictly inside (t_s + δ, t_r), send times inside (t_s, t_s + δ);
the floors of a round's waits, sized from its roster and the measured cost of a request."""

from __future__ import annotations

import math
from itertools import pairwise

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from anonml.errors import ProtocolError
from anonml.schedule import (
    DEFAULT_REQUEST_SECONDS,
    MEMBER_WORK_FACTOR,
    PACKET_REQUEST_SECONDS,
    PACKET_WORK_FACTOR,
    ScheduleFloors,
    ServiceMeter,
    WindowSchedule,
    release_time,
    schedule_floors,
    send_time,
)


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


# --- floors sized from the roster and the measured cost of a request -----------------------


def test_floors_follow_the_documented_formula() -> None:
    """n = 1,000, k_h = 1, h = 3, L = 8 ms, M = 10 ms, r = 1 s (schedule_floors Notes)."""
    f = schedule_floors(
        1000, hops=3, slots_per_peer=1, request_seconds=0.008, member_seconds=0.010, reaction_seconds=1.0
    )
    assert f.roster_seconds == pytest.approx(2 + 1000 * 0.010)  # the members' own work: n M
    assert f.median_step_seconds == pytest.approx(2 + 1000 * 0.010)
    # the members' own pre-send work and their packets': (a + b s) n M
    assert f.report_delay_seconds == pytest.approx(
        2 + (MEMBER_WORK_FACTOR + PACKET_WORK_FACTOR) * 1000 * 0.010
    )
    assert f.send_window_seconds == pytest.approx(1 + 1000 * 0.008)  # the packets' requests: m L
    assert f.release_window_seconds == pytest.approx(1 + 1.5 * 3 * 1000 * 0.008)
    # k_h slots per member multiply the packets m = n · k_h, not the roster term; in the report
    # delay only the packets' part of a member's work grows with them.
    g = schedule_floors(
        1000, hops=3, slots_per_peer=4, request_seconds=0.008, member_seconds=0.010, reaction_seconds=1.0
    )
    assert g.send_window_seconds == pytest.approx(1 + 4000 * 0.008)
    assert g.report_delay_seconds == pytest.approx(
        2 + (MEMBER_WORK_FACTOR + 4 * PACKET_WORK_FACTOR) * 1000 * 0.010
    )
    assert g.report_delay_seconds - f.report_delay_seconds == pytest.approx(
        3 * PACKET_WORK_FACTOR * 1000 * 0.010
    )
    assert g.roster_seconds == f.roster_seconds
    # Without a member cost, the request cost stands in for it.
    h = schedule_floors(1000, hops=3, slots_per_peer=1, request_seconds=0.002, reaction_seconds=1.0)
    assert h.roster_seconds == pytest.approx(2 + 1000 * 0.002)
    # A request cheaper than a packet's (batched registrations) does not shrink the packet windows.
    assert 0.002 < PACKET_REQUEST_SECONDS
    assert h.send_window_seconds == pytest.approx(1 + 1000 * PACKET_REQUEST_SECONDS)
    assert h.release_window_seconds == pytest.approx(1 + 1.5 * 3 * 1000 * PACKET_REQUEST_SECONDS)


def test_the_report_delay_holds_the_measured_pre_send_work_with_headroom() -> None:
    """The work factors against what they came from (benchmarks/protocol.py, ``presend_cost``).

    2 packets per member (k_h = 1 over 2 routes), r = 0.25 s; the slowest host's pre-send span
    and the registrations' M: at 1,000 peers on 3 hosts 8.1 s with M = 7.14 ms (load 11–16:
    1.14 n M), 6.15 s with M = 4.26 ms (load 4: 1.44 n M), 6.15 s with M = 3.85 ms (load 2:
    1.60 n M), the onions 0.76 of 10.2 ms CPU per member; at 10,000 peers on 4 hosts 144.3 s with
    M = 5.41 ms (load 2–8: 2.67 n M, every token fetched in the report delay), the onions 1.46 of
    14.4 ms. The report delay's work term holds 1.3 times the largest (that round ran at exactly
    these factors and lost no report) and twice the 1,000-peer ones.
    """
    measured = [
        (1000, 8.123, 0.00714),
        (1000, 6.153, 0.00426),
        (1000, 6.148, 0.003846),
        (10000, 144.28, 0.005412),
    ]
    for n, span, M in measured:
        f = schedule_floors(
            n, hops=3, slots_per_peer=2, request_seconds=0.005, member_seconds=M, reaction_seconds=0.25
        )
        work = f.report_delay_seconds - 2 * 0.25
        assert work >= (1.3 if n == 10000 else 2.0) * span, (n, span, work)
        assert work < 6 * n * M  # below the 3-per-packet proxy it replaces (6 n M here)
    # One packet's part of a member's work, in M: the run's span per member in M times its onions'
    # share of the member's CPU, per packet (load 2 at 1,000 peers; 10,000 peers).
    per_packet = [
        6.148 / (1000 * 0.003846) * 1.441 / 10.39 / 2,
        144.28 / (10000 * 0.005412) * 1.463 / 14.414 / 2,
    ]
    assert PACKET_WORK_FACTOR >= 1.5 * max(per_packet)  # with the same headroom


@pytest.mark.parametrize("field", list(ScheduleFloors.__dataclass_fields__))
def test_a_bigger_roster_gets_longer_waits_and_a_costlier_request_too(field: str) -> None:
    def floor(n: int, cost: float) -> float:
        f = schedule_floors(n, hops=3, slots_per_peer=1, request_seconds=cost)
        return getattr(f, field)

    sizes = [10, 100, 1_000, 10_000]
    for cost in (0.006, 0.02):
        values = [floor(n, cost) for n in sizes]
        assert all(a < b for a, b in pairwise(values)), (field, values)
    assert floor(1_000, 0.006) < floor(1_000, 0.02)
    # When a request costs nothing, the peers' reaction time is left — and for the packet windows
    # each packet's request at its floor.
    smallest = schedule_floors(1, hops=1, slots_per_peer=1, request_seconds=0.0)
    packets = {"send_window_seconds": 10_000, "release_window_seconds": 1.5 * 3 * 10_000}
    if field in packets:
        assert floor(10_000, 0.0) == pytest.approx(1.0 + packets[field] * PACKET_REQUEST_SECONDS)
    else:
        assert floor(10_000, 0.0) == getattr(smallest, field)


def test_raised_keeps_longer_draft_values_and_lifts_shorter_ones() -> None:
    f = ScheduleFloors(3.0, 2.0, 4.0, 5.0, 6.0)
    draft = {
        "roster_seconds": 10.0,
        "median_step_seconds": 1.0,
        "report_delay_seconds": 4.0,
        "send_window_seconds": 0.5,
        "release_window_seconds": 60.0,
        "witness_seconds": 1.0,  # not a floor: left out
    }
    assert f.raised(draft) == {
        "roster_seconds": 10.0,
        "median_step_seconds": 2.0,
        "report_delay_seconds": 4.0,
        "send_window_seconds": 5.0,
        "release_window_seconds": 60.0,
    }


@pytest.mark.parametrize(
    ("kwargs", "needle"),
    [
        ({"n_peers": 0}, "n=0"),
        ({"hops": 0}, "hops=0"),
        ({"slots_per_peer": 0}, "slots=0"),
        ({"request_seconds": float("nan")}, "request_seconds"),
        ({"reaction_seconds": -1.0}, "reaction_seconds"),
        ({"member_seconds": float("inf")}, "member_seconds"),
    ],
)
def test_floors_refuse_impossible_inputs_naming_them(kwargs: dict, needle: str) -> None:
    args = {"n_peers": 10, "hops": 3, "slots_per_peer": 1} | kwargs
    with pytest.raises(ProtocolError, match=needle):
        schedule_floors(**args)


def test_meter_is_latency_for_one_client_and_inverse_throughput_for_many() -> None:
    one = ServiceMeter()
    assert one.seconds_per_request() == DEFAULT_REQUEST_SECONDS  # nothing measured yet
    for k in range(10):  # one client: 10 ms requests with 5 ms gaps
        one.record(k * 0.015, k * 0.015 + 0.010)
    assert one.seconds_per_request() == pytest.approx(0.010)
    many = ServiceMeter()
    # 8 clients at once, contending: each waits 80 ms for a server that finishes one every 10 ms.
    for k in range(80):
        batch, i = divmod(k, 8)
        start = batch * 0.080
        many.record(start, start + 0.010 * (i + 1))
    assert many.seconds_per_request() == pytest.approx(0.010)  # 800 ms busy / 80 requests
    assert many.count == 80


def test_meter_refuses_a_request_that_ends_before_it_starts() -> None:
    with pytest.raises(ValueError, match="before it starts"):
        ServiceMeter().record(2.0, 1.0)


def test_meter_flow_counts_the_short_gaps_of_a_burst_and_not_a_trickle() -> None:
    """A burst: 10 ms requests every 30 ms → flow 30 ms per request, busy 10 ms.
    A trickle: the same requests 5 s apart (more than the 1 s gap) → flow = busy = 10 ms."""
    burst, trickle = ServiceMeter(), ServiceMeter()
    for k in range(20):
        burst.record(k * 0.030, k * 0.030 + 0.010)
        trickle.record(k * 5.0, k * 5.0 + 0.010)
    assert burst.seconds_per_request() == pytest.approx(0.010)
    # the first request has no predecessor: (10 + 19 × 30) ms over 20 requests
    assert burst.flow_seconds_per_request() == pytest.approx((0.010 + 19 * 0.030) / 20)
    assert trickle.flow_seconds_per_request() == pytest.approx(0.010)
    assert ServiceMeter().flow_seconds_per_request() == DEFAULT_REQUEST_SECONDS


def test_meter_counts_a_batch_as_its_items_and_the_hosts_preparation_before_it() -> None:
    """Batches of 256 registrations, each taking 0.5 s at the server after 3 s of the host's own
    work (more than the 1 s gap, less than 256 × 1 s): busy = 0.5 s / 256 per registration, flow =
    3.5 s / 256 (the host's preparation is the members' cost); a single request after the same 3 s
    gap is a trickle."""
    meter = ServiceMeter()
    for k in range(4):
        start = 3.0 + k * 3.5
        meter.record(start, start + 0.5, count=256)
    assert meter.count == 4 * 256
    assert meter.seconds_per_request() == pytest.approx(0.5 / 256)
    # the first batch has no predecessor: its 0.5 s, then 3 × (3 s gap + 0.5 s)
    assert meter.flow_seconds_per_request() == pytest.approx((0.5 + 3 * 3.5) / (4 * 256))
    single = ServiceMeter()
    single.record(0.0, 0.5)
    single.record(3.5, 4.0)  # 3 s after the first: not one flow for a request of one item
    assert single.flow_seconds_per_request() == pytest.approx(0.5)
    with pytest.raises(ValueError, match="at least one item"):
        ServiceMeter().record(0.0, 1.0, count=0)


def test_meter_marked_at_the_opening_counts_a_first_batch_preparation_and_not_a_late_single() -> None:
    """One host registers 96 members in one 0.2 s batch 5 s after the problem opened: flow =
    5.2 s / 96 (the preparation since the opening); one registration alone 5 s after the
    opening is a trickle (5 s > 1 × the 1 s gap) and costs only its own 0.2 s."""
    batch = ServiceMeter()
    batch.mark(100.0)
    batch.record(105.0, 105.2, count=96)
    assert batch.flow_seconds_per_request() == pytest.approx(5.2 / 96)
    assert batch.seconds_per_request() == pytest.approx(0.2 / 96)
    single = ServiceMeter()
    single.mark(100.0)
    single.record(105.0, 105.2)
    assert single.flow_seconds_per_request() == pytest.approx(0.2)
    late = ServiceMeter()
    late.record(0.0, 0.5)
    late.mark(-100.0)  # after a request: no effect
    late.record(1.0, 1.5)
    assert late.flow_seconds_per_request() == pytest.approx(1.5 / 2)
