"""The polling loop: discover proposals, decide, and drive every accepted problem.

Each ``poll_seconds`` the :class:`Worker` asks every configured aggregator for
problems in registration, records new ones, applies the policy (or the user's
``accept``) per hosted identity, and steps every :class:`ProblemSession`. A
session fetches what is common once per process — status, roster (verified
once, :class:`~peer.roster.RosterView`), open median queries, bins, model —
and hands it to each identity's :class:`~peer.participant.Participant`, in
parallel on a small thread pool. An identity that fails a check is aborted
with the reason; the others go on.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable
from concurrent.futures import Executor
from typing import Protocol

from anonml.errors import AnonMLError, ProtocolError
from anonml.protocol import Bins, CosignatureBundle, Problem, RosterWitness
from peer.client import AggregatorClient, HTTPRefusal
from peer.db import PeerDB
from peer.dispatch import Dispatcher
from peer.participant import Aborted, Participant
from peer.roster import RosterView
from peer.transcript import check_roster_entries

__all__ = ["ProblemSession", "SessionHost", "Worker"]

log = logging.getLogger("anonml.peer")

#: Identities that fetch their tokens in one poll while the median rounds run.
TOKENS_PER_POLL = 64


class SessionHost(Protocol):
    """What a session and the worker need from the process hosting them (:class:`peer.host.PeerHost`)."""

    db: PeerDB
    pool: Executor
    dispatcher: Dispatcher
    poll_seconds: float

    def count(self, what: str, n: int = 1) -> None: ...

    def publish_witness(self, node_id: bytes, witness: RosterWitness) -> None: ...

    def poll_once(self) -> None: ...


class ProblemSession:
    """Every hosted identity's participation in one problem."""

    def __init__(
        self, host: SessionHost, problem: Problem, client: AggregatorClient, participants: list[Participant]
    ) -> None:
        self.host = host
        self.problem = problem
        self.client = client
        self.participants = participants
        self.view: RosterView | None = None
        self.bins: Bins | None = None
        self._unwitnessed: RosterView | None = None  # verified roster, waiting for its cosignatures
        self._bins_bundle: CosignatureBundle | None = None
        self.phase = "registration"
        self.finished = False

    def _each(self, fn: Callable[[Participant], object], who: Iterable[Participant] | None = None) -> None:
        """Run ``fn`` for every active participant in parallel; abort those that fail."""
        targets = [p for p in (who if who is not None else self.participants) if p.active]

        def guarded(p: Participant) -> None:
            try:
                fn(p)
            except HTTPRefusal as exc:
                self._abort(p, f"aggregator refused: {exc.detail} (HTTP {exc.status})")
            except (Aborted, AnonMLError) as exc:
                self._abort(p, str(exc))

        list(self.host.pool.map(guarded, targets))

    def _abort(self, p: Participant, reason: str) -> None:
        p.abort(reason)
        self.host.db.set_participation(self.problem.id, p.node.fingerprint, "aborted", reason=reason)

    def _record(self, p: Participant) -> None:
        fingerprint = self.view.fingerprint if self.view is not None else None
        self.host.db.set_participation(
            self.problem.id, p.node.fingerprint, p.status, reason=p.reason, fingerprint=fingerprint
        )

    def step(self) -> None:
        """Advance every participant as far as the problem's phase allows."""
        status = self.client.status(self.problem.id)
        self.phase = status.phase
        if status.phase == "registration":
            self._each(lambda p: p.register() if p.status == "accepted" else None)
            return
        if status.phase == "failed":
            for p in self.participants:
                if p.active:
                    p.status, p.reason = "failed", f"the problem failed: {status.message}"
                    self._record(p)
            self.finished = True
            return
        for p in self.participants:  # registration closed before these got in
            if p.status == "accepted":
                self._abort(p, "registration closed before this identity registered")
        if self.view is None:
            if self._unwitnessed is None:
                view = RosterView.verify(self.client.roster(self.problem.id), self.problem)
                try:
                    check_roster_entries(view.roster, self.problem)
                except ProtocolError as exc:
                    for p in self.participants:
                        if p.active:
                            self._abort(p, str(exc))
                    self.finished = True
                    return
                self._unwitnessed = view
            bundle = self._bundle("roster")
            if bundle is None:
                return  # the witnesses have not all co-signed yet: nothing is released meanwhile
            self.view = view = self._unwitnessed
            self._each(lambda p: p.check_roster(view, bundle) if p.status == "registered" else None)
            for p in self.participants:
                if p.witness is not None:
                    self.host.publish_witness(p.node.node_id, p.witness)
                if p.active:
                    self._record(p)
        # Every identity of this process has published its witness; members hosted
        # elsewhere that have not yet are asked again at the next poll.
        pending = [p for p in self.participants if p.active and p.view is not None and not p.roster_confirmed]
        self._each(lambda p: p.compare_fingerprints(), pending)
        ready = [p for p in self.participants if p.active and p.roster_confirmed]
        if status.phase == "medians":
            queries = self.client.medians(self.problem.id)
            self._each(lambda p: [p.answer(q) for q in queries], ready)
        if status.phase in ("medians", "reporting"):
            # Ahead of the round: routes (certificates checked) and tokens (issuance is open);
            # a bounded number per poll, so polls stay short and median queries are answered.
            todo = [
                p for p in ready if p.paths is None or (p.tokens is None and p.assignment.role == "report")
            ]
            limit = len(todo) if status.phase == "reporting" else TOKENS_PER_POLL
            self._each(lambda p: (p.choose_paths(), p.fetch_tokens()), todo[:limit])
        if status.phase in ("reporting", "training", "done"):
            self._report_round(status.phase)
        if status.phase == "done" and status.model_available:
            document = self.client.model(self.problem.id)
            self._each(lambda p: p.receive_model(document))
            for p in self.participants:
                if p.status == "done":
                    self.host.db.set_participation(
                        self.problem.id, p.node.fingerprint, "done", model_json=document.model_dump_json()
                    )
            self.finished = True

    def _report_round(self, phase: str) -> None:
        """Relay from the moment the bins are out; send once the roster is confirmed."""
        if self.bins is None:
            self.bins = self.client.bins(self.problem.id)
            bins, view = self.bins, self.view
            # Every identity of this process relays before any of them sends — also
            # those that stopped taking part (relaying releases nothing of their own).
            for p in self.participants:
                if p.relay_key is not None and not p.relaying:
                    try:
                        p.open_round(bins, view)
                    except (Aborted, AnonMLError) as exc:
                        if p.active:
                            self._abort(p, str(exc))
                        else:
                            log.warning("identity %s cannot relay: %s", p.node.fingerprint[:12], exc)
        bins = self.bins
        if self._bins_bundle is None:
            self._bins_bundle = self._bundle("bins")
            if self._bins_bundle is not None:
                bundle = self._bins_bundle
                self._each(lambda p: p.check_bins(bins, bundle),
                           [p for p in self.participants if p.active and p.view is not None])
        if phase == "reporting" and self._bins_bundle is not None:
            self._each(lambda p: self._start(p, bins),
                       [p for p in self.participants
                        if p.active and p.roster_confirmed and p.bins_checked and not p.built])
        if time.time() >= bins.t_s + bins.delta:
            for p in self.participants:
                if p.active and not p.built:
                    self._abort(p, "the roster fingerprint could not be compared with another member, "
                                   "or the bins were not co-signed, before the send window closed")

    def _bundle(self, stage: str) -> CosignatureBundle | None:
        """The stage's cosignature bundle, or None while the aggregator is still collecting it (404)."""
        try:
            return self.client.cosignatures(self.problem.id, stage)
        except HTTPRefusal as exc:
            if exc.status == 404:
                return None
            raise

    def _start(self, p: Participant, bins: Bins) -> None:
        for when, url, packet in p.build_packets(bins):
            self.host.dispatcher.at(when, lambda p=p, url=url, packet=packet: self._send(p, url, packet))
        self._record(p)

    def _send(self, p: Participant, url: str, packet: bytes) -> None:
        try:
            p.send(url, packet)
            self.host.count("packets sent")
        except Exception as exc:  # the first hop is down or refused: counted, the round goes on
            self.host.count("packets not sent")
            log.warning("packet of %s to %s not sent: %s", p.node.fingerprint[:12], url, exc)


class Worker:
    """The daemon's loop (module docstring); one thread."""

    def __init__(self, host: SessionHost) -> None:
        self.host = host
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, name="peer-worker", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=30)

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                self.host.poll_once()
            except Exception:  # an aggregator being down must not end the daemon
                log.exception("poll failed")
            self._stop.wait(self.host.poll_seconds)
