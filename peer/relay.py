"""The relay: peel one onion layer, hold the packet, release it in the second window.

For each (node, round) a peer opens a :class:`RelayRound` when it has checked
the roster: its :class:`~anonml.crypto.SphinxRelay` (round key + replay
cache), the round's :class:`~anonml.crypto.WindowSchedule`, the roster's
routing table (node id → relay URL) and the aggregator's node id and intake
URL. :meth:`RelayService.handle` then, for one packet:

1. refuses anything but exactly ``PACKET_SIZE`` bytes (the HTTP route already
   refused oversized bodies with 413 before reading them) — before any crypto;
2. finds the round key by the packet's round id (404 if this node has none);
3. drops the packet if it arrives after ``t_r`` (410);
4. peels it (MAC, then the replay tag: 409 for a replay, 400 for anything
   else wrong) and schedules the release with :func:`~anonml.crypto.release_time`
   — to the next hop's relay, or, at the last hop, to the aggregator's intake
   as an :class:`~anonml.protocol.IntakeDelivery`. Cover packets end at the
   last hop.

Release times. Every packet of the round is inside the relays before any
leaves (first hops hold until after ``t_s + δ``), so arrival order says nothing
about send order. The release window ``(t_s + δ, t_r − g)`` is cut into one
*stage* per hop of the problem's routes: a packet received in the send window
is released uniformly in stage 1; one received during stage ``k`` is released
uniformly in stage ``k + 1``; one received in the last stage, uniformly in
what is left of it; one received later still (within ``g`` of ``t_r``),
at once.

Deviation: the protocol rule draws every release uniformly in
``(max(now, t_s + δ), t_r)``. Chained over three hops that puts the last
hops' releases in the last eighth of the window on average, all the round's
traffic arrives together just before ``t_r``, and under load packets miss
``t_r`` and are dropped at the next relay. Stages keep each hop's releases
uniform over a fixed share of the window (the same mixing: every packet of a
stage leaves in random order within it) and spread the load evenly; the
guard ``g`` (:attr:`RelayRound.guard`, default a third of the release window,
at most 2 s) leaves the hops that follow network time before ``t_r``. Every
release still falls inside ``(t_s + δ, t_r)``.

At ``t_r`` the round is closed: its key is destroyed and its replay cache
dropped (:meth:`~anonml.crypto.SphinxRelay.close`). Nothing received is
unpickled or executed; packets are opaque bytes until the Sphinx MAC holds.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from dataclasses import dataclass

import numpy as np

from anonml.crypto import (
    PACKET_SIZE,
    Deliver,
    InvalidPacket,
    ReplayedPacket,
    SphinxRelay,
    WindowSchedule,
    release_time,
)
from anonml.errors import ProtocolError
from anonml.protocol import IntakeDelivery
from peer.dispatch import Dispatcher, post

__all__ = ["RelayRound", "RelayService", "RelayOutcome", "default_guard"]


@dataclass
class RelayRound:
    """One node's relay state for one round."""

    node_id: bytes
    round_id: int
    relay: SphinxRelay
    schedule: WindowSchedule
    routes: dict[bytes, str]  # node id -> relay URL of every roster member
    destination: bytes  # the aggregator's node id
    intake_url: str
    guard: float | None = None  # seconds kept free before t_r (None: default_guard)
    stages: int = 1  # hops of the problem's routes: one release stage each

    def release_end(self) -> float:
        """End of the interval release times are drawn from: ``t_r − guard``."""
        guard = self.guard if self.guard is not None else default_guard(self.schedule)
        return self.schedule.t_r - guard


def default_guard(schedule: WindowSchedule) -> float:
    """A third of the release window, at most 2 s: network time for the hops that follow."""
    start, end = schedule.release_window
    return min(2.0, (end - start) / 3.0)


@dataclass(frozen=True)
class RelayOutcome:
    """What happened to one packet: an HTTP status and a reason."""

    status: int
    detail: str


