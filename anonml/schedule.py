"""A round's schedule: send inside a synchronised window, release at a random later time.

DESIGN §7: every peer sends its packets inside ``(t_s, t_s + δ)``; every relay
holds each packet and releases it at an independent uniform time in
``(t_s + δ, t_r)``. Because all packets of a round are inside the relays
before any leaves, arrival order says nothing about send order (the timing
side of Cyphers 2017, ch. 5). Times are POSIX seconds (floats).

How long the windows are is a function of the roster, not a constant:
:func:`schedule_floors` sizes every wait of a round from the number of
members, the routes' hops, the slots per member and a measured cost of one
request (:class:`ServiceMeter`), and the aggregator raises a proposal's
schedule to those floors when it fixes the round's schedule. Fixed seconds
that suit 100 peers on a quiet machine drop packets at 1,000 peers or under
load; floors that grow with the work keep the round whole.
"""

from __future__ import annotations

import math
import threading
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING

from anonml.errors import ProtocolError

if TYPE_CHECKING:
    import numpy as np

__all__ = [
    "WindowSchedule",
    "send_time",
    "release_time",
    "ScheduleFloors",
    "schedule_floors",
    "ServiceMeter",
    "DEFAULT_REQUEST_SECONDS",
    "DEFAULT_REACTION_SECONDS",
    "MEMBER_WORK_FACTOR",
    "PACKET_WORK_FACTOR",
    "PACKET_REQUEST_SECONDS",
]

#: Seconds one request is assumed to cost before any was measured (a restarted aggregator).
DEFAULT_REQUEST_SECONDS = 0.005
#: Seconds a peer takes to notice a phase change: the peer daemon's default poll interval.
DEFAULT_REACTION_SECONDS = 1.0
#: How many registrations (``M``) a member's own pre-send work costs its host before ``t_s``, apart
#: from its packets: its relay round opened, the bins and their cosignatures checked, its reports
#: perturbed and recorded in its ledger, its routes (and tokens, when not fetched during the
#: medians) and its state and sealed outbox stored. Measured in ``benchmarks/protocol.py`` (the
#: hosts' pre-send steps, :class:`benchmarks.protocol.PresendMeter`) with 2 packets per member,
#: the slowest host's span from its first relay round opened to its last outbox stored: at 1,000
#: peers on 3 hosts 1.14 ``n M`` at load 11–16 (8.1 s; ``M`` = 7.1 ms), 1.44 at load 4 and 1.60
#: at load 2 (6.1 s; ``M`` = 3.8 ms: the hosts' CPU-bound work, about 10 ms per member, shrinks
#: less than the registrations on a quieter machine), about three quarters of the members having
#: fetched their tokens during the medians; at 10,000 peers on 4 hosts, load 2–8, 2.67 ``n M``
#: (144 s; ``M`` = 5.4 ms), every member fetching its tokens in the report delay (14.4 ms CPU per
#: member, 10.3 ms at 1,000 without most token fetches). The onions were 10–15 % of that CPU (0.72–0.76
#: ms per packet). With :data:`PACKET_WORK_FACTOR`, 2 packets per member get 3.5 ``n M``: 1.31 times
#: the 10,000-peer figure — that round ran at exactly this factor and lost none of its 7,500 reports,
#: its slowest host using 76 % of the work term — and 2.2 times the 1,000-peer ones. (3.5, i.e. 1.5
#: times the 10,000-peer figure, was tried: it lengthened the demo's report delay — one host, 1 packet
#: per member — from 3 to 3.75 ``n M``, and the demo beside ``stress-ng --cpu 2`` took 70.4 and
#: 58.6 s against 55.0 and 54.6 s just before.)
MEMBER_WORK_FACTOR = 3.0
#: How many registrations (``M``) each packet adds to its member's pre-send work: an ``h``-hop onion
#: built (``h + 1`` X25519 exchanges) and sealed for the outbox (measured beside
#: :data:`MEMBER_WORK_FACTOR`: 5–7.5 % of a member's work per packet, at most 0.14 ``M``, taken at
#: about twice that). A factor of 3 per packet with nothing per member, all of a member's work counted
#: per packet, gave members of 2 packets 6 ``n M``: 5.3 times what their hosts took. (At 1,000
#: peers, 1 packet per member and load 10–14, 1 ``n M`` had left 284 of 1,000 members without
#: their packets when the send window closed.)
PACKET_WORK_FACTOR = 0.25
#: The least ``L`` the send and release windows assume per packet: what an unmeasured request is
#: assumed to cost (a relay peels, stores and forwards each packet; the intake checks each token).
PACKET_REQUEST_SECONDS = DEFAULT_REQUEST_SECONDS


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
    from anonml.randomness import resolve_rng  # NumPy: loaded by the first draw, not by the services' start

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


