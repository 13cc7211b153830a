"""One calibration-pool identity's answer to the aggregator's calibration question: its (score bin,
label) under the trained model, perturbed at the problem's ε, recorded in the ledger before it is
sent, sent once (docs/protocol.md, "Calibration").

Before anything is computed the identity checks, and refuses (:class:`~peer.phases.Aborted`,
nothing released) unless: the question and the model are signed by the problem's aggregator and
for this problem; the question names the model it came with (:func:`anonml.protocol.model_digest`);
this identity's own plan puts it in the calibration pool, and every member asked is in that pool;
ε is the problem's; the model is an uncalibrated binary model of the proposal's features; and the
cut points are exactly the model's own, recomputed here from the model alone with
:func:`anonml.learn.calibration.score_bins`, so no aggregator can choose cut points that single
one member out. The budget is the ledger's to
refuse (its per-problem and lifetime caps, :class:`~anonml.errors.BudgetExceeded`).

The answer is drawn once: it is saved with the participation (phase ``calibrated``) before the
release is recorded and sent, and any later ask — a repeated question, a restart — sends those
same signed bytes again, never a fresh draw. What is sent depends on the data only through the
perturbed value: an identity whose example is missing or out of range sends a uniform stand-in
value through the same mechanism.

A K ≥ 3-class model's pool answers in two halves the plan fixes (:mod:`peer.class_map_answer`): the
map half the first question, (predicted class, label) through the same mechanism, and the choice
half the second, its log-loss steps through the Hybrid mechanism. Each identity answers the one
question that names it, with the same checks above (its half in place of the whole pool), drawn
once, saved, recorded and sent as here; a choice-half identity is asked again at later polls until
its question comes (:func:`awaits_choice`).
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING

import numpy as np
from pydantic import TypeAdapter

from anonml.protocol import (
    CalibrationAnswer,
    CalibrationQuestion,
    CalibrationRequest,
    ChoiceAnswer,
    ChoiceQuestion,
    ClassMapQuestion,
    pack_bits,
    sign_message,
)
from anonml.randomness import resolve_rng
from peer import class_map_answer
from peer.answer_delivery import deliver_answer
from peer.calibration_checks import check_common, from_example
from peer.participation import Participation
from peer.phases import Aborted, ParticipationPhase

if TYPE_CHECKING:
    from anonml.learn import AnonMLClassifier

__all__ = [
    "answer",
    "asking",
    "awaits_choice",
    "check_request",
    "in_calibration_pool",
    "note_unanswered",
]

P = ParticipationPhase
log = logging.getLogger("anonml.peer")

#: The ledger's pool name of a calibration answer (either stage's: a member answers one).
POOL = "calibration"
#: A stored answer: a first-stage (or binary) answer, or a choice half's.
_STORED: TypeAdapter[CalibrationAnswer | ChoiceAnswer] = TypeAdapter(CalibrationAnswer | ChoiceAnswer)


def in_calibration_pool(p: Participation) -> bool:
    """Its checked assignment puts it in the calibration pool (False before its roster check)."""
    return p.roster is not None and p.roster.assignment.role == "calibration"


def check_request(p: Participation, request: CalibrationRequest) -> tuple[AnonMLClassifier, np.ndarray]:
    """The verified model (an :class:`~anonml.learn.AnonMLClassifier`) and its cut points, or
    :class:`~peer.phases.Aborted` naming the first check that failed (module docstring)."""
    from anonml.learn.calibration import CALIBRATION_BINS, score_bins

    question = request.question
    if not isinstance(question, CalibrationQuestion):
        raise Aborted("a binary calibration answer was asked by a K >= 3 question")
    model = check_common(p, question, request.model, lambda plan: plan.calibration_pool(), "calibration pool")
    if model.ensemble_.kind == "softmax" or model.ensemble_.calibration is not None:
        raise Aborted("the model to calibrate is not an uncalibrated binary model")
    cuts, _ = score_bins(model.ensemble_, CALIBRATION_BINS)
    if tuple(float(c) for c in cuts) != tuple(question.cuts):
        raise Aborted("the calibration question's cut points are not the model's own (score_bins)")
    return model, cuts


def asking(
    p: Participation, request: CalibrationRequest
) -> CalibrationQuestion | ClassMapQuestion | ChoiceQuestion | None:
    """The question of ``request`` that names this identity (the first, or K ≥ 3 the choice half's
    once asked), or None."""
    roster = p.facts(p.roster, "the checked roster")
    me = roster.view.index_of[bytes(p.node.identity.public)]
    if me in request.question.members:
        return request.question
    if request.choice is not None and me in request.choice.members:
        return request.choice
    return None


def awaits_choice(p: Participation, request: CalibrationRequest) -> bool:
    """A K ≥ 3 choice-half identity (by its plan) whose question is not asked yet: the worker asks
    again at a later poll."""
    if not isinstance(request.question, ClassMapQuestion) or request.choice is not None:
        return False
    if not in_calibration_pool(p) or p.phase != P.REPORTING:
        return False

    return class_map_answer.in_choice_half(p)


def answer(p: Participation, request: CalibrationRequest) -> bool:
    """Answer ``request`` if it names this identity; True when an answer was (re)sent.

    Drawn at most once per problem (module docstring): a second ask resends the stored answer.
    K ≥ 3: the map half answers the first question, the choice half the second
    (:mod:`peer.class_map_answer`); each identity answers one of them.
    """
    question = asking(p, request)
    if question is None:
        return False
    if p.phase == P.CALIBRATED and p.stored_calibration_answer is not None:
        _send(p, _STORED.validate_json(p.stored_calibration_answer), question)
        return True
    if p.phase != P.REPORTING:
        return False  # not through its report round yet (or ended)

    if isinstance(question, ChoiceQuestion):
        model, class_map = class_map_answer.check_choice(p, request)
    elif isinstance(question, ClassMapQuestion):
        model = class_map_answer.check_class_map(p, request)
    else:
        model, cuts = check_request(p, request)
    if time.time() >= question.deadline:
        p._short("calibration answer not sent: the question's deadline had passed")
        return False
    gen = resolve_rng(p.node.rng)
    signed: CalibrationAnswer | ChoiceAnswer
    if isinstance(question, ChoiceQuestion):
        signed = class_map_answer.choice_answer(p, question, model, class_map, gen)
    else:
        from anonml.privacy import best_mechanism

        mechanism = best_mechanism(question.epsilon, question.domain, len(question.members))
        if isinstance(question, ClassMapQuestion):
            value = class_map_answer.class_value(p, model, gen)
        else:
            value = _value(p, model, cuts, gen)
        bits = mechanism.perturb(np.asarray([value]), gen)[0]
        signed = sign_message(
            CalibrationAnswer(
                problem_id=p.problem.id,
                identity=bytes(p.node.identity.public),
                model_digest=question.model_digest,
                mechanism=mechanism.descriptor(),
                bits=pack_bits(bits),
                signature=bytes(64),
            ),
            p.node.identity,
        )
    # Saved before it is recorded and sent: a restart or a second ask sends these bytes, never a new draw.
    p.stored_calibration_answer = signed.model_dump_json()
    try:
        p._move(P.CALIBRATED)
    except Exception as exc:  # e.g. a full disk: nothing recorded, so nothing may be sent
        p.stored_calibration_answer = None
        p._short(f"calibration answer not sent: its state could not be saved: {exc}")
        return False
    _send(p, signed, question)
    return True


def _value(p: Participation, model: AnonMLClassifier, cuts: np.ndarray, gen: np.random.Generator) -> int:
    """``2·bin + label`` of this identity's example under the model; a uniform value when it cannot say."""

    def value(codes: np.ndarray, label: int) -> int:
        score = model.ensemble_.decision_function(codes)[0]  # the uncalibrated score the cuts divide
        return int(np.searchsorted(cuts, score, side="left")) * 2 + label

    return from_example(p, model, 2, value, lambda: int(gen.integers(2 * (len(cuts) + 1))))


