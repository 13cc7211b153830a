"""Identities: Ed25519 signing keys, X25519 relay keys, fingerprints, per-round relay keys.

- :class:`Identity` (secret) = an Ed25519 signing key (who a peer or the
  aggregator is: registration, signed rosters) + a long-term X25519 key.
- :class:`PublicIdentity` = the two public keys; its :attr:`~PublicIdentity.fingerprint`
  is ``BLAKE2b-256(person="AnonMLv1-fpr"; ed25519 public key)``, so it stays the
  same when relay keys rotate. :attr:`~PublicIdentity.node_id` (its first 16
  bytes) names the node inside onion routing commands.
- :class:`RoundRelayKey` = a fresh X25519 key for one round's onion packets;
  :class:`RelayKeyCertificate` = its public half signed by the identity for
  that round, which is what goes into the roster. After the round the peer calls
  :meth:`RoundRelayKey.destroy` (and drops its replay cache).

Signatures are domain separated: the signed bytes are
``"AnonMLv1-sig" ‖ I2OSP(len(context), 1) ‖ context ‖ message``, so a signature
made for one purpose (a roster) is never valid for another (a relay key).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import TYPE_CHECKING

import nacl.bindings as _b
import nacl.exceptions
import nacl.public
import nacl.signing

from anonml.crypto import vrf
from anonml.crypto._util import _ensure_bytes, _i2osp, _random_bytes
from anonml.crypto.exceptions import InvalidEncoding, InvalidPacket, InvalidPoint, InvalidSignature

if TYPE_CHECKING:
    import numpy as np

__all__ = [
    "FINGERPRINT_SIZE",
    "NODE_ID_SIZE",
    "Identity",
    "PublicIdentity",
    "RoundRelayKey",
    "RelayKeyCertificate",
    "x25519",
]

FINGERPRINT_SIZE = 32
NODE_ID_SIZE = 16
_SIG_PREFIX = b"AnonMLv1-sig"
_RELAY_CONTEXT = b"round-relay-key"
_MAX_ROUND = 2**64 - 1


def _signed_bytes(message: bytes, context: bytes) -> bytes:
    context = _ensure_bytes(context, "context", min_size=1, max_size=255)
    return _SIG_PREFIX + _i2osp(len(context), 1) + context + _ensure_bytes(message, "message")


def _fingerprint(signing_public: bytes) -> bytes:
    return hashlib.blake2b(signing_public, digest_size=FINGERPRINT_SIZE, person=b"AnonMLv1-fpr").digest()


def _verify(signing_public: bytes, message: bytes, signature: bytes, context: bytes) -> bytes:
    signature = _ensure_bytes(signature, "signature", size=64)
    if not _b.crypto_core_ed25519_is_valid_point(signing_public):
        raise InvalidSignature("signer's Ed25519 public key is not a valid prime-order point")
    try:
        nacl.signing.VerifyKey(signing_public).verify(_signed_bytes(message, context), signature)
    except nacl.exceptions.BadSignatureError as exc:
        raise InvalidSignature(f"bad signature for context {context!r}") from exc
    return message


def _relay_body(identity: bytes, round_id: int, relay_key: bytes) -> bytes:
    return identity + _i2osp(round_id, 8) + relay_key


def _check_round(round_id: int) -> int:
    if not isinstance(round_id, int) or isinstance(round_id, bool) or not 0 <= round_id <= _MAX_ROUND:
        raise InvalidEncoding(f"round id must be an integer in [0, 2^64), got {round_id!r}")
    return round_id


def x25519(secret: bytes, public: bytes) -> bytes:
    """X25519 (RFC 7748) rejecting non-canonical, all-zero and small-order public values.

    libsodium already refuses small-order inputs and an all-zero result; we also
    refuse a set top bit or u >= 2^255 - 19 so every public value has exactly one
    encoding. Raises :class:`InvalidPoint`.
    """
    public = _ensure_bytes(public, "X25519 public key", size=32)
    u = int.from_bytes(public, "little")
    if u >= 2**255 - 19:
        raise InvalidPoint("X25519 public key is not canonical")
    try:
        return _b.crypto_scalarmult(secret, public)
    except nacl.exceptions.RuntimeError as exc:
        raise InvalidPoint("X25519 public key has small order (all-zero shared secret)") from exc


class PublicIdentity:
    """A node's public keys: Ed25519 (identity) and X25519 (long-term relay key).

    Wire form: ``ed25519 public (32) ‖ x25519 public (32)``.
    """

    SIZE = 64
    __slots__ = ("verify_key", "relay_key", "fingerprint")

    def __init__(self, signing_public: bytes, relay_public: bytes) -> None:
        signing_public = _ensure_bytes(signing_public, "Ed25519 public key", size=32)
        relay_public = _ensure_bytes(relay_public, "X25519 public key", size=32)
        # Ed25519 verification in libsodium rejects small-order and non-canonical keys;
        # reject them here already so a bad key never becomes an identity.
        if not _b.crypto_core_ed25519_is_valid_point(signing_public):
            raise InvalidPoint("Ed25519 public key is not a valid prime-order point")
        if int.from_bytes(relay_public, "little") >= 2**255 - 19:
            raise InvalidPoint("X25519 public key is not canonical")
        self.verify_key = nacl.signing.VerifyKey(signing_public)
        self.relay_key = relay_public
        self.fingerprint = _fingerprint(signing_public)

    @classmethod
    def from_bytes(cls, data: bytes) -> PublicIdentity:
        data = _ensure_bytes(data, "public identity", size=cls.SIZE)
        return cls(data[:32], data[32:])

    @property
    def node_id(self) -> bytes:
        """First 16 bytes of the fingerprint: the node's name in onion routing commands."""
        return self.fingerprint[:NODE_ID_SIZE]

    def fingerprint_text(self) -> str:
        """The fingerprint as eight groups of eight hex digits, for people to compare."""
        h = self.fingerprint.hex()
        return " ".join(h[i : i + 8] for i in range(0, len(h), 8))

    def verify(self, message: bytes, signature: bytes, *, context: bytes) -> bytes:
        """Return ``message`` if ``signature`` is this identity's over (context, message)."""
        return _verify(bytes(self.verify_key), message, signature, context)

    def __bytes__(self) -> bytes:
        return bytes(self.verify_key) + self.relay_key

    def __eq__(self, other: object) -> bool:
        return isinstance(other, PublicIdentity) and bytes(self) == bytes(other)

    def __hash__(self) -> int:
        return hash(self.fingerprint)

    def __repr__(self) -> str:
        return f"PublicIdentity({self.fingerprint.hex()[:16]}…)"


