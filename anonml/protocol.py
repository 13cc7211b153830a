"""Every AnonML wire message, as pydantic models: the one schema both roles share.

The aggregator (``aggregator/``) and the peer daemon (``peer/``) never import
each other; they meet only here, over HTTP. Binary values travel as standard
base64 and are length-checked on the way in; anything else a message carries
is validated by its model, so a route handler only ever sees well-formed input.

Signed messages carry a ``signature`` over :func:`signing_bytes`: the
canonical JSON of the message without its signature (sorted keys, no
whitespace), under the context ``b"anonml/v1/" + name`` of the message's kind,
so a signature made for one kind of message is never valid for another.
:func:`sign_message` / :func:`verify_message` do this with
:class:`anonml.crypto.Identity` / :class:`anonml.crypto.PublicIdentity`.

The flow of one problem (DESIGN §7)::

    Problem (signed proposal, H(seed))  → peers decide by their policy
    Registration (signed by the peer)   → aggregator, until the deadline
    Roster (signed; seed revealed)      → witnesses co-sign its transcript (CosignRequest);
                                          peers check cosignatures, seed, plan (with the
                                          witnesses' beacon), fingerprint
    Assignment (signed)                 → each peer checks it with verify_assignment
    RosterWitness (signed by a peer)    → peers compare fingerprints via relays
    MedianQuery / MedianAnswer          → one median-pool peer per answer
    TokenBatchRequest / …Response       → one blind evaluation per (peer, slot),
                                          from the roster to the end of the send window
    Bins (signed; report schedule)      → witnesses co-sign the bins transcript;
                                          peers check it, then bin their features
    onion packet bytes over k hops      → IntakeDelivery (sealed box) at the aggregator
    ModelDocument (signed)              → peers predict locally
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import math
import re
from collections.abc import Sequence
from datetime import datetime
from typing import Annotated, Any, Literal, TypeVar

import numpy as np
from pydantic import (
    AwareDatetime,
    BaseModel,
    ConfigDict,
    Field,
    PlainSerializer,
    PlainValidator,
    model_validator,
)

from anonml.addresses import RESOLVE_SECONDS, Resolver, host_refusal, is_loopback_host, resolved_refusal
from anonml.crypto import (
    CryptoError,
    Identity,
    PublicIdentity,
    TokenPublicKey,
    TokenRequest,
    request_token_batch,
    vrf,
)
from anonml.crypto.onion import PAYLOAD_SIZE as SEALED_PAYLOAD_SIZE
from anonml.crypto.onion import PAYLOAD_VERSION
from anonml.crypto.vrf import PROOF_SIZE as VRF_PROOF_SIZE
from anonml.errors import ProtocolError
from anonml.model import FeatureKind, FeatureSpec
from anonml.plugins import PluginRef
from anonml.privacy.descriptor import MechanismDescriptor

__all__ = [
    "PROTOCOL_VERSION",
    "DEFAULT_ROUTES",
    "route_count",
    "B64",
    "signing_bytes",
    "REACHABILITY_SKEW_SECONDS",
    "check_own_relay_url",
    "ReachabilityRequest",
    "ReachabilityAnswer",
    "ReachabilityResult",
    "signing_context",
    "sign_message",
    "verify_message",
    "Schedule",
    "MedianSettings",
    "CentralTargetSpec",
    "MAX_LABEL_CLASSES",
    "LABEL_RANGE_LIMIT",
    "LabelSpec",
    "ProblemDraft",
    "Problem",
    "Phase",
    "MODEL_PHASES",
    "ReportAccount",
    "ShuffleStatement",
    "ProblemStatus",
    "Registration",
    "RegistrationBatch",
    "RegistrationReceipt",
    "RosterEntry",
    "Roster",
    "Assignment",
    "AssignmentBatchRequest",
    "AssignmentBatch",
    "RosterWitness",
    "MedianQuery",
    "MedianAnswer",
    "Ack",
    "Bins",
    "TokenSlotRequest",
    "TokenBatchRequest",
    "token_batch_request",
    "TokenBatchResponse",
    "PrivateReport",
    "IntakeDelivery",
    "IntakeReceipt",
    "IntakeBatch",
    "ItemResult",
    "BatchResults",
    "MAX_BATCH_ITEMS",
    "ReportReceipts",
    "ModelDocument",
    "ModelEvaluation",
    "WitnessRef",
    "Admission",
    "AdmissionCredential",
    "TranscriptStatement",
    "CosignRequest",
    "Cosignature",
    "CosignatureBundle",
    "WitnessLogEntry",
    "Stage",
    "STAGES",
    "transcript_hash",
    "roster_beacon",
    "vrf_input",
    "cosign_statement",
    "witness_vrf_output",
    "WitnessIdentity",
    "check_credential",
    "entry_registration",
    "PeerStatus",
    "report_slot",
    "check_relay_url",
    "check_relay_address",
    "pack_bits",
    "unpack_bits",
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


_M = TypeVar("_M", bound=BaseModel)
_UNSIGNED = bytes(64)


def sign_message(message: _M, identity: Identity) -> _M:
    """A copy of ``message`` whose ``signature`` is ``identity``'s over :func:`signing_bytes`.

    Build the message with any 64-byte placeholder signature (e.g. ``bytes(64)``);
    the signature covers every other field, under :func:`signing_context`.
    """
    signature = identity.sign(signing_bytes(message), context=signing_context(message))
    return message.model_copy(update={"signature": signature})


def verify_message(message: _M, signer: bytes | PublicIdentity) -> _M:
    """Return ``message`` if its ``signature`` is ``signer``'s; :class:`InvalidSignature` otherwise.

    ``signer`` is a :class:`~anonml.crypto.PublicIdentity` or its 64-byte wire form.
    """
    public = signer if isinstance(signer, PublicIdentity) else PublicIdentity.from_bytes(bytes(signer))
    public.verify(signing_bytes(message), message.signature, context=signing_context(message))  # type: ignore[attr-defined]
    return message


# --- proposing a problem ------------------------------------------------------


#: A schedule's wait between two steps: up to a day, possibly none.
WaitSeconds = Annotated[float, Field(ge=0, le=86_400)]
#: A schedule's window for a step to happen in: up to a day, never empty.
WindowSeconds = Annotated[float, Field(gt=0, le=86_400)]


class Schedule(_Message):
    """When each phase happens. Durations are seconds; the deadline is absolute.

    ``roster_seconds`` pass between the roster's publication and the first
    median query, for peers to check the roster and compare its fingerprint.

    The report round's absolute times (``t_s``, ``t_s + δ``, ``t_r``) are fixed
    when the bins are published: ``t_s = publication + witness_seconds +
    report_delay_seconds`` when the problem declares witnesses (their bins
    cosignatures are collected within ``witness_seconds``), else
    ``publication + report_delay_seconds``. The roster's cosignatures are
    collected within ``roster_seconds + witness_seconds`` of its publication.
    """

    registration_deadline: AwareDatetime
    roster_seconds: WaitSeconds = 2.0
    median_step_seconds: WindowSeconds = 10.0
    report_delay_seconds: WaitSeconds = 5.0
    send_window_seconds: WindowSeconds = 5.0
    release_window_seconds: WindowSeconds = 5.0
    witness_seconds: float = Field(
        default=10.0,
        ge=0,
        le=3600,
        description="Bound on collecting the witnesses' cosignatures, after the roster and after the bins.",
    )


class MedianSettings(_Message):
    """The private-median search (thesis algorithm 1) that sets numeric features' bins.

    ``pool_fraction`` of the peers answer median queries only (one answer
    each, parallel composition with the report pool); ``steps`` binary-search
    steps per numeric feature (per inner edge when ``bins > 2``), each asked of
    a fresh group of that pool. ``epsilon`` is one answer's ε (at most the
    problem's ε, which is what it defaults to); ``confidence`` is the level of
    :func:`anonml.privacy.estimate_quantile`'s stopping margin (0.5 moves more
    readily, as the learning library's simulation does). A step ends as soon
    as ``ceil(quorum · group size)`` of its group answered, or when
    ``Schedule.median_step_seconds`` passed, whichever comes first.
    """

    epsilon: float | None = Field(
        default=None, gt=0, le=20, description="ε of one answer; None = the problem's ε."
    )
    pool_fraction: float = Field(default=0.2, ge=0, lt=1)
    steps: int = Field(default=6, ge=1, le=32)
    quorum: float = Field(
        default=1.0,
        gt=0,
        le=1,
        description="A step ends once this fraction of its group answered (or at median_step_seconds).",
    )
    confidence: float = Field(
        default=0.5, gt=0, lt=1, description="Confidence of each search's stopping margin."
    )


WITNESS_URL_PATTERN = r"^https?://[A-Za-z0-9.\-\[\]:]{1,200}(/[A-Za-z0-9._~\-/]{0,200})?$"


class WitnessRef(_Message):
    """A witness a proposal declares: its public identity and where the aggregator reaches it.

    The URL is a plain base URL (scheme, host, optional port and path; no
    query, fragment or userinfo).
    """

    identity: IdentityBytes
    url: str = Field(pattern=WITNESS_URL_PATTERN)


class Admission(_Message):
    """Who may register: anyone (``open``) or holders of an issuer's credential for ``scope``."""

    mode: Literal["open", "credentials"] = "open"
    issuer: IdentityBytes | None = None
    scope: str = Field(default="", max_length=200, pattern=r"^[\x21-\x7e ]*$")

    @model_validator(mode="after")
    def _check(self) -> Admission:
        if self.mode == "credentials" and (self.issuer is None or not self.scope):
            raise ValueError("admission by credentials names its issuer and a non-empty scope")
        if self.mode == "open" and (self.issuer is not None or self.scope):
            raise ValueError("open admission names no issuer and no scope")
        return self

