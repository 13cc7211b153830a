"""The round: private-median queries and answers, the bins, one-time tokens, private reports, the
intake's deliveries and receipts, and the signed model.

The protocol as a whole: docs/protocol.md.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Literal

from pydantic import (
    AwareDatetime,
    Field,
    model_validator,
)

from anonml.crypto import (
    Identity,
    TokenPublicKey,
    TokenRequest,
    request_token_batch,
)
from anonml.crypto.onion import PAYLOAD_SIZE as SEALED_PAYLOAD_SIZE
from anonml.crypto.onion import PAYLOAD_VERSION
from anonml.privacy.descriptor import MechanismDescriptor
from anonml.protocol.membership import MAX_BATCH_ITEMS
from anonml.protocol.messages import B64, IdentityBytes, SignatureBytes, Slot, WireMessage, sign_message
from anonml.protocol.status import CalibrationAccount, MedianAccount, ReportAccount

if TYPE_CHECKING:
    import numpy as np

__all__ = [
    "MedianQuery",
    "MedianAnswer",
    "Ack",
    "Bins",
    "report_slot",
    "TokenSlotRequest",
    "TokenBatchRequest",
    "token_batch_request",
    "TokenBatchResponse",
    "PrivateReport",
    "pack_bits",
    "unpack_bits",
    "IntakeDelivery",
    "IntakeReceipt",
    "IntakeBatch",
    "ItemResult",
    "BatchResults",
    "ReportReceipts",
    "ModelDocument",
    "ModelEvaluation",
]


class _MedianStep(WireMessage):
    """What names one step of the private-median search: the problem, the feature, the step."""

    problem_id: str
    feature: int = Field(ge=0)
    step: int = Field(ge=0)


class MedianQuery(_MedianStep):
    """IsGreater(threshold) for one numeric feature, asked of ``members`` (roster indices)."""

    threshold: float
    members: tuple[int, ...]
    epsilon: float = Field(gt=0)
    signature: SignatureBytes


class MedianAnswer(_MedianStep):
    """One binary-randomised-response bit, signed by the answering peer."""

    identity: IdentityBytes
    bit: bool
    signature: SignatureBytes


class MedianAnswerBatch(WireMessage):
    """Median answers of many identities in one request (a host of many peers), each signed by its own.

    Answered with :class:`BatchResults`: each item gets the status and detail its own
    ``POST …/medians/answers`` would have got.
    """

    answers: tuple[MedianAnswer, ...] = Field(min_length=1, max_length=MAX_BATCH_ITEMS)


class Ack(WireMessage):
    """A plain acknowledgement (e.g. of a median answer)."""

    ok: bool = True
    detail: str = ""


class Bins(WireMessage):
    """The published bin edges and the report round's absolute schedule. Signed.

    ``edges[f]`` are the inner cut points of numeric feature ``f`` (empty for
    categorical and boolean features, whose categories are their bins).
    """

    problem_id: str
    edges: tuple[tuple[float, ...], ...]
    t_s: float
    delta: float
    t_r: float
    slots_per_peer: int = Field(ge=1, le=64)
    #: Seconds after ``t_r`` the intake still takes deliveries (the aggregator's intake grace): last
    #: hops keep retrying undelivered reports until ``t_r + grace``. Left out of the wire form when 0,
    #: so bins signed before the field existed keep their bytes.
    grace: float = Field(default=0.0, ge=0, le=3600, exclude_if=lambda grace: grace == 0)
    signature: SignatureBytes


# --- tokens and reports --------------------------------------------------------


_SLOT_MAX = 64  # anonml.crypto.tokens.SLOT_MAX_SIZE


def report_slot(problem_id: str, partition: int, k: int) -> bytes:
    """The public POPRF input of slot ``k`` of partition ``partition`` of a problem.

    ``problem_id ‖ "/p" ‖ partition ‖ "/r" ‖ k`` in ASCII (a problem id whose
    slot would pass 64 bytes is replaced by the hex of its 16-byte BLAKE2b).
    The token is bound to the whole triple: the POPRF key is tweaked by the
    slot (:mod:`anonml.crypto.poprf`), so a token issued for partition 0 does
    not verify as one for partition 1, and the intake refuses a redemption
    whose slot does not name the report's (partition, subset). The aggregator
    issues a peer only the slots of the partition the plan gives it, so it
    cannot tell peers apart by the slots they redeem beyond that partition —
    which the report itself names anyway.
    """
    if not 0 <= partition < 10_000 or not 0 <= k < 1000:
        raise ValueError(f"slot (partition={partition}, k={k}) out of range")
    slot = f"{problem_id}/p{partition}/r{k}".encode("ascii")
    if len(slot) > _SLOT_MAX:
        digest = hashlib.blake2b(problem_id.encode("ascii"), digest_size=16).hexdigest()
        slot = f"{digest}/p{partition}/r{k}".encode("ascii")
    return slot


class TokenSlotRequest(WireMessage):
    slot: Slot
    blinded: B64(32)


class TokenBatchRequest(WireMessage):
    """Blinded elements for a peer's slots, signed by the peer (authenticated issuance)."""

    problem_id: str
    identity: IdentityBytes
    requests: tuple[TokenSlotRequest, ...] = Field(min_length=1, max_length=64)
    signature: SignatureBytes


