"""One-time verification tokens: issue per (peer, slot), redeem once, anonymously.

Flow (DESIGN §7), on top of the POPRF of :mod:`anonml.crypto.poprf`:

1. Peer: ``request = request_token_batch(pinned_pk, slots)`` (or
   ``request_tokens(pinned_pk, slot)`` for one slot) — per slot a random
   32-byte nonce x and the blinded ``r·H(x)``; send the blinded elements in its
   signed request.
2. Aggregator: ``TokenIssuer.issue_batch(peer_id, [(slot, blinded), …])`` —
   evaluates each element with its slot-tweaked key, records (key, peer, slot)
   in an :class:`~anonml.crypto.spent.IssuanceLedger` (a second request is
   refused), and proves the whole request with one DLEQ proof.
3. Peer: ``tokens = finalize_tokens(request, response)`` — verifies the one
   proof against the pinned key and unblinds: ``y = F(sk, x, slot)`` (64 bytes).
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
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from anonml.crypto._util import _ensure_bytes, _i2osp, _random_bytes
from anonml.crypto.dleq import Proof
from anonml.crypto.exceptions import InvalidEncoding, InvalidToken
from anonml.crypto.group import Element, Scalar
from anonml.crypto.poprf import (
    TokenKey,
    TokenPublicKey,
    blind,
    evaluate,
    evaluate_blinded,
    finalize,
    prove_evaluation,
)
from anonml.crypto.spent import IssuanceLedger, SpentSet

if TYPE_CHECKING:
    import numpy as np

__all__ = [
    "SLOT_MAX_SIZE",
    "NONCE_SIZE",
    "MAC_SIZE",
    "TokenRequest",
    "TokenResponse",
    "Token",
    "Redemption",
    "request_tokens",
    "request_token_batch",
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
    """Client state between blinding and finalizing (keep private; send :meth:`message`).

    Element ``i`` is for ``slots[i]``; one request may cover several slots and
    several elements of a slot.
    """

    public_key: TokenPublicKey
    slots: tuple[bytes, ...]
    nonces: tuple[bytes, ...]
    blinds: tuple[Scalar, ...]
    blinded: tuple[Element, ...]

    def message(self) -> bytes:
        """The blinded elements, concatenated (32 bytes each): the body of a one-slot issuance request."""
        return b"".join(bytes(e) for e in self.blinded)

    def __repr__(self) -> str:
        return f"TokenRequest(slots={sorted(set(self.slots))!r}, count={len(self.nonces)})"


@dataclass(frozen=True, slots=True)
class TokenResponse:
    """The issuer's answer: evaluated elements and one DLEQ proof covering all of them.

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
    """Draw ``count`` fresh nonces for ``slot`` and blind them."""
    if not 1 <= count <= 0xFFFF:
        raise InvalidEncoding(f"count must be in [1, 65535], got {count}")
    return request_token_batch(public_key, [slot] * count, rng)


def request_token_batch(
    public_key: TokenPublicKey,
    slots: Sequence[bytes],
    rng: np.random.Generator | None = None,
) -> TokenRequest:
    """Draw one fresh nonce per entry of ``slots`` and blind it: one request, one proof to come."""
    slots = tuple(_check_slot(slot) for slot in slots)
    if not 1 <= len(slots) <= 0xFFFF:
        raise InvalidEncoding(f"a request covers 1 to 65535 elements, got {len(slots)}")
    nonces, blinds, blinded = [], [], []
    for _ in slots:
        nonce = _random_bytes(NONCE_SIZE, rng)
        r, b = blind(nonce, rng)
        nonces.append(nonce)
        blinds.append(r)
        blinded.append(b)
    return TokenRequest(public_key, slots, tuple(nonces), tuple(blinds), tuple(blinded))


def finalize_tokens(request: TokenRequest, response: TokenResponse | bytes) -> list[Token]:
    """Verify the issuer's one proof against the pinned key and unblind; :class:`InvalidProof` if forged."""
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
        request.slots,
        request.public_key,
    )
    key_id = request.public_key.key_id
    return [
        Token(key_id, slot, x, y) for slot, x, y in zip(request.slots, request.nonces, outputs, strict=True)
    ]


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
        """One slot's request (``message`` = its blinded elements concatenated); see :meth:`issue_batch`."""
        return self.issue_batch(peer_id, [(slot, message)], rng)

    def issue_batch(
        self,
        peer_id: bytes,
        requests: Sequence[tuple[bytes, bytes]],
        rng: np.random.Generator | None = None,
    ) -> TokenResponse:
        """Evaluate every ``(slot, blinded elements)`` of one request, record the slots, prove once.

        ``peer_id`` must come from an authenticated (signed) request; each slot
        appears once and carries 1..``max_tokens_per_slot`` elements of 32
        bytes. The response holds the evaluated elements in request order and
        one DLEQ proof covering all of them (:mod:`anonml.crypto.dleq`).

        Raises :class:`InvalidEncoding` for a malformed request,
        :class:`InvalidPoint` for a bad element, in both cases before anything
        is recorded, and :class:`AlreadyIssued` for a slot already issued to
        this peer (slots before it in the request stay recorded; a service
        runs the whole batch in one transaction).
        """
        if not requests:
            raise InvalidEncoding("an issuance request needs at least one slot")
        slots, infos, elements = [], [], []
        for slot, message in requests:
            slot = _check_slot(slot)
            message = _ensure_bytes(message, "issuance request", min_size=32)
            if len(message) % 32 or len(message) // 32 > self.max_tokens_per_slot:
                raise InvalidEncoding(
                    f"issuance request must hold 1..{self.max_tokens_per_slot} elements of 32 bytes "
                    f"per slot, got {len(message)} bytes for slot {slot!r}"
                )
            slots.append(slot)
            for i in range(0, len(message), 32):
                infos.append(slot)
                elements.append(message[i : i + 32])
        if len(set(slots)) != len(slots):
            raise InvalidEncoding("a slot appears twice in one issuance request")
        # Evaluation validates every element (before anything is recorded) ...
        blinded, evaluated = evaluate_blinded(self.key, elements, infos)
        for slot in slots:
            self.ledger.record(self.key.key_id, peer_id, slot)
        # ... and the proof is made only for a request the ledger accepted.
        return TokenResponse(tuple(evaluated), prove_evaluation(self.key, blinded, evaluated, infos, rng))


class TokenVerifier:
    """Server side of redemption: re-derive, check the MAC, spend atomically.

    The key keeps ``(sk + m(slot))^-1`` per slot (:meth:`TokenKey.tweak`), so a
    check costs one hash-to-group, one variable-base scalar multiplication and
    three hashes.
    """

    def __init__(self, key: TokenKey, spent: SpentSet) -> None:
        self.key = key
        self.spent = spent

    def check(self, redemption: Redemption, report: bytes) -> None:
        """Check the MAC only (no spending); :class:`InvalidToken` if it does not match."""
        report = _ensure_bytes(report, "report")
        y = evaluate(self.key, redemption.nonce, redemption.slot)
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
