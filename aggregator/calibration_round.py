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

A K ≥ 3-class (softmax) model is calibrated in two stages, each a wait and a close as above. The
first asks the plan's map half (:meth:`~anonml.learn.partition.PartitionPlan.class_map_half`) for
(predicted class, label); once it closes, the class map its answers give
(:func:`aggregator.calibration.class_map_of`) is put to the choice half in a second signed question
(``calibration_questions.choice_json``, asked under the lease with a deadline as long as the
first's), whose answers choose the map's weight (:func:`aggregator.calibration.chosen_map_weight`).
Too few first-stage answers and the second is never asked: the model is published as trained.

Everything it needs is in the database: the questions (their deadlines absolute), the uncalibrated
model, and the answers (unique per member, a table per stage). So a restart, or another process
taking the lease, resumes in ``calibrating`` where the step was: it waits on the same question until
the same deadline, rebuilds the same class map from the same stored answers (the build is
deterministic), and fits on the answers stored — none lost, none counted twice.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from sqlalchemy import func, select, update
from sqlalchemy.orm import Session

from aggregator.calibration import (
    calibrate_model,
    calibration_question,
    choice_question,
    chosen_map_weight,
    class_map_of,
)
from aggregator.db import (
    CalibrationAnswerRow,
    CalibrationChoiceRow,
    CalibrationQuestionRow,
    ProblemRow,
    RejectRow,
    publish_document,
)
from aggregator.lease import LeaseLost
from aggregator.state import ProblemContext, calibration_refusals
from aggregator.storage import storage_failure
from aggregator.training import publication_outcome, with_calibration_answers
from anonml.errors import AnonMLError
from anonml.phases import ProblemPhase
from anonml.protocol import (
    CalibrationAccount,
    CalibrationQuestion,
    ChoiceQuestion,
    ClassMapQuestion,
    ModelDocument,
    parse_question,
    sign_message,
)

if TYPE_CHECKING:
    import numpy as np

    from anonml.learn import AnonMLClassifier
    from anonml.learn.ensemble import Ensemble

__all__ = ["Calibrator", "ask", "calibration_account"]

log = logging.getLogger("anonml.aggregator")

#: Refusals of an answer that mean it came after the question closed.
_LATE_ANSWER = ("question closed",)


def _deadline(state: Any, ctx: ProblemContext) -> float:
    """When a question asked now stops waiting: ``roster_seconds + median_step_seconds`` of the round's
    schedule from now (the median steps' wait, with the time a member takes to read the model)."""
    schedule = state.round_schedule(ctx, len(ctx.require_roster().entries))
    return time.time() + schedule.roster_seconds + schedule.median_step_seconds


def ask(driver: Any, session: Session, row: ProblemRow, ctx: ProblemContext, document: ModelDocument) -> None:
    """In the trainer's transaction: store the question about ``document`` (the signed uncalibrated
    model) and move ``row`` to ``calibrating``.

    A binary model's question goes to the whole calibration pool, a softmax model's first question to
    the plan's map half. A problem trained again after its pool answered is not asked again (each
    member answers once); its new model's question stays the first one's, and :meth:`Calibrator._run`
    publishes the new model uncalibrated unless it is the model the pool answered about.
    """
    from anonml.learn import AnonMLClassifier  # scikit-learn: the trainer loaded it already

    state = driver.state
    plan = ctx.require_plan()
    existing = session.get(CalibrationQuestionRow, ctx.problem.id)
    if existing is None:
        model = AnonMLClassifier.from_json(json.dumps(document.model))
        members = plan.class_map_half() if model.ensemble_.kind == "softmax" else plan.calibration_pool()
        deadline = _deadline(state, ctx)
        question = calibration_question(ctx.problem, model, document.model, members, deadline, state.identity)
        session.add(
            CalibrationQuestionRow(
                problem_id=ctx.problem.id,
                question_json=question.model_dump_json(),
                model_json=document.model_dump_json(),
                open=True,
                choice_open=False,
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
    """The pool's answers expected / received / missing and why (None before a question is asked).

    K ≥ 3: both stages' — the members each question asked, and the answers each stored.
    """
    asked = session.get(CalibrationQuestionRow, problem_id)
    if asked is None:
        return None
    expected = len(parse_question(asked.question_json).members)
    if asked.choice_json is not None:
        expected += len(ChoiceQuestion.model_validate_json(asked.choice_json).members)
    received = sum(_count(session, table, problem_id) for table in _ANSWER_TABLES)
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


_AnswerTable = type[CalibrationAnswerRow] | type[CalibrationChoiceRow]
#: Where each stage's answers are stored: the (only or first) question's, the K ≥ 3 choice half's.
_ANSWER_TABLES: tuple[_AnswerTable, ...] = (CalibrationAnswerRow, CalibrationChoiceRow)


def _count(session: Session, table: _AnswerTable, pid: str) -> int:
    """Answers stored in ``table`` (a stage's) for problem ``pid``."""
    return int(session.scalar(select(func.count()).select_from(table).where(table.problem_id == pid)) or 0)


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
                question = parse_question(asked.question_json)
                trained = ModelDocument.model_validate_json(asked.model_json)
                still_open = asked.open
            if still_open:
                if not self._wait(pid, CalibrationAnswerRow, len(question.members), question.deadline):
                    return  # stopping: the question stays open for the next lease holder
                self._close(pid, "open")
            if isinstance(question, ClassMapQuestion):
                self._classes(pid, question, trained)
            else:
                self._binary(pid, question, trained)
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

    def _wait(self, pid: str, table: _AnswerTable, members: int, deadline: float) -> bool:
        """Until ``members`` answers are in ``table`` or ``deadline`` passed (True), or the driver stops
        (False)."""
        state = self.driver.state
        with state.answers:
            while not self.driver.stopping:
                with state.sessions() as s:
                    if _count(s, table, pid) >= members:
                        return True
                remaining = deadline - time.time()
                if remaining <= 0:
                    return True
                state.answers.wait(min(remaining, 0.25))
        return False

    def _close(self, pid: str, stage: str) -> None:
        # The close is a write: an answer committed before it is counted, one after is refused.
        with self.driver.state.sessions() as s, s.begin():
            self.driver.lease.guard(s)
            s.execute(
                update(CalibrationQuestionRow)
                .where(CalibrationQuestionRow.problem_id == pid)
                .values({stage: False})
            )

    def _answers(self, pid: str) -> list[tuple[str, bytes]]:
        """The first stage's stored answers, ``(mechanism JSON, bits)`` in the order they were stored."""
        with self.driver.state.sessions() as s:
            return [
                (r.mechanism_json, r.bits)
                for r in s.scalars(
                    select(CalibrationAnswerRow)
                    .where(CalibrationAnswerRow.problem_id == pid)
                    .order_by(CalibrationAnswerRow.id)
                )
            ]

    def _binary(self, pid: str, question: CalibrationQuestion, trained: ModelDocument) -> None:
        """Fit the Platt map on the stored answers and publish the model (calibrated, or as trained)."""
        from anonml.learn import AnonMLClassifier
        from anonml.protocol import model_digest

        answers = self._answers(pid)
        model = AnonMLClassifier.from_json(json.dumps(trained.model))
        same_model = model_digest(trained.model) == bytes(question.model_digest)
        ensemble = calibrate_model(model, answers, question.epsilon)[0] if same_model else None
        self._publish(pid, trained, model, ensemble, len(answers), same_model=same_model)

    def _classes(self, pid: str, question: ClassMapQuestion, trained: ModelDocument) -> None:
        """K ≥ 3: build the class map, ask the choice half (once), wait, choose and publish."""
        from anonml.learn import AnonMLClassifier
        from anonml.protocol import model_digest

        state = self.driver.state
        answers = self._answers(pid)
        model = AnonMLClassifier.from_json(json.dumps(trained.model))
        if model_digest(trained.model) != bytes(question.model_digest):
            self._publish(pid, trained, model, None, len(answers), same_model=False)
            return
        with state.sessions() as s:
            asked = s.get(CalibrationQuestionRow, pid)
            if asked is None:
                raise AnonMLError(f"problem {pid} lost its calibration question")
            choice = (
                None if asked.choice_json is None else ChoiceQuestion.model_validate_json(asked.choice_json)
            )
            choice_open = asked.choice_open
            n_choice = len(state.require_context(pid, s).require_plan().choice_half())
        if choice is None:
            class_map, _ = class_map_of(model, answers, n_choice, question.epsilon)
            if class_map is None:  # too few to carry a signal: the choice half is not asked
                self._publish(pid, trained, model, None, len(answers))
                return
            choice = self._ask_choice(pid, question, class_map)
            choice_open = True
        if choice_open:
            if not self._wait(pid, CalibrationChoiceRow, len(choice.members), choice.deadline):
                return  # stopping: the second question stays open for the next lease holder
            self._close(pid, "choice_open")
        with state.sessions() as s:
            reports = [
                json.loads(r)
                for r in s.scalars(
                    select(CalibrationChoiceRow.report_json)
                    .where(CalibrationChoiceRow.problem_id == pid)
                    .order_by(CalibrationChoiceRow.id)
                )
            ]
        k = model.ensemble_.n_classes
        weight = chosen_map_weight(reports, len(answers), question.epsilon, k)
        if weight is None:
            ensemble = None
        elif weight == 0.0:  # the map was measured not to help: the model as trained, calibrated
            ensemble = model.ensemble_
        else:
            import numpy as np  # the step's work: not at the service's start

            ensemble = model.ensemble_.with_class_map(np.asarray(choice.class_map, dtype=float), weight)
        self._publish(pid, trained, model, ensemble, len(answers) + len(reports), weight=weight)

    def _ask_choice(self, pid: str, question: ClassMapQuestion, class_map: np.ndarray) -> ChoiceQuestion:
        """Store the signed second question (the map to the plan's choice half), under the lease."""
        state = self.driver.state
        with state.sessions() as s, s.begin():
            self.driver.lease.guard(s)
            ctx = state.require_context(pid, s)
            members = ctx.require_plan().choice_half()
            deadline = _deadline(state, ctx)
            digest = bytes(question.model_digest)
            choice = choice_question(ctx.problem, digest, class_map, members, deadline, state.identity)
            asked = s.get(CalibrationQuestionRow, pid)
            row = s.get(ProblemRow, pid)
            if asked is None or row is None or row.phase != ProblemPhase.CALIBRATING:
                raise LeaseLost(f"problem {pid} left calibrating while this process calibrated it")
            asked.choice_json = choice.model_dump_json()
            asked.choice_open = True
            row.message = f"awaiting {members.size} calibration choice answers"
        return choice

    def _publish(
        self,
        pid: str,
        trained: ModelDocument,
        model: AnonMLClassifier,
        ensemble: Ensemble | None,
        answered: int,
        *,
        same_model: bool = True,
        weight: float | None = None,
    ) -> None:
        """Publish ``ensemble`` in ``model``'s place (None: the model as trained, not calibrated),
        with the pool's account, then ``done`` or ``degraded`` as training would have."""
        from anonml.learn import AnonMLClassifier

        state = self.driver.state
        privacy = with_calibration_answers(model.privacy_, answered)
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
                    metrics={**trained.metrics, "calibration_answers": float(answered)},
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
            publish_document(s, pid, "model", document.model_dump_json())
            phase, message = publication_outcome(document, state.settings.max_loss_fraction)
            notes = []
            if not same_model:
                notes.append("trained again after the pool answered: not calibrated")
            if weight == 0.0:
                notes.append("the class map was not measured to lower the log loss: the model as trained")
            for note in notes:
                message = f"{message}; {note}" if message else note
            self.driver._enter(row, phase, message)
        log.info("problem %s: model published (%s)", pid, account.describe() if account else "no question")
