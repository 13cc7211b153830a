"""One discrete-log-equality proof per issuance request, covering every slot's evaluation.

The issuer evaluates each blinded element ``C_i`` with its slot's tweaked key,
``Z_i = (sk + m_i)^-1·C_i`` (:mod:`anonml.crypto.poprf`), where ``m_i`` is the
public tweak of element i's slot. One proof ``(c, s)`` shows that a single
secret ``k`` — the one behind the pinned ``pk`` — satisfies, for every i,

    pk = k·B    and    C_i − m_i·Z_i = k·Z_i    (equivalently C_i = (k + m_i)·Z_i),

so every evaluation in the request used the pinned key and its own slot's tweak.

It is the Chaum–Pedersen proof for the group homomorphism
``w ↦ (w·B, w·Z_1, …, w·Z_n)`` (Maurer's generic sigma protocol), made
non-interactive with Fiat–Shamir:

* prover: ``r`` random, ``T = r·B``, ``U_i = r·Z_i``,
  ``c = HashToScalar(pk, T, (m_i, C_i, Z_i, u(U_i))_i)``, ``s = r − c·k``;
* verifier: ``T' = s·B + c·pk``, ``U_i' = (s − c·m_i)·Z_i + c·C_i`` (which is
  ``s·Z_i + c·(C_i − m_i·Z_i)``), accept iff the hash of the recomputed
  transcript equals ``c`` (constant-time comparison).

The per-element commitments enter the hash by their curve25519
u-coordinate ``u(U_i)`` only, which the prover gets from one X25519 ladder
(:func:`~anonml.crypto.group.random_ladder_scalar`) instead of libsodium's
Edwards multiplication, which costs twice as much because it re-checks the
subgroup membership of its input. ``T`` enters in full.

Soundness: ``T`` fixes ``s = log_B T − c·k``; if some
``C_i ≠ (log_B pk + m_i)·Z_i`` then ``u(U_i')`` equals the committed u for at
most two values of c (one per sign of ``U_i``), so a forger succeeds with
probability at most about 2q/L after q hash queries. The statement is proven
exactly — there is no random folding of the pairs and so no m/L batching
loss. Zero knowledge is unchanged: a simulator picks (c, s) and computes the
commitments, then their u-coordinates.

Deviation from RFC 9497 §2.2: the RFC proves one key over pairs folded with
hash-derived weights (ComputeComposites), and its POPRF proves the *tweaked*
key ``sk + m`` of one ``info`` per request. A request here carries several
slots with different tweaks, and folding would cost one more variable-base
multiplication per element on both sides (libsodium has no multi-scalar
multiplication); proving the untweaked ``sk`` with the tweak moved into the
statement covers all slots with one proof at one commitment per element. The
wire form of a proof is unchanged: ``c ‖ s``, 64 bytes.

References
----------
D. Chaum and T. P. Pedersen, "Wallet Databases with Observers", CRYPTO 1992.
U. Maurer, "Unifying Zero-Knowledge Proofs of Knowledge", AFRICACRYPT 2009.
RFC 9497 §2.2 (DLEQ proofs), §3.3.3 (POPRF).
"""

from __future__ import annotations

import hmac
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from anonml.crypto._util import _ensure_bytes, _i2osp, _length_prefixed
from anonml.crypto.exceptions import InvalidPoint, InvalidProof, InvalidScalar
from anonml.crypto.group import Element, Scalar, hash_to_scalar, ladder_u, random_ladder_scalar

if TYPE_CHECKING:
    import numpy as np

__all__ = ["Proof", "generate_proof", "verify_proof"]

MAX_BATCH = 0xFFFF


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


def _challenge(
    context: bytes,
    public: Element,
    T: Element,
    tweaks: Sequence[Scalar],
    blinded: Sequence[Element],
    evaluated: Sequence[Element],
    commitments: Sequence[bytes],
) -> Scalar:
    """The challenge ``c = HashToScalar(transcript)`` with ``transcript`` =
    ``len‖pk ‖ len‖T ‖ I2OSP(n, 2) ‖ (len‖m_i ‖ len‖C_i ‖ len‖Z_i ‖ len‖u(U_i))_i ‖ "Challenge"``."""
    parts = [_length_prefixed(bytes(public), bytes(T)), _i2osp(len(blinded), 2)]
    for m, C, Z, U in zip(tweaks, blinded, evaluated, commitments, strict=True):
        parts.append(_length_prefixed(bytes(m), bytes(C), bytes(Z), bytes(U)))
    parts.append(b"Challenge")
    return hash_to_scalar(b"".join(parts), b"HashToScalar-" + context)


def _check_batch(tweaks: Sequence[Scalar], blinded: Sequence[Element], evaluated: Sequence[Element]) -> None:
    if not 0 < len(blinded) == len(evaluated) == len(tweaks):
        raise InvalidProof(
            f"a proof covers a non-empty batch with one tweak, one blinded and one evaluated element "
            f"each; got {len(tweaks)}, {len(blinded)} and {len(evaluated)}"
        )
    if len(blinded) > MAX_BATCH:
        raise InvalidProof(f"batch larger than {MAX_BATCH} elements")


def generate_proof(
    k: Scalar,
    public: Element,
    tweaks: Sequence[Scalar],
    blinded: Sequence[Element],
    evaluated: Sequence[Element],
    *,
    context: bytes,
    rng: np.random.Generator | None = None,
) -> Proof:
    """Prove ``pk = k·B`` and ``C_i = (k + m_i)·Z_i`` for every i (see the module notes).

    Costs one fixed-base multiplication and n X25519 ladders. ``r`` is redrawn
    in the negligible case that ``s`` or ``c`` is zero (a zero scalar is not a
    valid proof half on the wire).
    """
    _check_batch(tweaks, blinded, evaluated)
    while True:
        r, ladder = random_ladder_scalar(rng)
        T = Element.base_mul(r)
        commitments = [ladder_u(ladder, Z) for Z in evaluated]
        c = _challenge(context, public, T, tweaks, blinded, evaluated, commitments)
        s = r - c * k
        if not (s.is_zero() or c.is_zero()):
            return Proof(c, s)


def verify_proof(
    public: Element,
    tweaks: Sequence[Scalar],
    blinded: Sequence[Element],
    evaluated: Sequence[Element],
    proof: Proof,
    *,
    context: bytes,
) -> None:
    """Recompute ``T' = s·B + c·pk`` and ``U_i' = (s − c·m_i)·Z_i + c·C_i`` and accept only if the
    challenge matches (constant time). Returns nothing; raises :class:`InvalidProof`."""
    _check_batch(tweaks, blinded, evaluated)
    c, s = proof.c, proof.s
    try:
        T = Element.base_mul(s) + public * c
        commitments = [
            (Z * (s - c * m) + C * c).to_montgomery()
            for m, C, Z in zip(tweaks, blinded, evaluated, strict=True)
        ]
    except (InvalidPoint, InvalidScalar) as exc:  # identity intermediate: not an honest proof
        raise InvalidProof("DLEQ proof does not verify") from exc
    expected = _challenge(context, public, T, tweaks, blinded, evaluated, commitments)
    if not hmac.compare_digest(bytes(expected), bytes(c)):
        raise InvalidProof("DLEQ proof does not verify: evaluation not made with the pinned key and slot")
