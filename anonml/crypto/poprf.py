"""A partially-oblivious PRF over edwards25519 in the shape of RFC 9497 (POPRF mode).

The server holds ``sk``; its public key ``pk = sk·B`` is pinned in the signed
roster. For a private input x (a token nonce) and a public ``info`` (the report
slot) the PRF is

    F(sk, x, info) = SHA-512(len‖x ‖ len‖info ‖ len‖u(N) ‖ "Finalize"),
    N = (sk + m)^-1 · HashToGroup(x),   m = HashToScalar("Info" ‖ len‖info),

with u(N) the curve25519 u-coordinate of N.

The client learns F without the server learning x; one DLEQ proof per request
(:mod:`anonml.crypto.dleq`) shows that every evaluated element of the request
was made with ``sk + m`` of its own slot, for the ``sk`` behind the pinned
``pk``, so the server cannot tag a client with a private key. Because t depends
on the slot, an evaluation for one slot is useless for another.

Suite: ``edwards25519-SHA512-AnonMLv1`` (Ne = Ns = 32, Nh = 64), context string
``"OPRFV1-" ‖ 0x02 ‖ "-" ‖ suite id``; HashToGroup and HashToScalar as in
:mod:`anonml.crypto.group`. This suite is ours — RFC 9497 registers no
edwards25519 suite — so its outputs match no published test vectors.

Deviation from RFC 9497 §3.3.3: Finalize and Evaluate hash ``u(N)`` (32 bytes)
instead of SerializeElement(N). ``u`` identifies N up to sign, which keeps the
output as unpredictable as N (guessing u(N) guesses N with probability 1/2),
and lets both sides compute it with one X25519 ladder
(:func:`~anonml.crypto.group.montgomery_mul`) instead of libsodium's Edwards
multiplication, which costs two ladders because it re-checks subgroup
membership on every call. Only public points (H(x), the evaluated element) are
converted to Montgomery form, so no secret-dependent value meets the
variable-time conversion; the secret scalars (the client's r^-1, the server's
t^-1) become ladder scalars by libsodium's constant-time scalar arithmetic.

References
----------
RFC 9497 §3.2.1 (DeriveKeyPair), §3.3.3 (POPRF protocol), §2.2 (DLEQ).
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import TYPE_CHECKING

from anonml.crypto._util import _ensure_bytes, _i2osp, _length_prefixed
from anonml.crypto.dleq import Proof, generate_proof, verify_proof
from anonml.crypto.exceptions import CryptoError, InvalidEncoding
from anonml.crypto.group import (
    SUITE_ID,
    Element,
    Scalar,
    hash_to_group,
    hash_to_scalar,
    montgomery_mul,
    random_scalar,
)

if TYPE_CHECKING:
    import numpy as np

__all__ = [
    "MODE_POPRF",
    "CONTEXT_STRING",
    "OUTPUT_SIZE",
    "TokenKey",
    "TokenPublicKey",
    "blind",
    "blind_evaluate",
    "evaluate_blinded",
    "prove_evaluation",
    "finalize",
    "evaluate",
]

MODE_POPRF = 0x02
CONTEXT_STRING = b"OPRFV1-" + _i2osp(MODE_POPRF, 1) + b"-" + SUITE_ID
OUTPUT_SIZE = 64
_DST_GROUP = b"HashToGroup-" + CONTEXT_STRING
_DST_SCALAR = b"HashToScalar-" + CONTEXT_STRING
_DST_DERIVE = b"DeriveKeyPair" + CONTEXT_STRING
_MAX_LEN = 0xFFFF


def _check_input(value: bytes, name: str) -> bytes:
    return _ensure_bytes(value, name, max_size=_MAX_LEN)


def _tweak(info: bytes) -> Scalar:
    """m = HashToScalar("Info" ‖ I2OSP(len(info), 2) ‖ info)."""
    return hash_to_scalar(b"Info" + _length_prefixed(info), _DST_SCALAR)


def _input_element(x: bytes) -> Element:
    # hash_to_group raises InvalidPoint for the identity, RFC 9497's InvalidInputError.
    return hash_to_group(x, _DST_GROUP)


def _finalize_hash(x: bytes, info: bytes, unblinded_u: bytes) -> bytes:
    return hashlib.sha512(_length_prefixed(x, info, unblinded_u) + b"Finalize").digest()


class TokenPublicKey:
    """The server's public key ``pk = sk·B``, validated on construction.

    ``key_id`` = BLAKE2b-256 (personal ``AnonMLv1-keyid``) of the encoding: the
    stable name under which tokens are spent and the roster pins the key.
    """

    SIZE = 32
    __slots__ = ("element", "key_id")

    def __init__(self, encoded: bytes) -> None:
        self.element = Element.from_bytes(encoded, name="token public key")
        self.key_id = hashlib.blake2b(bytes(self.element), digest_size=32, person=b"AnonMLv1-keyid").digest()

    def __bytes__(self) -> bytes:
        return bytes(self.element)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, TokenPublicKey) and self.element == other.element

    def __hash__(self) -> int:
        return hash(self.key_id)

    def __repr__(self) -> str:
        return f"TokenPublicKey(key_id={self.key_id.hex()[:16]}…)"


class TokenKey:
    """The server's secret POPRF key ``sk`` (a non-zero scalar below L)."""

    SIZE = 32
    TWEAK_CACHE_SIZE = 4096
    __slots__ = ("_sk", "public_key", "_tweaks")

    def __init__(self, secret: bytes) -> None:
        self._sk = Scalar.from_bytes(secret, name="token secret key")
        self.public_key = TokenPublicKey(bytes(Element.base_mul(self._sk)))
        self._tweaks: dict[bytes, tuple[Scalar, Scalar]] = {}

    @classmethod
    def generate(cls, rng: np.random.Generator | None = None) -> TokenKey:
        """A fresh key: RandomScalar (64 random bytes reduced mod L, never 0)."""
        return cls(bytes(random_scalar(rng)))

    @classmethod
    def derive(cls, seed: bytes, info: bytes = b"") -> TokenKey:
        """DeriveKeyPair (RFC 9497 §3.2.1): HashToScalar(seed ‖ len‖info ‖ counter) until non-zero."""
        seed = _ensure_bytes(seed, "seed", size=32)
        derive_input = seed + _length_prefixed(_check_input(info, "info"))
        for counter in range(256):
            sk = hash_to_scalar(derive_input + _i2osp(counter, 1), _DST_DERIVE)
            if not sk.is_zero():
                return cls(bytes(sk))
        raise CryptoError("DeriveKeyPair failed 256 times")  # probability 2^-64000

    @property
    def key_id(self) -> bytes:
        return self.public_key.key_id

    def tweak(self, info: bytes) -> tuple[Scalar, Scalar]:
        """``(m, (sk + m)^-1)`` with ``m = m(info)``.

        Raises :class:`InvalidScalar` if sk + m = 0 (RFC 9497 InverseError).
        Precomputed once per ``info`` and kept (up to :attr:`TWEAK_CACHE_SIZE`
        slots; a round has few): every issuance and redemption of a slot
        reuses them, saving a hash to scalar and a scalar inversion each.
        """
        info = _check_input(info, "info")
        cached = self._tweaks.get(info)
        if cached is None:
            m = _tweak(info)
            cached = (m, (self._sk + m).invert())
            if len(self._tweaks) < self.TWEAK_CACHE_SIZE:
                self._tweaks[info] = cached
        return cached

    def tweaked_inverse(self, info: bytes) -> Scalar:
        """``(sk + m(info))^-1`` (see :meth:`tweak`)."""
        return self.tweak(info)[1]

    def __bytes__(self) -> bytes:
        return bytes(self._sk)

    def __repr__(self) -> str:
        return f"TokenKey({self.public_key!r})"


