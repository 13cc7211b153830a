"""Every AnonML wire message, as pydantic models: the one schema both roles share.

The aggregator (``aggregator/``) and the peer daemon (``peer/``) never import
each other; they meet only here, over HTTP. Binary values travel as standard
base64 and are length-checked on the way in; anything else a message carries
is validated by its model, so a route handler only ever sees well-formed input.

Signed messages carry a ``signature`` over :func:`signing_bytes`: the
canonical JSON of the message without its signature (sorted keys, no
whitespace), prefixed by the message's name, so a signature made for one kind
of message is never valid for another. Signing and checking are done with
:class:`anonml.crypto.Identity` / :class:`anonml.crypto.PublicIdentity` under
the context ``b"anonml/v1/" + name``.

The flow of one problem (DESIGN §7)::

    Problem (signed proposal, H(seed))  → peers decide by their policy
    Registration (signed by the peer)   → aggregator, until the deadline
    Roster (signed; seed revealed)      → peers check seed, plan, fingerprint
    MedianQuery / MedianAnswer          → one median-pool peer per answer
    Bins (signed; report schedule)      → peers bin their features
    TokenBatchRequest / …Response       → one blind evaluation per (peer, slot)
    RelayPacket bytes over k hops       → IntakeDelivery at the aggregator
    ModelDocument (signed)              → peers predict locally
"""

from __future__ import annotations

import base64
import binascii
import json
from typing import Annotated, Any, Literal

from pydantic import (
    AwareDatetime,
    BaseModel,
    ConfigDict,
    Field,
    PlainSerializer,
    PlainValidator,
    model_validator,
)

from anonml.model import FeatureKind, FeatureSpec
from anonml.plugins import PluginRef
from anonml.privacy.descriptor import MechanismDescriptor

__all__ = [
    "PROTOCOL_VERSION",
    "B64",
    "signing_bytes",
    "signing_context",
    "Schedule",
    "MedianSettings",
    "ProblemDraft",
    "Problem",
    "Phase",
    "ProblemStatus",
    "Registration",
    "RegistrationReceipt",
    "RosterEntry",
    "Roster",
    "MedianQuery",
    "MedianAnswer",
    "Bins",
    "TokenSlotRequest",
    "TokenBatchRequest",
    "TokenBatchResponse",
    "PrivateReport",
    "IntakeDelivery",
    "IntakeReceipt",
    "ModelDocument",
    "ErrorBody",
    "report_slot",
]

PROTOCOL_VERSION = 1


def _b64_type(size: int | None = None, max_size: int | None = None) -> Any:
    def validate(value: object) -> bytes:
        if isinstance(value, bytes | bytearray):
            raw = bytes(value)
        elif isinstance(value, str):
            try:
                raw = base64.b64decode(value.encode("ascii"), validate=True)
            except (binascii.Error, UnicodeEncodeError):
                raise ValueError("not valid base64") from None
        else:
            raise ValueError(f"expected base64 text, got {type(value).__name__}")
        if size is not None and len(raw) != size:
            raise ValueError(f"expected {size} bytes, got {len(raw)}")
        if max_size is not None and len(raw) > max_size:
            raise ValueError(f"at most {max_size} bytes, got {len(raw)}")
        return raw

    return Annotated[
        bytes,
        PlainValidator(validate),
        PlainSerializer(lambda b: base64.b64encode(b).decode("ascii"), return_type=str),
    ]


def B64(size: int | None = None, *, max_size: int | None = None) -> Any:  # noqa: N802 - a type factory
    """A bytes field carried as base64, of exactly ``size`` or at most ``max_size`` bytes."""
    return _b64_type(size, max_size)


IdentityBytes = B64(64)  # PublicIdentity: Ed25519 public key ‖ X25519 public key
SignatureBytes = B64(64)
CertificateBytes = B64(136)  # RelayKeyCertificate
Slot = B64(max_size=64)


class _Message(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


def signing_context(message: BaseModel) -> bytes:
    """The signature context of a message kind: ``b"anonml/v1/" + class name``."""
    return b"anonml/v1/" + type(message).__name__.encode("ascii")


def signing_bytes(message: BaseModel) -> bytes:
    """Canonical bytes of ``message`` without its ``signature`` field (what gets signed)."""
    body = message.model_dump(mode="json", exclude={"signature"})
    return json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=True).encode("ascii")


# --- proposing a problem ------------------------------------------------------


class Schedule(_Message):
    """When each phase happens. Durations are seconds; the deadline is absolute.

    The report round's absolute times (``t_s``, ``t_s + δ``, ``t_r``) are fixed
    when the bins are published: ``t_s = publication + report_delay_seconds``.
    """

    registration_deadline: AwareDatetime
    median_step_seconds: float = Field(default=10.0, gt=0, le=86_400)
    report_delay_seconds: float = Field(default=5.0, ge=0, le=86_400)
    send_window_seconds: float = Field(default=5.0, gt=0, le=86_400)
    release_window_seconds: float = Field(default=5.0, gt=0, le=86_400)


class MedianSettings(_Message):
    """The private-median search (thesis algorithm 1) that sets numeric features' bins.

    ``pool_fraction`` of the peers answer median queries only (one answer
    each, parallel composition with the report pool); ``steps`` binary-search
    steps per numeric feature, each asked of a fresh group of that pool.
    """

    epsilon: float = Field(default=1.0, gt=0, le=20)
    pool_fraction: float = Field(default=0.2, ge=0, lt=1)
    steps: int = Field(default=6, ge=1, le=32)


