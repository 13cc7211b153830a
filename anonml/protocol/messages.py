"""Wire encoding every AnonML message shares: length-checked base64 fields, the message base
class and signatures under a per-kind context (:func:`sign_message` / :func:`verify_message`).

The protocol as a whole: docs/protocol.md.
"""

from __future__ import annotations

import base64
import binascii
import json
from typing import Annotated, Any, TypeVar

from pydantic import (
    BaseModel,
    ConfigDict,
    PlainSerializer,
    PlainValidator,
)

from anonml.crypto import (
    Identity,
    PublicIdentity,
)

__all__ = [
    "PROTOCOL_VERSION",
    "B64",
    "IdentityBytes",
    "SignatureBytes",
    "CertificateBytes",
    "Slot",
    "WireMessage",
    "signing_context",
    "signing_bytes",
    "sign_message",
    "verify_message",
]

PROTOCOL_VERSION = 1


def _b64_type(size: int | None = None, max_size: int | None = None) -> Any:
    def validate(value: object) -> bytes:
        if isinstance(value, bytes | bytearray):
            raw = bytes(value)
        elif isinstance(value, str):
            try:
                raw = base64.b64decode(value.encode("ascii"), validate=True)
            except (binascii.Error, UnicodeEncodeError):
                raise ValueError("not valid base64") from None
        else:
            raise ValueError(f"expected base64 text, got {type(value).__name__}")
        if size is not None and len(raw) != size:
            raise ValueError(f"expected {size} bytes, got {len(raw)}")
        if max_size is not None and len(raw) > max_size:
            raise ValueError(f"at most {max_size} bytes, got {len(raw)}")
        return raw

    return Annotated[
        bytes,
        PlainValidator(validate),
        PlainSerializer(lambda b: base64.b64encode(b).decode("ascii"), return_type=str),
    ]


def B64(size: int | None = None, *, max_size: int | None = None) -> Any:  # noqa: N802 - a type factory
    """A bytes field carried as base64, of exactly ``size`` or at most ``max_size`` bytes."""
    return _b64_type(size, max_size)


IdentityBytes = B64(64)  # PublicIdentity: Ed25519 public key ‖ X25519 public key
SignatureBytes = B64(64)
CertificateBytes = B64(136)  # RelayKeyCertificate
Slot = B64(max_size=64)


class WireMessage(BaseModel):
    """Every wire message: immutable, and no field beyond those its model declares."""

    model_config = ConfigDict(frozen=True, extra="forbid")


def signing_context(message: BaseModel) -> bytes:
    """The signature context of a message kind: ``b"anonml/v1/" + class name``."""
    return b"anonml/v1/" + type(message).__name__.encode("ascii")


def signing_bytes(message: BaseModel) -> bytes:
    """Canonical bytes of ``message`` without its ``signature`` field (what gets signed)."""
    body = message.model_dump(mode="json", exclude={"signature"})
    return json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=True).encode("ascii")


_M = TypeVar("_M", bound=BaseModel)
_UNSIGNED = bytes(64)


def sign_message(message: _M, identity: Identity) -> _M:
    """A copy of ``message`` whose ``signature`` is ``identity``'s over :func:`signing_bytes`.

    Build the message with any 64-byte placeholder signature (e.g. ``bytes(64)``);
    the signature covers every other field, under :func:`signing_context`.
    """
    signature = identity.sign(signing_bytes(message), context=signing_context(message))
    return message.model_copy(update={"signature": signature})


def verify_message(message: _M, signer: bytes | PublicIdentity) -> _M:
    """Return ``message`` if its ``signature`` is ``signer``'s; :class:`InvalidSignature` otherwise.

    ``signer`` is a :class:`~anonml.crypto.PublicIdentity` or its 64-byte wire form.
    """
    public = signer if isinstance(signer, PublicIdentity) else PublicIdentity.from_bytes(bytes(signer))
    public.verify(signing_bytes(message), message.signature, context=signing_context(message))  # type: ignore[attr-defined]
    return message