def blind(x: bytes, rng: np.random.Generator | None = None) -> tuple[Scalar, Element]:
    """Client Blind (RFC 9497 §3.3.3): returns ``(r, r·HashToGroup(x))``.

    Unlike the RFC, the client needs no tweaked key ``m·B + pk``: the proof of
    :mod:`anonml.crypto.dleq` is checked against the pinned ``pk`` itself.
    """
    x = _check_input(x, "input")
    r = random_scalar(rng)
    return r, _input_element(x) * r


def _tweaks(infos: Sequence[bytes]) -> list[Scalar]:
    """``m(info)`` per element, each distinct ``info`` hashed once."""
    seen: dict[bytes, Scalar] = {}
    for info in infos:
        if info not in seen:
            seen[info] = _tweak(_check_input(info, "info"))
    return [seen[info] for info in infos]


def evaluate_blinded(
    key: TokenKey, blinded: Sequence[bytes | Element], infos: Sequence[bytes]
) -> tuple[list[Element], list[Element]]:
    """Server BlindEvaluate of each element: ``Z_i = (sk + m(info_i))^-1·C_i``.

    ``blinded`` holds untrusted encodings (or elements); each is validated by
    the multiplication that evaluates it (:meth:`Element.from_bytes_times`,
    :class:`InvalidPoint` naming ``blinded element i``). The per-``info``
    scalars are precomputed once per key (:meth:`TokenKey.tweak`), so an
    element costs one validated multiplication. Returns the validated blinded
    elements and the evaluated ones.
    """
    if len(blinded) != len(infos):
        raise InvalidEncoding(f"{len(blinded)} blinded elements for {len(infos)} infos")
    checked, evaluated = [], []
    for i, (C, info) in enumerate(zip(blinded, infos, strict=True)):
        C, Z = Element.from_bytes_times(bytes(C), key.tweaked_inverse(info), name=f"blinded element {i}")
        checked.append(C)
        evaluated.append(Z)
    return checked, evaluated


