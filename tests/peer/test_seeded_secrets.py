"""A simulation's seeded generator never reaches a secret: relay keys and token blinds come from the OS.

``PeerNode.rng`` makes simulations reproducible (noise, send times, routes).
Had it reached the round relay key or the token blinds, anyone who knew the
seed could peel the node's onion layers or link its tokens to their issuance.
"""

from __future__ import annotations

import numpy as np

from anonml.crypto import Identity, TokenKey
from anonml.protocol import token_batch_request
from peer.participant import PeerNode


def test_round_relay_keys_differ_between_identically_seeded_nodes():
    identity = Identity.generate()
    keys = set()
    for _ in range(2):
        node = PeerNode(identity, store=None, ledger=None, rng=np.random.default_rng(7))  # type: ignore[arg-type]
        _, key, certificate = node.new_round_relay_key(round_id=3)
        certificate.verify(identity.public, round_id=3)
        keys.add(key.public_key)
    assert len(keys) == 2


def test_token_blinds_are_fresh_whatever_the_caller_seeds():
    identity, key = Identity.generate(), TokenKey.generate()
    slots = [b"slot-0", b"slot-1"]
    np.random.seed(0)  # a caller's global seed has no say either
    first, _ = token_batch_request("p-0001", identity, bytes(key.public_key), slots)
    np.random.seed(0)
    second, _ = token_batch_request("p-0001", identity, bytes(key.public_key), slots)
    assert {bytes(r.blinded) for r in first.requests}.isdisjoint(bytes(r.blinded) for r in second.requests)
