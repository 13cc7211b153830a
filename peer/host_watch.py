"""A session's watch over the roster's relay hosts in the send window: a host found dead is routed around.

Probes (:meth:`RelayHostWatch.watch`) and first hops that do not answer (:meth:`RelayHostWatch.dead`)
both mark a relay host dead for the round; every identity of the session then routes around all the
relays it hosts (:meth:`peer.participant.Participant.route_around`).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterable, Sequence
from typing import Protocol
from urllib.parse import urlsplit

import numpy as np

from anonml.addresses import connect_check
from anonml.outbound import OutboundError, RefusedAddress, fetch
from anonml.protocol import Bins, Problem, check_relay_address
from peer.dispatch import Dispatcher
from peer.participant import Participant
from peer.roster import RosterView

__all__ = ["RelayHostWatch", "WatchedSession", "WatchHost", "PROBE_SECONDS", "PROBE_HOSTS", "PROBE_DEADLINE"]

log = logging.getLogger("anonml.peer")

#: Seconds between two probes of the relay hosts in the send window (:meth:`RelayHostWatch.watch`).
PROBE_SECONDS = 0.5
#: Relay hosts one probe asks at most (drawn uniformly), so a roster of many hosts costs a bounded load.
PROBE_HOSTS = 16
#: Seconds a probed relay host has to answer before it counts as dead for the round.
PROBE_DEADLINE = 2.0


class WatchHost(Protocol):
    """What the watch uses of the process hosting its session (a :class:`peer.worker.SessionHost`)."""

    @property
    def dispatcher(self) -> Dispatcher: ...

    def count(self, what: str, n: int = 1) -> None: ...


class WatchedSession(Protocol):
    """What the watch reads of its session (a :class:`peer.worker.ProblemSession`, which owns the
    watch: naming the session through this protocol keeps the import one way, worker → watch)."""

    @property
    def host(self) -> WatchHost: ...

    @property
    def problem(self) -> Problem: ...

    @property
    def view(self) -> RosterView | None: ...

    @property
    def participants(self) -> Sequence[Participant]: ...

    def schedule(self, p: Participant, packets: Iterable[tuple[int, float, str, bytes]]) -> None: ...


class RelayHostWatch:
    """The relay hosts one session found dead this round, and the probes that look for them."""

    def __init__(self, session: WatchedSession) -> None:
        self.session = session
        # Relay hosts (scheme://host:port) found unreachable in the send window (a probe, or a first
        # hop there): every identity of this host routes around all their relays (route_around).
        self._dead_hosts: set[str] = set()
        self._dead_lock = threading.Lock()
        self._watching = False  # the relay hosts are probed through this round's send window

    def watch(self, bins: Bins) -> None:
        """Once per round: probe the roster's relay hosts every :data:`PROBE_SECONDS` through the
        send window, so a host that died is avoided (:meth:`dead`) even by identities
        that had no packet for it to find out by.

        Each probe asks up to :data:`PROBE_HOSTS` hosts drawn uniformly from every host of the
        roster but this one — never chosen by this host's routes, so the probes say nothing of
        them — for one member's relay witness (``GET …/roster/{problem}``, what the fingerprint
        comparison fetches): any answer means alive, no answer within
        :data:`PROBE_DEADLINE` seconds dead.
        """
        view = self.session.view
        if self._watching or view is None or time.time() >= bins.t_s + bins.delta:
            return
        self._watching = True
        own = {p.relay_url.split("/relay/")[0] for p in self.session.participants if p.relay_url is not None}
        hosts: dict[str, str] = {}
        for entry in view.roster.entries:
            if entry.relay_url is None:  # a sender-only member: no relay host to watch
                continue
            parts = urlsplit(entry.relay_url)
            origin = f"{parts.scheme}://{parts.netloc}"
            if entry.relay_url.split("/relay/")[0] not in own:
                hosts.setdefault(origin, entry.relay_url)
        if not hosts:
            return
        gen = np.random.default_rng()  # which hosts a probe asks: nothing secret, nothing simulated
        end = bins.t_s + bins.delta
        when = max(time.time(), bins.t_s)
        while when < end:
            with self._dead_lock:
                alive = sorted(set(hosts) - self._dead_hosts)
            for origin in gen.permutation(alive)[:PROBE_HOSTS]:
                url = hosts[str(origin)]
                self.session.host.dispatcher.at(when, lambda url=url: self._probe(url))
            when += PROBE_SECONDS

    def _probe(self, relay_url: str) -> None:
        """One probe of the relay host of ``relay_url`` (:meth:`watch`)."""
        allow = self.session.participants[0].relay.allow_loopback_http
        self.session.host.count("relay host probes")
        try:
            check_relay_address(relay_url, allow_loopback_http=allow)
        except ValueError:
            return  # refused to ask, not found dead
        try:
            fetch(
                "GET",
                f"{relay_url}/roster/{self.session.problem.id}",
                deadline=PROBE_DEADLINE,
                max_bytes=4096,
                address_check=connect_check(allow_loopback=allow),
            )
        except RefusedAddress:
            return  # its name now resolves to an address not asked: refused, not found dead
        except OutboundError:  # (a ValueError too: caught here, after the address checks)
            self.session.host.count("relay host probes unanswered")
            self.dead(relay_url)

    def dead(self, url: str) -> None:
        """The relay host of first hop ``url`` did not answer in the send window: the first time, every
        identity of this host routes around all the relays it hosts and sends a copy of each packet it
        already sent through one of them (:meth:`Participant.route_around`)."""
        parts = urlsplit(url)
        origin = f"{parts.scheme}://{parts.netloc}"
        with self._dead_lock:
            if origin in self._dead_hosts:
                return
            self._dead_hosts.add(origin)
        view = self.session.view
        if view is None:
            return
        dead = frozenset(
            node for node, entry in zip(view.node_ids, view.roster.entries, strict=True)
            if entry.relay_url.startswith(origin + "/")
        )  # fmt: skip
        log.warning(
            "%s: relay host %s is unreachable: %d relays avoided", self.session.problem.id, origin, len(dead)
        )
        self.session.host.count("relay hosts found dead")
        for p in self.session.participants:
            if p.roster is None or not p.built:
                continue
            copies = p.route_around(dead)
            if copies:
                self.session.host.count("packets copied around a dead relay host", len(copies))
                self.session.schedule(p, copies)
