"""Typed failures of :mod:`anonml.crypto`, in the PyNaCl style.

Every class derives from :class:`anonml.errors.CryptoError` (or from
:class:`anonml.errors.InvalidToken` for token checks), and those describing
bad input also derive from the builtin :class:`ValueError` / :class:`TypeError`,
so ``except ValueError`` and ``except CryptoError`` both catch them (as
``nacl.exceptions.ValueError`` does). Verifiers return the value or raise one of
these; they never return ``False``.
"""

from __future__ import annotations

from anonml.errors import CryptoError, InvalidToken

__all__ = [
    "CryptoError",
    "InvalidToken",
    "CryptoTypeError",
    "InvalidEncoding",
    "InvalidPoint",
    "InvalidScalar",
    "InvalidProof",
    "InvalidSignature",
    "TokenSpent",
    "AlreadyIssued",
    "InvalidPacket",
    "ReplayedPacket",
    "KeyFileError",
    "WrongPassphrase",
]


class CryptoTypeError(CryptoError, TypeError):
    """An argument has the wrong Python type (e.g. ``str`` where ``bytes`` is needed)."""


class InvalidEncoding(CryptoError, ValueError):
    """A byte string has the wrong length or layout for what it should encode."""


class InvalidPoint(InvalidEncoding):
    """A group element is non-canonical, off the curve, of small order, outside the
    prime-order subgroup, or the identity."""


class InvalidScalar(InvalidEncoding):
    """A scalar is not the canonical encoding of an integer in [1, L)."""


class InvalidProof(CryptoError):
    """A DLEQ proof does not verify: the server did not use the pinned key."""


class InvalidSignature(CryptoError):
    """An Ed25519 signature (identity, relay-key certificate) does not verify."""


class TokenSpent(InvalidToken):
    """The token (key id, slot, nonce) was already redeemed."""


class AlreadyIssued(CryptoError):
    """The issuer already evaluated a request of this peer for this slot."""


class InvalidPacket(CryptoError, ValueError):
    """An onion packet is malformed, was tampered with, or is not for this relay."""


class ReplayedPacket(InvalidPacket):
    """An onion packet with an authentic MAC was already processed under this round key."""


class KeyFileError(CryptoError):
    """A key file cannot be read, is malformed, or has unsafe permissions."""


class WrongPassphrase(KeyFileError):
    """The passphrase does not decrypt the key file (or the file was altered)."""
