"""The signed bins are checked once per process for all the identities it hosts, and never taken
on the strength of another document's check (peer.round_packets._bins_refusal)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import cast

from anonml.crypto import Identity
from anonml.protocol import Bins, Problem, sign_message
from peer import round_packets
from peer.roster import RosterView
from peer.round_packets import _bins_refusal


def _view() -> RosterView:
    """A roster view with nothing in it but its memo (all this check uses)."""
    return RosterView(roster=None, fingerprint="", keys=(), node_ids=(), routes={}, index_of={})  # type: ignore[arg-type]


def _bins(signer: Identity, t_s: float = 100.0) -> Bins:
    unsigned = Bins(
        problem_id="p1",
        edges=((1.0, 2.0),),
        t_s=t_s,
        delta=5.0,
        t_r=30.0,
        slots_per_peer=1,
        signature=bytes(64),
    )
    return sign_message(unsigned, signer)


def test_bins_are_verified_once_per_view_and_any_other_document_anew(monkeypatch):
    aggregator, other = Identity.generate(), Identity.generate()
    problem = cast(Problem, SimpleNamespace(aggregator=bytes(aggregator.public)))
    view, good = _view(), _bins(aggregator)
    calls: list[int] = []
    real = round_packets.verify_message
    monkeypatch.setattr(round_packets, "verify_message", lambda *a: (calls.append(1), real(*a))[1])
    assert [_bins_refusal(good, problem, view) for _ in range(50)] == [None] * 50
    assert len(calls) == 1  # fifty identities of one host: one signature check
    # The same signature over other content (a later t_s shown to some members) is checked anew.
    tampered = good.model_copy(update={"t_s": 200.0})
    refusal = _bins_refusal(tampered, problem, view)
    assert refusal is not None and refusal.startswith("bins are not signed by the aggregator")
    # Bins another key signed are refused, the aggregator's own still taken.
    forged = _bins(other)
    assert _bins_refusal(forged, problem, view) is not None
    assert _bins_refusal(good, problem, view) is None
    assert len(calls) == 3
    # Under another aggregator key (another problem) the same document is checked again, and refused.
    elsewhere = cast(Problem, SimpleNamespace(aggregator=bytes(other.public)))
    assert _bins_refusal(good, elsewhere, view) is not None