def token_batch_request(
    problem_id: str,
    identity: Identity,
    token_key: bytes,
    slots: Sequence[bytes],
    *,
    signer: Identity | None = None,
) -> tuple[TokenBatchRequest, TokenRequest]:
    """Blind one fresh nonce per slot under ``token_key`` and sign the batch (RFC 9497 blinding).

    Nonces and blinds always come from the OS CSPRNG (no generator parameter).

    Returns the batch, signed by ``signer`` (default ``identity``, the requester it names), and
    the pending request that turns the aggregator's :class:`TokenBatchResponse` into tokens
    (:func:`anonml.crypto.finalize_tokens`).
    """
    pending = request_token_batch(TokenPublicKey(bytes(token_key)), slots)
    unsigned = TokenBatchRequest(
        problem_id=problem_id,
        identity=bytes(identity.public),
        requests=tuple(
            TokenSlotRequest(slot=slot, blinded=bytes(b))
            for slot, b in zip(slots, pending.blinded, strict=True)
        ),
        signature=bytes(64),
    )
    return sign_message(unsigned, signer or identity), pending


class TokenBatchResponse(WireMessage):
    """One evaluated element per requested slot, in request order, and one DLEQ proof
    (``c ‖ s``, 64 bytes) covering all of them (:mod:`anonml.crypto.dleq`)."""

    evaluated: tuple[B64(32), ...] = Field(min_length=1, max_length=64)
    proof: B64(64)

    def wire(self) -> bytes:
        """``Z_1 ‖ … ‖ Z_n ‖ c ‖ s``: what :func:`anonml.crypto.finalize_tokens` decodes and checks."""
        return b"".join(bytes(z) for z in self.evaluated) + bytes(self.proof)


class PrivateReport(WireMessage):
    """One perturbed report: the bits over (binned subset × label), and how they were made."""

    problem_id: str
    partition: int = Field(ge=0)
    subset: int = Field(ge=0)
    mechanism: MechanismDescriptor
    bits: B64(max_size=512)

    def to_bytes(self) -> bytes:
        return self.model_dump_json().encode("ascii")

    @classmethod
    def from_bytes(cls, data: bytes) -> PrivateReport:
        """Parse report bytes (JSON only; pydantic validation, never code)."""
        return cls.model_validate_json(data)

    def bit_vector(self) -> np.ndarray:
        """The report's ``mechanism.m`` bits (see :func:`unpack_bits`)."""
        return unpack_bits(self.bits, self.mechanism.m)


def pack_bits(bits: np.ndarray) -> bytes:
    """A bit vector as bytes: ``numpy.packbits`` (big-endian bit order), zero padded."""
    import numpy as np  # loaded by the first report, not by the services' start-up

    arr = np.asarray(bits)
    if arr.ndim != 1:
        raise ValueError(f"bits must be 1-D, got shape {arr.shape}")
    return np.packbits(arr.astype(bool)).tobytes()


def unpack_bits(data: bytes, m: int) -> np.ndarray:
    """Inverse of :func:`pack_bits` for ``m`` bits; refuses a wrong length or set padding bits."""
    if len(data) != (m + 7) // 8:
        raise ValueError(f"{m} bits need {(m + 7) // 8} bytes, got {len(data)}")
    import numpy as np

    bits = np.unpackbits(np.frombuffer(data, dtype=np.uint8))
    if bits[m:].any():
        raise ValueError("padding bits after the last report bit must be zero")
    return bits[:m].astype(bool)


