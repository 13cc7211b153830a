"""ECVRF-EDWARDS25519-SHA512-TAI: one verifiable pseudorandom output per key and input (RFC 9381).

A verifiable random function gives its key holder exactly one output
``beta`` for each input ``alpha``, with a proof anyone can check against the
public key. That uniqueness is what a signature lacks: Ed25519 is
deterministic only for a signer that follows RFC 8032, and a verifier cannot
tell which nonce was used, so a signer in league with an aggregator can
produce as many valid signatures over one statement as it likes. The proof's
``(c, s)`` part can still vary with the prover's nonce, but ``Gamma = x·H(alpha)``
and hence ``beta`` cannot: the witnesses' beacon (:func:`anonml.protocol.roster_beacon`)
is built from ``beta`` alone.

The suite is RFC 9381 §5.5's ECVRF-EDWARDS25519-SHA512-TAI (suite string
``0x03``): the key pair is an Ed25519 key pair (RFC 8032 §5.1.5), ``H`` comes from
try-and-increment (§5.4.1.1), the nonce from RFC 8032 (§5.4.2.2), the challenge
is 16 bytes and the proof ``Gamma ‖ c ‖ s`` 80 bytes. Every operation on the
secret scalar and the nonce goes through libsodium's constant-time
``crypto_scalarmult_ed25519_*_noclamp`` and ``crypto_core_ed25519_scalar_*``
(:mod:`anonml.crypto.group`); only the try-and-increment decoding of the
public hash into a point uses Python integers, on public data.

Verification is stricter than the RFC where honest proofs never differ: the
public key and ``Gamma`` must lie in the prime-order subgroup (an honest
``Gamma = x·H`` always does), which also gives the RFC's full uniqueness
(``validate_key``: no small-order key).
"""

from __future__ import annotations

import hashlib
import hmac

from anonml.crypto._util import _ensure_bytes
from anonml.crypto.exceptions import InvalidPoint, InvalidProof, InvalidScalar
from anonml.crypto.group import ELEMENT_SIZE, Element, Scalar

__all__ = ["SUITE_STRING", "PROOF_SIZE", "OUTPUT_SIZE", "prove", "verify", "proof_to_hash"]

