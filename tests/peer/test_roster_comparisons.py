"""The fingerprint comparison sends requests only to members hosted elsewhere
(:func:`peer.roster_checks.compare_fingerprints`).

Identities hosted by one process share its one verified roster view, so one of them drawn agrees by
construction, without a request; the members drawn are as before. The participant and the roster are
stand-ins with the attributes the comparison reads; the member's relay is a stand-in for
:func:`peer.client.fetch_witness`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from types import SimpleNamespace

import numpy as np
import pytest

from anonml.errors import ProtocolError
from peer import roster_checks
from peer.phases import ParticipationPhase
from peer.roster import RosterView
from peer.roster_checks import Comparisons

P = ParticipationPhase
N = 12


def _view() -> RosterView:
    keys = tuple(bytes([i]) * 32 for i in range(N))
    node_ids = tuple(bytes([i]) * 16 for i in range(N))
    entries = tuple(SimpleNamespace(relay_url=f"http://127.0.0.1:9/relay/{n.hex()}", identity=k)
                    for k, n in zip(keys, node_ids, strict=True))
    return RosterView(
        roster=SimpleNamespace(entries=entries),  # type: ignore[arg-type]
        fingerprint="f" * 64,
        keys=keys,
        node_ids=node_ids,
        routes={},
        index_of={k: i for i, k in enumerate(keys)},
        relay_capable=tuple(range(N)),
    )


@dataclass
class _Member:
    """What :func:`~peer.roster_checks.compare_fingerprints` reads of a participant."""

    view: RosterView
    me: int
    roster_comparisons: int = 2
    phase: ParticipationPhase = P.ROSTER_CHECKED
    comparisons: Comparisons = field(default_factory=Comparisons)
    moves: list[ParticipationPhase] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.roster = SimpleNamespace(view=self.view)
        self.node = SimpleNamespace(identity=SimpleNamespace(public=self.view.keys[self.me]),
                                    rng=np.random.default_rng(self.me))
        self.relay = SimpleNamespace(allow_loopback_http=True, count=lambda *a: None)
        self.problem = SimpleNamespace(id="p-1")
        self.relaying = False

    def facts(self, record, what):
        return record

    def _move(self, new: ParticipationPhase) -> None:
        self.phase = new
        self.moves.append(new)


@pytest.fixture
def asked(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Roster indices whose relays were asked; every relay answers "not ready" (asked again later)."""
    seen: list[int] = []

    def not_ready(relay_url: str, problem_id: str, *, allow_loopback: bool):
        seen.append(int(relay_url.rsplit("/", 1)[1][:2], 16))
        raise ProtocolError("not ready")

    monkeypatch.setattr(roster_checks, "fetch_witness", not_ready)
    return seen


def test_members_hosted_by_this_process_agree_without_a_request(asked: list[int]) -> None:
    view = _view()
    hosted = frozenset(range(8))  # this process hosts members 0..7; 8..11 are elsewhere
    confirmed_unasked = 0
    for me in range(8):
        member = _Member(view, me)
        for _ in range(5):  # polls: no member elsewhere answers, so each asks its other candidates in turn
            roster_checks.compare_fingerprints(member, hosted)  # type: ignore[arg-type]
        assert member.comparisons.confirmed <= hosted - {me}  # only co-hosted ones agreed
        confirmed_unasked += len(member.comparisons.confirmed)
    assert asked and set(asked) <= {8, 9, 10, 11}  # requests went only to members elsewhere
    assert confirmed_unasked > 0  # and co-hosted draws were counted as agreeing


def test_two_co_hosted_draws_confirm(asked: list[int]) -> None:
    view = _view()
    member = _Member(view, 0)
    hosted = frozenset(range(N)) - {11}  # one member elsewhere, and it never answers
    polls = 0
    while not roster_checks.compare_fingerprints(member, hosted):  # type: ignore[arg-type]
        polls += 1
        assert polls < 20, member.comparisons
    assert member.moves == [P.CONFIRMED] and len(member.comparisons.confirmed) == 2
    assert set(asked) <= {11}


def test_without_the_hosted_set_a_member_asks_its_own_host_too(asked: list[int]) -> None:
    view = _view()
    for me in range(8):
        member = _Member(view, me)
        for _ in range(5):
            roster_checks.compare_fingerprints(member)  # type: ignore[arg-type]
    assert set(asked) & set(range(8))  # the stand-in works: the old choice includes co-hosted members


def test_a_process_hosting_every_relaying_member_confirms_without_asking(asked: list[int]) -> None:
    view = _view()
    member = _Member(view, 3)
    assert roster_checks.compare_fingerprints(member, frozenset(range(N))) is True  # type: ignore[arg-type]
    assert asked == [] and member.moves == [P.CONFIRMED]