class Identity:
    """A node's secret keys: an Ed25519 signing seed and an X25519 secret (32 bytes each)."""

    SEED_SIZE = 32
    __slots__ = ("_signing", "_relay", "public")

    def __init__(self, signing_seed: bytes, relay_secret: bytes) -> None:
        self._signing = nacl.signing.SigningKey(_ensure_bytes(signing_seed, "signing seed", size=32))
        self._relay = nacl.public.PrivateKey(_ensure_bytes(relay_secret, "relay secret", size=32))
        self.public = PublicIdentity(bytes(self._signing.verify_key), bytes(self._relay.public_key))

    @classmethod
    def generate(cls, rng: np.random.Generator | None = None) -> Identity:
        """Fresh keys from the OS CSPRNG (or ``rng`` for reproducible simulations)."""
        return cls(_random_bytes(32, rng), _random_bytes(32, rng))

    @property
    def fingerprint(self) -> bytes:
        return self.public.fingerprint

    def sign(self, message: bytes, *, context: bytes) -> bytes:
        """Ed25519 signature (64 bytes) over ``"AnonMLv1-sig" ‖ len‖context ‖ message``."""
        return self._signing.sign(_signed_bytes(message, context)).signature

    def vrf_prove(self, alpha: bytes) -> bytes:
        """ECVRF proof (RFC 9381, :mod:`anonml.crypto.vrf`) over ``alpha`` with the Ed25519 key.

        Verified with :func:`anonml.crypto.vrf.verify` against the identity's
        Ed25519 public key (its first 32 bytes); one output per key and ``alpha``.
        """
        return vrf.prove(bytes(self._signing), alpha)

    def relay_exchange(self, public: bytes) -> bytes:
        """X25519 of the long-term relay secret with a peer's public value."""
        return x25519(bytes(self._relay), public)

    def open_sealed(self, sealed: bytes) -> bytes:
        """Open a libsodium sealed box (``crypto_box_seal_open``) addressed to this identity's X25519
        key — for the aggregator, its intake key (:func:`anonml.crypto.onion.open_payload`).

        :class:`InvalidPacket` if it does not open (altered, or sealed to another key).
        """
        sealed = _ensure_bytes(sealed, "sealed box")
        try:
            return nacl.public.SealedBox(self._relay).decrypt(sealed)
        except nacl.exceptions.CryptoError:
            raise InvalidPacket("sealed box does not open with this identity's X25519 key") from None

    def certify_relay_key(self, round_id: int, relay_public: bytes) -> RelayKeyCertificate:
        """Sign ``relay_public`` as this identity's relay key for ``round_id``."""
        round_id = _check_round(round_id)
        relay_public = _ensure_bytes(relay_public, "relay public key", size=32)
        identity = bytes(self._signing.verify_key)
        body = _relay_body(identity, round_id, relay_public)
        return RelayKeyCertificate(identity, round_id, relay_public, self.sign(body, context=_RELAY_CONTEXT))

    def new_round_relay_key(
        self, round_id: int, rng: np.random.Generator | None = None
    ) -> tuple[RoundRelayKey, RelayKeyCertificate]:
        """A fresh per-round X25519 key and its certificate for the roster."""
        key = RoundRelayKey.generate(round_id, rng)
        return key, self.certify_relay_key(round_id, key.public_key)

    def _secret_bytes(self) -> bytes:
        # For anonml.crypto.keystore only: the 64 bytes that are encrypted at rest.
        return bytes(self._signing) + bytes(self._relay)

    def __repr__(self) -> str:
        return f"Identity({self.fingerprint.hex()[:16]}…)"


