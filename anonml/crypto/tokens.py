"""One-time verification tokens: issue per (peer, slot), redeem once, anonymously.

Flow (DESIGN §7), on top of the POPRF of :mod:`anonml.crypto.poprf`:

1. Peer: ``request = request_tokens(pinned_pk, slot)`` — random 32-byte nonce
   x, blinded ``r·H(x)``; send ``request.message()`` in its signed request.
2. Aggregator: ``TokenIssuer.issue(peer_id, slot, message)`` — records
   (key, peer, slot) in an :class:`~anonml.crypto.spent.IssuanceLedger` (a
   second request is refused), evaluates with the slot-tweaked key, proves it.
3. Peer: ``token = finalize_tokens(request, response)[0]`` — verifies the proof
   against the pinned key and unblinds: ``y = F(sk, x, slot)`` (64 bytes).
4. Peer, anonymously through the onion route:
   ``token.redeem(report) = (slot, x, MAC_y(key id ‖ slot ‖ x ‖ report))``.
5. Aggregator: ``TokenVerifier.redeem(redemption, report)`` re-derives y from
   (x, slot), checks the MAC (constant time), then records (key id, slot, x)
   as spent atomically. Only after both does it return the report.

The MAC is keyed BLAKE2b-256 (key = y, personal ``AnonMLv1-redeem``), with the
slot length-prefixed so (slot, report) pairs cannot be re-split.
"""

from __future__ import annotations

import hashlib
import hmac
from dataclasses import dataclass

import numpy as np

from anonml.crypto._util import _ensure_bytes, _i2osp, _random_bytes
from anonml.crypto.dleq import Proof
from anonml.crypto.exceptions import InvalidEncoding, InvalidToken
from anonml.crypto.group import Element, Scalar
from anonml.crypto.poprf import (
    TokenKey,
    TokenPublicKey,
    blind,
    blind_evaluate,
    evaluate,
    finalize,
)
from anonml.crypto.spent import IssuanceLedger, SpentSet

__all__ = [
    "SLOT_MAX_SIZE",
    "NONCE_SIZE",
    "MAC_SIZE",
    "TokenRequest",
    "TokenResponse",
    "Token",
    "Redemption",
    "request_tokens",
    "finalize_tokens",
    "redemption_mac",
    "TokenIssuer",
    "TokenVerifier",
]

SLOT_MAX_SIZE = 64
NONCE_SIZE = 32
MAC_SIZE = 32


def _check_slot(slot: bytes) -> bytes:
    return _ensure_bytes(slot, "slot", min_size=1, max_size=SLOT_MAX_SIZE)


def redemption_mac(output: bytes, key_id: bytes, slot: bytes, nonce: bytes, report: bytes) -> bytes:
    """The redemption MAC.

    ``BLAKE2b-256(key=y, person="AnonMLv1-redeem"; key_id ‖ I2OSP(len slot, 1) ‖ slot ‖ nonce ‖ report)``
    """
    mac = hashlib.blake2b(key=output, digest_size=MAC_SIZE, person=b"AnonMLv1-redeem")
    mac.update(key_id + _i2osp(len(slot), 1) + slot + nonce)
    mac.update(report)
    return mac.digest()


@dataclass(frozen=True, slots=True)
class Redemption:
    """What travels with a report: ``(slot, nonce, MAC)``.

    Wire form: ``I2OSP(len(slot), 1) ‖ slot ‖ nonce (32) ‖ mac (32)``.
    """

    slot: bytes
    nonce: bytes
    mac: bytes

    def __post_init__(self) -> None:
        _check_slot(self.slot)
        _ensure_bytes(self.nonce, "nonce", size=NONCE_SIZE)
        _ensure_bytes(self.mac, "mac", size=MAC_SIZE)

    def __bytes__(self) -> bytes:
        return _i2osp(len(self.slot), 1) + self.slot + self.nonce + self.mac

    @classmethod
    def from_bytes(cls, data: bytes) -> Redemption:
        data = _ensure_bytes(data, "redemption", min_size=1)
        n = data[0]
        if len(data) != 1 + n + NONCE_SIZE + MAC_SIZE:
            raise InvalidEncoding(f"redemption of {len(data)} bytes does not match slot length {n}")
        body = data[1:]
        return cls(body[:n], body[n : n + NONCE_SIZE], body[n + NONCE_SIZE :])


