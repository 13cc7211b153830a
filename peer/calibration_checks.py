"""The checks every calibration answer passes before anything is computed from the data, binary or
either K ≥ 3 stage (:func:`check_common`), and the one way an answer reads its example
(:func:`from_example`): shared by :mod:`peer.calibration_answer` and :mod:`peer.class_map_answer`
(docs/protocol.md, "Calibration")."""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from typing import TYPE_CHECKING, TypeVar

import numpy as np

from anonml.crypto import CryptoError
from anonml.errors import AnonMLError, ProtocolError
from anonml.protocol import (
    CalibrationQuestion,
    ChoiceQuestion,
    ClassMapQuestion,
    ModelDocument,
    model_digest,
    verify_message,
)
from peer.features import invalid_features
from peer.participation import Participation
from peer.phases import Aborted

if TYPE_CHECKING:
    from anonml.learn import AnonMLClassifier
    from anonml.learn.partition import PartitionPlan

__all__ = ["check_common", "from_example"]

T = TypeVar("T")


def check_common(
    p: Participation,
    question: CalibrationQuestion | ClassMapQuestion | ChoiceQuestion,
    document: ModelDocument,
    pool: Callable[[PartitionPlan], np.ndarray],
    pool_name: str,
) -> AnonMLClassifier:
    """The checks every calibration question passes, binary or either K ≥ 3 stage: the verified model,
    or :class:`~peer.phases.Aborted` naming the first check that failed.

    Signed by the problem's aggregator and for this problem (question and model); the question names
    the model it came with; this identity's plan puts it in the calibration pool and every member
    asked is in ``pool`` of the plan (the whole pool, or one of its halves, named ``pool_name``); ε is
    the problem's; the model is a valid model of the proposal's features.
    """
    from anonml.learn import AnonMLClassifier
    from anonml.learn.settings import roster_plan

    aggregator = bytes(p.problem.aggregator)
    try:
        verify_message(question, aggregator)
        verify_message(document, aggregator)
    except CryptoError as exc:
        raise Aborted(f"calibration question or model not signed by the aggregator: {exc}") from None
    if question.problem_id != p.problem.id or document.problem_id != p.problem.id:
        raise Aborted("the calibration question or its model is for another problem")
    if bytes(question.model_digest) != model_digest(document.model):
        raise Aborted("the calibration question names another model than the one it came with")
    roster = p.facts(p.roster, "the checked roster")
    if roster.assignment.role != "calibration":
        role = roster.assignment.role
        raise Aborted(f"asked to calibrate, but the plan puts this identity in the {role} pool")
    draft = p.problem.draft
    plan = roster.view.memo(
        ("plan", roster.beacon), lambda: roster_plan(draft, roster.view.roster, roster.beacon)
    )
    if not set(question.members) <= {int(i) for i in pool(plan)}:
        raise Aborted(f"the calibration question asks members outside the plan's {pool_name}")
    if not math.isclose(question.epsilon, draft.epsilon, rel_tol=1e-12):
        raise Aborted(
            f"the calibration question asks ε={question.epsilon}, the proposal promised {draft.epsilon}"
        )
    try:
        model = AnonMLClassifier.from_json(json.dumps(document.model))
    except ProtocolError as exc:
        raise Aborted(f"the model to calibrate is not a valid model: {exc}") from None
    if model.n_features_in_ != len(draft.features):
        raise Aborted(
            f"the model takes {model.n_features_in_} features, the proposal has {len(draft.features)}"
        )
    return model


def from_example(
    p: Participation,
    model: AnonMLClassifier,
    n_labels: int,
    compute: Callable[[np.ndarray, int], T],
    standin: Callable[[], T],
) -> T:
    """``compute(codes, label)`` of this identity's example under ``model`` (its binned row, its label
    index in ``0..n_labels − 1``); ``standin()`` — a uniform input to the same mechanism — whenever it
    cannot say (no example, a feature out of range, another label), noted as a stand-in."""
    p.compute_example()
    try:
        if p.example is None:
            raise AnonMLError("no example")
        bad = invalid_features(p.example.x, p.problem.draft.features)
        if bad:
            raise AnonMLError("; ".join(bad.values()))
        label = int(p.example.y)
        if not 0 <= label < n_labels:
            raise AnonMLError(f"label index {label} is not one of the model's {n_labels} classes")
        return compute(model.binning_.transform(np.asarray(p.example.x, dtype=float)[None, :]), label)
    except Exception as exc:  # whatever fails, a uniform value through the same mechanism
        p._standin(f"calibration answer: {exc}")
        return standin()
