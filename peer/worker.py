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

from anonml.database import storage_failure
from anonml.errors import AnonMLError, ProtocolError
from anonml.outbound import OutboundError
from anonml.phases import AFTER_ROUND_PHASES, MODEL_PHASES, ProblemPhase
from anonml.protocol import (
    MAX_BATCH_ITEMS,
    Assignment,
    Bins,
    CosignatureBundle,
    MedianQuery,
    Problem,
    Registration,
    RosterWitness,
)
from peer import calibration_answer, median_answer
from peer.client import AggregatorClient, HTTPRefusal, retry_wait, transient
from peer.db import PeerDB
from peer.discovery import poll_backoff
from peer.dispatch import Dispatcher
from peer.first_hop import FirstHopSender
from peer.host_watch import RelayHostWatch
from peer.model_step import fetch_for_host
from peer.participant import READY, Aborted, Participant
from peer.phases import ParticipationPhase
from peer.roster import RosterView
from peer.transcript import check_roster_entries

__all__ = ["ProblemSession", "SessionHost", "Worker"]

P = ParticipationPhase

log = logging.getLogger("anonml.peer")

#: Identities that fetch their tokens in one poll while the median rounds run.
TOKENS_PER_POLL = 64
#: Identities outside the median pool that compare roster fingerprints in one poll while the median
#: questions are still to come or open (:data:`MEDIANS_AHEAD`); from the round on, all that are left.
#: A 333-identity host took 2.0-2.8 s for all of them in one poll, and a median step waited that long.
COMPARISONS_PER_POLL = 64
#: The phases in which the median pool compares first and the others' comparisons are bounded.
MEDIANS_AHEAD = (ProblemPhase.WITNESSING, ProblemPhase.MEDIANS)
#: In the medians phase a poll's bounded work (comparisons, tokens) goes this many identities at a
#: time, and between two such chunks the host looks for a question opened meanwhile while any of its
#: median pool is still unasked: a step's next question waits for one chunk, not for the whole poll
#: (a 1,000-peer round's later steps took 1.6-2.1 s each, most of it the rest of the poll before).
QUESTION_CHECK_EVERY = 16

#: Seconds a host keeps asking for the receipts once the model is out (an aggregator that restarts
#: answers within seconds to a minute; after this the identities end with "lost: not known").
RECEIPTS_WAIT_SECONDS = 300.0