#: Most classes (or target bins) a label may have: every report's domain is K × its cells.
MAX_LABEL_CLASSES = 16
#: A numeric label's public range must lie within ±this bound (finite, and no float-precision games).
LABEL_RANGE_LIMIT = 1e12
_CLASS_NAME = r"^[\x21-\x7e][\x20-\x7e]{0,62}[\x21-\x7e]$|^[\x21-\x7e]$"


class LabelSpec(_Message):
    """The label a problem learns, and so the label domain K of every report.

    * ``binary`` (the default): the instancer's label is a bit; K = 2.
    * ``classes``: K = len(``classes``) named classes (2 ≤ K ≤ :data:`MAX_LABEL_CLASSES`,
      distinct printable-ASCII names); the instancer's label is a class name or
      its index.
    * ``numeric``: a number learned as ``bins`` ordered bins (K = ``bins``) of
      equal width over the public range ``[low, high]`` (finite, within
      ±:data:`LABEL_RANGE_LIMIT`); a value outside the range is clipped into an
      end bin, so no value changes what a peer sends. The model predicts
      ``Σ_k P̂(bin k | x)·c_k`` with ``c_k`` the bin midpoints
      (:class:`anonml.learn.AnonMLRegressor`).

    Like the features' ranges, everything here is public and fixed before any
    data is seen; the peer checks it as it checks every parameter: K is
    bounded (a label spec cannot make a report's domain large enough to tell
    peers apart by a value only one of them has) and a numeric range is finite.
    """

    kind: Literal["binary", "classes", "numeric"] = "binary"
    classes: tuple[str, ...] = Field(default=(), max_length=MAX_LABEL_CLASSES)
    low: float | None = None
    high: float | None = None
    bins: int | None = Field(default=None, ge=2, le=MAX_LABEL_CLASSES)

    @model_validator(mode="after")
    def _check(self) -> LabelSpec:
        if self.kind != "classes" and self.classes:
            raise ValueError(f"a {self.kind} label names no classes")
        ranged = self.low is not None or self.high is not None or self.bins is not None
        if self.kind != "numeric" and ranged:
            raise ValueError(f"a {self.kind} label has no range and no bins")
        if self.kind == "classes":
            if not 2 <= len(self.classes) <= MAX_LABEL_CLASSES:
                raise ValueError(
                    f"a classes label names 2 to {MAX_LABEL_CLASSES} classes, got {len(self.classes)}"
                )
            for name in self.classes:
                if not re.fullmatch(_CLASS_NAME, name):
                    raise ValueError(
                        f"class name {name[:40]!r} must be 1-64 printable ASCII characters, "
                        "not starting or ending with a space"
                    )
            if len(set(self.classes)) != len(self.classes):
                raise ValueError("class names must be distinct")
        if self.kind == "numeric":
            if self.low is None or self.high is None or self.bins is None:
                raise ValueError("a numeric label needs its public range (low, high) and its bins")
            for name, value in (("low", self.low), ("high", self.high)):
                if not (math.isfinite(value) and abs(value) <= LABEL_RANGE_LIMIT):
                    raise ValueError(
                        f"the numeric label's {name} = {value} must be finite "
                        f"and within ±{LABEL_RANGE_LIMIT:g}"
                    )
            if not self.high > self.low:
                raise ValueError(f"the numeric label's range needs low < high, got [{self.low}, {self.high}]")
        return self

    @property
    def k(self) -> int:
        """K, the label domain of every report."""
        if self.kind == "classes":
            return len(self.classes)
        if self.kind == "numeric":
            assert self.bins is not None
            return int(self.bins)
        return 2

    def model_classes(self) -> tuple[int | str, ...]:
        """The published model's ``classes_``: 0/1, the class names, or the bin indices 0..K−1."""
        return self.classes if self.kind == "classes" else tuple(range(self.k))

    def describe(self) -> str:
        """One line: ``"binary"``, ``"3 classes: a, b, c"``, ``"numeric in [0, 60], 4 bins"``."""
        if self.kind == "classes":
            return f"{self.k} classes: {', '.join(self.classes)}"
        if self.kind == "numeric":
            return f"numeric in [{self.low:g}, {self.high:g}], {self.bins} bins"
        return "binary"


