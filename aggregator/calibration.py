"""The calibration step at the aggregator: the question to the pool, and the Platt map its answers fit.

After training, a problem whose plan set a calibration pool apart
(:meth:`~anonml.protocol.ProblemDraft.calibration_pool_size`) asks that pool one signed
:class:`~anonml.protocol.CalibrationQuestion` about the uncalibrated model (its digest, the
public cut points :func:`anonml.learn.calibration.score_bins` derives from the model alone, the
problem's ε, the members asked, the deadline). Each member's signed answer is its (score bin,
label) pair perturbed at ε (:mod:`anonml.protocol.calibration`). Here the answers are summed per
mechanism and debiased, ``n̂ = (ñ − q·n)/(p − q)`` (:func:`anonml.privacy.estimate_counts`,
raw: unbiased, possibly negative, as the library keeps them), and the map is the library's
(:func:`anonml.learn.calibration.platt_map`): Platt scaling ``P(y=1|x) = σ(a·f(x) + b)`` fitted
to the debiased histogram with the intercept tied to the private base rate, the slope limited
to what the pool's noise supports, and tempered toward the base rate by its measured Brier gain.

Too few answers to carry a signal — the library's own rule,
:func:`anonml.learn.simulation.calibration_pool_size` of the answers received is 0 — and the
model is published as trained (:func:`calibrate_model` returns None; the status and the model
document say so).

K ≥ 3 classes (a softmax model) calibrate in two stages, each asking one half of the pool the plan
fixes. The map half's answers are (predicted class, label) pairs over K² values, debiased the same
way (:func:`answer_counts`), and the class map ``Q`` is the library's
(:func:`anonml.learn.calibration.class_map_from_counts`, shrunk toward the model's own prior):
:func:`class_map_of`. The choice half's answers, Hybrid-mechanism reports of their log-loss steps
under ``Q`` mixed in at each weight of ``CLASS_MAP_WEIGHTS``, choose the weight
(:func:`anonml.learn.calibration.choose_from_reports`): :func:`chosen_map_weight`. The library's
pool rule for K classes (:func:`enough_answers` with ``n_classes = K``) is applied to the answers
of both halves as one pool: after the first stage with every choice member counted as answering
(else the second is not asked, and no choice member spends ε), after the second with those that
did; each half needs two answers (a standard error needs two reports).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

from anonml.crypto import Identity
from anonml.privacy.descriptor import MechanismDescriptor
from anonml.protocol import (
    CalibrationQuestion,
    ChoiceQuestion,
    ClassMapQuestion,
    Problem,
    model_digest,
    sign_message,
    unpack_bits,
)

if TYPE_CHECKING:
    import numpy as np

    from anonml.learn.ensemble import Ensemble
    from anonml.learn.model import AnonMLClassifier

__all__ = [
    "score_cuts",
    "calibration_question",
    "choice_question",
    "answer_counts",
    "enough_answers",
    "calibrate_model",
    "class_map_of",
    "chosen_map_weight",
]

#: Fewest answers of either half of a K ≥ 3 pool (as the library's calibrate_classes: two per half).
MIN_HALF_ANSWERS = 2


def score_cuts(model: AnonMLClassifier) -> tuple[float, ...]:
    """The public cut points of ``model``'s score: :func:`anonml.learn.calibration.score_bins` of its
    ensemble with ``CALIBRATION_BINS`` bins, a function of the model alone (the peer recomputes them)."""
    from anonml.learn.calibration import CALIBRATION_BINS, score_bins

    cuts, _ = score_bins(model.ensemble_, CALIBRATION_BINS)
    return tuple(float(c) for c in cuts)


def calibration_question(
    problem: Problem,
    model: AnonMLClassifier,
    document_model: dict,
    members: Iterable[int],
    deadline: float,
    identity: Identity,
) -> CalibrationQuestion | ClassMapQuestion:
    """The signed question about ``model`` (published as ``document_model``) to the pool ``members``:
    a binary model's (score bin, label) question with its cut points, a softmax model's (predicted
    class, label) question to the map half."""
    common = {
        "problem_id": problem.id,
        "model_digest": model_digest(document_model),
        "epsilon": problem.draft.epsilon,
        "members": tuple(int(i) for i in members),
        "deadline": float(deadline),
        "signature": bytes(64),
    }
    if model.ensemble_.kind == "softmax":
        return sign_message(ClassMapQuestion(classes=model.ensemble_.n_classes, **common), identity)
    return sign_message(CalibrationQuestion(cuts=score_cuts(model), **common), identity)


def choice_question(
    problem: Problem,
    digest: bytes,
    class_map: np.ndarray,
    members: Iterable[int],
    deadline: float,
    identity: Identity,
) -> ChoiceQuestion:
    """The signed second-stage question to the choice half ``members``: the model ``digest`` names,
    the map ``Q``, the library's ``CLASS_MAP_WEIGHTS`` and ``LOSS_CLIP``, the problem's ε."""
    from anonml.learn.calibration import CLASS_MAP_WEIGHTS, LOSS_CLIP

    return sign_message(
        ChoiceQuestion(
            problem_id=problem.id,
            model_digest=digest,
            class_map=tuple(tuple(float(v) for v in row) for row in class_map),
            weights=tuple(float(t) for t in CLASS_MAP_WEIGHTS),
            clip=float(LOSS_CLIP),
            epsilon=problem.draft.epsilon,
            members=tuple(int(i) for i in members),
            deadline=float(deadline),
            signature=bytes(64),
        ),
        identity,
    )


def answer_counts(
    answers: Iterable[tuple[str, bytes]], n_bins: int, n_labels: int = 2
) -> tuple[np.ndarray, np.ndarray, int]:
    """Debiased (score bin, label) counts of stored answers, their variances (each (n_bins, n_labels)),
    and n. K ≥ 3: (predicted class, label) counts with ``n_bins = n_labels = K``.

    ``answers`` are ``(mechanism JSON, packed bits)``. Answers made by one mechanism are summed and
    debiased together (raw counts, no consistency step); the groups' counts and variances add (the
    groups' noise is independent). Honest members all choose the same mechanism, so there is one group.
    """
    import numpy as np  # the calibration step's work: not at the service's start

    from anonml.privacy import estimate_counts

    sums: dict[str, tuple[MechanismDescriptor, np.ndarray, int]] = {}
    for mechanism_json, bits in answers:
        if mechanism_json not in sums:
            descriptor = MechanismDescriptor.model_validate_json(mechanism_json)
            sums[mechanism_json] = (descriptor, np.zeros(descriptor.m, dtype=np.int64), 0)
        descriptor, total, n = sums[mechanism_json]
        sums[mechanism_json] = (descriptor, total + unpack_bits(bits, descriptor.m), n + 1)
    shape = (n_bins, n_labels)
    counts = np.zeros(shape)
    variance = np.zeros(shape)
    for descriptor, total, n in sums.values():
        if descriptor.m != n_bins * n_labels:
            raise ValueError(
                f"an answer over {descriptor.m} values, the question's domain is {n_bins * n_labels}"
            )
        estimate = estimate_counts(total, descriptor, n, consistency=None)
        counts += np.asarray(estimate.raw, dtype=float).reshape(shape)
        variance += np.asarray(estimate.variance, dtype=float).reshape(shape)
    return counts, variance, sum(n for _, _, n in sums.values())


def enough_answers(received: int, epsilon: float, n_classes: int = 2) -> bool:
    """Do ``received`` answers at ε carry a signal: the library's pool rule for ``n_classes``
    (:func:`anonml.learn.simulation.calibration_pool_size` with the whole share) is not 0."""
    from anonml.learn.simulation import calibration_pool_size

    return received > 0 and calibration_pool_size(1.0, received, epsilon, n_classes) > 0


def calibrate_model(
    model: AnonMLClassifier, answers: Iterable[tuple[str, bytes]], epsilon: float
) -> tuple[Ensemble | None, int]:
    """``model``'s ensemble with the Platt map its pool's ``answers`` fit, and the answers counted.

    None instead of an ensemble when too few answers arrived (:func:`enough_answers`): the model
    stays as trained.
    """
    from anonml.learn.calibration import CALIBRATION_BINS, platt_map

    counts, variance, n = answer_counts(answers, CALIBRATION_BINS)
    if not enough_answers(n, epsilon):
        return None, n
    return model.ensemble_.with_calibration(platt_map(model.ensemble_, counts, variance)), n


def class_map_of(
    model: AnonMLClassifier, answers: Iterable[tuple[str, bytes]], n_choice: int, epsilon: float
) -> tuple[np.ndarray | None, int]:
    """K ≥ 3, after the first stage: the class map ``Q`` the map half's ``answers`` give, and the
    answers counted.

    None instead of ``Q`` when the pool cannot carry a signal even if all ``n_choice`` members of
    the choice half answer (module docstring): the second stage is then not asked.
    """
    from anonml.learn.calibration import class_map_from_counts, class_prior

    ensemble = model.ensemble_
    k = ensemble.n_classes
    counts, variance, n = answer_counts(answers, k, k)
    if min(n, n_choice) < MIN_HALF_ANSWERS or not enough_answers(n + n_choice, epsilon, k):
        return None, n
    return class_map_from_counts(counts, variance, float(n), class_prior(ensemble)), n


def chosen_map_weight(
    reports: Sequence[Sequence[float]], n_map: int, epsilon: float, n_classes: int
) -> float | None:
    """K ≥ 3, after the second stage: the map weight ``t`` the choice half's ``reports`` choose
    (0: the model as trained), or None when the two halves' ``n_map + len(reports)`` answers are
    too few to carry a signal (module docstring)."""
    import numpy as np

    from anonml.learn.calibration import LOSS_CLIP, choose_from_reports, chosen_weight

    if len(reports) < MIN_HALF_ANSWERS or not enough_answers(n_map + len(reports), epsilon, n_classes):
        return None
    return chosen_weight(choose_from_reports(np.asarray(reports, dtype=float), LOSS_CLIP))
