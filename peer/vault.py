"""One identity's secrets at rest: what a restarted peer needs and nobody else may read.

The peer's state database keeps, between a crash and a restart, the round
relay key (until ``t_r``), the tokens (redeemable secrets), the packets it
built and the packets it holds as a relay. Each is sealed with PyNaCl's
``SecretBox`` (XSalsa20-Poly1305, a fresh random nonce per value) under a key
derived from the identity: ``BLAKE2b-256(Ed25519-sign("peer state at rest"))``
with its own signature context. Ed25519 signatures are deterministic
(RFC 8032 §5.1.6), so the same identity derives the same key after a
restart, and nobody without the identity's signing key can derive it. A value
sealed by another identity, or altered on disk, fails authentication on
opening (:class:`VaultError`).
"""

from __future__ import annotations

import nacl.encoding
import nacl.exceptions
import nacl.hash
import nacl.secret
import nacl.utils

from anonml.crypto import Identity
from anonml.errors import AnonMLError

__all__ = ["Vault", "VaultError"]

_CONTEXT = b"anonml-peer-state-at-rest"
_MESSAGE = b"peer state at rest, v1"


class VaultError(AnonMLError):
    """A sealed value does not open under this identity (another identity's, or altered)."""


class Vault:
    """Seal and open byte strings under the key derived from ``identity`` (module docstring)."""

    __slots__ = ("_box",)

    def __init__(self, identity: Identity) -> None:
        seed = identity.sign(_MESSAGE, context=_CONTEXT)
        key = nacl.hash.blake2b(seed, digest_size=32, encoder=nacl.encoding.RawEncoder)
        self._box = nacl.secret.SecretBox(key)

    def seal(self, data: bytes) -> bytes:
        return bytes(self._box.encrypt(data, nacl.utils.random(nacl.secret.SecretBox.NONCE_SIZE)))

    def open(self, sealed: bytes) -> bytes:
        try:
            return bytes(self._box.decrypt(sealed))
        except nacl.exceptions.CryptoError:
            raise VaultError("a sealed peer secret does not open under this identity") from None