class IntakeDelivery(WireMessage):
    """What a final hop hands the aggregator: the sealed payload it peeled, unopened.

    ``sealed`` is the :data:`~anonml.crypto.PAYLOAD_SIZE`-byte sealed box of
    :mod:`anonml.crypto.onion` (a report with its redemption, or cover — the
    relay cannot tell which), ``round_id`` the packet's round. Only the
    aggregator opens it (:func:`~anonml.crypto.open_payload`). ``version`` is
    the payload version; a v1 delivery (redemption and report in the clear) is
    refused by name.
    """

    version: Literal[2]
    round_id: int = Field(ge=0, lt=2**64)
    sealed: B64(SEALED_PAYLOAD_SIZE)

    @model_validator(mode="before")
    @classmethod
    def _not_v1(cls, data: Any) -> Any:
        if isinstance(data, dict) and ("redemption" in data or "report" in data):
            raise ValueError(
                "an AnonSphinx-v1 delivery (redemption and report in the clear) is no longer accepted: "
                f"relays forward the sealed payload (version {PAYLOAD_VERSION})"
            )
        return data


class IntakeReceipt(WireMessage):
    accepted: bool


class IntakeBatch(WireMessage):
    """Many final-hop deliveries in one request: what a last-hop relay releases together.

    Each delivery is checked and its token spent independently of the others
    (:class:`BatchResults`); the batch as a whole is refused only when it is
    not a well-formed batch (422: not this shape, empty, or more than
    :data:`MAX_BATCH_ITEMS` items) or its body is over the service's body cap
    (413).
    """

    deliveries: tuple[IntakeDelivery, ...] = Field(min_length=1, max_length=MAX_BATCH_ITEMS)


class ItemResult(WireMessage):
    """What one item of a batch got: the status and detail its own single request would have got."""

    status: int = Field(ge=100, le=599)
    detail: str = ""


class BatchResults(WireMessage):
    """Per-item answers of a batch request, in the items' order (one per item)."""

    results: tuple[ItemResult, ...]


class ReportReceipts(WireMessage):
    """After the report round: a digest of the nonce of every redeemed token, in sorted order.

    ``digests`` are ``BLAKE2b-256(person="AnonMLv1-receipt"; nonce)``. Each peer
    downloads the whole list and checks its own tokens' nonces locally, so a
    report dropped on its route (a relay that accepts and discards) is counted
    by its sender; the list says nothing the aggregator did not know (it holds
    the nonces) and, sorted, nothing about arrival order. Nonces are drawn by
    the peers at random, so a digest names no peer to anyone else.
    """

    problem_id: str
    digests: tuple[B64(32), ...]

    @staticmethod
    def digest(nonce: bytes) -> bytes:
        return hashlib.blake2b(bytes(nonce), digest_size=32, person=b"AnonMLv1-receipt").digest()


class ModelDocument(WireMessage):
    """The trained model as versioned JSON (never pickle), signed by the aggregator."""

    problem_id: str
    created_at: AwareDatetime
    model: dict[str, Any]
    metrics: dict[str, float] = {}
    reports: ReportAccount | None = None
    medians: MedianAccount | None = None
    #: The calibration pool's answers (a problem with a calibration pool); left out of the wire form
    #: otherwise, so a model signed before the field existed keeps its bytes.
    calibration: CalibrationAccount | None = Field(default=None, exclude_if=lambda account: account is None)
    signature: SignatureBytes


class ModelEvaluation(WireMessage):
    """The published model scored on labelled rows its operator supplied (held out; never a peer's data).

    ``metrics`` are the model's and ``trivial`` those of the best constant predictor *on the same
    rows* (their own base rate, class shares or median — a floor no constant beats): for a binary
    label ``auc`` (when both classes occur), ``accuracy``, ``brier`` and ``log_loss``; for classes
    ``accuracy`` and ``log_loss``; for a numeric label ``mae``. ``model_created_at`` names the model
    scored, so a retrained model's page does not show the old model's figures as its own.
    """

    problem_id: str
    name: str = Field(default="", max_length=200)
    evaluated_at: AwareDatetime
    model_created_at: AwareDatetime
    rows: int = Field(ge=1)
    label: str
    metrics: dict[str, float]
    trivial: dict[str, float]
