"""The calibration step of a problem at the aggregator: ask the pool, wait, fit, publish.

When training ends and the plan has a calibration pool (:meth:`PartitionPlan.calibration_pool
<anonml.learn.partition.PartitionPlan.calibration_pool>`), the :class:`~aggregator.rounds.Trainer`
stores the signed uncalibrated model and the signed question
(:func:`aggregator.calibration.calibration_question`) in ``calibration_questions`` and moves the
problem to ``calibrating`` in one transaction (:func:`ask`). The :class:`Calibrator` then waits —
a thread per problem — until every member asked has answered or the question's deadline passed
(``roster_seconds + median_step_seconds`` of the round's schedule after asking: the median steps'
wait, with the time a member takes to read the model), closes the question (a write guarded by the
phase lease: an answer committed before it counts, one after is refused), fits the map
(:func:`aggregator.calibration.calibrate_model`) and publishes the model, calibrated or — too few
answers — as trained, with the calibration account saying which, then ``done`` or ``degraded`` as
training would have.

Everything it needs is in the database: the question (its deadline absolute), the uncalibrated
model, and the answers (unique per member). So a restart, or another process taking the lease,
resumes in ``calibrating`` where the step was: it waits on the same question until the same
deadline, and fits on the answers stored — none lost, none counted twice.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import func, select, update
from sqlalchemy.orm import Session

from aggregator.calibration import calibrate_model, calibration_question
from aggregator.db import CalibrationAnswerRow, CalibrationQuestionRow, ProblemRow, RejectRow
from aggregator.lease import LeaseLost
from aggregator.state import ProblemContext, calibration_refusals
from aggregator.storage import storage_failure
from aggregator.training import publication_outcome, with_calibration_answers
from anonml.errors import AnonMLError
from anonml.phases import ProblemPhase
from anonml.protocol import CalibrationAccount, CalibrationQuestion, ModelDocument, sign_message

__all__ = ["Calibrator", "ask", "calibration_account"]

log = logging.getLogger("anonml.aggregator")

#: Refusals of an answer that mean it came after the question closed.
_LATE_ANSWER = ("question closed",)


def ask(driver: Any, session: Session, row: ProblemRow, ctx: ProblemContext, document: ModelDocument) -> None:
    """In the trainer's transaction: store the question about ``document`` (the signed uncalibrated
    model) and move ``row`` to ``calibrating``.

    A problem trained again after its pool answered is not asked again (each member answers once);
    its new model's question stays the first one's, and :meth:`Calibrator._run` publishes the new
    model uncalibrated unless it is the model the pool answered about.
    """
    from anonml.learn import AnonMLClassifier  # scikit-learn: the trainer loaded it already

    state = driver.state
    members = ctx.require_plan().calibration_pool()
    roster_size = len(ctx.require_roster().entries)
    schedule = state.round_schedule(ctx, roster_size)
    existing = session.get(CalibrationQuestionRow, ctx.problem.id)
    if existing is None:
        model = AnonMLClassifier.from_json(json.dumps(document.model))
        deadline = time.time() + schedule.roster_seconds + schedule.median_step_seconds
        question = calibration_question(ctx.problem, model, document.model, members, deadline, state.identity)
        session.add(
            CalibrationQuestionRow(
                problem_id=ctx.problem.id,
                question_json=question.model_dump_json(),
                model_json=document.model_dump_json(),
                open=True,
            )
        )
        message = f"awaiting {members.size} calibration answers"
    else:
        existing.model_json = document.model_dump_json()
        message = "trained again: the calibration pool answered once already"
    driver._enter(row, ProblemPhase.CALIBRATING, message)


def calibration_account(
    session: Session, problem_id: str, *, calibrated: bool = False
) -> CalibrationAccount | None:
    """The pool's answers expected / received / missing and why (None before a question is asked)."""
    asked = session.get(CalibrationQuestionRow, problem_id)
    if asked is None:
        return None
    expected = len(CalibrationQuestion.model_validate_json(asked.question_json).members)
    received = int(
        session.scalar(
            select(func.count())
            .select_from(CalibrationAnswerRow)
            .where(CalibrationAnswerRow.problem_id == problem_id)
        )
        or 0
    )
    rows = list(
        session.execute(select(RejectRow.reason, RejectRow.count).where(RejectRow.problem_id == problem_id))
    )
    refusals = calibration_refusals(rows)
    refusals.pop("duplicate answer", None)  # its first copy was counted
    missing = max(0, expected - received)
    late = min(missing, sum(refusals.pop(reason, 0) for reason in _LATE_ANSWER))
    refused: dict[str, int] = {}
    room = missing - late
    for reason, n in sorted(refusals.items()):
        if take := min(room, n):
            refused[reason] = take
            room -= take
    return CalibrationAccount(
        expected=expected,
        received=received,
        missing=missing,
        late=late,
        refused=refused,
        not_arrived=room,
        calibrated=calibrated,
    )


