"""One identity hosted by this process: its keys, event store, privacy ledger and vault.

:class:`PeerNode` lives apart from :mod:`peer.participant` so that the step modules (and
:mod:`peer.participation`, what they read of a participant) can name it without importing the
participant that imports them.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import nacl.utils
import numpy as np

from anonml.crypto import Identity, RelayKeyCertificate, RoundRelayKey
from anonml.privacy import PrivacyLedger
from anonml.store import EventStore
from peer.vault import Vault

__all__ = ["PeerNode"]


@dataclass
class PeerNode:
    """One identity hosted by this process, with its own event store and ledger."""

    identity: Identity
    store: EventStore
    ledger: PrivacyLedger
    user: str | None = None
    rng: np.random.Generator | None = None

    @property
    def fingerprint(self) -> str:
        return self.identity.fingerprint.hex()

    @property
    def node_id(self) -> bytes:
        return self.identity.public.node_id

    @cached_property
    def vault(self) -> Vault:
        """This identity's secrets at rest (:mod:`peer.vault`)."""
        return Vault(self.identity)

    def new_round_relay_key(self, round_id: int) -> tuple[bytes, RoundRelayKey, RelayKeyCertificate]:
        """A fresh round relay key, its certificate, and its secret sealed for the state DB.

        The secret comes from the OS CSPRNG even in a seeded simulation (``rng`` drives only
        simulated choices): whoever knew the seed could otherwise peel every onion layer.
        """
        secret = nacl.utils.random(32)
        key = RoundRelayKey(round_id, secret)
        return self.vault.seal(secret), key, self.identity.certify_relay_key(round_id, key.public_key)
