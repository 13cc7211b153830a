"""The calibration step: the signed question the aggregator asks its calibration pool about the
trained model, and each pool member's one signed answer (docs/protocol.md, "Calibration").

After training, when the plan set a calibration pool apart
(:meth:`~anonml.protocol.ProblemDraft.calibration_pool_size`), the aggregator publishes the
*uncalibrated* model (a signed :class:`~anonml.protocol.ModelDocument`) together with a signed
:class:`CalibrationQuestion`: the model's digest, the public score cut points (a function of the
model alone, :func:`anonml.learn.calibration.score_bins`), the problem's ε, the pool members asked
and the deadline. Each member answers once, directly and signed (as a median answer, not through
the onion round): its (score bin, label) pair, one-hot over ``2·(len(cuts) + 1)`` values,
perturbed at ε by the least-error mechanism (:func:`anonml.privacy.best_mechanism`). The debiased
histogram of the answers fits the Platt map of the published model
(:mod:`anonml.learn.calibration`).

A K ≥ 3-class model is calibrated in two stages by the two halves of the pool the plan fixes
(:meth:`~anonml.learn.partition.PartitionPlan.class_map_half`,
:meth:`~anonml.learn.partition.PartitionPlan.choice_half`). The map half is asked a
:class:`ClassMapQuestion` and answers, as above (:class:`CalibrationAnswer`), its (predicted
class, label) pair, one-hot over K² values; the aggregator builds the class map ``Q`` from the
debiased counts (:func:`anonml.learn.calibration.class_map_from_counts`). The choice half is then
asked a :class:`ChoiceQuestion` carrying ``Q`` and answers with a :class:`ChoiceAnswer`: its
log-loss steps of mixing ``Q`` into the model, perturbed by the Hybrid mechanism
(:func:`anonml.learn.calibration.perturb_steps`); the aggregator keeps ``Q`` at the weight the
reports measure to help (:func:`anonml.learn.calibration.choose_from_reports`), or none.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from pydantic import Field, TypeAdapter

from anonml.privacy.descriptor import MechanismDescriptor
from anonml.protocol.messages import B64, IdentityBytes, SignatureBytes, WireMessage
from anonml.protocol.problems import MAX_LABEL_CLASSES
from anonml.protocol.round import ModelDocument

__all__ = [
    "MAX_SCORE_CUTS",
    "model_digest",
    "CalibrationQuestion",
    "CalibrationAnswer",
    "CalibrationRequest",
    "ClassMapQuestion",
    "ChoiceQuestion",
    "ChoiceAnswer",
    "MAX_CHOICE_CANDIDATES",
    "parse_question",
]

#: Most mixing weights a choice question may name (the library tries 2, CLASS_MAP_WEIGHTS).
MAX_CHOICE_CANDIDATES = 8

#: Most score cut points a question may carry (the library uses CALIBRATION_BINS − 1 = 9).
MAX_SCORE_CUTS = 63


def model_digest(model: dict[str, Any]) -> bytes:
    """SHA-256 of a model document's canonical JSON (sorted keys, no spaces): what a question names.

    Both sides compute it from the JSON-native document (:meth:`ModelDocument.model`), so the
    digest of the document a peer downloaded equals the one the aggregator signed.
    """
    canonical = json.dumps(model, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    return hashlib.sha256(b"anonml/calibration/model/" + canonical.encode("ascii")).digest()


class _PoolQuestion(WireMessage):
    """What every calibration question names: the problem, the model (its digest), ε, the roster
    indices asked and the POSIX time the aggregator stops waiting for their answers. Each kind is
    signed under its own class name (:func:`~anonml.protocol.messages.signing_context`)."""

    problem_id: str
    model_digest: B64(32)
    epsilon: float = Field(gt=0, le=20)
    members: tuple[int, ...] = Field(min_length=1)
    deadline: float
    signature: SignatureBytes


class CalibrationQuestion(_PoolQuestion):
    """Asked of the calibration pool once the model is trained. Signed by the aggregator.

    ``cuts`` are the score cut points (a score ``f`` falls in bin ``#{k : f > cuts[k]}``): a peer
    recomputes them from the model named by ``model_digest`` and refuses any others, so the
    aggregator cannot choose cut points that single one peer out. ``members`` are the roster
    indices asked (the plan's calibration pool); ``deadline`` the POSIX time the aggregator stops
    waiting for answers.
    """

    cuts: tuple[float, ...] = Field(min_length=1, max_length=MAX_SCORE_CUTS)

    @property
    def domain(self) -> int:
        """Values an answer is one-hot over: (score bin, label), ``2·(len(cuts) + 1)``."""
        return 2 * (len(self.cuts) + 1)


class ClassMapQuestion(_PoolQuestion):
    """K ≥ 3, stage 1: asked of the map half once the model is trained. Signed by the aggregator.

    A member answers (:class:`CalibrationAnswer`) its pair (predicted class ``ĉ``, label ``y``) as
    the value ``ĉ·K + y`` of a one-hot over ``K²`` values, ``ĉ`` the argmax of the model's decision
    function at its example (computed from the model alone). ``members`` are the roster indices
    asked (the plan's map half); ``deadline`` the POSIX time the aggregator stops waiting.
    """

    classes: int = Field(ge=3, le=MAX_LABEL_CLASSES)

    @property
    def domain(self) -> int:
        """Values an answer is one-hot over: (predicted class, label), ``K²``."""
        return self.classes**2


class ChoiceQuestion(_PoolQuestion):
    """K ≥ 3, stage 2: asked of the choice half once the map half's answers built the class map.
    Signed by the aggregator.

    ``class_map`` is ``Q`` (K × K, ``Q[ĉ, y] = P̂(y | ĉ)``); ``weights`` the mixing weights tried
    against the model (``CLASS_MAP_WEIGHTS``) and ``clip`` the bound on a loss step (``LOSS_CLIP``):
    a member refuses any others. Its answer (:class:`ChoiceAnswer`) is the steps
    ``ℓ_{t_j} − ℓ_{t_{j−1}}`` of its example's log loss under the mixtures ``p_t ∝ p^(1−t)·Q[ĉ]^t``
    (``t_0 = 0``), clipped to ±``clip``, divided by ``clip`` and perturbed at ``epsilon``.
    """

    class_map: tuple[tuple[float, ...], ...] = Field(min_length=3, max_length=MAX_LABEL_CLASSES)
    weights: tuple[float, ...] = Field(min_length=1, max_length=MAX_CHOICE_CANDIDATES)
    clip: float = Field(gt=0)


class ChoiceAnswer(WireMessage):
    """One choice-half member's perturbed log-loss steps, signed by the member.

    ``report`` is :func:`anonml.learn.calibration.perturb_steps` of the member's steps at the
    question's ε (one value per weight; the support :func:`anonml.learn.calibration.check_choice_report`
    states).
    """

    problem_id: str
    identity: IdentityBytes
    model_digest: B64(32)
    report: tuple[float, ...] = Field(min_length=1, max_length=MAX_CHOICE_CANDIDATES)
    signature: SignatureBytes


class CalibrationAnswer(WireMessage):
    """One pool member's perturbed (score bin, label), signed by the member.

    ``bits`` are the ``mechanism.m`` bits (:func:`~anonml.protocol.pack_bits`) of value
    ``2·bin + label`` perturbed by ``mechanism`` at the question's ε.
    """

    problem_id: str
    identity: IdentityBytes
    model_digest: B64(32)
    mechanism: MechanismDescriptor
    bits: B64(max_size=64)
    signature: SignatureBytes


class CalibrationRequest(WireMessage):
    """What ``GET /problems/{id}/calibration`` serves once asked: the question and the signed
    uncalibrated model it is about (each signed on its own).

    K ≥ 3: ``question`` is the map half's :class:`ClassMapQuestion`, and ``choice`` the choice half's
    :class:`ChoiceQuestion` once asked (absent before, and for a binary model).
    """

    question: CalibrationQuestion | ClassMapQuestion
    model: ModelDocument
    choice: ChoiceQuestion | None = Field(default=None, exclude_if=lambda choice: choice is None)


_FIRST_QUESTION: TypeAdapter[CalibrationQuestion | ClassMapQuestion] = TypeAdapter(
    CalibrationQuestion | ClassMapQuestion
)


def parse_question(data: str | bytes) -> CalibrationQuestion | ClassMapQuestion:
    """A stored first question from its JSON: a binary :class:`CalibrationQuestion` or a K ≥ 3
    :class:`ClassMapQuestion` (their fields tell them apart: each forbids the other's)."""
    return _FIRST_QUESTION.validate_json(data)
