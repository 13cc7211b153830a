"""A median-pool identity that never answered the question due to it ends ``partial`` saying why
(:meth:`peer.participant.Participant._into_round`); one whose share was too small for a question
had nothing to do. The participant is a stand-in holding what the rule reads."""

from __future__ import annotations

from types import MethodType, SimpleNamespace

import pytest

from anonml.learn.partition import PeerAssignment
from peer.participant import Participant
from peer.phases import ParticipationPhase
from tests.aggregator.helpers import draft

P = ParticipationPhase


def _member(
    rank: int, pool: int, *, phase: ParticipationPhase = P.CONFIRMED, missed: bool = False, bins: int = 2
):
    # Two numeric features; bins - 1 searches of at most 2 steps each per feature.
    d = draft(n_numeric=2, steps=2).model_copy(update={"bins": bins})
    me = SimpleNamespace(
        phase=phase,
        medians_missed=missed,
        shortfall=[],
        moves=[],
        problem=SimpleNamespace(draft=d),
        roster=SimpleNamespace(
            assignment=PeerAssignment("median", rank),
            view=SimpleNamespace(roster=SimpleNamespace(median_pool_size=pool)),
        ),
    )
    me._short = lambda why: me.shortfall.append(why)
    me._move = lambda new: me.moves.append(new)
    me._median_question = MethodType(Participant._median_question, me)
    return me, d


def test_a_member_whose_question_never_reached_it_ends_short_naming_the_question() -> None:
    me, d = _member(rank=5, pool=8)  # ranks 4..7 ask feature 2's search; rank 5 its step 0
    Participant._into_round(me)  # type: ignore[arg-type]
    assert me.moves == [P.RELAYING]
    (why,) = me.shortfall
    assert f"feature {d.numeric_features[1]}, step 0" in why
    assert "not open while this identity was ready" in why


def test_a_member_asked_before_it_was_ready_says_so() -> None:
    me, _ = _member(rank=0, pool=8, missed=True)
    Participant._into_round(me)  # type: ignore[arg-type]
    assert me.shortfall == ["median answer not sent: the median steps had closed when this identity's "
                            "roster check was done"]


@pytest.mark.parametrize("phase", [P.ANSWERED])
def test_a_member_that_answered_or_had_no_question_has_nothing_to_say(phase: ParticipationPhase) -> None:
    answered, _ = _member(rank=1, pool=8, phase=phase)
    Participant._into_round(answered)  # type: ignore[arg-type]
    # 3 bins (two searches per feature), shares of 2 and 1: the second feature's share is too small for
    # one step per search, so rank 2 is never asked.
    idle, _ = _member(rank=2, pool=3, bins=3)
    Participant._into_round(idle)  # type: ignore[arg-type]
    assert answered.shortfall == [] == idle.shortfall
    assert answered.moves == [P.RELAYING] == idle.moves