@dataclass(frozen=True, slots=True)
class Token:
    """A finalized token: the PRF output ``y`` for (nonce, slot) under ``key_id``. Secret."""

    key_id: bytes
    slot: bytes
    nonce: bytes
    output: bytes

    def redeem(self, report: bytes) -> Redemption:
        """Bind ``report`` to this token: ``(slot, nonce, MAC_y(...))``."""
        report = _ensure_bytes(report, "report")
        return Redemption(
            self.slot, self.nonce, redemption_mac(self.output, self.key_id, self.slot, self.nonce, report)
        )

    def __repr__(self) -> str:
        return f"Token(slot={self.slot!r}, key_id={self.key_id.hex()[:16]}…)"


@dataclass(frozen=True, slots=True)
class TokenRequest:
    """Client state between blinding and finalizing (keep private; send :meth:`message`)."""

    public_key: TokenPublicKey
    slot: bytes
    nonces: tuple[bytes, ...]
    blinds: tuple[Scalar, ...]
    blinded: tuple[Element, ...]
    tweaked_key: Element

    def message(self) -> bytes:
        """The blinded elements, concatenated (32 bytes each): the body of the issuance request."""
        return b"".join(bytes(e) for e in self.blinded)

    def __repr__(self) -> str:
        return f"TokenRequest(slot={self.slot!r}, count={len(self.nonces)})"


@dataclass(frozen=True, slots=True)
class TokenResponse:
    """The issuer's answer: evaluated elements and one batched DLEQ proof.

    Wire form: ``Z_1 ‖ … ‖ Z_m ‖ c ‖ s`` (32·m + 64 bytes).
    """

    evaluated: tuple[Element, ...]
    proof: Proof

    def __bytes__(self) -> bytes:
        return b"".join(bytes(e) for e in self.evaluated) + bytes(self.proof)

    @classmethod
    def from_bytes(cls, data: bytes, count: int) -> TokenResponse:
        """Decode and validate every element and scalar (typed errors, never a crash)."""
        data = _ensure_bytes(data, "token response", size=32 * count + Proof.SIZE)
        elements = tuple(
            Element.from_bytes(data[32 * i : 32 * i + 32], name=f"evaluated element {i}")
            for i in range(count)
        )
        return cls(elements, Proof.from_bytes(data[32 * count :]))


def request_tokens(
    public_key: TokenPublicKey,
    slot: bytes,
    count: int = 1,
    rng: np.random.Generator | None = None,
) -> TokenRequest:
    """Draw ``count`` fresh nonces for ``slot`` and blind them against the pinned key."""
    slot = _check_slot(slot)
    if not 1 <= count <= 0xFFFF:
        raise InvalidEncoding(f"count must be in [1, 65535], got {count}")
    nonces, blinds, blinded = [], [], []
    tweaked = None
    for _ in range(count):
        nonce = _random_bytes(NONCE_SIZE, rng)
        r, b, tweaked = blind(nonce, slot, public_key, rng)
        nonces.append(nonce)
        blinds.append(r)
        blinded.append(b)
    assert tweaked is not None  # count >= 1
    return TokenRequest(public_key, slot, tuple(nonces), tuple(blinds), tuple(blinded), tweaked)


def finalize_tokens(request: TokenRequest, response: TokenResponse | bytes) -> list[Token]:
    """Verify the issuer's proof against the pinned key and unblind; :class:`InvalidProof` if forged."""
    if isinstance(response, bytes | bytearray | memoryview):
        response = TokenResponse.from_bytes(bytes(response), len(request.nonces))
    if len(response.evaluated) != len(request.nonces):
        raise InvalidEncoding(
            f"response has {len(response.evaluated)} elements for {len(request.nonces)} requested"
        )
    outputs = finalize(
        request.nonces,
        request.blinds,
        response.evaluated,
        request.blinded,
        response.proof,
        request.slot,
        request.tweaked_key,
    )
    key_id = request.public_key.key_id
    return [Token(key_id, request.slot, x, y) for x, y in zip(request.nonces, outputs, strict=True)]


