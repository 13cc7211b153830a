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
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from pydantic import Field

from anonml.privacy.descriptor import MechanismDescriptor
from anonml.protocol.messages import B64, IdentityBytes, SignatureBytes, WireMessage
from anonml.protocol.round import ModelDocument

__all__ = [
    "MAX_SCORE_CUTS",
    "model_digest",
    "CalibrationQuestion",
    "CalibrationAnswer",
    "CalibrationRequest",
]

#: Most score cut points a question may carry (the library uses CALIBRATION_BINS − 1 = 9).
MAX_SCORE_CUTS = 63


def model_digest(model: dict[str, Any]) -> bytes:
    """SHA-256 of a model document's canonical JSON (sorted keys, no spaces): what a question names.

    Both sides compute it from the JSON-native document (:meth:`ModelDocument.model`), so the
    digest of the document a peer downloaded equals the one the aggregator signed.
    """
    canonical = json.dumps(model, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    return hashlib.sha256(b"anonml/calibration/model/" + canonical.encode("ascii")).digest()


class CalibrationQuestion(WireMessage):
    """Asked of the calibration pool once the model is trained. Signed by the aggregator.

    ``cuts`` are the score cut points (a score ``f`` falls in bin ``#{k : f > cuts[k]}``): a peer
    recomputes them from the model named by ``model_digest`` and refuses any others, so the
    aggregator cannot choose cut points that single one peer out. ``members`` are the roster
    indices asked (the plan's calibration pool); ``deadline`` the POSIX time the aggregator stops
    waiting for answers.
    """

    problem_id: str
    model_digest: B64(32)
    cuts: tuple[float, ...] = Field(min_length=1, max_length=MAX_SCORE_CUTS)
    epsilon: float = Field(gt=0, le=20)
    members: tuple[int, ...] = Field(min_length=1)
    deadline: float
    signature: SignatureBytes

    @property
    def domain(self) -> int:
        """Values an answer is one-hot over: (score bin, label), ``2·(len(cuts) + 1)``."""
        return 2 * (len(self.cuts) + 1)


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
    uncalibrated model it is about (each signed on its own)."""

    question: CalibrationQuestion
    model: ModelDocument