@dataclass(frozen=True, slots=True)
class RelayKeyCertificate:
    """``(identity public key, round id, relay public key, signature)``; 136 bytes on the wire."""

    identity: bytes
    round_id: int
    relay_key: bytes
    signature: bytes

    SIZE = 32 + 8 + 32 + 64

    def __bytes__(self) -> bytes:
        return _relay_body(self.identity, self.round_id, self.relay_key) + self.signature

    @classmethod
    def from_bytes(cls, data: bytes) -> RelayKeyCertificate:
        data = _ensure_bytes(data, "relay key certificate", size=cls.SIZE)
        return cls(data[:32], int.from_bytes(data[32:40], "big"), data[40:72], data[72:])

    def verify(self, expected: PublicIdentity | None = None, *, round_id: int | None = None) -> bytes:
        """Return the relay public key if the signature holds (and matches ``expected`` /
        ``round_id`` when given); :class:`InvalidSignature` otherwise."""
        if expected is not None and _fingerprint(self.identity) != expected.fingerprint:
            raise InvalidSignature("relay key certificate is signed by another identity")
        if round_id is not None and round_id != self.round_id:
            raise InvalidSignature(f"relay key certificate is for round {self.round_id}, not {round_id}")
        body = _relay_body(self.identity, _check_round(self.round_id), self.relay_key)
        _verify(self.identity, body, self.signature, _RELAY_CONTEXT)
        if int.from_bytes(self.relay_key, "little") >= 2**255 - 19:
            raise InvalidPoint("certified relay key is not canonical")
        return self.relay_key

    @property
    def node_id(self) -> bytes:
        """Node id of the certifying identity (first 16 bytes of its fingerprint)."""
        return _fingerprint(self.identity)[:NODE_ID_SIZE]


class RoundRelayKey:
    """An X25519 key pair used for one round's onion packets, then destroyed."""

    __slots__ = ("round_id", "_secret", "public_key")

    def __init__(self, round_id: int, secret: bytes) -> None:
        self.round_id = _check_round(round_id)
        self._secret: bytes | None = _ensure_bytes(secret, "relay secret", size=32)
        self.public_key = _b.crypto_scalarmult_base(self._secret)

    @classmethod
    def generate(cls, round_id: int, rng: np.random.Generator | None = None) -> RoundRelayKey:
        return cls(round_id, _random_bytes(32, rng))

    def exchange(self, public: bytes) -> bytes:
        """X25519(secret, public) with the checks of :func:`x25519`."""
        if self._secret is None:
            raise InvalidEncoding(f"relay key of round {self.round_id} was destroyed")
        return x25519(self._secret, public)

    def destroy(self) -> None:
        """Forget the secret. Python cannot wipe the bytes object itself; dropping the only
        reference is the best it can do, so keep no other copy."""
        self._secret = None

    @property
    def destroyed(self) -> bool:
        return self._secret is None

    def __repr__(self) -> str:
        return f"RoundRelayKey(round={self.round_id}, public={self.public_key.hex()[:16]}…)"