def prove_evaluation(
    key: TokenKey,
    blinded: Sequence[Element],
    evaluated: Sequence[Element],
    infos: Sequence[bytes],
    rng: np.random.Generator | None = None,
) -> Proof:
    """One DLEQ proof that every ``Z_i`` is ``C_i`` evaluated with the pinned key and ``info_i``'s tweak
    (one X25519 ladder per element and one fixed-base multiplication per request)."""
    tweaks = [key.tweak(info)[0] for info in infos]
    return generate_proof(
        key._sk, key.public_key.element, tweaks, blinded, evaluated, context=CONTEXT_STRING, rng=rng
    )


def blind_evaluate(
    key: TokenKey,
    blinded: Sequence[bytes | Element],
    infos: Sequence[bytes],
    rng: np.random.Generator | None = None,
) -> tuple[list[Element], Proof]:
    """Server BlindEvaluate, batched over slots: :func:`evaluate_blinded`, then :func:`prove_evaluation`."""
    checked, evaluated = evaluate_blinded(key, blinded, infos)
    return evaluated, prove_evaluation(key, checked, evaluated, infos, rng)


def finalize(
    inputs: Sequence[bytes],
    blinds: Sequence[Scalar],
    evaluated: Sequence[Element],
    blinded: Sequence[Element],
    proof: Proof,
    infos: Sequence[bytes],
    public_key: TokenPublicKey,
) -> list[bytes]:
    """Client Finalize: verify the request's one proof against the pinned key, then
    ``u(N_i) = u(r_i^-1 · Z_i)`` and hash. Raises :class:`InvalidProof` on a bad proof."""
    if not len(inputs) == len(blinds) == len(evaluated) == len(blinded) == len(infos):
        raise InvalidEncoding(
            "finalize needs one blind, one blinded element, one evaluated element and one info per input"
        )
    verify_proof(
        public_key.element, _tweaks(infos), list(blinded), list(evaluated), proof, context=CONTEXT_STRING
    )
    return [
        _finalize_hash(x, info, montgomery_mul(r.invert(), Z))
        for x, r, Z, info in zip(inputs, blinds, evaluated, infos, strict=True)
    ]


def evaluate(key: TokenKey, x: bytes, info: bytes, *, tweaked_inverse: Scalar | None = None) -> bytes:
    """Server Evaluate: the PRF output computed directly, ``H(x, info, u(t^-1·HashToGroup(x)))``.

    ``tweaked_inverse`` lets a verifier reuse ``t^-1`` across all redemptions of a slot.
    """
    x = _check_input(x, "input")
    info = _check_input(info, "info")
    t_inv = tweaked_inverse if tweaked_inverse is not None else key.tweaked_inverse(info)
    return _finalize_hash(x, info, montgomery_mul(t_inv, _input_element(x)))
