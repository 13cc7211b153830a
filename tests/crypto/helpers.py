"""What the cryptography tests share."""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable
from typing import TypeVar

from anonml.crypto import Element, Scalar
from anonml.crypto.identity import _signed_bytes
from anonml.crypto.vrf import _challenge, _encode_to_curve, _secret_scalar

T = TypeVar("T")


def flip_bit(data: bytes, bit: int) -> bytes:
    """``data`` with bit ``bit`` inverted (bit ``i % 8`` of byte ``i // 8``): the smallest tampering."""
    out = bytearray(data)
    out[bit // 8] ^= 1 << (bit % 8)
    return bytes(out)


def decoded_or_refused(decode: Callable[[bytes], T], data: bytes, refusal: type[Exception]) -> T | None:
    """``decode(data)``, or ``None`` when it refuses the bytes with ``refusal``.

    Fuzzing a decoder: any other exception (an untyped error) fails the calling test.
    """
    try:
        return decode(data)
    except refusal:
        return None


def grinding_vrf_proof(seed: bytes, alpha: bytes) -> bytes:
    """A valid ECVRF proof made with a fresh random nonce instead of RFC 9381 §5.4.2.2's.

    What a prover in league with an aggregator can make as often as it likes:
    each is a new, valid ``(Gamma, c, s)`` — with the same ``Gamma``.
    """
    x, _ = _secret_scalar(seed)
    public_key = bytes(Element.base_mul(x))
    h = _encode_to_curve(public_key, alpha)
    gamma = h * x
    k = Scalar.reduce(os.urandom(64))
    c = _challenge(public_key, bytes(h), bytes(gamma), bytes(Element.base_mul(k)), bytes(h * k))
    s = k + Scalar.from_int(int.from_bytes(c, "little")) * x
    return bytes(gamma) + c + bytes(s)


def random_nonce_signature(seed: bytes, message: bytes, context: bytes) -> bytes:
    """An Ed25519 signature with a random nonce (RFC 8032 §5.1.6 with ``r`` drawn afresh).

    Verification cannot tell it from a deterministic one, so a signer that
    ignores RFC 8032 has as many valid signatures on one message as it likes.
    """
    a, _ = _secret_scalar(seed)
    public_key = bytes(Element.base_mul(a))
    signed = _signed_bytes(message, context)
    r = Scalar.reduce(os.urandom(64))
    big_r = bytes(Element.base_mul(r))
    h = Scalar.reduce(hashlib.sha512(big_r + public_key + signed).digest())
    return big_r + bytes(r + h * a)