class SessionHost(Protocol):
    """What a session and the worker need from the process hosting them (:class:`peer.host.PeerHost`)."""

    db: PeerDB
    pool: Executor
    dispatcher: Dispatcher
    poll_seconds: float

    def count(self, what: str, n: int = 1) -> None: ...

    def publish_witness(self, node_id: bytes, witness: RosterWitness) -> None: ...

    def poll_once(self, wait: float | None = None) -> None: ...


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
        self.phase = ProblemPhase.REGISTRATION
        self.finished = False
        # Transient failures (peer.client.transient): a step that met one is tried again after a
        # jittered backoff, never ended for it; a participation in a streak is logged once.
        self.failures = 0
        self.next_try = 0.0
        self.last_error = ""
        self._refusal = ""
        self._streak: set[int] = set()
        self._model_seen: float | None = None
        # Calibration-pool identities this process has put the question to (each once: a second ask
        # would only resend its stored answer, and count a refused duplicate at the aggregator).
        self._calibration_asked: set[int] = set()
        self.relay_hosts = RelayHostWatch(self)  # relay hosts found dead in the send window
        self.sender = FirstHopSender(host, self.relay_hosts)

    def due(self) -> bool:
        """Whether the step is tried in this poll (not while backing off after a transient failure)."""
        return time.monotonic() >= self.next_try

    def failed(self, exc: BaseException) -> None:
        """The step met ``exc``: a transient one is tried again after :func:`~peer.client.retry_wait`
        (the aggregator's Retry-After, if it gave one, plus jittered backoff)."""
        if transient(exc):
            self.last_error = str(exc)
            self.host.count("aggregator calls retried")
            self.next_try = time.monotonic() + retry_wait(self.failures, exc)
            if self.failures == 0:
                log.warning("%s: the aggregator did not answer, tried again with backoff: %s",
                            self.problem.id, exc)
            self.failures += 1
        elif str(exc) != self._refusal:  # a refusal of the whole step: said once, tried at the next poll
            self._refusal = str(exc)
            log.warning("%s: step refused, tried again at the next poll: %s", self.problem.id, exc)

    def answered(self) -> None:
        if self.failures:
            log.info("%s: the aggregator answers again after %d failed steps", self.problem.id, self.failures)
        self.failures = 0

    def _each(self, fn: Callable[[Participant], object], who: Iterable[Participant] | None = None) -> None:
        """Run ``fn`` for every active participant in parallel; abort those that fail."""
        targets = [p for p in (who if who is not None else self.participants) if p.active]

        def guarded(p: Participant) -> None:
            try:
                fn(p)
            except AnonMLError as exc:
                if transient(exc):  # not an answer: the participation stays, the next poll tries again
                    self._deferred(p, str(exc), "aggregator calls retried", f"no answer, tried again: {exc}")
                    return
                if isinstance(exc, HTTPRefusal):
                    p.abort(f"aggregator refused: {exc.detail} (HTTP {exc.status})")
                else:
                    p.abort(str(exc))
            except Exception as exc:
                full = storage_failure(exc)
                if full is None:
                    raise
                # The state DB cannot write (a full disk): the move was undone (Participant._move),
                # so the step is taken again at the next poll, as after an unanswered call.
                self._deferred(p, f"state database: {full}", "steps deferred: state database cannot write",
                               f"its state cannot be saved ({full}), tried again")
            else:
                self._streak.discard(id(p))

        list(self.host.pool.map(guarded, targets))

    def _deferred(self, p: Participant, error: str, counter: str, said: str) -> None:
        """``p``'s step is tried again at the next poll: counted, and logged once per streak."""
        self.last_error = error
        self.host.count(counter)
        if id(p) not in self._streak:
            self._streak.add(id(p))
            log.warning("identity %s in %s: %s", p.node.fingerprint[:12], self.problem.id, said)

    def _in(self, *phases: ParticipationPhase) -> list[Participant]:
        return [p for p in self.participants if p.phase in phases]

    def step(self) -> None:
        """Advance every participant as far as the problem's phase allows."""
        status = self.client.status(self.problem.id)
        self.phase = status.phase
        if status.phase == ProblemPhase.REGISTRATION:
            self._register(self._in(P.ACCEPTED))
            return
        if status.phase == ProblemPhase.FAILED:
            for p in self.participants:
                p.fail(f"the problem failed: {status.message}")
            self.finished = True
            return
        for p in self._in(P.ACCEPTED):  # registration closed before these got in
            p.abort("registration closed before this identity registered")
        # Checked again while an identity still waits for its roster check (its assignment did not
        # arrive: the aggregator was unreachable), until the send window's end aborts it.
        unchecked = self._in(P.REGISTERED) or any(p.needs_roster for p in self.participants)
        if (self.view is None or unchecked) and not self._check_roster():
            return
        # Every identity of this process has published its witness; members hosted
        # elsewhere that have not yet are asked again at the next poll.
        hosted = self._hosted_members()
        unconfirmed = self._in(P.ROSTER_CHECKED)
        queries = self.client.medians(self.problem.id) if status.phase == ProblemPhase.MEDIANS else []
        if status.phase in MEDIANS_AHEAD:
            # A median step waits for its whole group: the median pool (and anyone a query names)
            # compares and answers first, and the others' comparisons, two requests each, go
            # COMPARISONS_PER_POLL a poll, in chunks between which the host looks for the next
            # question. Every named identity answers or, outside the pool, aborts.
            first: list[Participant] = []
            rest: list[Participant] = []
            for p in unconfirmed:
                (first if p.in_median_pool or median_answer.named_in(p, queries) else rest).append(p)
            self._answer_named(queries, first, hosted)
            # Those asked least first: one whose drawn members cannot answer yet waits its turn.
            unconfirmed = sorted(rest, key=lambda p: len(p.comparisons.asked))[:COMPARISONS_PER_POLL]
        self._each_between_questions(lambda p: p.compare_fingerprints(hosted), unconfirmed, status.phase)
        ready = self._in(*READY)
        if status.phase == ProblemPhase.MEDIANS:
            # Asked, but not ready to answer (its confirmation could not be saved yet: a full disk):
            # if it is still unanswered when the round opens, it ends partial with the reason.
            for p in self.participants:
                if p.phase not in READY and p.active and median_answer.named_in(p, queries):
                    p.medians_missed = True
        if status.phase == ProblemPhase.MEDIANS:
            # Ahead of the round: routes (certificates checked) and tokens (issuance is open);
            # a bounded number per poll, so polls stay short and median queries are answered.
            # Once reporting, whoever is left prepares as it builds its packets, after every
            # relay of the host is open.
            todo = [p for p in ready if p.preparation is None]
            self._each_between_questions(lambda p: p.prepare_round(), todo[:TOKENS_PER_POLL], status.phase)
        if status.phase in (ProblemPhase.REPORTING, *AFTER_ROUND_PHASES):
            self._report_round(status.phase)
        if status.phase == ProblemPhase.CALIBRATING:
            self._calibrate()
        if status.phase in MODEL_PHASES and status.model_available:  # degraded: published all the same
            document = self.client.model(self.problem.id)
            degraded = status.phase == ProblemPhase.DEGRADED
            taking = self._in(P.REPORTING, P.CALIBRATED)
            fetched = fetch_for_host(self.client, self.problem, taking, self.host.count)
            self.last_error = fetched.error or self.last_error
            if fetched.awaited and time.monotonic() < self._receipts_until():
                # Not the end: counted against the receipts (or the sender's count is wrong), and
                # the median questions asked (or a missed one is not said). The step is tried again
                # (with backoff) until RECEIPTS_WAIT_SECONDS have passed.
                missing = " and ".join(fetched.awaited)
                raise OutboundError(f"{self.problem.id}: {missing} not available yet ({fetched.error})")
            self._each(lambda p: median_answer.note_unanswered(p, fetched.asked), taking)
            self._each(lambda p: calibration_answer.note_unanswered(p, fetched.calibration), taking)
            receipts = fetched.receipts
            self._each(lambda p: p.receive_model(document, degraded=degraded, receipts=receipts))
            self.finished = True

    def _answer_named(
        self, queries: list[MedianQuery], unconfirmed: list[Participant], hosted: frozenset[int]
    ) -> None:
        """``unconfirmed`` compare fingerprints; then every ready identity a query names answers it
        (one outside the pool aborts), the answers sent together
        (:func:`peer.median_answer.send_together`)."""
        self._each(lambda p: p.compare_fingerprints(hosted), unconfirmed)
        signed: list[median_answer.SignedAnswer] = []

        def sign(p: Participant) -> None:
            mine = [a for a in (p.sign_answer(q) for q in queries) if a is not None]
            signed.extend(mine)  # one call on a list: whole under the GIL, as _register's dict stores

        self._each(sign, [p for p in self._in(*READY) if median_answer.named_in(p, queries)])
        if signed:
            left = median_answer.send_together(self.client, signed)
            self._each(lambda p: left[id(p)](), [s.participation for s in signed])

    def _each_between_questions(
        self, fn: Callable[[Participant], object], who: list[Participant], phase: ProblemPhase
    ) -> None:
        """:meth:`_each` over ``who``; in the medians phase :data:`QUESTION_CHECK_EVERY` at a time,
        answering after each chunk the questions opened meanwhile while a pool member is unasked.

        A named identity whose comparison could not finish yet (members it drew, on other hosts, had
        not checked the roster) tries again there too: its step waits for it. Looking is best
        effort: a transient failure leaves the questions to the next poll.
        """
        start = 0
        while start < len(who):
            if phase != ProblemPhase.MEDIANS or not self._pool_unasked():
                self._each(fn, who[start:])
                return
            self._each(fn, who[start : start + QUESTION_CHECK_EVERY])
            start += QUESTION_CHECK_EVERY
            try:
                queries = self.client.medians(self.problem.id)
            except AnonMLError as exc:
                if not transient(exc):
                    raise
                self._each(fn, who[start:])  # the work goes on; the questions wait for the next poll
                return
            named = [p for p in self._in(P.ROSTER_CHECKED) if median_answer.named_in(p, queries)]
            self._answer_named(queries, named, self._hosted_members())

    def _pool_unasked(self) -> bool:
        """Whether a hosted median pool member has not answered yet (and so may still be asked)."""
        waiting = (P.ROSTER_CHECKED, P.CONFIRMED)
        return any(p.phase in waiting and p.active and p.in_median_pool for p in self.participants)

    def _register(self, who: list[Participant]) -> None:
        """Register ``who``: each signs its own registration (in parallel), sent
        :data:`~anonml.protocol.MAX_BATCH_ITEMS` to a request.

        Each result is what the identity's own request would have got: stored
        (→ registered) or refused (→ aborted with the reason). An aggregator
        without the batch route (404/405) gets one request per identity. A
        batch that got no answer is sent again at the next poll, the same
        signed documents (:meth:`~peer.participant.Participant.registration`):
        an identity whose earlier copy was stored then gets 409 "already
        registered" for its own registration and counts as registered — only
        it signs registrations for itself, and its roster check still requires
        the roster to list exactly the relay URL and key it sent.
        """
        signed: dict[int, Registration] = {}
        resent: set[int] = {id(p) for p in who if p.registration_sent}

        def sign(p: Participant) -> None:
            signed[id(p)] = p.registration()

        self._each(sign, who)
        ready = [p for p in who if p.active and id(p) in signed]
        for start in range(0, len(ready), MAX_BATCH_ITEMS):
            chunk = ready[start : start + MAX_BATCH_ITEMS]
            try:
                answer = self.client.register_batch(self.problem.id, [signed[id(p)] for p in chunk])
            except HTTPRefusal as exc:
                if exc.status not in (404, 405):
                    raise
                self._each(lambda p: (self.client.register(signed[id(p)]), p.registered()), chunk)
                continue
            self.host.count("registrations sent in batches", len(chunk))
            taken = []
            for p, result in zip(chunk, answer.results, strict=True):
                if result.status == 201 or (result.status == 409 and id(p) in resent
                                            and "already registered" in result.detail):
                    taken.append(p)
                else:
                    p.abort(f"aggregator refused: {result.detail} (HTTP {result.status})")
            # Each on its own: one whose state cannot be saved now is sent again at the next poll
            # ("already registered" then), without keeping the others from being recorded.
            self._each(lambda p: p.registered(), taken)
        # Only now the example, off this thread: neither this registration nor the next poll
        # waits for the person's data (Participant.prepare).
        for p in who:
            if p.phase == P.REGISTERED:
                self.host.pool.submit(p.compute_example)

    def _check_roster(self) -> bool:
        """Verify the roster once for the process, then each identity's own checks; False to wait."""
        if self._unwitnessed is None:
            view = RosterView.verify(self.client.roster(self.problem.id), self.problem)
            try:
                check_roster_entries(view.roster, self.problem)
            except ProtocolError as exc:
                for p in self.participants:
                    p.abort(str(exc))
                self.finished = True
                return False
            self._unwitnessed = view
        bundle = self._bundle("roster")
        if bundle is None:
            return False  # the witnesses have not all co-signed yet: nothing is released meanwhile
        self.view = view = self._unwitnessed
        fresh = self._in(P.REGISTERED)
        restored = [p for p in self.participants if p.needs_roster]
        notices = self._assignments([*fresh, *restored])
        self._each(lambda p: p.check_roster(view, bundle, notices.get(p.node.fingerprint)), fresh)
        medians_open = (ProblemPhase.REGISTRATION, ProblemPhase.WITNESSING, ProblemPhase.MEDIANS)
        if self.phase not in medians_open:  # checked after the medians
            for p in fresh:
                p.medians_missed = True
        self._each(lambda p: p.restore_roster(view, bundle, notices.get(p.node.fingerprint)), restored)
        for p in self.participants:
            if p.witness is not None:
                self.host.publish_witness(p.node.node_id, p.witness)
        return True

    def _hosted_members(self) -> frozenset[int]:
        """Roster indices of this process's identities: they share its one verified view, so the
        fingerprint comparison sends requests only to members hosted elsewhere
        (:func:`peer.roster_checks.compare_fingerprints`)."""
        view = self.view
        if view is None:
            return frozenset()

        def hosted() -> frozenset[int]:
            mine = (view.index_of.get(bytes(p.node.identity.public)) for p in self.participants)
            return frozenset(i for i in mine if i is not None)

        # The view is this session's own. Identities join a session only while registration is
        # open: after the roster, its count is fixed.
        return view.memo(("hosted", len(self.participants)), hosted)

    def _assignments(self, who: list[Participant]) -> dict[str, Assignment]:
        """The signed assignments of ``who``, fetched together (one request per
        :data:`~anonml.protocol.MAX_BATCH_ITEMS` identities, not one each).

        Only the identities on the roster are asked (one absent would fail the
        batch; it finds out in its own check, which then asks alone). A batch
        the aggregator refuses leaves each identity to ask for its own.
        """
        view = self._unwitnessed
        if view is None:  # called only once the roster was fetched: nothing to ask for yet
            return {}
        asked = [
            p.node.fingerprint for p in who if bytes(p.node.identity.public) in view.index_of
        ]
        if not asked:
            return {}
        try:
            notices = self.client.assignments(self.problem.id, asked)
            self.host.count("assignments fetched in batches", len(notices))
            return notices
        except AnonMLError as exc:
            if transient(exc):  # the aggregator is down: one request each would fail the same way
                raise
            self.host.count("assignment batches refused")
            log.warning("assignments of %d identities not fetched together: %s", len(asked), exc)
            return {}

    def _report_round(self, phase: str) -> None:
        """Relay from the moment the bins are out; send once the roster is confirmed."""
        if self.bins is None:
            self.bins = self.client.bins(self.problem.id)
            bins, view = self.bins, self.view
            # Every identity of this process relays before any of them sends — also
            # those that stopped taking part (relaying releases nothing of their own).
            # In parallel: each opens its relay with its own key (its stored replay tags
            # and relay count are read from the state DB), and all are open before any sends.

            def open_one(p: Participant) -> None:
                # (a sender-only identity has no relay key: it only takes the bins)
                if (p.relay_key is None and p.relays) or p.relaying or time.time() >= bins.t_r:
                    return
                try:
                    p.open_round(bins, view)
                except (Aborted, AnonMLError) as exc:
                    if p.active:
                        p.abort(str(exc))
                    else:
                        log.warning("identity %s cannot relay: %s", p.node.fingerprint[:12], exc)

            list(self.host.pool.map(open_one, self.participants))
        bins = self.bins
        if self._bins_bundle is None:
            self._bins_bundle = self._bundle("bins")
        if self._bins_bundle is not None:
            # Every poll: an identity whose roster check was retried (its assignment did not arrive at
            # first) checks the bins once it holds its roster, after the bundle was fetched.
            bundle = self._bins_bundle
            self._each(lambda p: p.check_bins(bins, bundle),
                       [p for p in self.participants if p.active and p.roster is not None and p.bins is None])
        if phase == ProblemPhase.REPORTING and self._bins_bundle is not None:
            self._each(self._start, [p for p in self._in(P.RELAYING) if p.bins is not None])
            self.relay_hosts.watch(bins)
        if time.time() >= bins.t_s + bins.delta:
            unanswered = f" (last unanswered call: {self.last_error})" if self.last_error else ""
            for p in self.participants:
                if p.active and not p.built:
                    p.abort("the roster was not checked and compared with another member, its assignment "
                            "or tokens did not arrive, or the bins were not co-signed, before the send "
                            f"window closed{unanswered}")

    def _calibrate(self) -> None:
        """Calibration-pool identities of this host answer the question (fetched once for them all;
        never by a host without one: the download says nothing of any identity's data)."""
        pool = [
            p
            for p in self._in(P.REPORTING, P.CALIBRATED)
            if p.in_calibration_pool and id(p) not in self._calibration_asked
        ]
        if not pool:
            return
        request = self.client.calibration(self.problem.id)

        def ask(p: Participant) -> None:
            p.answer_calibration(request)  # a calibrated one (resumed after a restart) resends once
            if not p.awaits_calibration_choice(request):  # K >= 3 choice half: asked at a later poll
                self._calibration_asked.add(id(p))  # not when it raised: tried again at the next poll

        self._each(ask, pool)

    def _receipts_until(self) -> float:
        """When this host stops waiting for the receipts and the median queries asked (monotonic):
        :data:`RECEIPTS_WAIT_SECONDS` after the model was first seen published."""
        if self._model_seen is None:
            self._model_seen = time.monotonic()
        return self._model_seen + RECEIPTS_WAIT_SECONDS

    def _bundle(self, stage: str) -> CosignatureBundle | None:
        """The stage's cosignature bundle, or None while the aggregator is still collecting it (404)."""
        try:
            return self.client.cosignatures(self.problem.id, stage)
        except HTTPRefusal as exc:
            if exc.status == 404:
                return None
            raise

    def _start(self, p: Participant) -> None:
        self.schedule(p, [(slot, *packet) for slot, packet in enumerate(p.build_packets())])

    def schedule(self, p: Participant, packets: Iterable[tuple[int, float, str, bytes]]) -> None:
        """Send each ``(slot, time, first hop, packet)`` at its time (:meth:`FirstHopSender.schedule`)."""
        self.sender.schedule(p, packets)


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
        """Poll every ``poll_seconds``; after failures, back off (doubling, at most 30 s)."""
        failures = 0
        while not self._stop.is_set():
            try:
                self.host.poll_once(wait=self.host.poll_seconds)
                failures = 0
            except AnonMLError as exc:  # an aggregator being down must not end the daemon
                failures += 1
                log.warning("poll failed (%d in a row): %s", failures, exc)
            except Exception:  # a bug: its traceback, once per failure streak
                failures += 1
                if failures == 1:
                    log.exception("poll failed")
            self._stop.wait(poll_backoff(self.host.poll_seconds, failures))