class ProblemDraft(_Message):
    """What an aggregator proposes: plugins by (name, version, params), never code."""

    title: str = Field(min_length=1, max_length=200)
    description: str = Field(default="", max_length=4000)
    instancer: PluginRef
    featurizer: PluginRef
    features: tuple[FeatureSpec, ...] = Field(min_length=1, max_length=256)
    epsilon: float = Field(gt=0, le=20, description="Each peer's total ε for this problem.")
    kp: int = Field(default=1, ge=1, le=1000)
    kh: int = Field(default=1, ge=1, le=64)
    ks: int = Field(default=1, ge=1, le=8)
    subsets: tuple[tuple[int, ...], ...] | None = None
    bins: int = Field(default=2, ge=2, le=16, description="Bins per numeric feature.")
    median: MedianSettings = MedianSettings()
    schedule: Schedule
    min_peers: int = Field(default=10, ge=2, le=1_000_000)
    hops: int = Field(default=3, ge=1, le=4)
    mode: Literal["default", "paper"] = "default"

    @model_validator(mode="after")
    def _check(self) -> ProblemDraft:
        if self.ks > len(self.features):
            raise ValueError(f"ks={self.ks} exceeds the {len(self.features)} features")
        if self.subsets is not None:
            for i, subset in enumerate(self.subsets):
                if len(subset) != self.ks or any(not 0 <= f < len(self.features) for f in subset):
                    raise ValueError(f"subsets[{i}] must name {self.ks} of the features by index")
        return self

    @property
    def numeric_features(self) -> list[int]:
        return [i for i, f in enumerate(self.features) if f.kind is FeatureKind.NUMERIC]


class Problem(_Message):
    """A published proposal, signed by the aggregator, with its seed commitment H(seed)."""

    v: Literal[1] = PROTOCOL_VERSION
    id: str = Field(pattern=r"^[a-z0-9-]{4,64}$")
    draft: ProblemDraft
    created_at: AwareDatetime
    seed_commitment: B64(32)
    aggregator: IdentityBytes
    round_id: int = Field(ge=0, lt=2**63)
    signature: SignatureBytes


Phase = Literal["registration", "medians", "reporting", "training", "done", "failed"]


class ProblemStatus(_Message):
    """What anyone may know about a problem's progress."""

    id: str
    title: str
    phase: Phase
    registered: int
    roster_size: int
    median_answers: int
    tokens_issued: int
    reports_accepted: int
    rejects: dict[str, int]
    model_available: bool
    message: str = ""
    phase_seconds: dict[str, float] = {}


# --- registration and roster ---------------------------------------------------


class Registration(_Message):
    """A peer joins a problem: its identity, its relay, its signed round relay key."""

    problem_id: str
    identity: IdentityBytes
    relay_url: str = Field(pattern=r"^https?://[^\s]{1,200}$")
    relay_certificate: CertificateBytes
    signature: SignatureBytes


class RegistrationReceipt(_Message):
    problem_id: str
    fingerprint: str
    registered: int


class RosterEntry(_Message):
    identity: IdentityBytes
    relay_url: str = Field(pattern=r"^https?://[^\s]{1,200}$")
    relay_certificate: CertificateBytes


class Roster(_Message):
    """The closed roster: members, the pinned token key, the revealed seed. Signed."""

    v: Literal[1] = PROTOCOL_VERSION
    problem_id: str
    round_id: int
    entries: tuple[RosterEntry, ...]
    token_key: B64(32)
    seed: B64(32)
    median_pool_size: int = Field(ge=0)
    signature: SignatureBytes


# --- private medians -----------------------------------------------------------


class MedianQuery(_Message):
    """IsGreater(threshold) for one numeric feature, asked of ``members`` (roster indices)."""

    problem_id: str
    feature: int = Field(ge=0)
    step: int = Field(ge=0)
    threshold: float
    members: tuple[int, ...]
    epsilon: float = Field(gt=0)
    signature: SignatureBytes


class MedianAnswer(_Message):
    """One binary-randomised-response bit, signed by the answering peer."""

    problem_id: str
    feature: int = Field(ge=0)
    step: int = Field(ge=0)
    identity: IdentityBytes
    bit: bool
    signature: SignatureBytes


class Bins(_Message):
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
    signature: SignatureBytes


# --- tokens and reports --------------------------------------------------------


def report_slot(problem_id: str, k: int) -> bytes:
    """The public POPRF input of a peer's k-th report slot: the same for every peer."""
    return f"{problem_id}/r/{k}".encode("ascii")


class TokenSlotRequest(_Message):
    slot: Slot
    blinded: B64(32)


class TokenBatchRequest(_Message):
    """Blinded elements for a peer's slots, signed by the peer (authenticated issuance)."""

    problem_id: str
    identity: IdentityBytes
    requests: tuple[TokenSlotRequest, ...] = Field(min_length=1, max_length=64)
    signature: SignatureBytes


class TokenBatchResponse(_Message):
    """Per slot: evaluated element ‖ DLEQ proof (32 + 64 bytes)."""

    responses: tuple[B64(96), ...]


class PrivateReport(_Message):
    """One perturbed report: the bits over (binned subset × label), and how they were made."""

    problem_id: str
    partition: int = Field(ge=0)
    subset: int = Field(ge=0)
    mechanism: MechanismDescriptor
    bits: B64(max_size=512)

    def to_bytes(self) -> bytes:
        return self.model_dump_json().encode("ascii")


class IntakeDelivery(_Message):
    """What a final hop hands the aggregator: the redemption and the report bytes."""

    redemption: B64(max_size=1 + 64 + 32 + 32)
    report: B64(max_size=1024)


class IntakeReceipt(_Message):
    accepted: bool


class ModelDocument(_Message):
    """The trained model as versioned JSON (never pickle), signed by the aggregator."""

    problem_id: str
    created_at: AwareDatetime
    model: dict[str, Any]
    metrics: dict[str, float] = {}
    signature: SignatureBytes


class ErrorBody(_Message):
    detail: str
