"""The phase machine: registration → witnessing → medians → reporting → training → (calibrating →) model.

One :class:`RoundDriver` thread per aggregator process moves every active problem on each
``tick_seconds`` (only while it holds the phase lease, :class:`aggregator.lease.PhaseLease`); each
tick is guarded, so an error fails the one problem it came from and the loop never dies. What each
phase does, and how a restarted or taken-over process resumes from the database:
docs/protocol.md, "Aggregator: the phase machine".
"""

from __future__ import annotations

import json
import logging
import threading
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import ColumnElement, func, select, update
from sqlalchemy.orm import Session, object_session

from aggregator.calibration_round import Calibrator, ask
from aggregator.db import (
    MedianAnswerRow,
    ProblemRow,
    RegistrationRow,
    ReportRow,
    count_reports,
    publish_document,
    published,
    read_document,
    settle_reports,
    wipe_log,
)
from aggregator.lease import LeaseLost, PhaseLease
from aggregator.medians import MedianRun
from aggregator.routes.problems import median_account, problem_account
from aggregator.state import AggregatorState, MissingProblemFact, ProblemContext
from aggregator.storage import storage_failure
from aggregator.timeline import Sampler
from aggregator.training import expected_reports, report_round_over
from anonml.crypto import CryptoError, TokenKey
from anonml.errors import AnonMLError
from anonml.model import FeatureKind
from anonml.outbound import OutboundError, fetch
from anonml.phases import (
    ACTIVE_PHASES,
    FINISHED_PHASES,
    RETRAINABLE_PHASES,
    ProblemPhase,
    check_problem_transition,
)
from anonml.protocol import (
    AdmissionCredential,
    Bins,
    Cosignature,
    CosignatureBundle,
    CosignRequest,
    ModelDocument,
    Roster,
    RosterEntry,
    TranscriptStatement,
    WitnessRef,
    roster_beacon,
    sign_message,
    transcript_hash,
    verify_message,
    witness_vrf_output,
)

__all__ = ["RoundDriver"]

log = logging.getLogger("anonml.aggregator")


#: Largest witness answer read (a cosignature is about 600 bytes).
MAX_WITNESS_RESPONSE = 16 * 1024