_BINARY = LabelSpec()

#: Routes each report slot travels over by default (:attr:`ProblemDraft.routes`; the choice and its
#: anonymity cost are argued in docs/threat-model.md, "Redundant routes").
DEFAULT_ROUTES = 2


def route_count(routes: int, hops: int, members: int) -> int:
    """Routes each slot actually travels over: ``max(1, min(routes, ⌊(members − 1) / hops⌋))``.

    The ``routes`` copies of a slot go over pairwise disjoint relay sets
    (:func:`peer.reports.choose_routes`), which needs ``routes · hops`` other
    members; a roster too small for that degrades to as many disjoint routes
    as fit (at least one). A function of the signed roster's size alone, so
    every member sends the same number of packets (volume says nothing of
    role) and the aggregator's account states the same figure.
    """
    if routes < 1 or hops < 1:
        raise ValueError(f"routes ({routes}) and hops ({hops}) must be at least 1")
    return max(1, min(routes, (members - 1) // hops))


class CentralTargetSpec(_Message):
    """A central (ε, δ) the aggregator chose the problem's local ε for (shuffle amplification).

    The draft's ``epsilon`` stays each peer's local ε — the guarantee. The
    target is what the aggregator's view of the unlinkable reports should also
    satisfy by shuffling (FMT 2021, :mod:`anonml.privacy.amplification`) if the
    reports are unlinkable within each partition and every member is honest;
    whether the groups that reported meet it is stated in the published
    model's ``privacy.central_target``.
    """

    epsilon: float = Field(gt=0, le=20)
    delta: float = Field(gt=0, lt=1)


class ProblemDraft(_Message):
    """What an aggregator proposes: plugins by (name, version, params), never code.

    ``features`` names features of the featurizer (by name, with the kind the
    featurizer declares); a peer computes all of the featurizer's features
    locally and keeps these, in this order. Their declared ranges are public
    and bound the median search and the bins. The label is the instancer's,
    read as ``label`` says (:class:`LabelSpec`: binary, K named classes, or a
    numeric target in K ordered bins); every report carries it, so each
    report's domain is K × its subset's cells. Paper mode is binary only
    (thesis eq. 6.2 votes ±1).
    """

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
    #: Copies of each slot's packet, each over its own route (identical report bytes, one token: the
    #: intake keeps one). Left out of the wire form at the default, so a problem that does not set it
    #: signs the bytes it had before the field existed.
    routes: int = Field(
        default=DEFAULT_ROUTES,
        ge=1,
        le=4,
        exclude_if=lambda routes: routes == DEFAULT_ROUTES,
        description="Disjoint routes each report (and cover) packet travels over (redundant delivery).",
    )
    mode: Literal["default", "paper"] = "default"
    witnesses: tuple[WitnessRef, ...] = Field(default=(), max_length=16)
    admission: Admission = Admission()
    #: Left out of the wire form when binary, so a binary problem's canonical bytes (and every
    #: signature and transcript over them) are those it had before drafts named a label.
    label: LabelSpec = Field(default=_BINARY, exclude_if=lambda spec: spec == _BINARY)
    #: Left out of the wire form when unset, so a problem without a target signs the same bytes as before.
    central_target: CentralTargetSpec | None = Field(default=None, exclude_if=lambda target: target is None)

    @model_validator(mode="after")
    def _check(self) -> ProblemDraft:
        if self.mode == "paper" and self.label.kind != "binary":
            raise ValueError(
                f"paper mode learns a binary label (eq. 6.2 votes ±1), not {self.label.describe()}"
            )
        names = [f.name for f in self.features]
        if len(set(names)) != len(names):
            raise ValueError("feature names must be distinct")
        witnesses = [bytes(w.identity) for w in self.witnesses]
        if len(set(witnesses)) != len(witnesses):
            raise ValueError("a witness is declared more than once")
        if self.median.epsilon is not None and self.median.epsilon > self.epsilon:
            raise ValueError(
                f"median.epsilon={self.median.epsilon} exceeds the problem's ε={self.epsilon}: "
                "a median-pool peer would spend more than the budget it accepted"
            )
        if self.kh * self.ks > len(self.features) and self.subsets is None:
            raise ValueError(
                f"kh·ks = {self.kh}·{self.ks} exceeds the {len(self.features)} features "
                "(one partition's subsets must not overlap)"
            )
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

    @property
    def report_epsilon(self) -> float:
        """ε of one report: ε / k_h, so a report peer's k_h reports compose to ε."""
        return self.epsilon / self.kh

    @property
    def median_epsilon(self) -> float:
        """ε of one median answer (``median.epsilon``, else the problem's ε)."""
        return self.median.epsilon if self.median.epsilon is not None else self.epsilon

    def median_pool_size(self, n_peers: int) -> int:
        """``floor(pool_fraction · n)`` peers answer median queries (0 without numeric features)."""
        if not self.numeric_features:
            return 0
        return int(math.floor(self.median.pool_fraction * n_peers))


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


Phase = Literal[
    "registration", "witnessing", "medians", "reporting", "training", "done", "degraded", "failed"
]
#: Phases in which the signed model is published (``degraded``: trained, but too many reports lost).
MODEL_PHASES: tuple[str, ...] = ("done", "degraded")


class ReportAccount(_Message):
    """Reports expected, received, pending and lost, and why, as far as the aggregator can know.

    ``expected = report_peers × slots_per_peer`` (every report peer of the
    roster fills each of its slots once); ``received`` counts stored reports
    (staged while the round is open, settled after). A report not received
    is ``pending`` while it may still arrive — the round's delivery window is
    open (until ``t_r`` + the intake's grace, or the round leaves
    ``reporting``) — and ``lost`` only once it closed: while open, ``pending
    = max(0, expected − received)`` and nothing is lost; once closed,
    ``pending = 0`` and ``lost = max(0, expected − received)``, split into
    ``late`` (deliveries refused after ``t_r`` +
    grace), ``refused`` (other intake refusals, by reason) and ``not_arrived``
    (the rest: dropped on the route, never sent, or never redeemed). Refusal
    counts are attributed to the loss up to its size, late first. ``cover``
    counts the cover payloads the intake opened and dropped (relays cannot
    tell them from reports, so only the aggregator drops them): neither
    received nor lost, and not in :attr:`expected`. Each report travels as
    ``routes`` identical copies (redundant delivery, :func:`route_count`); the
    intake keeps the first and refuses the others as a spent token, counted as
    ``duplicates`` — neither received nor lost — so the relays' deliveries
    add up to ``received + duplicates`` (+ cover and refusals).
    """

    expected: int = Field(ge=0)
    received: int = Field(ge=0)
    lost: int = Field(ge=0)
    late: int = Field(default=0, ge=0)
    refused: dict[str, int] = {}
    not_arrived: int = Field(default=0, ge=0)
    cover: int = Field(default=0, ge=0)
    #: Not received yet, the delivery window still open: written only when not 0, so a settled
    #: account (the one a model document signs) keeps the bytes it had before the field existed.
    pending: int = Field(default=0, ge=0, exclude_if=lambda pending: pending == 0)
    #: Routes each report travelled over (:func:`route_count`), and how many the problem asked for
    #: (fewer fit a small roster); written only when not 1, like :attr:`pending`.
    routes: int = Field(default=1, ge=1, exclude_if=lambda routes: routes == 1)
    routes_asked: int = Field(default=1, ge=1, exclude_if=lambda routes: routes == 1)
    #: Redundant copies of a stored report the intake refused as a spent token: neither received
    #: nor lost (each report is sent ``routes`` times and kept once).
    duplicates: int = Field(default=0, ge=0, exclude_if=lambda duplicates: duplicates == 0)

    @property
    def lost_fraction(self) -> float:
        return self.lost / self.expected if self.expected else 0.0

    def describe(self) -> str:
        """One line: ``"12 of 75 reports lost (16.0 %): 2 late, 1 refused (bad token: 1), 9 not arrived"``.

        While the delivery window is open: ``"60 of 75 reports received, 15 pending (the delivery
        window is open)"``.
        """
        cover = f"; {self.cover} cover packets dropped" if self.cover else ""
        extra = cover + self._redundancy()
        if self.pending:
            return (
                f"{self.received} of {self.expected} reports received, {self.pending} pending "
                f"(the delivery window is open){extra}"
            )
        why = _shortfall(self.late, self.refused, self.not_arrived, "refused at intake")
        return f"{self.lost} of {self.expected} reports lost ({self.lost_fraction:.1%}){why}{extra}"

    def _redundancy(self) -> str:
        """``"; each report over 2 routes (3 asked; the roster fits 2), 9 duplicate copies dropped"``."""
        if self.routes == 1 and self.routes_asked == 1 and not self.duplicates:
            return ""
        asked = ""
        if self.routes_asked > self.routes:
            asked = f" ({self.routes_asked} asked; the roster fits {self.routes})"
        plural = "" if self.routes == 1 else "s"
        duplicates = f", {self.duplicates} duplicate copies dropped" if self.duplicates else ""
        return f"; each report over {self.routes} route{plural}{asked}{duplicates}"


def _shortfall(late: int, refused: dict[str, int], not_arrived: int, refused_as: str) -> str:
    """``": 1 late, 2 refused … (reason: n), 3 not arrived"`` (the parts that are not zero), or ``""``."""
    parts = []
    if late:
        parts.append(f"{late} late")
    if sum(refused.values()):
        reasons = ", ".join(f"{k}: {v}" for k, v in sorted(refused.items()))
        parts.append(f"{sum(refused.values())} {refused_as} ({reasons})")
    if not_arrived:
        parts.append(f"{not_arrived} not arrived")
    return ": " + ", ".join(parts) if parts else ""


class MedianAccount(_Message):
    """Median answers expected, received and missing, and why, as far as the aggregator can know.

    ``expected`` counts the median-pool members the search's queries named
    (each is named at most once: disjoint groups, DESIGN §6); ``received``
    the answers stored; ``missing = max(0, expected − received)``, split into
    ``late`` (refused because the query had closed or the search had moved
    on), ``refused`` (other refusals of an answer, by reason) and
    ``not_arrived`` (the rest: never sent, or lost on the way). Refusals are
    attributed to the shortfall up to its size, late first, as in
    :class:`ReportAccount`. Members of the pool a search never reached (it
    stopped early) are not expected.
    """

    expected: int = Field(ge=0)
    received: int = Field(ge=0)
    missing: int = Field(ge=0)
    late: int = Field(default=0, ge=0)
    refused: dict[str, int] = {}
    not_arrived: int = Field(default=0, ge=0)

    def describe(self) -> str:
        """One line: ``"3 of 10 median answers missing: 1 late, 2 not arrived"``."""
        why = _shortfall(self.late, self.refused, self.not_arrived, "refused")
        return f"{self.missing} of {self.expected} median answers missing{why}"


class ShuffleStatement(_Message):
    """The conditional central (ε, δ) of the aggregator's view by shuffling, beside the local ε.

    Feldman, McMillan & Talwar (FOCS 2021), numerical clone bound
    (:class:`anonml.privacy.amplification.ShuffleBound`): each report pool's
    reports are unlinkable among at least ``smallest_group`` of them. It holds
    only under ``assumptions`` (unlinkability, honest members); the local ε
    (``local_epsilon``, each peer's total) is the guarantee that needs neither.
    ``planned`` is True while the figure rests on the roster's partition sizes
    (before the reports arrived), False once it rests on the reports received.
    ``pools`` names the peer pools whose reports it covers and ``peers_outside``
    counts the peers it does not (the median peers who answered: their answers
    are signed, DESIGN §11); None before the median round has run.
    """

    local_epsilon: float = Field(gt=0)
    epsilon: float = Field(ge=0)
    delta: float = Field(gt=0, lt=1)
    smallest_group: int = Field(ge=1)
    assumptions: str = Field(max_length=2000)
    planned: bool = False
    pools: tuple[Annotated[str, Field(max_length=32)], ...] = Field(default=(), max_length=8)
    peers_outside: int | None = Field(default=None, ge=0)


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
    median_pool: int = 0
    report_peers: int = 0
    slots_per_peer: int = 0
    reports: ReportAccount | None = None  # once the roster is out
    medians: MedianAccount | None = None  # once the roster is out
    #: The schedule the round keeps — the proposal's, raised to floors sized for the roster — once
    #: the roster is out (the bins carry its absolute report windows).
    schedule: Schedule | None = None
    #: The conditional shuffle bound beside the local ε, once the roster fixes the partitions.
    shuffle: ShuffleStatement | None = None


# --- registration and roster ---------------------------------------------------


class AdmissionCredential(_Message):
    """An issuer's signed statement that ``subject`` may register for problems of ``scope``.

    Signed by ``issuer`` (e.g. a course platform) over :func:`signing_bytes`;
    valid until ``not_after``. One credential names one identity, so Sybils
    need one credential each from the issuer.
    """

    issuer: IdentityBytes
    subject: IdentityBytes
    scope: str = Field(min_length=1, max_length=200, pattern=r"^[\x21-\x7e ]*$")
    not_after: AwareDatetime
    signature: SignatureBytes


#: Items (registrations, assignments, deliveries, relay packets) one batch request may carry;
#: more is refused with 422.
MAX_BATCH_ITEMS = 256


def _relay_pair(url: str | None, certificate: bytes | None) -> None:
    """Both a relay URL and a relay certificate (a relay-capable member) or neither (sender-only)."""
    if (url is None) != (certificate is None):
        raise ValueError(
            "relay_url and relay_certificate go together: both for a member that relays, "
            "neither for a sender-only member"
        )


class Registration(_Message):
    """A peer joins a problem: its identity, its relay (if it relays), its signed round relay key.

    ``aggregator`` names the aggregator identity the peer registers with (the
    Problem's): a registration signed for one aggregator key is worthless in a
    copy of the problem shown under another.

    ``relay_url`` and ``relay_certificate`` are both given by a member that
    relays and both None for a *sender-only* member (behind NAT: it opens
    connections and accepts none). Either way the member's signature covers
    them, so relay capability is the member's own signed statement: an
    aggregator can neither make a sender-only member a relay (routing others'
    packets to an address it chose) nor strip a relay from a member.
    """

    problem_id: str
    aggregator: IdentityBytes
    identity: IdentityBytes
    relay_url: str | None = Field(default=None, pattern=r"^https?://[^\s]{1,200}$")
    relay_certificate: CertificateBytes | None = None
    credential: AdmissionCredential | None = None
    signature: SignatureBytes

    @model_validator(mode="after")
    def _relay_together(self) -> Registration:
        _relay_pair(self.relay_url, self.relay_certificate)
        return self

    @property
    def relays(self) -> bool:
        """Whether this member offers a relay (else it is sender-only)."""
        return self.relay_url is not None


class RegistrationBatch(_Message):
    """Registrations of many identities in one request (a host of many peers), each signed by its own.

    Answered with :class:`BatchResults`: each item gets the status and detail
    its own ``POST …/registrations`` would have got.
    """

    registrations: tuple[Registration, ...] = Field(min_length=1, max_length=MAX_BATCH_ITEMS)


class RegistrationReceipt(_Message):
    problem_id: str
    fingerprint: str
    registered: int


class RosterEntry(_Message):
    """One member as it registered: ``registration_signature`` is its own signature over its
    :class:`Registration` (:func:`entry_registration` rebuilds it), so every peer can check that
    the identity, relay URL, relay certificate and credential came from that identity — and so
    whether it relays at all (both relay fields None: a sender-only member)."""

    identity: IdentityBytes
    relay_url: str | None = Field(default=None, pattern=r"^https?://[^\s]{1,200}$")
    relay_certificate: CertificateBytes | None = None
    credential: AdmissionCredential | None = None
    registration_signature: SignatureBytes

    @model_validator(mode="after")
    def _relay_together(self) -> RosterEntry:
        _relay_pair(self.relay_url, self.relay_certificate)
        return self

    @property
    def relays(self) -> bool:
        """Whether this member relays (both fields present) or is sender-only (neither)."""
        return self.relay_url is not None


def entry_registration(entry: RosterEntry, problem: Problem) -> Registration:
    """The signed :class:`Registration` a roster entry claims its member sent to ``problem``'s
    aggregator (verify it with :func:`verify_message` against ``entry.identity``)."""
    return Registration(
        problem_id=problem.id,
        aggregator=problem.aggregator,
        identity=entry.identity,
        relay_url=entry.relay_url,
        relay_certificate=entry.relay_certificate,
        credential=entry.credential,
        signature=entry.registration_signature,
    )


def check_credential(
    credential: AdmissionCredential | None, admission: Admission, subject: bytes, *, valid_at: datetime
) -> AdmissionCredential:
    """Return ``credential`` if it admits ``subject`` under ``admission`` at ``valid_at``.

    Checks, in order: one is present, its issuer and scope are the admission's,
    it names ``subject``, it has not expired at ``valid_at``, and the issuer's
    signature. Raises :class:`ValueError` naming the first that fails (and
    :class:`~anonml.crypto.InvalidSignature` for a bad signature).
    """
    if admission.mode != "credentials":
        raise ValueError("this problem's admission is open: it takes no credential")
    if credential is None:
        raise ValueError(f"admission needs a credential from issuer {bytes(admission.issuer).hex()[:16]}…")
    if bytes(credential.issuer) != bytes(admission.issuer) or credential.scope != admission.scope:
        raise ValueError(
            f"credential is from issuer {bytes(credential.issuer).hex()[:16]}… "
            f"for scope {credential.scope!r}; "
            f"the problem admits issuer {bytes(admission.issuer).hex()[:16]}… scope {admission.scope!r}"
        )
    if bytes(credential.subject) != bytes(subject):
        raise ValueError("credential names another identity")
    if credential.not_after <= valid_at:
        raise ValueError(f"credential expired at {credential.not_after.isoformat()}")
    return verify_message(credential, bytes(credential.issuer))


class Roster(_Message):
    """The closed roster: members, the pinned token key, the revealed seed. Signed by ``aggregator``."""

    v: Literal[1] = PROTOCOL_VERSION
    problem_id: str
    aggregator: IdentityBytes
    round_id: int
    entries: tuple[RosterEntry, ...]
    token_key: B64(32)
    seed: B64(32)
    median_pool_size: int = Field(ge=0)
    signature: SignatureBytes


class Assignment(_Message):
    """What the aggregator says one peer does, signed; the peer re-derives it from the seed.

    ``role`` is ``"median"`` (``index`` = rank in the median pool) or
    ``"report"`` (``index`` = partition, ``subsets`` = its k_h feature subsets).
    """

    problem_id: str
    identity: IdentityBytes
    role: Literal["median", "report"]
    index: int = Field(ge=0)
    subsets: tuple[tuple[int, ...], ...] = ()
    signature: SignatureBytes


class AssignmentBatchRequest(_Message):
    """The members (fingerprints, hex) whose signed assignments one request asks for.

    A host of many identities asks once per :data:`MAX_BATCH_ITEMS` of them
    instead of once per identity.
    """

    problem_id: str
    fingerprints: tuple[Annotated[str, Field(pattern=r"^[0-9a-fA-F]{64}$")], ...] = Field(
        min_length=1, max_length=MAX_BATCH_ITEMS
    )


class AssignmentBatch(_Message):
    """One signed :class:`Assignment` per fingerprint asked, in the order asked."""

    assignments: tuple[Assignment, ...] = Field(max_length=MAX_BATCH_ITEMS)


class RosterWitness(_Message):
    """A peer's signed statement of the roster fingerprint it holds (served by its relay)."""

    problem_id: str
    identity: IdentityBytes
    fingerprint: str = Field(pattern=r"^[0-9a-f]{64}$")
    signature: SignatureBytes


#: Seconds a :class:`ReachabilityRequest` is good for after it was issued (either way: clocks differ).
REACHABILITY_SKEW_SECONDS = 300.0


class ReachabilityRequest(_Message):
    """A peer asks an aggregator to connect to its relay URL from outside, before it registers a relay.

    Signed by the identity whose relay URL it is (the URL has the one relay
    form, :func:`check_relay_url`, and ends with that identity's node id);
    ``aggregator`` names the aggregator asked and ``issued_at`` (UNIX seconds)
    bounds a replay to :data:`REACHABILITY_SKEW_SECONDS`. The aggregator
    requests ``GET {relay_url}/reachability/{challenge hex}``; the peer's relay
    answers a challenge it is waiting for with a :class:`ReachabilityAnswer`
    holding 32 random bytes it drew for it, and the aggregator hands them back
    in its :class:`ReachabilityResult`. So *reachable* is proven (the secret
    left the peer's relay only over that connection), while *unreachable* is
    the aggregator's word — lying costs the peer only its relaying, which the
    relay floors bound (``docs/threat-model.md``, "Relays").
    """

    aggregator: IdentityBytes
    identity: IdentityBytes
    relay_url: str = Field(pattern=r"^https?://[^\s]{1,200}$")
    challenge: B64(32)
    issued_at: float = Field(ge=0)
    signature: SignatureBytes


class ReachabilityAnswer(_Message):
    """A relay's answer to the aggregator's probe: the secret it drew for the challenge."""

    answer: B64(32)


class ReachabilityResult(_Message):
    """What the aggregator saw when it connected to ``relay_url``: the relay's answer, or why none."""

    relay_url: str
    reachable: bool
    answer: B64(32) | None = None
    reason: str = Field(default="", max_length=500)

    @model_validator(mode="after")
    def _answer_when_reachable(self) -> ReachabilityResult:
        if self.reachable != (self.answer is not None):
            raise ValueError("a reachable result carries the relay's answer, an unreachable one none")
        return self


# --- private medians -----------------------------------------------------------


class _MedianStep(_Message):
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


class Ack(_Message):
    """A plain acknowledgement (e.g. of a median answer)."""

    ok: bool = True
    detail: str = ""


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


_RELAY_URL = re.compile(
    r"^(?P<scheme>https?)://(?P<host>[a-z0-9](?:[a-z0-9.-]{0,251}[a-z0-9])?|\[::1\])"
    r"(?::(?P<port>[0-9]{1,5}))?/relay/(?P<node>[0-9a-f]{32})$"
)


def _relay_host(url: str, *, allow_loopback_http: bool) -> str:
    """The host of ``url`` once it has the relay form and a host allowed by its text; ValueError else."""
    if not isinstance(url, str) or len(url) > 300:
        raise ValueError("a relay URL is a string of at most 300 characters")
    match = _RELAY_URL.fullmatch(url)
    if match is None:
        raise ValueError(
            f"relay URL {url[:80]!r} is not of the form https://host[:port]/relay/<32 hex digits> "
            "(no userinfo, query or fragment)"
        )
    if match["port"] is not None and not 1 <= int(match["port"]) <= 65535:
        raise ValueError(f"relay URL {url[:80]!r} has port {match['port']} out of range")
    host = match["host"]
    if match["scheme"] == "http":
        if not is_loopback_host(host):
            raise ValueError(f"relay URL {url[:80]!r}: plain http is allowed on loopback only")
        if not allow_loopback_http:
            raise ValueError(
                f"relay URL {url[:80]!r}: plain http (loopback) is allowed only in test mode "
                "(allow_loopback_http)"
            )
    refusal = host_refusal(host, allow_loopback=allow_loopback_http)
    if refusal is not None:
        raise ValueError(f"relay URL {url[:80]!r}: its host {host!r} is {refusal}")
    return host


def check_relay_url(url: str, *, allow_loopback_http: bool) -> str:
    """``url`` if it has the one relay form and a global host; :class:`ValueError` naming what is wrong.

    The form: ``https://host[:port]/relay/<node id, 32 lowercase hex>``, where
    host is a DNS name or IPv4 address (lowercase; ``[::1]`` for IPv6
    loopback); no userinfo, query, fragment, percent-escapes or trailing
    slash. ``http`` is accepted only for a loopback host (``127.0.0.0/8``,
    ``localhost``, ``[::1]``) and only with ``allow_loopback_http`` (test and
    demo deployments). The host must be a global address by its text
    (:func:`anonml.addresses.host_refusal`): no private, loopback (outside that
    test mode), link-local, multicast, unspecified or reserved address, no
    numeric form other than a dotted quad, no special-use name (``localhost``,
    ``*.internal``, ``*.local``, …). Checked by the aggregator at registration
    and by every peer on every roster entry before it fetches anything from it,
    so a registrant cannot make other peers request an arbitrary URL (blind SSRF
    through a query string, another path, credentials, or an internal host).
    What a *name* resolves to is checked where it is connected to
    (:func:`check_relay_address`): a pure function of the text here.
    """
    _relay_host(url, allow_loopback_http=allow_loopback_http)
    return url


def check_own_relay_url(url: str, node_id: bytes, *, allow_loopback_http: bool) -> str:
    """``url`` if it passes :func:`check_relay_url` and ends with ``/relay/<node_id hex>``: the relay
    URL a member with that node id may state as its own (:class:`ValueError` naming what is wrong)."""
    check_relay_url(url, allow_loopback_http=allow_loopback_http)
    if not url.endswith("/relay/" + node_id.hex()):
        raise ValueError("the relay URL must end in /relay/<the registrant's node id>")
    return url


def check_relay_address(
    url: str,
    *,
    allow_loopback_http: bool,
    timeout: float = RESOLVE_SECONDS,
    resolver: Resolver | None = None,
) -> str:
    """Return ``url`` if :func:`check_relay_url` passes and its host resolves to global addresses only.

    Called by a peer just before it connects to another member's relay (roster
    witness, first hop, next hop): every address the name resolves to, within
    ``timeout`` seconds, must be global (:func:`anonml.addresses.resolved_refusal`;
    ``resolver`` defaults to :func:`socket.getaddrinfo`). :class:`ValueError`
    naming the address otherwise, or when the name does not resolve in time.
    """
    host = _relay_host(url, allow_loopback_http=allow_loopback_http)
    refusal = resolved_refusal(host, allow_loopback=allow_loopback_http, timeout=timeout, resolver=resolver)
    if refusal is not None:
        raise ValueError(f"relay URL {url[:80]!r}: its host {host!r} is {refusal}")
    return url


class TokenSlotRequest(_Message):
    slot: Slot
    blinded: B64(32)


class TokenBatchRequest(_Message):
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


class TokenBatchResponse(_Message):
    """One evaluated element per requested slot, in request order, and one DLEQ proof
    (``c ‖ s``, 64 bytes) covering all of them (:mod:`anonml.crypto.dleq`)."""

    evaluated: tuple[B64(32), ...] = Field(min_length=1, max_length=64)
    proof: B64(64)

    def wire(self) -> bytes:
        """``Z_1 ‖ … ‖ Z_n ‖ c ‖ s``: what :func:`anonml.crypto.finalize_tokens` decodes and checks."""
        return b"".join(bytes(z) for z in self.evaluated) + bytes(self.proof)


class PrivateReport(_Message):
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
    arr = np.asarray(bits)
    if arr.ndim != 1:
        raise ValueError(f"bits must be 1-D, got shape {arr.shape}")
    return np.packbits(arr.astype(bool)).tobytes()


def unpack_bits(data: bytes, m: int) -> np.ndarray:
    """Inverse of :func:`pack_bits` for ``m`` bits; refuses a wrong length or set padding bits."""
    if len(data) != (m + 7) // 8:
        raise ValueError(f"{m} bits need {(m + 7) // 8} bytes, got {len(data)}")
    bits = np.unpackbits(np.frombuffer(data, dtype=np.uint8))
    if bits[m:].any():
        raise ValueError("padding bits after the last report bit must be zero")
    return bits[:m].astype(bool)


class IntakeDelivery(_Message):
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


class IntakeReceipt(_Message):
    accepted: bool


class IntakeBatch(_Message):
    """Many final-hop deliveries in one request: what a last-hop relay releases together.

    Each delivery is checked and its token spent independently of the others
    (:class:`BatchResults`); the batch as a whole is refused only when it is
    not a well-formed batch (422: not this shape, empty, or more than
    :data:`MAX_BATCH_ITEMS` items) or its body is over the service's body cap
    (413).
    """

    deliveries: tuple[IntakeDelivery, ...] = Field(min_length=1, max_length=MAX_BATCH_ITEMS)


class ItemResult(_Message):
    """What one item of a batch got: the status and detail its own single request would have got."""

    status: int = Field(ge=100, le=599)
    detail: str = ""


class BatchResults(_Message):
    """Per-item answers of a batch request, in the items' order (one per item)."""

    results: tuple[ItemResult, ...]


class ReportReceipts(_Message):
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


class ModelDocument(_Message):
    """The trained model as versioned JSON (never pickle), signed by the aggregator."""

    problem_id: str
    created_at: AwareDatetime
    model: dict[str, Any]
    metrics: dict[str, float] = {}
    reports: ReportAccount | None = None
    medians: MedianAccount | None = None
    signature: SignatureBytes


class ModelEvaluation(_Message):
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


# --- witnesses -------------------------------------------------------------------

Stage = Literal["roster", "bins"]
STAGES: tuple[str, ...] = ("roster", "bins")
_TRANSCRIPT_DOMAIN = b"anonml/v1/transcript"


def _framed(h: Any, part: bytes) -> None:
    h.update(len(part).to_bytes(8, "big"))
    h.update(part)


def transcript_hash(stage: str, problem: Problem, roster: Roster, bins: Bins | None = None) -> bytes:
    """BLAKE2b-256 of what every peer must see identically before releasing anything in ``stage``.

    ``H(domain ‖ stage ‖ Problem ‖ its signature ‖ schedule ‖ Roster ‖ its signature [‖ Bins ‖
    its signature])``, each part length-prefixed (8 bytes, big-endian) so the encoding is
    injective; documents enter as :func:`signing_bytes` (canonical JSON). The roster carries the
    token public key and the revealed seed; the Problem carries the parameters, ε and the
    relative schedule; stage ``"bins"`` adds the signed Bins with the round's absolute schedule
    (t_s, δ, t_r). Two peers with equal transcripts hold byte-identical signed documents.
    """
    if stage not in STAGES:
        raise ValueError(f"stage must be one of {STAGES}, got {stage!r}")
    if (stage == "bins") != (bins is not None):
        raise ValueError("the bins transcript covers the signed Bins; the roster transcript does not")
    h = hashlib.blake2b(digest_size=32)
    for part in (
        _TRANSCRIPT_DOMAIN,
        stage.encode("ascii"),
        signing_bytes(problem),
        bytes(problem.signature),
        signing_bytes(problem.draft.schedule),
        signing_bytes(roster),
        bytes(roster.signature),
    ):
        _framed(h, part)
    if bins is not None:
        _framed(h, signing_bytes(bins))
        _framed(h, bytes(bins.signature))
    return h.digest()


class TranscriptStatement(_Message):
    """What a witness co-signs: aggregator ``aggregator`` showed ``transcript`` for (problem, stage)."""

    aggregator: IdentityBytes
    problem_id: str = Field(pattern=r"^[a-z0-9-]{4,64}$")
    stage: Stage
    transcript: B64(32)


class CosignRequest(_Message):
    """The aggregator asks a witness to co-sign a statement; signed by the aggregator it names."""

    statement: TranscriptStatement
    signature: SignatureBytes


class Cosignature(_Message):
    """A witness's signature over a statement, with its VRF proof on the statement.

    ``vrf_proof`` is the witness's ECVRF proof (RFC 9381, :mod:`anonml.crypto.vrf`)
    over :func:`vrf_input` of the statement under its Ed25519 key: its output is the
    witness's share of the roster beacon (:func:`roster_beacon`). A signature cannot
    be that share — a signer may produce many valid ones — while the VRF output is
    unique per key and statement. Absent only in logs written before the VRF
    (left out of the signed bytes then, so those signatures still verify).
    """

    witness: IdentityBytes
    statement: TranscriptStatement
    vrf_proof: B64(VRF_PROOF_SIZE) | None = Field(default=None, exclude_if=lambda proof: proof is None)
    signature: SignatureBytes


class CosignatureBundle(_Message):
    """Every declared witness's cosignature on one (problem, stage) transcript."""

    problem_id: str
    stage: Stage
    cosignatures: tuple[Cosignature, ...] = Field(max_length=16)


class WitnessLogEntry(_Message):
    """One entry of a witness's append-only log: its ``index`` and what it co-signed."""

    index: int = Field(ge=0)
    cosignature: Cosignature


class WitnessIdentity(_Message):
    """``GET /identity`` of a witness: its 64-byte public identity and its fingerprint, as hex."""

    identity: str
    fingerprint: str


_VRF_DOMAIN = b"anonml/v1/witness-vrf"
_BEACON_DOMAIN = b"anonml/v2/beacon"


def vrf_input(statement: TranscriptStatement) -> bytes:
    """``alpha = domain ‖ signing_bytes(statement)``: what a witness's VRF proof is over."""
    return _VRF_DOMAIN + b"\x00" + signing_bytes(statement)


def cosign_statement(statement: TranscriptStatement, witness: Identity) -> Cosignature:
    """``witness``'s :class:`Cosignature` of ``statement``: its VRF proof on it, then its signature."""
    unsigned = Cosignature(
        witness=bytes(witness.public),
        statement=statement,
        vrf_proof=witness.vrf_prove(vrf_input(statement)),
        signature=bytes(64),
    )
    return sign_message(unsigned, witness)


def witness_vrf_output(cosignature: Cosignature) -> bytes:
    """The witness's verified VRF output (``beta``, 64 bytes) on the cosignature's statement.

    Raises
    ------
    ProtocolError
        The cosignature carries no VRF proof, or it does not verify under the
        witness's Ed25519 key for :func:`vrf_input` of its statement.
    """
    witness = bytes(cosignature.witness)
    if cosignature.vrf_proof is None:
        raise ProtocolError(f"witness {witness.hex()[:16]}… sent no VRF proof with its cosignature")
    try:
        return vrf.verify(witness[:32], vrf_input(cosignature.statement), bytes(cosignature.vrf_proof))
    except CryptoError as exc:
        raise ProtocolError(f"VRF proof of witness {witness.hex()[:16]}… does not verify: {exc}") from None


def roster_beacon(cosignatures: Sequence[Cosignature]) -> bytes:
    """``BLAKE2b-256(domain ‖ sorted (witness key ‖ VRF output))``: randomness fixed after the roster.

    Call it with the cosignatures of every declared witness over the roster
    transcript (each on the same statement; :func:`peer.transcript.verify_bundle`
    checks that and their signatures). Each VRF proof is verified here: a
    witness key has exactly one valid output per statement (RFC 9381 full
    uniqueness), which the aggregator cannot compute before an honest witness
    answers, and an honest witness answers once per (aggregator, problem,
    stage) — so a declared witness in league with the aggregator can re-sign or
    re-prove as often as it likes without moving the beacon. Sorting makes it
    independent of the bundle's order. No cosignature gives ``b""`` (no beacon).

    Raises
    ------
    ProtocolError
        A cosignature without a valid VRF proof (:func:`witness_vrf_output`).
    """
    if not cosignatures:
        return b""
    shares = sorted(bytes(c.witness)[:32] + witness_vrf_output(c) for c in cosignatures)
    h = hashlib.blake2b(digest_size=32)
    _framed(h, _BEACON_DOMAIN)
    for share in shares:
        _framed(h, share)
    return h.digest()


class PeerStatus(_Message):
    """A peer daemon's local status (its own user only): identities, problems, relay counters."""

    identities: int
    problems: dict[str, dict[str, int]]
    relay: dict[str, int]
