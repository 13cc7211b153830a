"""Small shared helpers: byte checks, I2OSP, and injected randomness for key material."""

from __future__ import annotations

from typing import TYPE_CHECKING

import nacl.utils

from anonml.crypto.exceptions import CryptoTypeError, InvalidEncoding

if TYPE_CHECKING:
    import numpy as np

__all__: list[str] = []


def _random_bytes(n: int, rng: np.random.Generator | None) -> bytes:
    """``n`` random bytes: from ``rng`` when given (tests, known-answer vectors), else the OS.

    Deviation from the house rule (``None`` = numpy generator seeded from the OS):
    key material, blinds and nonces come straight from libsodium's
    ``randombytes_buf`` (OS CSPRNG), because PCG64 is not a cryptographic
    generator — its state can be recovered from its outputs.
    """
    if rng is None:
        return nacl.utils.random(n)
    import numpy as np  # only an injected generator needs it: the services' start-up loads no NumPy

    if not isinstance(rng, np.random.Generator):
        raise CryptoTypeError(f"rng must be a numpy.random.Generator or None, not {type(rng).__name__}")
    return rng.bytes(n)


def _ensure_bytes(
    value: object,
    name: str,
    *,
    size: int | None = None,
    min_size: int = 0,
    max_size: int | None = None,
) -> bytes:
    """Return ``value`` as ``bytes`` after checking its type and length, naming ``name``."""
    if isinstance(value, bytearray | memoryview):
        value = bytes(value)
    if not isinstance(value, bytes):
        raise CryptoTypeError(f"{name} must be bytes, not {type(value).__name__}")
    if size is not None and len(value) != size:
        raise InvalidEncoding(f"{name} must be {size} bytes, got {len(value)}")
    if len(value) < min_size:
        raise InvalidEncoding(f"{name} must be at least {min_size} bytes, got {len(value)}")
    if max_size is not None and len(value) > max_size:
        raise InvalidEncoding(f"{name} must be at most {max_size} bytes, got {len(value)}")
    return value


def _i2osp(value: int, length: int) -> bytes:
    """Big-endian encoding of a non-negative integer in ``length`` bytes (RFC 8017 §4.1)."""
    if value < 0 or value >= 1 << (8 * length):
        raise InvalidEncoding(f"integer {value} does not fit in {length} bytes")
    return value.to_bytes(length, "big")


def _length_prefixed(*parts: bytes) -> bytes:
    """Concatenate ``I2OSP(len(part), 2) || part`` for each part (RFC 9497 framing)."""
    return b"".join(_i2osp(len(p), 2) + p for p in parts)
