"""The aggregator sizes each round's waits for its roster: the proposal's schedule raised to the floors.

:meth:`aggregator.state.AggregatorState.round_schedule` with
:func:`anonml.schedule.schedule_floors`; the measured costs come from the
problem's registrations (:class:`anonml.schedule.ServiceMeter`).
"""

from __future__ import annotations

import time

import pytest

from anonml.protocol import DEFAULT_ROUTES
from anonml.schedule import PACKET_REQUEST_SECONDS, schedule_floors
from tests.aggregator.helpers import (
    WirePeer,
    bins_of,
    close_registration,
    draft,
    propose,
    status,
    wait_phase,
)


def _metered(aggregator, n_registrations: int, seconds: float, **draft_args):
    """A proposed problem whose meter saw ``n_registrations`` back-to-back requests of ``seconds`` each,
    from now (the meter was marked when the problem was proposed, a moment ago)."""
    problem = propose(aggregator.url, draft(**draft_args))
    meter = aggregator.state.meter(problem.id)
    t0 = time.monotonic()
    for k in range(n_registrations):
        meter.record(t0 + k * seconds, t0 + (k + 1) * seconds)
    return problem, aggregator.state.context(problem.id)


def test_a_bigger_roster_gets_longer_waits(aggregator) -> None:
    """Same measured cost (4 ms a registration), 10 members vs 1,000: every wait floor is longer."""
    state = aggregator.state
    r = aggregator.settings.peer_poll_seconds
    short = dict(report_delay=0.01, send_window=0.01, release_window=0.01, median_step=0.01)
    _, small_ctx = _metered(aggregator, 10, 0.004, **short)
    _, big_ctx = _metered(aggregator, 1000, 0.004, **short)
    small = state.round_schedule(small_ctx, 10)
    big = state.round_schedule(big_ctx, 1000)
    for name in (
        "roster_seconds",
        "median_step_seconds",
        "report_delay_seconds",
        "send_window_seconds",
        "release_window_seconds",
    ):
        assert getattr(small, name) < getattr(big, name), name
    # The floors of the formula, with L = 4 ms and M = 4 ms plus the moment from the proposal to
    # the first registration spread over the members: n = 1,000, k_h = 1, h = 3, and each slot sent
    # over the default 2 routes (2 packets per member).
    meter = state.meter(big_ctx.problem.id)
    assert meter.seconds_per_request() == pytest.approx(0.004)
    assert 0.004 <= meter.flow_seconds_per_request() < 0.004 + 1.0 / 1000
    expected = schedule_floors(
        1000,
        hops=3,
        slots_per_peer=DEFAULT_ROUTES,
        request_seconds=0.004,
        member_seconds=meter.flow_seconds_per_request(),
        reaction_seconds=r,
    )
    # L = 4 ms is below a packet's request floor: the packet windows take the floor.
    floor = max(0.004, PACKET_REQUEST_SECONDS)
    assert big.send_window_seconds == expected.send_window_seconds == r + DEFAULT_ROUTES * 1000 * floor
    assert big.release_window_seconds == expected.release_window_seconds
    assert big.roster_seconds == expected.roster_seconds
    # Fixed when first taken: later registrations do not move a round's schedule.
    aggregator.state.meter(big_ctx.problem.id).record(10.0, 20.0)
    assert state.round_schedule(big_ctx, 1000) is big


def test_longer_waits_a_proposal_asks_for_are_kept(aggregator) -> None:
    _, ctx = _metered(aggregator, 100, 0.004, send_window=600.0, release_window=0.01)
    schedule = aggregator.state.round_schedule(ctx, 100)
    assert schedule.send_window_seconds == 600.0  # above its floor: the proposal's value
    assert schedule.release_window_seconds > 0.01  # below its floor: raised


def test_the_bins_carry_the_round_schedule_the_status_shows(aggregator) -> None:
    """Over HTTP: registrations measured, registration closed, bins windows = the status's schedule."""
    d = draft(send_window=4.0, release_window=0.05, report_delay=0.05, min_peers=6)
    problem = propose(aggregator.url, d)
    peers = [WirePeer() for _ in range(6)]
    for p in peers:
        assert p.register(aggregator.url, problem).status_code == 201
    assert aggregator.state.meter(problem.id).count == 6
    close_registration(aggregator.url, problem.id)
    wait_phase(aggregator.url, problem.id, ("reporting",), timeout=60)
    st = status(aggregator.url, problem.id)
    assert st.schedule is not None
    bins = bins_of(aggregator.url, problem.id)
    assert bins.delta == st.schedule.send_window_seconds == 4.0  # the proposal's, above the floor
    release = bins.t_r - bins.t_s - bins.delta
    assert abs(release - st.schedule.release_window_seconds) < 1e-6
    assert release >= aggregator.settings.peer_poll_seconds > 0.05  # raised to at least r
