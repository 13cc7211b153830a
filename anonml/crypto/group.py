"""The edwards25519 prime-order group, its scalars, and hashing into both.

Thin wrappers over libsodium's ``crypto_core_ed25519_*`` and
``crypto_scalarmult_ed25519_*_noclamp`` (PyNaCl >= 1.6.2). An :class:`Element`
can only be built from an encoding that libsodium's ``is_valid_point`` accepts
(canonical, on the curve, not of small order, in the prime-order subgroup — the
last check is the one CVE-2025-69277 broke, fixed in the libsodium that
PyNaCl 1.6.2 bundles); a :class:`Scalar` only from a canonical integer in
[1, L). Bad encodings raise :class:`~anonml.crypto.exceptions.InvalidPoint` /
:class:`~anonml.crypto.exceptions.InvalidScalar`, never a bare libsodium error.

References
----------
RFC 9380 §5.3.1 (expand_message_xmd), §5.3.3 (long DSTs).
RFC 9497 §4 (ciphersuite functions HashToGroup, HashToScalar, RandomScalar).
libsodium documentation, "Point*scalar multiplication" and "Finite field arithmetic".
"""

from __future__ import annotations

import hashlib
import hmac
from typing import TYPE_CHECKING, Self

import nacl.bindings as _b
import nacl.exceptions

from anonml.crypto._util import _ensure_bytes, _i2osp, _random_bytes
from anonml.crypto.exceptions import CryptoError, InvalidPoint, InvalidScalar

if TYPE_CHECKING:
    import numpy as np

__all__ = [
    "L",
    "ELEMENT_SIZE",
    "SCALAR_SIZE",
    "SUITE_ID",
    "Scalar",
    "Element",
    "expand_message_xmd",
    "hash_to_group",
    "hash_to_scalar",
    "random_scalar",
    "montgomery_mul",
    "random_ladder_scalar",
    "ladder_u",
]

L = 2**252 + 27742317777372353535851937790883648493
"""Order of the prime-order subgroup of edwards25519."""
_P = 2**255 - 19
ELEMENT_SIZE = 32
SCALAR_SIZE = 32
SUITE_ID = b"edwards25519-SHA512-AnonMLv1"
"""Our own ciphersuite identifier; it appears in every domain separation tag."""

_IDENTITY = (1).to_bytes(32, "little")  # (0, 1)
_INV8 = pow(8, -1, L)


class _Encoded:
    """A group value held as its 32-byte canonical encoding; equality is constant-time.

    ``Type(encoded)`` decodes with the subclass's ``from_bytes`` and its checks;
    :meth:`_trusted` skips them, for encodings libsodium produced from valid
    values (scalars it reduced mod L; elements in the subgroup, not the identity).
    """

    __slots__ = ("_b",)

    def __init__(self, encoded: bytes) -> None:
        """Decode and validate (as the subclass's ``from_bytes`` with its defaults)."""
        self._b = bytes(type(self).from_bytes(encoded))  # type: ignore[attr-defined]

    @classmethod
    def _trusted(cls, encoded: bytes) -> Self:
        obj = object.__new__(cls)
        obj._b = encoded
        return obj

    def __bytes__(self) -> bytes:
        return self._b

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, type(self)):
            return NotImplemented
        return hmac.compare_digest(self._b, other._b)

    def __hash__(self) -> int:
        return hash(self._b)