@dataclass(frozen=True, slots=True)
class ScheduleFloors:
    """The least each wait of a round may last, in seconds (:func:`schedule_floors`)."""

    roster_seconds: float
    median_step_seconds: float
    report_delay_seconds: float
    send_window_seconds: float
    release_window_seconds: float

    def raised(self, current: dict[str, float]) -> dict[str, float]:
        """``current`` (field name → seconds) with every field below its floor raised to it.

        Values above the floor are kept: a proposal may always ask for more time.
        Fields of ``current`` this class does not name are left out.
        """
        return {name: max(float(current[name]), floor) for name, floor in asdict(self).items()}


def _round_costs(
    n_peers: int,
    hops: int,
    slots_per_peer: int,
    request_seconds: float,
    member_seconds: float | None,
    reaction_seconds: float,
) -> tuple[float, float, float]:
    """``(L, M, r)`` of :func:`schedule_floors` from its arguments, which it checks.

    ``M`` is the measured ``request_seconds`` unless ``member_seconds`` is given;
    ``L`` is ``request_seconds`` raised to :data:`PACKET_REQUEST_SECONDS`.

    Raises
    ------
    ProtocolError
        When a count is below 1 or a cost is negative or not finite (naming it).
    """
    if n_peers < 1 or hops < 1 or slots_per_peer < 1:
        raise ProtocolError(
            f"schedule floors need n_peers, hops and slots ≥ 1, got "
            f"n={n_peers}, hops={hops}, slots={slots_per_peer}"
        )
    M = request_seconds if member_seconds is None else member_seconds
    for name, value in (
        ("request_seconds", request_seconds),
        ("member_seconds", M),
        ("reaction_seconds", reaction_seconds),
    ):
        if not (math.isfinite(value) and value >= 0):
            raise ProtocolError(f"schedule floors need a finite {name} ≥ 0, got {value!r}")
    # A packet is a request at every hop whatever the registrations cost: batched registrations
    # amortise L far below it (2.1 ms at 1,000 peers sized windows that lost 289 of 750 reports).
    return max(request_seconds, PACKET_REQUEST_SECONDS), M, reaction_seconds


def schedule_floors(
    n_peers: int,
    *,
    hops: int,
    slots_per_peer: int,
    request_seconds: float = DEFAULT_REQUEST_SECONDS,
    member_seconds: float | None = None,
    reaction_seconds: float = DEFAULT_REACTION_SECONDS,
) -> ScheduleFloors:
    """The floors of a round's waits for ``n_peers`` members, from the work each wait must hold.

    Parameters
    ----------
    n_peers : int
        Roster size ``n`` (≥ 1).
    hops : int
        Relays on every route ``h`` (each packet is one request at each of them).
    slots_per_peer : int
        Packets every member sends, ``k_h``: ``m = n · k_h`` packets in the round.
    request_seconds : float
        ``L``: seconds one request costs the server, measured
        (:meth:`ServiceMeter.seconds_per_request` over the problem's
        registrations: busy wall time per request, so it grows with load and
        not with concurrency).
    member_seconds : float, optional
        ``M``: seconds per member while the members are at work, measured
        (:meth:`ServiceMeter.flow_seconds_per_request`: registrations that
        follow each other closely, gaps included — what the peers' own side
        costs per member, e.g. many identities stepped by one host). None: ``L``.
    reaction_seconds : float
        ``r``: how long a peer takes to notice a new phase (its poll interval).

    Returns
    -------
    ScheduleFloors

    Notes
    -----
    Every wait is the time peers need to notice it began plus the work it must
    hold. Waits the members' own steps fill grow with ``n M``; windows the
    packets' requests fill grow with ``m L`` (one server takes every delivery,
    so the serial sum is what the intake faces; relays spread over many hosts
    only do better):

    * roster: ``2r + n M`` — every member fetches and checks the roster and
      compares its fingerprint through other members' relays (as much work
      per member as registering) before the first median query;
    * median step: ``2r + n M`` — a step's question reaches its group at the
      next poll, and one poll of a host steps each of its members (at worst
      all ``n`` on one host, as in a simulation); a step still ends as soon as
      its quorum answered (:class:`~anonml.protocol.MedianSettings`), so the
      floor costs time only when peers are missing;
    * report delay: ``2r + (a + b s) n M`` — every member sees the bins, checks
      them, records its reports and builds and stores its ``s`` =
      ``slots_per_peer`` packets before ``t_s``: ``a`` =
      :data:`MEMBER_WORK_FACTOR` registrations of work per member and ``b`` =
      :data:`PACKET_WORK_FACTOR` more per packet (measured on the hosts'
      pre-send steps; the work that does not grow with the packets is most of it);
    * send window ``δ``: ``r + m L`` — the first hops take in all ``m`` packets
      (here ``L`` is at least :data:`PACKET_REQUEST_SECONDS`: a packet costs a
      request at every hop even when registrations came in batches);
    * release window: ``r + (3/2) h m L`` — ``h`` release stages (one per hop,
      :mod:`peer.relay`), each carrying all ``m`` packets, inside the two
      thirds of the window the relays leave before their guard.

    With ``L = M`` = 2 ms (``L`` raised to the 5 ms packet floor), ``r`` = 1 s,
    ``h = 3``, ``k_h = 1`` over 2 routes (``s = 2``): 100 peers get δ = 2 s, a
    5.5 s release window and a 2.7 s report delay; 1,000 peers δ = 11 s, 46 s
    and 9 s; 10,000 peers δ = 101 s, 451 s and 72 s. Cyphers 2017 (ch. 5) fixes
    the windows by hand; this sizing is ours.
    """
    L, M, r = _round_costs(n_peers, hops, slots_per_peer, request_seconds, member_seconds, reaction_seconds)
    n, m = n_peers, n_peers * slots_per_peer
    return ScheduleFloors(
        roster_seconds=2 * r + n * M,
        median_step_seconds=2 * r + n * M,
        report_delay_seconds=2 * r + (MEMBER_WORK_FACTOR + PACKET_WORK_FACTOR * slots_per_peer) * n * M,
        send_window_seconds=r + m * L,
        release_window_seconds=r + 1.5 * hops * m * L,
    )


