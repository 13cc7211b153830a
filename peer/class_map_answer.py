"""A K ≥ 3-class problem's calibration answers: the map half's (predicted class, label) and the
choice half's perturbed log-loss steps (docs/protocol.md, "Calibration", K ≥ 3).

The plan fixes the halves (:meth:`~anonml.learn.partition.PartitionPlan.class_map_half`,
:meth:`~anonml.learn.partition.PartitionPlan.choice_half`): a member derives its own from the plan,
and refuses a question asking it, or asking anyone, outside the half that question is for. Beyond
the checks every calibration question passes (:func:`peer.calibration_checks.check_common`), the
model must be an uncalibrated softmax model of the label's K classes, and the second question's map
``Q`` a K × K matrix of finite, positive entries whose rows sum to 1 within 1e-9 (positive: the
published ensemble's own rule, and a zero entry gives an infinite log loss whose steps are
undefined), with the library's mixing weights and clip exactly. Everything is refused before
anything is computed from the data or released.

The map half's value is ``ĉ·K + y``, ``ĉ`` the argmax of the model's decision function at the
example (the model alone decides it); it goes through the least-error mechanism as the binary
answer does. The choice half's answer is :func:`anonml.learn.calibration.perturb_steps` of its
steps :func:`anonml.learn.calibration.loss_steps` — the library's own functions, so the protocol's
answer is the simulation's. A member that cannot say (no example, a feature out of range) sends a
uniform value (map half) or uniform steps in ``[−clip, clip]`` (choice half) through the same
mechanism. Drawing once, saving, recording and sending are :mod:`peer.calibration_answer`'s.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from anonml.protocol import CalibrationRequest, ChoiceAnswer, ChoiceQuestion, ClassMapQuestion, sign_message
from peer.calibration_checks import check_common, from_example
from peer.participation import Participation
from peer.phases import Aborted

if TYPE_CHECKING:
    from anonml.learn import AnonMLClassifier

__all__ = ["MECHANISM", "in_choice_half", "check_class_map", "check_choice", "class_value", "choice_answer"]

#: The ledger's name of a choice answer's mechanism: Wang et al.'s Hybrid mechanism over a vector.
MECHANISM = "hybrid-vector"

#: How far a row of the map may sum from 1.
ROW_SUM_TOLERANCE = 1e-9


def in_choice_half(p: Participation) -> bool:
    """Its checked assignment puts it in the calibration pool's choice half (its rank in the pool at
    least the map half's size, :func:`anonml.learn.partition.class_map_groups`)."""
    from anonml.learn.partition import class_map_groups

    roster = p.facts(p.roster, "the checked roster")
    pool = p.problem.draft.calibration_pool_size(len(roster.view.roster.entries))
    n_map, _ = class_map_groups(pool)
    return roster.assignment.role == "calibration" and roster.assignment.index >= n_map


def _check_softmax(p: Participation, model: AnonMLClassifier, classes: int) -> None:
    k = p.problem.draft.label.k
    ensemble = model.ensemble_
    if ensemble.kind != "softmax" or ensemble.class_map is not None:
        raise Aborted("the model to calibrate is not an uncalibrated model of K >= 3 classes")
    if not ensemble.n_classes == classes == k:
        raise Aborted(
            f"the model has {ensemble.n_classes} classes and the question names {classes}; "
            f"the proposal's label has {k}"
        )


def check_class_map(p: Participation, request: CalibrationRequest) -> AnonMLClassifier:
    """The first question, to the map half: the verified model, or :class:`~peer.phases.Aborted`."""
    question = request.question
    if not isinstance(question, ClassMapQuestion):
        raise Aborted("a class-map answer was asked by a binary question")
    model = check_common(p, question, request.model, lambda plan: plan.class_map_half(), "map half")
    _check_softmax(p, model, question.classes)
    return model


def check_choice(p: Participation, request: CalibrationRequest) -> tuple[AnonMLClassifier, np.ndarray]:
    """The second question, to the choice half: the verified model and map ``Q``, or
    :class:`~peer.phases.Aborted` naming the first check that failed (module docstring)."""
    from anonml.learn.calibration import CLASS_MAP_WEIGHTS, LOSS_CLIP

    choice = request.choice
    if choice is None or not isinstance(request.question, ClassMapQuestion):
        raise Aborted("a choice answer was asked without a K >= 3 choice question")
    model = check_common(p, choice, request.model, lambda plan: plan.choice_half(), "choice half")
    k = model.ensemble_.n_classes
    _check_softmax(p, model, len(choice.class_map))
    if bytes(choice.model_digest) != bytes(request.question.model_digest):
        raise Aborted("the choice question names another model than the first question")
    if any(len(row) != k for row in choice.class_map):
        raise Aborted(f"the class map is not a {k} x {k} matrix")
    class_map = np.asarray(choice.class_map, dtype=float)
    if not np.all(np.isfinite(class_map)) or np.any(class_map <= 0):
        raise Aborted("the class map has an entry that is not a finite positive number")
    if np.any(np.abs(class_map.sum(axis=1) - 1.0) > ROW_SUM_TOLERANCE):
        raise Aborted(f"a row of the class map does not sum to 1 within {ROW_SUM_TOLERANCE:g}")
    if tuple(choice.weights) != tuple(float(t) for t in CLASS_MAP_WEIGHTS) or choice.clip != LOSS_CLIP:
        raise Aborted(
            f"the choice question's weights {choice.weights} and clip {choice.clip} are not the "
            f"protocol's {CLASS_MAP_WEIGHTS} and {LOSS_CLIP}"
        )
    return model, class_map


def class_value(p: Participation, model: AnonMLClassifier, gen: np.random.Generator) -> int:
    """``ĉ·K + y`` of this identity's example (``ĉ`` the model's argmax); uniform over K² when it
    cannot say."""
    k = model.ensemble_.n_classes

    def value(codes: np.ndarray, label: int) -> int:
        return int(np.argmax(model.ensemble_.decision_function(codes)[0])) * k + label

    return from_example(p, model, k, value, lambda: int(gen.integers(k * k)))


def choice_answer(
    p: Participation,
    question: ChoiceQuestion,
    model: AnonMLClassifier,
    class_map: np.ndarray,
    gen: np.random.Generator,
) -> ChoiceAnswer:
    """The signed answer: this identity's log-loss steps under ``class_map`` mixed in at each weight
    (uniform in ``[−clip, clip]`` when it cannot say), perturbed at the question's ε."""
    from anonml.learn.calibration import loss_steps, perturb_steps

    k = model.ensemble_.n_classes
    d = len(question.weights)

    def steps(codes: np.ndarray, label: int) -> np.ndarray:
        mapped = class_map[np.argmax(model.ensemble_.decision_function(codes), axis=1)]
        return loss_steps(model.ensemble_.proba(codes), mapped, np.asarray([label]))[0]

    own = from_example(p, model, k, steps, lambda: gen.uniform(-question.clip, question.clip, d))
    report = perturb_steps(np.asarray(own, dtype=float)[None, :], question.clip, question.epsilon, gen)[0]
    return sign_message(
        ChoiceAnswer(
            problem_id=p.problem.id,
            identity=bytes(p.node.identity.public),
            model_digest=question.model_digest,
            report=tuple(float(v) for v in report),
            signature=bytes(64),
        ),
        p.node.identity,
    )