SUITE_STRING = b"\x03"
"""RFC 9381 §5.5: ECVRF-EDWARDS25519-SHA512-TAI."""
PROOF_SIZE = 80
"""``Gamma`` (32) ‖ ``c`` (16) ‖ ``s`` (32)."""
OUTPUT_SIZE = 64
"""``beta``: a SHA-512 digest."""
_C_SIZE = 16
_P = 2**255 - 19
_D = (-121665 * pow(121666, -1, _P)) % _P
_SQRT_M1 = pow(2, (_P - 1) // 4, _P)
_EIGHT = Scalar.from_int(8)


def _decode_point(data: bytes) -> tuple[int, int] | None:
    """RFC 8032 §5.1.3 point decoding in affine coordinates; None where it fails.

    Variable time: for the public try-and-increment hash only.
    """
    y = int.from_bytes(data, "little")
    sign = y >> 255
    y &= (1 << 255) - 1
    if y >= _P:
        return None
    u = (y * y - 1) % _P
    v = (_D * y * y + 1) % _P
    x = u * pow(v, 3, _P) * pow(u * pow(v, 7, _P), (_P - 5) // 8, _P) % _P
    vxx = v * x * x % _P
    if vxx == (-u) % _P:
        x = x * _SQRT_M1 % _P
    elif vxx != u:
        return None
    if x == 0 and sign == 1:
        return None
    if x & 1 != sign:
        x = _P - x
    return x, y


def _double(point: tuple[int, int]) -> tuple[int, int]:
    """Twisted Edwards doubling (a = -1; the formula is complete on edwards25519)."""
    x, y = point
    xy = x * y % _P
    dxxyy = _D * xy * xy % _P
    return (
        2 * xy * pow(1 + dxxyy, -1, _P) % _P,
        (y * y + x * x) * pow(1 - dxxyy, -1, _P) % _P,
    )


def _encode_point(point: tuple[int, int]) -> bytes:
    x, y = point
    return (y | ((x & 1) << 255)).to_bytes(32, "little")


def _encode_to_curve(public_key: bytes, alpha: bytes) -> Element:
    """``H`` by try-and-increment (RFC 9381 §5.4.1.1): the first counter whose hash decodes.

    ``hash = SHA-512(suite ‖ 0x01 ‖ PK ‖ alpha ‖ ctr ‖ 0x00)``, its first 32 bytes
    decoded as a point and multiplied by the cofactor 8 until that is not the
    identity. About two tries on average; 256 failing tries have probability 2^-256.
    """
    for ctr in range(256):
        digest = hashlib.sha512(SUITE_STRING + b"\x01" + public_key + alpha + bytes([ctr]) + b"\x00").digest()
        point = _decode_point(digest[:32])
        if point is None:
            continue
        for _ in range(3):
            point = _double(point)
        if point != (0, 1):
            return Element.from_bytes(_encode_point(point), name="H")
    raise InvalidProof("try-and-increment found no point in 256 tries")  # probability 2^-256


def _challenge(*points: bytes) -> bytes:
    """``c = SHA-512(suite ‖ 0x02 ‖ Y ‖ H ‖ Gamma ‖ U ‖ V ‖ 0x00)[:16]`` (RFC 9381 §5.4.3)."""
    return hashlib.sha512(SUITE_STRING + b"\x02" + b"".join(points) + b"\x00").digest()[:_C_SIZE]


def _secret_scalar(seed: bytes) -> tuple[Scalar, bytes]:
    """The Ed25519 secret scalar ``x`` (RFC 8032 §5.1.5, reduced mod L) and the nonce key."""
    digest = hashlib.sha512(seed).digest()
    clamped = bytearray(digest[:32])
    clamped[0] &= 248
    clamped[31] &= 127
    clamped[31] |= 64
    # x·P = (x mod L)·P on the prime-order subgroup; libsodium reduces in constant time.
    return Scalar.reduce(bytes(clamped) + bytes(32)), digest[32:]


def prove(seed: bytes, alpha: bytes) -> bytes:
    """``pi = ECVRF_prove(SK, alpha)`` (RFC 9381 §5.1) for the Ed25519 secret key ``seed``.

    Deterministic: the nonce is ``SHA-512(SHA-512(seed)[32:] ‖ H)`` (§5.4.2.2).
    Callers hold the seed inside :class:`~anonml.crypto.Identity`
    (:meth:`~anonml.crypto.Identity.vrf_prove`).
    """
    seed = _ensure_bytes(seed, "VRF secret key", size=32)
    alpha = _ensure_bytes(alpha, "VRF input")
    x, nonce_key = _secret_scalar(seed)
    public_key = bytes(Element.base_mul(x))
    h = _encode_to_curve(public_key, alpha)
    gamma = h * x
    k = Scalar.reduce(hashlib.sha512(nonce_key + bytes(h)).digest())
    c = _challenge(public_key, bytes(h), bytes(gamma), bytes(Element.base_mul(k)), bytes(h * k))
    s = k + Scalar.from_int(int.from_bytes(c, "little")) * x
    return bytes(gamma) + c + bytes(s)


def proof_to_hash(proof: bytes) -> bytes:
    """``beta = SHA-512(suite ‖ 0x03 ‖ 8·Gamma ‖ 0x00)`` (RFC 9381 §5.2), of a proof already verified."""
    proof = _ensure_bytes(proof, "VRF proof", size=PROOF_SIZE)
    gamma = Element.from_bytes(proof[:ELEMENT_SIZE], name="Gamma")
    return hashlib.sha512(SUITE_STRING + b"\x03" + bytes(gamma * _EIGHT) + b"\x00").digest()


def verify(public_key: bytes, alpha: bytes, proof: bytes) -> bytes:
    """Check ``proof`` for ``alpha`` under the Ed25519 ``public_key``; return ``beta`` (RFC 9381 §5.3).

    Raises
    ------
    InvalidProof
        The key is not a prime-order point, ``Gamma`` is not one, ``s`` is not a
        canonical scalar, or the challenge does not match.
    """
    public_key = _ensure_bytes(public_key, "VRF public key", size=32)
    alpha = _ensure_bytes(alpha, "VRF input")
    proof = _ensure_bytes(proof, "VRF proof", size=PROOF_SIZE)
    try:
        y = Element.from_bytes(public_key, name="VRF public key")
        gamma = Element.from_bytes(proof[:ELEMENT_SIZE], name="Gamma")
        c_bytes = proof[ELEMENT_SIZE : ELEMENT_SIZE + _C_SIZE]
        c = Scalar.from_int(int.from_bytes(c_bytes, "little"))
        s = Scalar.from_bytes(proof[ELEMENT_SIZE + _C_SIZE :], name="s")
        h = _encode_to_curve(public_key, alpha)
        u = Element.base_mul(s) - y * c
        v = h * s - gamma * c
    except (InvalidPoint, InvalidScalar) as exc:
        raise InvalidProof(f"VRF proof does not verify: {exc}") from None
    if not hmac.compare_digest(_challenge(public_key, bytes(h), bytes(gamma), bytes(u), bytes(v)), c_bytes):
        raise InvalidProof("VRF proof does not verify: challenge mismatch")
    return proof_to_hash(proof)
