"""Witnessing: transcripts of a stage, cosign requests and cosignatures (with their VRF outputs)
and the beacon they make.

The protocol as a whole: docs/protocol.md.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Any, Literal

from pydantic import (
    Field,
)

from anonml.crypto import (
    CryptoError,
    Identity,
    vrf,
)
from anonml.crypto.vrf import PROOF_SIZE as VRF_PROOF_SIZE
from anonml.errors import ProtocolError
from anonml.protocol.membership import Roster
from anonml.protocol.messages import (
    B64,
    IdentityBytes,
    SignatureBytes,
    WireMessage,
    sign_message,
    signing_bytes,
)
from anonml.protocol.problems import Problem
from anonml.protocol.round import Bins

__all__ = [
    "Stage",
    "STAGES",
    "transcript_hash",
    "TranscriptStatement",
    "CosignRequest",
    "Cosignature",
    "CosignatureBundle",
    "WitnessLogEntry",
    "WitnessIdentity",
    "vrf_input",
    "cosign_statement",
    "witness_vrf_output",
    "roster_beacon",
]

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


class TranscriptStatement(WireMessage):
    """What a witness co-signs: aggregator ``aggregator`` showed ``transcript`` for (problem, stage)."""

    aggregator: IdentityBytes
    problem_id: str = Field(pattern=r"^[a-z0-9-]{4,64}$")
    stage: Stage
    transcript: B64(32)


class CosignRequest(WireMessage):
    """The aggregator asks a witness to co-sign a statement; signed by the aggregator it names."""

    statement: TranscriptStatement
    signature: SignatureBytes


class Cosignature(WireMessage):
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


class CosignatureBundle(WireMessage):
    """Every declared witness's cosignature on one (problem, stage) transcript."""

    problem_id: str
    stage: Stage
    cosignatures: tuple[Cosignature, ...] = Field(max_length=16)


class WitnessLogEntry(WireMessage):
    """One entry of a witness's append-only log: its ``index`` and what it co-signed."""

    index: int = Field(ge=0)
    cosignature: Cosignature


class WitnessIdentity(WireMessage):
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