def _send(
    p: Participation,
    signed: CalibrationAnswer | ChoiceAnswer,
    question: CalibrationQuestion | ClassMapQuestion | ChoiceQuestion,
) -> None:
    """Record the release (once) and send ``signed`` until the question's deadline."""
    what = "calibration answer"
    releases = p.node.ledger.releases(peer=p.node.fingerprint, problem=p.problem.id)
    if not any(r.pool == POOL for r in releases):
        # A choice answer's mechanism is the Hybrid one over its steps (no descriptor): named, at ε.
        choice = isinstance(signed, ChoiceAnswer)
        try:
            p.node.ledger.record(
                peer=p.node.fingerprint,
                problem=p.problem.id,
                round=0,
                attributes=[*(f.name for f in p.problem.draft.features), "label"],
                mechanism=class_map_answer.MECHANISM if choice else signed.mechanism,
                epsilon=question.epsilon if choice else None,
                pool=POOL,
            )
        except Exception as exc:  # not recorded (a cap, a full disk): not released
            p._short(f"{what} not sent: the release could not be recorded: {exc}")
            return

    def send() -> object:
        if isinstance(signed, ChoiceAnswer):
            return p.client.answer_choice(signed)
        return p.client.answer_calibration(signed)

    deliver_answer(
        p,
        send,
        until=question.deadline,
        what=what,
        counter="calibration answers",
        deadline="the question's",
    )


def note_unanswered(p: Participation, asked: CalibrationRequest | None) -> None:
    """A calibration-pool identity named by the question asked that never answered says so when the
    model comes: it ends ``partial`` with the reason, never ``done`` as if it had done its part. (A
    K ≥ 3 choice-half identity whose question was never asked — too few first-stage answers — was
    not named: it spent nothing and ends ``done``.)"""
    if asked is None or not in_calibration_pool(p) or p.phase != P.REPORTING or p.shortfall:
        return
    if asking(p, asked) is not None:
        p._short("calibration answer not sent: the question closed before this identity's host answered it")