class TokenIssuer:
    """Server side of issuance: at most one evaluation per (peer, slot) under this key.

    Parameters
    ----------
    key : TokenKey
        The secret key whose public half is pinned in the signed roster.
    ledger : IssuanceLedger
        Records (key id, peer id, slot); shared by every worker of the service.
    max_tokens_per_slot : int, default=1
        How many blinded elements one request may carry.
    """

    def __init__(self, key: TokenKey, ledger: IssuanceLedger, *, max_tokens_per_slot: int = 1) -> None:
        self.key = key
        self.ledger = ledger
        self.max_tokens_per_slot = max_tokens_per_slot

    def issue(
        self,
        peer_id: bytes,
        slot: bytes,
        message: bytes,
        rng: np.random.Generator | None = None,
    ) -> TokenResponse:
        """Validate the blinded elements, record the issuance, evaluate and prove.

        ``peer_id`` must come from an authenticated (signed) request. Raises
        :class:`InvalidPoint` for a bad element (nothing recorded) and
        :class:`AlreadyIssued` for a second request for the slot.
        """
        slot = _check_slot(slot)
        message = _ensure_bytes(message, "issuance request", min_size=32)
        if len(message) % 32 or len(message) // 32 > self.max_tokens_per_slot:
            raise InvalidEncoding(
                f"issuance request must hold 1..{self.max_tokens_per_slot} elements of 32 bytes, "
                f"got {len(message)} bytes"
            )
        blinded = [
            Element.from_bytes(message[i : i + 32], name=f"blinded element {i // 32}")
            for i in range(0, len(message), 32)
        ]
        self.ledger.record(self.key.key_id, peer_id, slot)
        evaluated, proof = blind_evaluate(self.key, blinded, slot, rng)
        return TokenResponse(tuple(evaluated), proof)


class TokenVerifier:
    """Server side of redemption: re-derive, check the MAC, spend atomically.

    Caches ``(sk + m(slot))^-1`` per slot, so a check costs one hash-to-group,
    one variable-base scalar multiplication and three hashes.
    """

    def __init__(self, key: TokenKey, spent: SpentSet) -> None:
        self.key = key
        self.spent = spent
        self._inverse: dict[bytes, Scalar] = {}

    def _tweaked_inverse(self, slot: bytes) -> Scalar:
        inv = self._inverse.get(slot)
        if inv is None:
            inv = self.key.tweaked_inverse(slot)
            if len(self._inverse) < 4096:  # slots per round are few; bound memory anyway
                self._inverse[slot] = inv
        return inv

    def check(self, redemption: Redemption, report: bytes) -> None:
        """Check the MAC only (no spending); :class:`InvalidToken` if it does not match."""
        report = _ensure_bytes(report, "report")
        y = evaluate(
            self.key,
            redemption.nonce,
            redemption.slot,
            tweaked_inverse=self._tweaked_inverse(redemption.slot),
        )
        expected = redemption_mac(y, self.key.key_id, redemption.slot, redemption.nonce, report)
        if not hmac.compare_digest(expected, redemption.mac):
            raise InvalidToken("token MAC does not verify (forged, other slot, other key, or altered report)")

    def redeem(self, redemption: Redemption, report: bytes) -> bytes:
        """Return ``report`` if the token is authentic and unspent, recording it as spent.

        Raises :class:`InvalidToken` (bad MAC) or :class:`TokenSpent` (already
        redeemed, possibly by a concurrent call: exactly one of them succeeds).
        """
        self.check(redemption, report)
        self.spent.spend(self.key.key_id, redemption.slot, redemption.nonce)
        return report