class RoundDriver:
    """Moves every active problem through its phases while this process holds the lease (docs/protocol.md).

    Parameters
    ----------
    state : AggregatorState
        The process's state.
    lease : PhaseLease or None
        The phase lease (default: a new holder on ``state.engine`` with
        ``settings.lease_seconds``).
    """

    def __init__(self, state: AggregatorState, lease: PhaseLease | None = None) -> None:
        self.state = state
        self.lease = lease or PhaseLease(state.engine, state.settings.lease_seconds)
        self._stop = threading.Event()  # the process is stopping
        self._halt = threading.Event()  # set while this process must not advance phases
        self._halt.set()
        self._thread: threading.Thread | None = None
        self._keeper: threading.Thread | None = None
        self._medians: dict[str, MedianRun] = {}
        self.trainer = Trainer(self)
        self.calibrator = Calibrator(self)
        self.witnesses = WitnessCollection(self)
        self.sampler = Sampler()

    @property
    def stopping(self) -> bool:
        """True when this process must not advance phases: it stops, or does not hold the lease."""
        return self._halt.is_set() or not self.lease.held

    def wait(self, seconds: float) -> bool:
        """Sleep ``seconds`` unless the driver halts first; True if it must stop."""
        return self._halt.wait(seconds) or not self.lease.held

    def start(self) -> None:
        self._keeper = threading.Thread(target=self._keep_lease, name="aggregator-lease", daemon=True)
        self._keeper.start()
        self._thread = threading.Thread(target=self._loop, name="aggregator-rounds", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._halt.set()
        with self.state.answers:
            self.state.answers.notify_all()
        for loop in (self._thread, self._keeper):
            if loop is not None:
                loop.join(timeout=10)
        for run in list(self._medians.values()):
            for thread in run.threads:
                thread.join(timeout=5)
        for thread in list(self.trainer.threads.values()):
            thread.join(timeout=30)
        for thread in list(self.calibrator.threads.values()):
            thread.join(timeout=30)
        for thread in list(self.witnesses.threads.values()):
            thread.join(timeout=15)
        try:
            self.lease.release()  # another worker takes over at once
        except Exception:
            log.exception("releasing the phase lease failed; another worker takes it at its expiry")

    # -- lease --------------------------------------------------------------------
    def _keep_lease(self) -> None:
        """Take or renew the lease every ``renew_every`` (every second while another holds it)."""
        while True:
            try:
                self.lease.acquire()
            except Exception as exc:  # the database unreachable: held at most until the last renewal expires
                reason = storage_failure(exc)
                if reason is not None:  # a full disk: said once for the streak (aggregator.storage)
                    self.state.storage.failed(reason, "renewing the phase lease")
                else:
                    log.warning("taking or renewing the phase lease failed (%s: %s)",
                                exc.__class__.__name__, exc)
            else:
                if self.lease.held:  # the renewal wrote and committed: the disk takes writes
                    self.state.storage.recovered()
            pause = self.lease.renew_every if self.lease.held else min(1.0, self.lease.renew_every)
            if self._stop.wait(pause):
                return

    def _threads(self) -> list[threading.Thread]:
        runs = [t for run in list(self._medians.values()) for t in run.threads]
        return [
            *runs,
            *list(self.trainer.threads.values()),
            *list(self.calibrator.threads.values()),
            *list(self.witnesses.threads.values()),
        ]

    def _take_over(self) -> bool:
        """Start advancing phases once every thread of an earlier tenure has ended; True when started."""
        if any(t.is_alive() for t in self._threads()):
            return False
        self._medians.clear()
        self.trainer.threads.clear()
        self.calibrator.threads.clear()
        self.witnesses.threads.clear()
        self._halt.clear()
        log.info("this process drives the phases now (lease holder %s)", self.lease.holder)
        return True

    def _step_down(self) -> None:
        self._halt.set()
        with self.state.answers:
            self.state.answers.notify_all()
        log.warning("the phase lease is not held any more: this process stops advancing phases")

    # -- loop ---------------------------------------------------------------------
    def _loop(self) -> None:
        """Tick while the lease is held; every problem resumes from the database on take-over."""
        while not self._stop.wait(self.state.settings.tick_seconds):
            if not self.lease.held:
                if not self._halt.is_set():
                    self._step_down()
                continue
            if self._halt.is_set() and not self._take_over():
                continue
            self.tick()

    def tick(self) -> None:
        """Advance every active problem once; no error escapes (the loop must outlive it).

        A problem whose step raises is failed with the reason; when even that
        or the listing fails (e.g. the database is unreachable or its pool
        exhausted), the error is logged and the next tick tries again.
        """
        try:
            pids = self._active()
        except Exception:
            log.exception("listing the active problems failed; retrying at the next tick")
            return
        for pid in pids:
            if self.stopping:
                return
            try:
                self.advance(pid)
                self._sample(pid)
            except LeaseLost as exc:
                log.warning("problem %s not advanced: %s", pid, exc)
                return
            except Exception as exc:  # one broken problem must not stop the others
                reason = storage_failure(exc)
                if reason is not None:  # the disk refused the step: the same step at the next tick
                    self.state.storage.failed(reason, f"advancing problem {pid}")
                    continue
                log.exception("problem %s failed", pid)
                try:
                    self._fail(pid, f"internal error: {exc}")
                except LeaseLost:
                    return
                except Exception:
                    log.exception("recording the failure of %s failed; retrying at the next tick", pid)

    def _sample(self, pid: str) -> None:
        """Store the problem's public counts for the console's charts when they changed
        (:class:`aggregator.timeline.Sampler`); a failure is logged and never stops the round."""
        try:
            with self.state.sessions() as s:
                self.sampler.record(s, pid, time.time())
        except Exception as exc:
            reason = storage_failure(exc)
            if reason is not None:  # a full disk: said once for the streak (aggregator.storage)
                self.state.storage.failed(reason, f"sampling the counts of {pid}")
            else:
                log.exception("sampling the counts of %s failed; the next tick tries again", pid)

    def _all_reports_in(self, pid: str, ctx: ProblemContext) -> bool:
        """Is every report the round expects stored (:func:`~aggregator.training.report_round_over`)?"""
        with self.state.sessions() as s:
            return count_reports(s, pid) >= expected_reports(ctx)

    def _active(self) -> list[str]:
        """Problems the loop looks at: active phases, and failed ones an admin asked to retrain."""
        with self.state.sessions() as s:
            return list(
                s.scalars(
                    select(ProblemRow.id).where(
                        ProblemRow.phase.in_(ACTIVE_PHASES)
                        | ((ProblemRow.phase == ProblemPhase.FAILED) & ProblemRow.train_requested.is_(True))
                    )
                )
            )

    def advance(self, pid: str) -> None:
        """Look at one problem and take the step its phase and the clock call for."""
        with self.state.sessions() as s:
            row = s.get(ProblemRow, pid)
            if row is None:
                return
            phase, close, train, t_r = row.phase, row.close_requested, row.train_requested, row.t_r
            since = row.phase_started
            bins_pending = row.bins_cosignatures_json is None and published(s, pid)["bins"]
        ctx = self.state.require_context(pid)
        now = time.time()
        if phase == ProblemPhase.REGISTRATION:
            deadline = ctx.problem.draft.schedule.registration_deadline.timestamp()
            if close or now >= deadline:
                self._close_registration(pid)
        elif phase == ProblemPhase.WITNESSING and (pid, "roster") not in self.witnesses.threads:
            self.witnesses.start_roster(pid)
        elif phase == ProblemPhase.MEDIANS:
            run = self._medians.get(pid)
            if run is None and (pid, "roster") in self.witnesses.threads:
                return  # the witnessing thread committed the phase and is starting the search
            if run is None:  # after a restart: replay the searches from the stored steps and answers
                log.info("problem %s: resuming its median searches from the database", pid)
                self._medians[pid] = MedianRun(self, ctx, since=since)
            elif run.done:
                del self._medians[pid]
                if run.errors:
                    self._fail(pid, "; ".join(run.errors))
                else:
                    self._publish_bins(pid, run.thresholds)
        elif phase == ProblemPhase.REPORTING:
            grace = self.state.settings.intake_grace_seconds
            if train or report_round_over(t_r, grace, now, lambda: self._all_reports_in(pid, ctx)):
                self.trainer.start(pid)
            elif bins_pending and (pid, "bins") not in self.witnesses.threads and ctx.bins is not None:
                self.witnesses.start_bins(pid, ctx.bins)  # after a restart; idempotent at the witnesses
        elif phase == ProblemPhase.TRAINING and pid not in self.trainer.threads:
            self.trainer.resume(pid)
        elif phase == ProblemPhase.CALIBRATING:
            self.calibrator.resume(pid)  # after the trainer asked, a restart or a take-over
        elif phase in FINISHED_PHASES and train:
            self.trainer.start(pid)

    # -- transitions --------------------------------------------------------------
    def _enter(self, row: ProblemRow, phase: ProblemPhase, message: str | None = None) -> None:
        """Move ``row`` to ``phase`` inside its session's transaction, guarded by the lease; only a
        move :data:`~anonml.phases.PROBLEM_TRANSITIONS` lists (else :class:`IllegalProblemTransition`)."""
        check_problem_transition(row.phase, phase)
        session = object_session(row)
        if session is None:
            raise MissingProblemFact(f"problem {row.id}: phases change in the transaction that read it")
        self.lease.guard(session)
        now = time.time()
        seconds = json.loads(row.phase_seconds_json)
        seconds[row.phase] = round(now - row.phase_started, 6)
        row.phase_seconds_json = json.dumps(seconds)
        row.phase, row.phase_started = phase, now
        if message is not None:
            row.message = message

    def _fail(self, pid: str, message: str) -> None:
        with self.state.sessions() as s, s.begin():
            row = s.get(ProblemRow, pid)
            if row is not None and row.phase != ProblemPhase.FAILED:
                self._enter(row, ProblemPhase.FAILED, message)

    def _fail_quietly(self, pid: str, message: str) -> None:
        """:meth:`_fail` from a worker thread: a lost lease or a database error is logged, not raised."""
        try:
            self._fail(pid, message)
        except LeaseLost as exc:
            log.warning("problem %s not failed (%s): %s", pid, message, exc)
        except Exception:
            log.exception("recording the failure of %s failed; the next holder's tick retries it", pid)

    def _close_registration(self, pid: str) -> None:
        """Close registration in three steps, so no write lock is held across the CPU work between them.

        1. A one-statement write transaction sets ``close_requested``: registrations that commit
           after it are refused (they re-read the flag under the write lock, or ``FOR SHARE`` on
           PostgreSQL), so the registered set is final from here on.
        2. Without a transaction: read the registrations, build and sign the roster, check the
           partition plan (its first call imports scikit-learn: 12–17 s under ``stress-ng --cpu 2``,
           which the write lock used to span, blocking the lease's renewal — issue 26) and fix the
           round's schedule.
        3. One write transaction, guarded by the lease, publishes the roster (or fails the problem)
           if the problem is still in registration.

        A crash or a lost lease between 1 and 3 leaves the problem in registration with
        ``close_requested`` set, so the next holder's tick closes it again from step 1.
        """
        state = self.state
        with state.sessions() as s, s.begin():
            if _take(s, pid, ProblemRow.phase == ProblemPhase.REGISTRATION, close_requested=True) is None:
                return
        outcome = self._roster_or_failure(pid)
        with state.sessions() as s, s.begin():
            row = _problem_row(s, pid)
            if row.phase != ProblemPhase.REGISTRATION:
                return  # another tenure closed it meanwhile
            if outcome.failure is not None:
                self._enter(row, ProblemPhase.FAILED, outcome.failure)
                return
            publish_document(s, pid, "roster", outcome.roster_json)
            self._enter(row, ProblemPhase.WITNESSING)
        self.witnesses.start_roster(pid)

    def _roster_or_failure(self, pid: str) -> _Closing:
        """The signed roster of the closed registration, or why the problem fails.

        Reads only, in no transaction; the CPU work of closing (signing, the plan, the JSON).
        """
        state = self.state
        with state.sessions() as s:
            row = _problem_row(s, pid)
            round_id, token_secret, seed = row.round_id, row.token_secret, row.seed
            ctx = state.require_context(pid, s)
            regs = list(
                s.scalars(
                    select(RegistrationRow)
                    .where(RegistrationRow.problem_id == pid)
                    .order_by(RegistrationRow.id)
                )
            )
        draft = ctx.problem.draft
        n = len(regs)
        if n < draft.min_peers:
            return _Closing(failure=f"only {n} peers registered; the problem needs {draft.min_peers}")
        relays = sum(1 for r in regs if r.relay_url is not None)
        # With sender-only members, a roster whose relays are too few for any relaying member's route
        # (`hops` relays other than itself) fails here, with the reason, rather than at every peer.
        # A roster of relaying members only is published as before (each peer's floors judge it).
        if relays < n and relays < draft.hops + 1:
            return _Closing(
                failure=f"only {relays} of the {n} registered peers relay (the others are sender-only); "
                f"routes of {draft.hops} relays need {draft.hops + 1}"
            )
        roster = sign_message(
            Roster(
                problem_id=pid,
                aggregator=state.public_identity,
                round_id=round_id,
                entries=tuple(
                    RosterEntry(
                        identity=r.identity,
                        relay_url=r.relay_url,
                        relay_certificate=r.certificate,
                        credential=None
                        if r.credential_json is None
                        else AdmissionCredential.model_validate_json(r.credential_json),
                        registration_signature=r.signature,
                    )
                    for r in regs
                ),
                token_key=bytes(TokenKey(token_secret).public_key),
                seed=seed,
                median_pool_size=draft.median_pool_size(n),
                signature=bytes(64),
            ),
            state.identity,
        )
        try:  # the sizes alone decide whether a plan exists; the beacon comes later
            ctx.plan_for(roster)
        except ValueError as exc:
            return _Closing(failure=f"cannot build the partition plan: {exc}")
        state.round_schedule(ctx, n)  # the waits of this round, sized for n members
        return _Closing(roster_json=roster.model_dump_json())

    def _publish_bins(self, pid: str, thresholds: dict[int, tuple[float, ...]]) -> None:
        state = self.state
        ctx = state.require_context(pid)
        draft = ctx.problem.draft
        sched = state.round_schedule(ctx, len(ctx.require_roster().entries))
        edges = tuple(
            tuple(thresholds.get(j, ())) if f.kind is FeatureKind.NUMERIC else ()
            for j, f in enumerate(draft.features)
        )
        witnessed = bool(draft.witnesses)
        t_s = time.time() + sched.report_delay_seconds + (sched.witness_seconds if witnessed else 0.0)
        t_r = t_s + sched.send_window_seconds + sched.release_window_seconds
        bins = sign_message(
            Bins(
                problem_id=pid,
                edges=edges,
                t_s=t_s,
                delta=sched.send_window_seconds,
                t_r=t_r,
                slots_per_peer=draft.kh,
                grace=state.settings.intake_grace_seconds,
                signature=bytes(64),
            ),
            state.identity,
        )
        with state.sessions() as s, s.begin():
            row = _problem_row(s, pid)
            publish_document(s, pid, "bins", bins.model_dump_json())
            if not witnessed:
                row.bins_cosignatures_json = CosignatureBundle(
                    problem_id=pid, stage="bins", cosignatures=()
                ).model_dump_json()
            row.t_r = t_r
            row.median_answered = int(
                s.scalar(
                    select(func.count()).select_from(MedianAnswerRow).where(MedianAnswerRow.problem_id == pid)
                )
                or 0
            )
            self._enter(row, ProblemPhase.REPORTING)
        if witnessed:
            self.witnesses.start_bins(pid, bins)


@dataclass(frozen=True)
class _Closing:
    """What closing registration publishes: the signed roster (JSON), or why the problem fails."""

    roster_json: str | None = None
    failure: str | None = None


class WitnessCollection:
    """A driver's collection of the declared witnesses' cosignatures on a problem's roster and bins
    transcripts, each stage in a thread of its own (docs/protocol.md, "Aggregator")."""

    def __init__(self, driver: RoundDriver) -> None:
        self.driver = driver
        self.threads: dict[tuple[str, str], threading.Thread] = {}  # (problem, stage) -> its collector

    def start_roster(self, pid: str) -> None:
        key = (pid, "roster")
        if key in self.threads:
            return
        thread = threading.Thread(
            target=self._witness_roster, args=(pid,), name=f"witness-{pid}", daemon=True
        )
        self.threads[key] = thread
        thread.start()

    def _witness_roster(self, pid: str) -> None:
        state = self.driver.state
        try:
            with state.sessions() as s:
                row = _problem_row(s, pid)
                roster_json = read_document(s, pid, "roster")
                if roster_json is None:
                    raise MissingProblemFact(f"problem {pid}: witnessing without a published roster")
                roster = Roster.model_validate_json(roster_json)
                since = row.phase_started
            ctx = state.require_context(pid)
            sched = ctx.problem.draft.schedule
            deadline = since + sched.roster_seconds + sched.witness_seconds
            bundle = self._collect(pid, "roster", transcript_hash("roster", ctx.problem, roster), deadline)
            if bundle is None:
                return
            beacon = roster_beacon(bundle.cosignatures)
            plan = ctx.plan_for(roster, beacon)  # CPU work (and scikit-learn's import): before the write
            cosignatures = bundle.model_dump_json()
            with state.sessions() as s, s.begin():
                row = _problem_row(s, pid)
                if row.phase != ProblemPhase.WITNESSING:
                    return
                row.roster_cosignatures_json = cosignatures
                self.driver._enter(row, ProblemPhase.MEDIANS)
            ctx = state.publish_roster(ctx, roster, beacon, plan)
            self.driver._medians[pid] = MedianRun(self.driver, ctx)
        except LeaseLost as exc:
            log.warning("roster cosignatures of %s not recorded: %s", pid, exc)
        except Exception as exc:  # a bug: keep the traceback, fail the problem with the reason
            log.exception("witnessing the roster of %s failed", pid)
            self.driver._fail_quietly(pid, f"witnessing the roster failed: {exc}")
        finally:
            self.threads.pop((pid, "roster"), None)

    def _witness_bins(self, pid: str, bins: Bins) -> None:
        state = self.driver.state
        try:
            ctx = state.require_context(pid)
            transcript = transcript_hash("bins", ctx.problem, ctx.require_roster(), bins)
            bundle = self._collect(pid, "bins", transcript, bins.t_s)
            if bundle is None:
                return
            with state.sessions() as s, s.begin():
                self.driver.lease.guard(s)
                row = s.get(ProblemRow, pid)
                if row is not None and row.phase == ProblemPhase.REPORTING:
                    row.bins_cosignatures_json = bundle.model_dump_json()
        except LeaseLost as exc:
            log.warning("bins cosignatures of %s not recorded: %s", pid, exc)
        except Exception as exc:
            log.exception("witnessing the bins of %s failed", pid)
            self.driver._fail_quietly(pid, f"witnessing the bins failed: {exc}")
        finally:
            self.threads.pop((pid, "bins"), None)

    def _collect(self, pid: str, stage: str, transcript: bytes, deadline: float) -> CosignatureBundle | None:
        """Every declared witness's cosignature on ``transcript``, or None (the problem failed, with why).

        Unreachable witnesses and server errors are retried with exponential
        backoff (0.1 s doubling to 2 s) until ``deadline``; a refusal (4xx:
        e.g. 409, it co-signed another transcript) fails the problem at once.
        """
        state = self.driver.state
        ctx = state.require_context(pid)
        statement = TranscriptStatement(
            aggregator=state.public_identity, problem_id=pid, stage=stage, transcript=transcript
        )
        request = sign_message(CosignRequest(statement=statement, signature=bytes(64)), state.identity)
        body = request.model_dump_json()
        pending: dict[bytes, WitnessRef] = {bytes(w.identity): w for w in ctx.problem.draft.witnesses}
        got: dict[bytes, Cosignature] = {}
        delay = 0.1
        last: dict[bytes, str] = {}
        while pending and not self.driver.stopping:
            for key, witness in list(pending.items()):
                remaining = deadline - time.time()
                if remaining <= 0:
                    break
                outcome = _ask_witness(witness, body, statement, timeout=min(10.0, max(0.5, remaining)))
                if isinstance(outcome, Cosignature):
                    got[key] = outcome
                    del pending[key]
                elif outcome.startswith("refused"):
                    self.driver._fail(pid, f"witness {key.hex()[:16]}… {outcome} ({stage} transcript)")
                    return None
                else:
                    last[key] = outcome
            if not pending or time.time() >= deadline:
                break
            self.driver.wait(min(delay, max(0.0, deadline - time.time())))
            delay = min(delay * 2, 2.0)
        if pending:
            if not self.driver.stopping:
                key = next(iter(pending))
                self.driver._fail(
                    pid,
                    f"no {stage} cosignature from {len(pending)} declared witness(es) in time "
                    f"(e.g. {key.hex()[:16]}…: {last.get(key, 'not asked')})",
                )
            return None
        # The bundle lists the witnesses in the proposal's order.
        ordered = tuple(got[bytes(w.identity)] for w in ctx.problem.draft.witnesses)
        return CosignatureBundle(problem_id=pid, stage=stage, cosignatures=ordered)  # type: ignore[arg-type]

    def start_bins(self, pid: str, bins: Bins) -> None:
        thread = threading.Thread(
            target=self._witness_bins, args=(pid, bins), name=f"witness-bins-{pid}", daemon=True
        )
        self.threads[(pid, "bins")] = thread
        thread.start()


class Trainer:
    """A driver's training of a problem on its settled reports and the signing of its model, in a
    thread per problem (docs/protocol.md, "Aggregator")."""

    def __init__(self, driver: RoundDriver) -> None:
        self.driver = driver
        self.threads: dict[str, threading.Thread] = {}
        self.lock = threading.RLock()  # threads and the phase re-read (resume)

    def start(self, pid: str) -> None:
        with self.driver.state.sessions() as s, s.begin():
            # Write first: takes the lock, so intake transactions after it see "training".
            row = _take(s, pid, ProblemRow.phase.in_(RETRAINABLE_PHASES), train_requested=False)
            if row is None:
                return
            self.driver._enter(row, ProblemPhase.TRAINING)
            settle_reports(s, pid)  # the round is over: staged reports move in random order
        wipe_log(self.driver.state.engine)
        self._start_thread(pid)

    def resume(self, pid: str) -> None:
        """Train ``pid`` again when it is in ``training`` and no thread of this process trains it (after
        a restart, a take-over, or a try the disk refused): the round's reports were settled when
        training began.

        The phase read at the top of :meth:`RoundDriver.advance` may be stale: a training thread of
        this process can publish the model and leave :attr:`threads` between that read and the check,
        and a second thread would train the problem again ("left training while this process trained
        it"). So the phase is read again under :attr:`lock`, which the thread leaves only after its
        transaction committed: under the lock, "not in ``threads``" and "still training" together
        mean no thread of this process trains it.
        """
        with self.lock:
            if pid in self.threads:
                return
            with self.driver.state.sessions() as s:
                if s.scalar(select(ProblemRow.phase).where(ProblemRow.id == pid)) != ProblemPhase.TRAINING:
                    return
            log.info("problem %s: resuming training from the stored reports", pid)
            self._start_thread(pid)

    def _start_thread(self, pid: str) -> None:
        thread = threading.Thread(target=self._train, args=(pid,), name=f"train-{pid}", daemon=True)
        with self.lock:
            self.threads[pid] = thread
        thread.start()

    def _train(self, pid: str) -> None:
        state = self.driver.state
        try:
            ctx = state.require_context(pid)
            roster, bins, plan = ctx.require_roster(), ctx.require_bins(), ctx.require_plan()
            with state.sessions() as s:
                reports = [
                    (r.partition, r.subset, r.mechanism_json, r.bits)
                    for r in s.scalars(select(ReportRow).where(ReportRow.problem_id == pid))
                ]
                answered = int(s.scalar(select(ProblemRow.median_answered).where(ProblemRow.id == pid)) or 0)
                account = problem_account(s, pid, ctx, state.settings.intake_grace_seconds)
                medians = median_account(s, pid, ctx)
            if account is None or medians is None:
                raise MissingProblemFact(f"problem {pid}: training without a report or median account")
            # scikit-learn: imported when first needed
            from aggregator.training import publication_outcome, train_problem

            model, metrics = train_problem(ctx.problem, roster, bins, plan, reports, answered)
            document = sign_message(
                ModelDocument(
                    problem_id=pid,
                    created_at=datetime.now(UTC),
                    model=model.to_document(),
                    metrics=metrics,
                    reports=account,
                    medians=medians,
                    signature=bytes(64),
                ),
                state.identity,
            )
            calibrating = plan.calibration_pool_size > 0
            with state.sessions() as s, s.begin():
                row = _problem_row(s, pid)
                # trained by another tenure meanwhile: its model stands
                if row.phase != ProblemPhase.TRAINING:
                    log.warning("problem %s left training while this process trained it", pid)
                    return
                if calibrating:  # the pool calibrates this model first (aggregator.calibration_round)
                    ask(self.driver, s, row, ctx, document)
                else:
                    publish_document(s, pid, "model", document.model_dump_json())
                    # Every shortfall is in the message: lost reports, and missing median answers.
                    phase, message = publication_outcome(document, state.settings.max_loss_fraction)
                    self.driver._enter(row, phase, message)
            if calibrating:
                self.driver.calibrator.resume(pid)
        except LeaseLost as exc:
            log.warning("the model of %s was not published: %s", pid, exc)
        except AnonMLError as exc:  # expected (e.g. no report arrived): the reason is the status
            log.warning("training of %s failed: %s", pid, exc)
            self.driver._fail_quietly(pid, f"training failed: {exc}")
        except Exception as exc:  # a bug: keep the traceback in the log
            reason = storage_failure(exc)
            if reason is not None:  # the disk refused the model: trained again at a tick once it can write
                self.driver.state.storage.failed(reason, f"publishing the model of {pid}")
                return
            log.exception("training of %s failed", pid)
            self.driver._fail_quietly(pid, f"training failed: {exc}")
        finally:
            with self.lock:  # after the commit: see resume
                self.threads.pop(pid, None)


def _problem_row(session: Session, pid: str) -> ProblemRow:
    """The problem's row; :class:`MissingProblemFact` if the database has none (none is ever deleted)."""
    row = session.get(ProblemRow, pid)
    if row is None:
        raise MissingProblemFact(f"no problem {pid!r} in the database")
    return row


def _take(session: Session, pid: str, when: ColumnElement[bool], **values: Any) -> ProblemRow | None:
    """Write ``values`` to the problem if ``when`` holds, first (the row lock orders concurrent writers).

    Returns the row when this transaction took it, None when the condition did not hold.
    """
    taken = session.execute(update(ProblemRow).where(ProblemRow.id == pid, when).values(**values)).rowcount
    return session.get(ProblemRow, pid) if taken == 1 else None


def _ask_witness(
    witness: WitnessRef, body: str, statement: TranscriptStatement, *, timeout: float
) -> Cosignature | str:
    """POST one cosign request; the checked cosignature, or why not (``"refused …"`` for a 4xx).

    The whole exchange — connect, headers, body — ends within ``timeout``
    seconds and reads at most :data:`MAX_WITNESS_RESPONSE` bytes
    (:func:`anonml.outbound.fetch`), so a witness that trickles its answer
    cannot hold the round past its deadline.
    """
    url = witness.url.rstrip("/") + "/cosign"
    try:
        reply = fetch(
            "POST",
            url,
            body.encode("utf-8"),
            "application/json",
            deadline=timeout,
            max_bytes=MAX_WITNESS_RESPONSE,
        )
    except OutboundError as exc:
        return f"unreachable: {exc}"
    content, status = reply.body, reply.status
    if 400 <= status < 500:
        try:
            detail = json.loads(content).get("detail", "")
        except (ValueError, AttributeError):
            detail = content[:200].decode("utf-8", "replace")
        return f"refused (HTTP {status}): {detail}"
    if status != 200:
        return f"HTTP {status}"
    try:
        cosignature = Cosignature.model_validate_json(content)
        if bytes(cosignature.witness) != bytes(witness.identity) or cosignature.statement != statement:
            return "answered with a cosignature on something else"
        verify_message(cosignature, bytes(witness.identity))
        witness_vrf_output(cosignature)  # the beacon share every peer will check
    except (ValueError, CryptoError) as exc:  # ProtocolError is a ValueError
        return f"answered with an invalid cosignature: {exc}"
    return cosignature
