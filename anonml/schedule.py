"""A round's schedule: send inside a synchronised window, release at a random later time.

DESIGN §7: every peer sends its packets inside ``(t_s, t_s + δ)``; every relay
holds each packet and releases it at an independent uniform time in
``(t_s + δ, t_r)``. Because all packets of a round are inside the relays
before any leaves, arrival order says nothing about send order (the timing
side of Cyphers 2017, ch. 5). Times are POSIX seconds (floats).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from anonml.errors import ProtocolError
from anonml.randomness import resolve_rng

__all__ = ["WindowSchedule", "send_time", "release_time"]


@dataclass(frozen=True, slots=True)
class WindowSchedule:
    """A round's schedule: send window ``(t_s, t_s + delta)``, release window ``(t_s + delta, t_r)``.

    Parameters
    ----------
    t_s : float
        Start of the send window (POSIX seconds).
    delta : float
        Length of the send window, > 0.
    t_r : float
        End of the release window; must exceed ``t_s + delta`` by more than one float step.
    """

    t_s: float
    delta: float
    t_r: float

    def __post_init__(self) -> None:
        for name in ("t_s", "delta", "t_r"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
                raise ProtocolError(f"schedule {name} must be a finite number, got {value!r}")
        if self.delta <= 0:
            raise ProtocolError(f"schedule delta must be > 0, got {self.delta}")
        for name, (lo, hi) in (("send", self.send_window), ("release", self.release_window)):
            if not math.nextafter(lo, hi) < hi:
                raise ProtocolError(
                    f"schedule {name} window ({lo}, {hi}) is empty: need t_s < t_s + delta < t_r"
                )

    @property
    def send_window(self) -> tuple[float, float]:
        return (float(self.t_s), float(self.t_s + self.delta))

    @property
    def release_window(self) -> tuple[float, float]:
        return (float(self.t_s + self.delta), float(self.t_r))


def _uniform_open(lo: float, hi: float, rng: np.random.Generator | None) -> float:
    """Uniform on the open interval (lo, hi): draws from [lo, hi) and redraws the endpoints,
    which float rounding of ``lo + (hi - lo)·U`` can produce."""
    rng = resolve_rng(rng)
    while True:
        t = float(rng.uniform(lo, hi))
        if lo < t < hi:
            return t


def send_time(schedule: WindowSchedule, rng: np.random.Generator | None = None) -> float:
    """When a peer sends a packet: uniform in ``(t_s, t_s + δ)``."""
    return _uniform_open(*schedule.send_window, rng)


def release_time(schedule: WindowSchedule, rng: np.random.Generator | None = None) -> float:
    """When a relay releases a packet: uniform in ``(t_s + δ, t_r)``, independent per packet."""
    return _uniform_open(*schedule.release_window, rng)
