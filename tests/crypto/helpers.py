"""What the cryptography tests share."""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

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
