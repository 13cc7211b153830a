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

from anonml.crypto.onion import PAYLOAD_SIZE as SEALED_PAYLOAD_SIZE
from anonml.errors import ProtocolError
from anonml.phases import MODEL_PHASES, ProblemPhase
from anonml.protocol.membership import (
    MAX_BATCH_ITEMS,
    REACHABILITY_SKEW_SECONDS,
    AdmissionCredential,
    Assignment,
    AssignmentBatch,
    AssignmentBatchRequest,
    ReachabilityAnswer,
    ReachabilityRequest,
    ReachabilityResult,
    Registration,
    RegistrationBatch,
    RegistrationReceipt,
    Roster,
    RosterEntry,
    RosterWitness,
    check_credential,
    check_own_relay_url,
    check_relay_address,
    check_relay_url,
    entry_registration,
)
from anonml.protocol.messages import (
    B64,
    PROTOCOL_VERSION,
    sign_message,
    signing_bytes,
    signing_context,
    verify_message,
)
from anonml.protocol.problems import (
    DEFAULT_ROUTES,
    LABEL_RANGE_LIMIT,
    MAX_LABEL_CLASSES,
    Admission,
    CentralTargetSpec,
    LabelSpec,
    MedianSettings,
    Problem,
    ProblemDraft,
    Schedule,
    WitnessRef,
    route_count,
)
from anonml.protocol.round import (
    Ack,
    BatchResults,
    Bins,
    IntakeBatch,
    IntakeDelivery,
    IntakeReceipt,
    ItemResult,
    MedianAnswer,
    MedianQuery,
    ModelDocument,
    ModelEvaluation,
    PrivateReport,
    ReportReceipts,
    TokenBatchRequest,
    TokenBatchResponse,
    TokenSlotRequest,
    pack_bits,
    report_slot,
    token_batch_request,
    unpack_bits,
)
from anonml.protocol.status import (
    MedianAccount,
    PeerStatus,
    ProblemStatus,
    ReportAccount,
    ShuffleStatement,
)
from anonml.protocol.witnessing import (
    STAGES,
    Cosignature,
    CosignatureBundle,
    CosignRequest,
    Stage,
    TranscriptStatement,
    WitnessIdentity,
    WitnessLogEntry,
    cosign_statement,
    roster_beacon,
    transcript_hash,
    vrf_input,
    witness_vrf_output,
)

__all__ = [
    "MedianAccount",
    "SEALED_PAYLOAD_SIZE",
    "ProtocolError",
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
    "ProblemPhase",
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