class RelayService:
    """Every relay round hosted by this process, and what they did (counters)."""

    def __init__(self, dispatcher: Dispatcher, rng: np.random.Generator | None = None) -> None:
        self.dispatcher = dispatcher
        self.rng = rng
        self._rounds: dict[tuple[bytes, int], RelayRound] = {}
        self._closed: set[tuple[bytes, int]] = set()
        self._lock = threading.Lock()
        self.counters: Counter[str] = Counter()

    def count(self, what: str, n: int = 1) -> None:
        with self._lock:
            self.counters[what] += n

    # -- rounds -------------------------------------------------------------------
    def open_round(self, round_: RelayRound) -> None:
        """Start relaying for ``round_``; it closes itself at ``t_r``."""
        key = (round_.node_id, round_.round_id)
        with self._lock:
            if key in self._rounds:
                raise ValueError(f"node {round_.node_id.hex()} already relays round {round_.round_id}")
            self._rounds[key] = round_
        self.dispatcher.at(round_.schedule.t_r, lambda: self.close_round(round_.node_id, round_.round_id))

    def close_round(self, node_id: bytes, round_id: int) -> None:
        """Destroy the round key and drop the replay cache (idempotent)."""
        with self._lock:
            round_ = self._rounds.pop((node_id, round_id), None)
            self._closed.add((node_id, round_id))
        if round_ is not None:
            round_.relay.close()

    def has_round(self, node_id: bytes, round_id: int) -> bool:
        with self._lock:
            return (node_id, round_id) in self._rounds

    # -- packets ------------------------------------------------------------------
    def handle(self, node_id: bytes, packet: bytes) -> RelayOutcome:
        """Process one packet addressed to ``node_id`` (see the module docstring)."""
        self.count("received")
        if len(packet) != PACKET_SIZE:
            return self._reject(
                "wrong size",
                413 if len(packet) > PACKET_SIZE else 400,
                f"a packet is exactly {PACKET_SIZE} bytes, got {len(packet)}",
            )
        round_id = int.from_bytes(packet[1:9], "big")
        with self._lock:
            round_ = self._rounds.get((node_id, round_id))
            closed = (node_id, round_id) in self._closed
        if round_ is None:
            if closed:
                return self._reject("late", 410, "the round is over; its relay key was destroyed")
            return self._reject("unknown round", 404, "this node holds no relay key for that round")
        now = time.time()
        if now >= round_.schedule.t_r:
            return self._reject("late", 410, "the round's release window is over; packet dropped")
        try:
            result = round_.relay.process(packet)
        except ReplayedPacket:
            return self._reject("replay", 409, "packet already processed in this round (replay)")
        except InvalidPacket as exc:
            return self._reject("invalid", 400, f"packet rejected: {exc}")
        if isinstance(result, Deliver):
            return self._deliver(round_, result, now)
        url = round_.routes.get(result.next_hop)
        if url is None:
            return self._reject("unknown hop", 400, "next hop is not on this round's roster")
        when = self._release_at(round_, now)
        data = result.packet
        self.dispatcher.at(when, lambda: self._send(url, data, "application/octet-stream", "forwarded"))
        self.count("held")
        return RelayOutcome(202, "held for release")

    def _deliver(self, round_: RelayRound, result: Deliver, now: float) -> RelayOutcome:
        if result.destination != round_.destination:
            return self._reject(
                "unknown destination", 400, "final hop names a destination other than the aggregator"
            )
        if result.is_cover:
            self.count("cover")
            return RelayOutcome(202, "cover packet ended here")
        when = self._release_at(round_, now)
        body = (
            IntakeDelivery(redemption=bytes(result.redemption), report=result.report)
            .model_dump_json()
            .encode()
        )
        url = round_.intake_url
        self.dispatcher.at(when, lambda: self._send(url, body, "application/json", "delivered"))
        self.count("held")
        return RelayOutcome(202, "held for delivery")

    def _release_at(self, round_: RelayRound, now: float) -> float:
        """A uniform time in this packet's release stage (module docstring)."""
        schedule = round_.schedule
        start, end = schedule.t_s + schedule.delta, round_.release_end()
        if end <= start:
            start, end = schedule.release_window
        length = (end - start) / max(1, round_.stages)
        if now < start:
            lo, hi = start, start + length
        else:
            stage = int((now - start) // length)
            if stage + 1 < round_.stages:
                lo, hi = start + (stage + 1) * length, start + (stage + 2) * length
            else:
                lo, hi = now, end
        try:
            window = WindowSchedule(schedule.t_s, lo - schedule.t_s, hi)
        except ProtocolError:  # past the last stage: pass it on at once
            return now
        return release_time(window, self.rng)

    def _send(self, url: str, data: bytes, content_type: str, what: str) -> None:
        try:
            response = post(url, data, content_type)
        except Exception:
            self.count(f"{what} failed")
            return
        self.count(what if response.status_code < 300 else f"{what} refused ({response.status_code})")

    def _reject(self, reason: str, status: int, detail: str) -> RelayOutcome:
        self.count(f"rejected: {reason}")
        return RelayOutcome(status, detail)
