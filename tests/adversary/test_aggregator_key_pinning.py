"""An aggregator that re-keys at its URL is refused: peers pin its signing key per URL.

Issue 24, item 3's lever: a peer learned the aggregator's key from each
proposal's own ``aggregator`` field, so whoever answered at the URL could sign
with a fresh key for each problem (or each peer). Now the first proposal seen
from a URL pins its Ed25519 key (or the policy names it), and a proposal from
that URL under any other key is never recorded, so never joined.
"""

from __future__ import annotations

import pytest

from anonml.crypto import Identity
from anonml.protocol import sign_message
from peer.db import PeerDB
from peer.host import discover
from peer.policy import PeerPolicy
from tests.adversary.malicious import MaliciousAggregator, mooc_draft

OTHER = Identity.generate()


def _re_keyed(problems: list) -> list:
    """What the aggregator shows after re-keying: the same proposals, validly signed by another key."""
    return [sign_message(p.model_copy(update={"aggregator": bytes(OTHER.public)}), OTHER) for p in problems]


@pytest.mark.slow
def test_a_proposal_under_a_new_key_from_a_pinned_url_is_refused(adversary: MaliciousAggregator, tmp_path):
    db = PeerDB(f"sqlite:///{tmp_path / 'peer.db'}")
    counted: list[str] = []
    first = adversary.propose(mooc_draft(min_peers=20))
    assert [p.id for p in discover(db, [adversary.url], count=counted.append)] == [first.id]  # pins
    adversary.equivocate(None, "problems", _re_keyed, resign=False)
    second = adversary.propose(mooc_draft(min_peers=20, title="after re-keying"))
    assert discover(db, [adversary.url], count=counted.append) == []
    assert db.proposal(second.id) is None  # never recorded: never evaluated, never joined
    assert counted.count("aggregator key changed") == 2  # both proposals now come under OTHER's key
    # A fresh peer would pin the new key on first use; one whose policy names the key does not.
    configured = PeerPolicy(aggregator_keys={adversary.url: bytes(adversary.identity.public)[:32].hex()})
    fresh = PeerDB(f"sqlite:///{tmp_path / 'fresh.db'}")
    assert discover(fresh, [adversary.url], pinned=configured.aggregator_keys) == []
    adversary.honest(None, "problems")
    listed = {p.id for p in discover(fresh, [adversary.url], pinned=configured.aggregator_keys)}
    assert listed == {first.id, second.id}


def test_configured_keys_are_validated():
    with pytest.raises(ValueError, match="64 hex digits"):
        PeerPolicy(aggregator_keys={"https://agg.example": "abc"})
    policy = PeerPolicy(aggregator_keys={"https://agg.example/": "AB" * 32})
    assert policy.aggregator_keys == {"https://agg.example": "ab" * 32}