#: Requests closer together than this are one flow of work (:meth:`ServiceMeter.flow_seconds_per_request`).
FLOW_GAP_SECONDS = 1.0


class ServiceMeter:
    """Wall time per request of one kind at a server: ``L`` and ``M`` of :func:`schedule_floors`.

    Each finished request reports its ``(start, end)`` (monotonic seconds).

    * ``busy``: the meter adds the part of each request not already covered
      by the requests seen before — the length of the union of the intervals
      (exactly, when requests are recorded in order of their ends, which is
      how they finish; one recorded out of that order adds only what lies
      past the others). ``busy / count`` is the server's time per request:
      one request alone costs its latency; ``c`` concurrent ones contending
      for one lock or core cost ``1/c`` of their (inflated) latency each, the
      inverse of the throughput achieved. A loaded machine shows up as a
      larger value; many clients at once do not.
    * ``flow``: the same union with the gaps shorter than ``gap`` seconds
      counted too — the time the clients took between requests while they
      kept coming. ``flow / count`` is what one more member costs the whole
      system (peers and server) when members register as fast as they can; a
      trickle (gaps longer than ``gap``) adds only its requests' own time.
      A request serving ``count`` items (a host's batch of registrations)
      may follow a gap of up to ``count · gap``: the host prepared that many
      members (keys, signatures, its own state) before it, which is the
      members' own cost this measure is for.
    """

    def __init__(self, gap: float = FLOW_GAP_SECONDS) -> None:
        self._lock = threading.Lock()
        self.gap = gap
        self._busy = 0.0
        self._flow = 0.0
        self._until = -math.inf
        self.count = 0

    def mark(self, t: float) -> None:
        """Work began at ``t`` (the problem opened), before any request was recorded.

        The first request's gap is then measured from ``t``: a host that
        prepared its members since the problem opened and registers them in
        one batch shows that preparation in ``flow`` (within ``count · gap``).
        No effect once a request was recorded.
        """
        with self._lock:
            if self.count == 0:
                self._until = t

    def record(self, start: float, end: float, count: int = 1) -> None:
        """One request that ran from ``start`` to ``end`` (seconds, one clock).

        ``count``: how many items it served (a batch of registrations counts as
        that many, so ``busy / count`` stays the time per item; the gap before it
        that still joins the flow is ``count · gap``).
        """
        if not end >= start:
            raise ValueError(f"a request cannot end ({end}) before it starts ({start})")
        if count < 1:
            raise ValueError(f"a request serves at least one item, got count={count}")
        with self._lock:
            if start >= self._until:
                self._busy += end - start
                near = start - self._until <= self.gap * count
                self._flow += end - (self._until if near else start)
            elif end > self._until:
                self._busy += end - self._until
                self._flow += end - self._until
            self._until = max(self._until, end)
            self.count += count

    def seconds_per_request(self, default: float = DEFAULT_REQUEST_SECONDS) -> float:
        """``busy / count``; ``default`` before any request was recorded."""
        with self._lock:
            return self._busy / self.count if self.count else default

    def flow_seconds_per_request(self, default: float = DEFAULT_REQUEST_SECONDS) -> float:
        """``flow / count`` (at least ``busy / count``); ``default`` before any request was recorded."""
        with self._lock:
            return self._flow / self.count if self.count else default
