"""Batched discrete-log-equality proofs over edwards25519 (RFC 9497 §2.2).

A proof shows that the same secret scalar k maps A to B and every C_i to D_i
(B = k·A, D_i = k·C_i) without revealing k. The m pairs are folded into one
pair (M, Z) with hash-derived weights d_i, so one proof of two scalars (c, s)
covers a whole batch; forging it for any D_i != k·C_i succeeds with probability
about m/L.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from anonml.crypto._util import _ensure_bytes, _i2osp, _length_prefixed
from anonml.crypto.exceptions import InvalidPoint, InvalidProof, InvalidScalar
from anonml.crypto.group import Element, Scalar, hash_to_scalar, random_scalar

__all__ = ["Proof", "generate_proof", "verify_proof"]


@dataclass(frozen=True, slots=True)
class Proof:
    """A DLEQ proof ``(c, s)``; wire form ``c || s`` (64 bytes, RFC 9497 §4.3 serialisation)."""

    c: Scalar
    s: Scalar

    SIZE = 64

    def __bytes__(self) -> bytes:
        return bytes(self.c) + bytes(self.s)

    @classmethod
    def from_bytes(cls, data: bytes) -> Proof:
        """Decode; each half must be a canonical non-zero scalar (:class:`InvalidScalar`)."""
        data = _ensure_bytes(data, "proof", size=cls.SIZE)
        return cls(
            Scalar.from_bytes(data[:32], name="proof c"),
            Scalar.from_bytes(data[32:], name="proof s"),
        )


def _composite_weights(
    context: bytes, B: Element, Cs: Sequence[Element], Ds: Sequence[Element]
) -> list[Scalar]:
    """The d_i of ComputeComposites (RFC 9497 §2.2.1), derived from a seed bound to B."""
    seed_dst = b"Seed-" + context
    seed = hashlib.sha512(_length_prefixed(bytes(B), seed_dst)).digest()  # the suite's Hash
    dst = b"HashToScalar-" + context
    weights = []
    for i, (C, D) in enumerate(zip(Cs, Ds, strict=True)):
        transcript = (
            _length_prefixed(seed) + _i2osp(i, 2) + _length_prefixed(bytes(C), bytes(D)) + b"Composite"
        )
        weights.append(hash_to_scalar(transcript, dst))
    return weights


def _fold(weights: Sequence[Scalar], points: Sequence[Element]) -> Element:
    """sum_i d_i·P_i (a zero weight or cancelling sum has negligible probability and raises)."""
    acc = points[0] * weights[0]
    for d, P in zip(weights[1:], points[1:], strict=True):
        acc = acc + P * d
    return acc


def _mul(P: Element, k: Scalar) -> Element:
    """k·P, with libsodium's fixed-base table when P is the generator (about 5x faster)."""
    return Element.base_mul(k) if P == Element.generator() else P * k


def _challenge(context: bytes, B: Element, M: Element, Z: Element, t2: Element, t3: Element) -> Scalar:
    transcript = _length_prefixed(bytes(B), bytes(M), bytes(Z), bytes(t2), bytes(t3)) + b"Challenge"
    return hash_to_scalar(transcript, b"HashToScalar-" + context)


def _check_batch(Cs: Sequence[Element], Ds: Sequence[Element]) -> None:
    if len(Cs) == 0 or len(Cs) != len(Ds):
        raise InvalidProof(f"batch must be non-empty and paired, got {len(Cs)} and {len(Ds)} elements")
    if len(Cs) > 0xFFFF:
        raise InvalidProof("batch larger than 65535 elements")


def generate_proof(
    k: Scalar,
    A: Element,
    B: Element,
    Cs: Sequence[Element],
    Ds: Sequence[Element],
    *,
    context: bytes,
    rng: np.random.Generator | None = None,
) -> Proof:
    """GenerateProof (RFC 9497 §2.2.1) with ComputeCompositesFast: Z = k·M.

    ``r`` random, ``t2 = r·A``, ``t3 = r·M``, ``c = HashToScalar(B, M, Z, t2, t3)``,
    ``s = r - c·k``. ``r`` is redrawn in the negligible case that s = 0 (a zero
    scalar is not a valid proof half on the wire).
    """
    _check_batch(Cs, Ds)
    M = _fold(_composite_weights(context, B, Cs, Ds), Cs)
    Z = M * k
    while True:
        r = random_scalar(rng)
        t2, t3 = _mul(A, r), M * r
        c = _challenge(context, B, M, Z, t2, t3)
        s = r - c * k
        if not (s.is_zero() or c.is_zero()):
            return Proof(c, s)


def verify_proof(
    A: Element,
    B: Element,
    Cs: Sequence[Element],
    Ds: Sequence[Element],
    proof: Proof,
    *,
    context: bytes,
) -> None:
    """VerifyProof (RFC 9497 §2.2.2): recompute ``t2 = s·A + c·B``, ``t3 = s·M + c·Z`` and
    accept only if the challenge matches (constant-time). Raises :class:`InvalidProof`.
    """
    _check_batch(Cs, Ds)
    weights = _composite_weights(context, B, Cs, Ds)
    try:
        M = _fold(weights, Cs)
        Z = _fold(weights, Ds)
        t2 = _mul(A, proof.s) + B * proof.c
        t3 = M * proof.s + Z * proof.c
    except (InvalidPoint, InvalidScalar) as exc:  # identity intermediate: not an honest proof
        raise InvalidProof("DLEQ proof does not verify") from exc
    expected = _challenge(context, B, M, Z, t2, t3)
    if not hmac.compare_digest(bytes(expected), bytes(proof.c)):
        raise InvalidProof("DLEQ proof does not verify: evaluation not made with the pinned key")