class Scalar(_Encoded):
    """An integer modulo L, stored as its 32-byte little-endian canonical encoding.

    Built from the wire with :meth:`from_bytes` (rejects values >= L and, unless
    asked, zero); arithmetic results may be zero and say so via :meth:`is_zero`.
    Equality is constant-time.
    """

    SIZE = SCALAR_SIZE
    __slots__ = ()

    @classmethod
    def from_bytes(cls, data: bytes, *, allow_zero: bool = False, name: str = "scalar") -> Scalar:
        """Decode a canonical scalar; raise :class:`InvalidScalar` if it is >= L (or zero)."""
        data = _ensure_bytes(data, name, size=SCALAR_SIZE)
        value = int.from_bytes(data, "little")
        if value >= L:
            raise InvalidScalar(f"{name} is not canonical (>= L)")
        if value == 0 and not allow_zero:
            raise InvalidScalar(f"{name} is zero")
        return cls._trusted(data)

    @classmethod
    def from_int(cls, value: int) -> Scalar:
        """The scalar ``value mod L``."""
        return cls._trusted((value % L).to_bytes(32, "little"))

    @classmethod
    def reduce(cls, wide: bytes) -> Scalar:
        """Reduce 64 bytes (little-endian) modulo L: a near-uniform scalar from uniform bytes."""
        wide = _ensure_bytes(wide, "wide scalar", size=64)
        return cls._trusted(_b.crypto_core_ed25519_scalar_reduce(wide))

    def is_zero(self) -> bool:
        return hmac.compare_digest(self._b, bytes(32))

    def __add__(self, other: Scalar) -> Scalar:
        return Scalar._trusted(_b.crypto_core_ed25519_scalar_add(self._b, other._b))

    def __sub__(self, other: Scalar) -> Scalar:
        return Scalar._trusted(_b.crypto_core_ed25519_scalar_sub(self._b, other._b))

    def __mul__(self, other: Scalar) -> Scalar:
        return Scalar._trusted(_b.crypto_core_ed25519_scalar_mul(self._b, other._b))

    def __neg__(self) -> Scalar:
        return Scalar._trusted(_b.crypto_core_ed25519_scalar_negate(self._b))

    def invert(self) -> Scalar:
        """Multiplicative inverse modulo L; :class:`InvalidScalar` for zero."""
        if self.is_zero():
            raise InvalidScalar("zero has no inverse modulo L")
        return Scalar._trusted(_b.crypto_core_ed25519_scalar_invert(self._b))

    def __repr__(self) -> str:  # never print secret scalars
        return "Scalar(<hidden>)"


