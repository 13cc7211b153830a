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
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from anonml.crypto import Identity
from anonml.privacy.descriptor import MechanismDescriptor
from anonml.protocol import CalibrationQuestion, Problem, model_digest, sign_message, unpack_bits

if TYPE_CHECKING:
    import numpy as np

    from anonml.learn.ensemble import Ensemble
    from anonml.learn.model import AnonMLClassifier

__all__ = [
    "score_cuts",
    "calibration_question",
    "answer_counts",
    "enough_answers",
    "calibrate_model",
]


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
) -> CalibrationQuestion:
    """The signed question about ``model`` (published as ``document_model``) to the pool ``members``."""
    return sign_message(
        CalibrationQuestion(
            problem_id=problem.id,
            model_digest=model_digest(document_model),
            cuts=score_cuts(model),
            epsilon=problem.draft.epsilon,
            members=tuple(int(i) for i in members),
            deadline=float(deadline),
            signature=bytes(64),
        ),
        identity,
    )


def answer_counts(answers: Iterable[tuple[str, bytes]], n_bins: int) -> tuple[np.ndarray, np.ndarray, int]:
    """Debiased (score bin, label) counts of stored answers, their variances (each (n_bins, 2)), and n.

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
    counts = np.zeros((n_bins, 2))
    variance = np.zeros((n_bins, 2))
    for descriptor, total, n in sums.values():
        if descriptor.m != 2 * n_bins:
            raise ValueError(f"an answer over {descriptor.m} values, the question's domain is {2 * n_bins}")
        estimate = estimate_counts(total, descriptor, n, consistency=None)
        counts += np.asarray(estimate.raw, dtype=float).reshape(n_bins, 2)
        variance += np.asarray(estimate.variance, dtype=float).reshape(n_bins, 2)
    return counts, variance, sum(n for _, _, n in sums.values())


def enough_answers(received: int, epsilon: float) -> bool:
    """Do ``received`` answers at ε carry a signal: the library's pool rule
    (:func:`anonml.learn.simulation.calibration_pool_size` with the whole share) is not 0."""
    from anonml.learn.simulation import calibration_pool_size

    return received > 0 and calibration_pool_size(1.0, received, epsilon) > 0


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
