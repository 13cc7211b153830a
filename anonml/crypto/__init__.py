"""Anonymity primitives: identities, one-time verification tokens, onion packets.

- :mod:`~anonml.crypto.identity`, :mod:`~anonml.crypto.keystore`: Ed25519 identities,
  X25519 relay keys, signed per-round relay keys, keys at rest.
- :mod:`~anonml.crypto.group`, :mod:`~anonml.crypto.dleq`, :mod:`~anonml.crypto.poprf`:
  the edwards25519 POPRF of RFC 9497's shape (suite ``edwards25519-SHA512-AnonMLv1``).
- :mod:`~anonml.crypto.tokens`, :mod:`~anonml.crypto.spent`: issue one token per
  (peer, slot), redeem each once.
- :mod:`~anonml.crypto.onion`: AnonSphinx-v2 packets (1,280 bytes at every hop; payloads
  sealed to the aggregator).
- :mod:`~anonml.crypto.vrf`: ECVRF-EDWARDS25519-SHA512-TAI (RFC 9381), the witnesses' beacon shares.
- :class:`~anonml.schedule.WindowSchedule` (send and release windows) is re-exported here
  for the relay's callers; it holds no cryptography and lives in :mod:`anonml.schedule`.
"""

from anonml.crypto import exceptions, onion, spent, tokens, vrf
from anonml.crypto.dleq import Proof
from anonml.crypto.exceptions import *  # noqa: F403 - the module's __all__, listed once there
from anonml.crypto.group import SUITE_ID, Element, Scalar, expand_message_xmd, hash_to_group, hash_to_scalar
from anonml.crypto.identity import (
    FINGERPRINT_SIZE,
    NODE_ID_SIZE,
    Identity,
    PublicIdentity,
    RelayKeyCertificate,
    RoundRelayKey,
)
from anonml.crypto.keystore import load_identity, load_or_create_identity, save_identity
from anonml.crypto.onion import *  # noqa: F403 - the module's __all__, listed once there
from anonml.crypto.poprf import TokenKey, TokenPublicKey
from anonml.crypto.spent import *  # noqa: F403 - the module's __all__, listed once there
from anonml.crypto.tokens import *  # noqa: F403 - the module's __all__, listed once there
from anonml.schedule import WindowSchedule, release_time, send_time

__all__ = [
    # identities and keys at rest
    "Identity",
    "PublicIdentity",
    "RoundRelayKey",
    "RelayKeyCertificate",
    "FINGERPRINT_SIZE",
    "NODE_ID_SIZE",
    "save_identity",
    "load_identity",
    "load_or_create_identity",
    # group and POPRF
    "SUITE_ID",
    "Element",
    "Scalar",
    "Proof",
    "expand_message_xmd",
    "hash_to_group",
    "hash_to_scalar",
    "TokenKey",
    "TokenPublicKey",
    # tokens and ledgers
    *tokens.__all__,
    *spent.__all__,
    # onion packets
    *onion.__all__,
    # round schedule (from anonml.schedule)
    "WindowSchedule",
    "send_time",
    "release_time",
    # verifiable random function
    "vrf",
    # errors
    *exceptions.__all__,
]