class Element(_Encoded):
    """A non-identity element of the prime-order subgroup of edwards25519.

    :meth:`from_bytes` validates untrusted encodings; results of group operations
    on valid elements stay in the subgroup, and an operation whose result would
    be the identity raises :class:`InvalidPoint` (libsodium cannot encode a
    scalar multiple equal to the identity, and a protocol value never should be).
    """

    SIZE = ELEMENT_SIZE
    __slots__ = ()

    @classmethod
    def from_bytes(cls, data: bytes, *, name: str = "element") -> Element:
        """Decode and validate; raise :class:`InvalidPoint` unless ``data`` is a canonical,
        non-identity element of the prime-order subgroup."""
        data = _ensure_bytes(data, name, size=ELEMENT_SIZE)
        if not _b.crypto_core_ed25519_is_valid_point(data):
            raise InvalidPoint(
                f"{name} is not a canonical element of the prime-order subgroup "
                "(non-canonical, off-curve, small-order, identity or torsion component)"
            )
        return cls._trusted(data)

    @classmethod
    def from_bytes_times(cls, data: bytes, k: Scalar, *, name: str = "element") -> tuple[Element, Element]:
        """Decode and validate an untrusted ``P`` and return ``(P, k·P)``, with one libsodium call.

        ``crypto_scalarmult_ed25519_noclamp`` runs the checks of
        ``crypto_core_ed25519_is_valid_point`` (canonical, not of small order, on
        the curve, in the prime-order subgroup) on its input before multiplying,
        so validating first with :meth:`from_bytes` would pay for the subgroup
        check — a multiplication by L — twice. Raises :class:`InvalidPoint`
        exactly when :meth:`from_bytes` would (``k`` must be non-zero).
        """
        data = _ensure_bytes(data, name, size=ELEMENT_SIZE)
        if k.is_zero():
            raise InvalidScalar(f"cannot validate {name} by a multiplication with zero")
        try:
            product = _b.crypto_scalarmult_ed25519_noclamp(bytes(k), data)
        except nacl.exceptions.RuntimeError as exc:  # input rejected (k·P is never the identity)
            raise InvalidPoint(
                f"{name} is not a canonical element of the prime-order subgroup "
                "(non-canonical, off-curve, small-order, identity or torsion component)"
            ) from exc
        return cls._trusted(data), cls._trusted(product)

    @classmethod
    def generator(cls) -> Element:
        """The standard base point B (y = 4/5)."""
        return _GENERATOR

    @classmethod
    def base_mul(cls, k: Scalar) -> Element:
        """k·B with libsodium's fixed-base table."""
        if k.is_zero():
            raise InvalidPoint("0·B is the identity")
        return cls._trusted(_b.crypto_scalarmult_ed25519_base_noclamp(bytes(k)))

    def __mul__(self, k: Scalar) -> Element:
        if not isinstance(k, Scalar):
            return NotImplemented
        try:
            return Element._trusted(_b.crypto_scalarmult_ed25519_noclamp(bytes(k), self._b))
        except nacl.exceptions.RuntimeError as exc:  # only the identity result can fail here
            raise InvalidPoint("scalar multiple is the identity") from exc

    __rmul__ = __mul__

    def __add__(self, other: Element) -> Element:
        out = _b.crypto_core_ed25519_add(self._b, other._b)
        if hmac.compare_digest(out, _IDENTITY):
            raise InvalidPoint("sum is the identity")
        return Element._trusted(out)

    def __sub__(self, other: Element) -> Element:
        out = _b.crypto_core_ed25519_sub(self._b, other._b)
        if hmac.compare_digest(out, _IDENTITY):
            raise InvalidPoint("difference is the identity")
        return Element._trusted(out)

    def to_montgomery(self) -> bytes:
        """The curve25519 u-coordinate ``u = (1 + y) / (1 - y) mod p`` (RFC 7748 §4.1), 32 bytes LE.

        Computed with Python integers, i.e. in variable time: call it on public
        elements only (a received or hashed point), never on a secret-derived one.
        """
        y = int.from_bytes(self._b, "little") & ((1 << 255) - 1)
        return ((1 + y) * pow(1 - y, -1, _P) % _P).to_bytes(32, "little")

    def __repr__(self) -> str:
        return f"Element({self._b.hex()})"


_INV8_SCALAR = Scalar.from_int(_INV8)
_BIT_SCALARS = (Scalar._trusted(bytes(32)), Scalar.from_int(1))
_GENERATOR = Element._trusted(_b.crypto_scalarmult_ed25519_base_noclamp((1).to_bytes(32, "little")))


