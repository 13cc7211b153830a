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
from anonml.errors import ProtocolError
from anonml.protocol import RosterEntry, sign_message
from peer.db import PeerDB
from peer.discovery import discover
from peer.policy import PeerPolicy
from peer.roster import RosterView
from peer.transcript import check_roster_entries
from tests.adversary.malicious import MaliciousAggregator, mooc_draft
from tests.aggregator.helpers import WirePeer, post, roster_document

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


def test_registrations_and_rosters_name_the_aggregator_key(adversary: MaliciousAggregator):
    """A registration is signed for one aggregator identity; a roster names the one that signed it.

    Swapping the X25519 half of its identity (issue 24, item 3) gave the aggregator a second copy of a
    problem in which every honest member's registration was still valid. Now each registration names
    the aggregator it was sent to: the aggregator refuses one naming another, and a peer holding a copy
    of the problem under another identity finds every member's registration invalid in its roster.
    """
    problem = adversary.propose(mooc_draft(min_peers=2))
    swapped = Identity(bytes(32), b"\x05" * 32)  # stands for the aggregator with another X25519 half
    copy = sign_message(problem.model_copy(update={"aggregator": bytes(swapped.public)}), swapped)
    peer = WirePeer()
    refused = post(f"{adversary.url}/problems/{problem.id}/registrations", peer.registration(copy))
    assert refused.status_code == 422 and "another aggregator" in refused.json()["detail"]
    honest = peer.registration(problem)
    member = RosterEntry(
        identity=honest.identity,
        relay_url=honest.relay_url,
        relay_certificate=honest.relay_certificate,
        registration_signature=honest.signature,
    )
    roster = roster_document(problem.id, (member,), signer=adversary.identity, round_id=problem.round_id)
    check_roster_entries(roster, problem)  # valid for the problem it was sent to
    with pytest.raises(ProtocolError, match="not the member's own signed registration"):
        check_roster_entries(roster, copy)  # worthless in the copy under the other identity
    with pytest.raises(ProtocolError, match="roster names aggregator"):
        RosterView.verify(
            adversary.sign(roster.model_copy(update={"aggregator": bytes(swapped.public)})), problem
        )