class Calibrator:
    """A driver's calibration steps, a thread per problem in ``calibrating`` (module docstring)."""

    def __init__(self, driver: Any) -> None:
        self.driver = driver
        self.threads: dict[str, threading.Thread] = {}
        self.lock = threading.RLock()  # threads and the phase re-read (resume)

    def resume(self, pid: str) -> None:
        """Run the step of ``pid`` when it is in ``calibrating`` and no thread of this process runs it
        (after the trainer asked, a restart or a take-over); the phase is read again under :attr:`lock`,
        as :meth:`aggregator.rounds.Trainer.resume` does."""
        with self.lock:
            if pid in self.threads:
                return
            with self.driver.state.sessions() as s:
                if s.scalar(select(ProblemRow.phase).where(ProblemRow.id == pid)) != ProblemPhase.CALIBRATING:
                    return
            thread = threading.Thread(target=self._run, args=(pid,), name=f"calibrate-{pid}", daemon=True)
            self.threads[pid] = thread
            thread.start()

    def _run(self, pid: str) -> None:
        state = self.driver.state
        try:
            with state.sessions() as s:
                asked = s.get(CalibrationQuestionRow, pid)
                if asked is None:
                    raise AnonMLError(f"problem {pid} is calibrating without a question")
                question = CalibrationQuestion.model_validate_json(asked.question_json)
                trained = ModelDocument.model_validate_json(asked.model_json)
                still_open = asked.open
            if still_open:
                if not self._wait(pid, question):
                    return  # stopping: the question stays open for the next lease holder
                self._close(pid)
            self._publish(pid, question, trained)
        except LeaseLost as exc:
            log.warning("the calibrated model of %s was not published: %s", pid, exc)
        except AnonMLError as exc:
            log.warning("calibration of %s failed: %s", pid, exc)
            self.driver._fail_quietly(pid, f"calibration failed: {exc}")
        except Exception as exc:
            reason = storage_failure(exc)
            if reason is not None:  # the disk refused: the step runs again at a tick once it can write
                state.storage.failed(reason, f"publishing the calibrated model of {pid}")
                return
            log.exception("calibration of %s failed", pid)
            self.driver._fail_quietly(pid, f"calibration failed: {exc}")
        finally:
            with self.lock:
                self.threads.pop(pid, None)

    def _wait(self, pid: str, question: CalibrationQuestion) -> bool:
        """Until every member asked answered or the deadline passed (True), or the driver stops (False)."""
        state = self.driver.state
        count = (
            select(func.count())
            .select_from(CalibrationAnswerRow)
            .where(CalibrationAnswerRow.problem_id == pid)
        )
        with state.answers:
            while not self.driver.stopping:
                with state.sessions() as s:
                    if (s.scalar(count) or 0) >= len(question.members):
                        return True
                remaining = question.deadline - time.time()
                if remaining <= 0:
                    return True
                state.answers.wait(min(remaining, 0.25))
        return False

    def _close(self, pid: str) -> None:
        # The close is a write: an answer committed before it is counted, one after is refused.
        with self.driver.state.sessions() as s, s.begin():
            self.driver.lease.guard(s)
            s.execute(
                update(CalibrationQuestionRow)
                .where(CalibrationQuestionRow.problem_id == pid)
                .values(open=False)
            )

    def _publish(self, pid: str, question: CalibrationQuestion, trained: ModelDocument) -> None:
        """Fit the map on the stored answers and publish the model (calibrated, or as trained)."""
        from anonml.learn import AnonMLClassifier
        from anonml.protocol import model_digest

        state = self.driver.state
        with state.sessions() as s:
            answers = [
                (r.mechanism_json, r.bits)
                for r in s.scalars(
                    select(CalibrationAnswerRow)
                    .where(CalibrationAnswerRow.problem_id == pid)
                    .order_by(CalibrationAnswerRow.id)
                )
            ]
        model = AnonMLClassifier.from_json(json.dumps(trained.model))
        same_model = model_digest(trained.model) == bytes(question.model_digest)
        ensemble = calibrate_model(model, answers, question.epsilon)[0] if same_model else None
        privacy = with_calibration_answers(model.privacy_, len(answers))
        published = AnonMLClassifier.from_ensemble(
            model.binning_,
            model.ensemble_ if ensemble is None else ensemble,
            classes=model.classes_,
            privacy=privacy,
            feature_names=getattr(model, "feature_names_in_", None),
            fitted_features=model.features_,
            **model.get_params(deep=False),
        )
        with state.sessions() as s, s.begin():
            account = calibration_account(s, pid, calibrated=ensemble is not None)
            document = sign_message(
                ModelDocument(
                    problem_id=pid,
                    created_at=datetime.now(UTC),
                    model=published.to_document(),
                    metrics={**trained.metrics, "calibration_answers": float(len(answers))},
                    reports=trained.reports,
                    medians=trained.medians,
                    calibration=account,
                    signature=bytes(64),
                ),
                state.identity,
            )
            row = s.get(ProblemRow, pid)
            if row is None or row.phase != ProblemPhase.CALIBRATING:
                log.warning("problem %s left calibrating while this process calibrated it", pid)
                return
            row.model_json = document.model_dump_json()
            phase, message = publication_outcome(document, state.settings.max_loss_fraction)
            if not same_model:
                again = "trained again after the pool answered: not calibrated"
                message = f"{message}; {again}" if message else again
            self.driver._enter(row, phase, message)
        log.info("problem %s: model published (%s)", pid, account.describe() if account else "no question")