def expand_message_xmd(msg: bytes, dst: bytes, len_in_bytes: int) -> bytes:
    """expand_message_xmd with SHA-512 (RFC 9380 §5.3.1).

    ``b_0 = H(Z_pad || msg || I2OSP(len,2) || 0x00 || DST')``,
    ``b_1 = H(b_0 || 0x01 || DST')``, ``b_i = H((b_0 xor b_{i-1}) || I2OSP(i,1) || DST')``,
    output the first ``len_in_bytes`` of ``b_1 || ... || b_ell``, where
    ``DST' = DST || I2OSP(len(DST), 1)`` and ``Z_pad`` is 128 zero bytes (SHA-512's block).
    DSTs over 255 bytes are first hashed as in §5.3.3.
    """
    msg = _ensure_bytes(msg, "msg")
    dst = _ensure_bytes(dst, "dst", min_size=1)
    if len(dst) > 255:
        dst = hashlib.sha512(b"H2C-OVERSIZE-DST-" + dst).digest()
    ell = -(-len_in_bytes // 64)
    if not 1 <= len_in_bytes <= 65535 or ell > 255:
        raise CryptoError(f"expand_message_xmd cannot produce {len_in_bytes} bytes")
    dst_prime = dst + _i2osp(len(dst), 1)
    b0 = hashlib.sha512(bytes(128) + msg + _i2osp(len_in_bytes, 2) + b"\x00" + dst_prime).digest()
    blocks = [hashlib.sha512(b0 + b"\x01" + dst_prime).digest()]
    for i in range(2, ell + 1):
        mixed = bytes(x ^ y for x, y in zip(b0, blocks[-1], strict=True))
        blocks.append(hashlib.sha512(mixed + _i2osp(i, 1) + dst_prime).digest())
    return b"".join(blocks)[:len_in_bytes]


def hash_to_group(msg: bytes, dst: bytes) -> Element:
    """HashToGroup: ``from_uniform(u0) + from_uniform(u1)``, ``u0 || u1 = expand_message_xmd(msg, dst, 64)``.

    ``crypto_core_ed25519_from_uniform`` is libsodium's Elligator 2 map (high bit
    = sign of x) followed by cofactor clearing, so each term lies in the
    prime-order subgroup; summing two independent maps gives a random-oracle
    style encoding (the RFC 9380 ``hash_to_curve`` shape, with libsodium's map in
    place of the RFC's). The identity is reached with negligible probability
    and rejected with :class:`InvalidPoint`, as RFC 9497 requires.
    """
    uniform = expand_message_xmd(msg, dst, 64)
    q0 = _b.crypto_core_ed25519_from_uniform(uniform[:32])
    q1 = _b.crypto_core_ed25519_from_uniform(uniform[32:])
    out = _b.crypto_core_ed25519_add(q0, q1)
    if hmac.compare_digest(out, _IDENTITY):
        raise InvalidPoint("hash_to_group produced the identity")
    return Element._trusted(out)


def hash_to_scalar(msg: bytes, dst: bytes) -> Scalar:
    """HashToScalar: ``expand_message_xmd(msg, dst, 64)`` read little-endian and reduced mod L.

    The 512-bit input makes the bias of the reduction below 2^-259.
    """
    return Scalar.reduce(expand_message_xmd(msg, dst, 64))


def random_scalar(rng: np.random.Generator | None = None) -> Scalar:
    """RandomScalar: 64 random bytes reduced mod L, drawn again in the (2^-252) case of zero."""
    while True:
        k = Scalar.reduce(_random_bytes(64, rng))
        if not k.is_zero():
            return k


def _x25519_scalar(k: Scalar) -> bytes | None:
    """An X25519 scalar acting as ±k on the prime-order subgroup that clamping leaves unchanged.

    X25519 clears the low 3 bits and bit 255 and sets bit 254. With
    ``c ≡ ±k / 8 (mod L)`` chosen as the larger of the two representatives,
    ``c >= L/2 > 2^251``; if also ``c < 2^252`` then ``8c`` has bit 254 set and no
    higher bit, so clamping keeps it, and ``[8c]P = [±k]P`` for P of order L.
    Returns None in the remaining case (probability about 2^-127).

    ``k`` is often secret (a blind's inverse, a slot's tweaked key inverse), so
    every step runs on libsodium's constant-time scalar arithmetic or on the
    fixed-size byte strings: ``c1 = k·8⁻¹``; ``c1 >= (L+1)/2`` exactly when
    ``2·c1 mod L`` is odd (L is odd), which picks ``c = c1`` or ``-c1`` by a
    multiplication with that bit rather than a branch; ``8c`` is a 3-bit shift
    of a value with bit 251 set (a fixed number of digits).
    """
    c1 = k * _INV8_SCALAR
    c2 = -c1
    larger = bytes(c1 + c1)[0] & 1  # 1 when c1 is the representative >= L/2
    c = c2 + (c1 - c2) * _BIT_SCALARS[larger]
    encoded = bytes(c)
    if encoded[31] >> 4:  # c >= 2^252: no clamping-proof representative
        return None
    return (int.from_bytes(encoded, "little") << 3).to_bytes(32, "little")


def montgomery_mul(k: Scalar, element: Element) -> bytes:
    """The u-coordinate of ``k·P`` for a public element P, computed with one X25519 ladder.

    libsodium's ``crypto_scalarmult_ed25519_noclamp`` re-checks that its input
    lies in the prime-order subgroup — a second full multiplication — on every
    call; our elements are validated once, so the ladder on ``u(P)`` with the
    clamping-proof scalar of :func:`_x25519_scalar` gives ``u(k·P)`` for about
    half the cost. ``u`` identifies ``k·P`` up to sign. The (2^-127) scalars with
    no clamping-proof representative take the Edwards path. ``k`` may be
    secret: its conversion (:func:`_x25519_scalar`) uses no integer arithmetic
    on it.
    """
    scalar = _x25519_scalar(k)
    if scalar is None:
        return (element * k).to_montgomery()
    return _b.crypto_scalarmult(scalar, element.to_montgomery())


_MASK_252 = (1 << 252) - 1
_HALF_L = (L + 1) // 2
_EIGHT = (8).to_bytes(32, "little")


def random_ladder_scalar(rng: np.random.Generator | None = None) -> tuple[Scalar, bytes]:
    """A fresh secret scalar ``r`` and an X25519 scalar ``a`` with ``u(a·P) = u(r·P)`` for every element P.

    :func:`montgomery_mul` derives a ladder scalar from a given ``r`` (two
    libsodium multiplications); a fresh nonce needs none: the ladder scalar is
    drawn first and ``r`` derived from it with libsodium's constant-time
    scalar arithmetic: ``c`` uniform in
    ``[⌈L/2⌉, 2^252)`` (rejection sampling on 252 random bits, accepted about
    half the time; the number of draws is independent of the result), a
    random sign ``σ``, then ``a = 8c`` — low three bits clear, bit 254 set,
    bit 255 clear, so X25519's clamping leaves it unchanged — and
    ``r = σ·8c mod L``. As c and L − c together cover [1, L) but for about
    2^126 values, r is within statistical distance 2^-126 of uniform on
    [1, L); ``a·P = ±r·P``, and ``u`` does not see the sign.
    """
    while True:
        drawn = _random_bytes(33, rng)
        c = int.from_bytes(drawn[:32], "little") & _MASK_252
        if c >= _HALF_L:
            break
    r = Scalar._trusted(_b.crypto_core_ed25519_scalar_mul(c.to_bytes(32, "little"), _EIGHT))
    r = (r, -r)[drawn[32] & 1]
    return r, (c << 3).to_bytes(32, "little")


def ladder_u(scalar: bytes, element: Element) -> bytes:
    """``u(a·P)`` with one X25519 ladder, for a ladder scalar ``a`` of :func:`random_ladder_scalar`."""
    return _b.crypto_scalarmult(scalar, element.to_montgomery())


def _check_backend() -> None:
    """Refuse to run on a libsodium whose subgroup check misses P + (0, -1) (CVE-2025-69277).

    (x, y) + (0, -1) = (-x, -y) on a twisted Edwards curve with a = -1, so the
    encoding of B + (0, -1) is ``p - y`` with the sign bit of x flipped.
    """
    y = int.from_bytes(bytes(_GENERATOR), "little")
    sign, y = y >> 255, y & ((1 << 255) - 1)
    bad = ((_P - y) | ((1 - sign) << 255)).to_bytes(32, "little")
    if _b.crypto_core_ed25519_is_valid_point(bad):
        raise CryptoError(
            "libsodium accepts points outside the prime-order subgroup (CVE-2025-69277); "
            "install PyNaCl >= 1.6.2 with its bundled libsodium"
        )


_check_backend()
