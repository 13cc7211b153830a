"""The demo's packet windows hold the measured relay work (anonml.demo.packet_windows)."""

from __future__ import annotations

import pytest

from anonml.demo import DEMO_POLL_SECONDS, WINDOW_HEADROOM, packet_windows
from anonml.schedule import PACKET_REQUEST_SECONDS


def test_windows_carry_every_packet_over_every_hop_at_a_fraction_of_the_measured_capacity() -> None:
    # 300 members, one packet each, 3 hops, 7.1 ms per hop (measured beside two busy loops).
    send, release = packet_windows(300, hops=3, slots_per_peer=1, hop_seconds=0.0071)
    L = WINDOW_HEADROOM * 0.0071
    assert send == pytest.approx(DEMO_POLL_SECONDS + 300 * L)  # 8.72 s
    assert release == pytest.approx(DEMO_POLL_SECONDS + 1.5 * 3 * 300 * L)  # 38.54 s
    # Each of the 3 stages, inside the two thirds before the guard, holds its 300 hops twice over.
    assert (release - DEMO_POLL_SECONDS) * 2 / 3 / 3 >= 2 * 300 * 0.0071 - 1e-9


def test_windows_grow_with_the_cost_and_the_packets() -> None:
    quiet = packet_windows(300, hops=3, slots_per_peer=1, hop_seconds=0.003)
    loaded = packet_windows(300, hops=3, slots_per_peer=1, hop_seconds=0.012)
    more = packet_windows(300, hops=3, slots_per_peer=2, hop_seconds=0.012)
    assert quiet[0] < loaded[0] < more[0] and quiet[1] < loaded[1] < more[1]
    assert more[1] - DEMO_POLL_SECONDS == pytest.approx(2 * (loaded[1] - DEMO_POLL_SECONDS))


def test_a_cost_below_the_packet_floor_is_raised_to_it() -> None:
    # A packet is a request at every hop: never sized below PACKET_REQUEST_SECONDS per request.
    send, release = packet_windows(100, hops=3, slots_per_peer=1, hop_seconds=0.0)
    assert send == pytest.approx(DEMO_POLL_SECONDS + 100 * PACKET_REQUEST_SECONDS)
    assert release == pytest.approx(DEMO_POLL_SECONDS + 4.5 * 100 * PACKET_REQUEST_SECONDS)
