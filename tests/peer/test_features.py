"""A peer computes its own example from its own store, keeping the proposed features."""

from __future__ import annotations

from pathlib import Path

import pytest

from anonml.demo import simulate_peers
from anonml.errors import AnonMLError
from anonml.model import FeatureSpec
from anonml.store import EventStore
from peer.features import local_example
from tests.peer.test_policy import problem


def test_local_example_selects_and_clips_the_proposed_features(tmp_path: Path):
    peers, _ = simulate_peers(
        3, tmp_path, weeks=4, history_weeks=2, seed=1, features=["time_on_site_minutes", "sessions"]
    )
    p = problem(
        features=(
            FeatureSpec(name="time_on_site_minutes", low=0, high=1.0),
            FeatureSpec(name="sessions", low=0, high=60),
        )
    )
    for peer in peers:
        example = local_example(p, peer.store, peer.username)
        # Same values the central pipeline computes, with the first clipped into its public range.
        assert example.x[0] == min(peer.x[0], 1.0) and example.x[1] == peer.x[1]
        assert example.y == peer.y
        peer.store.close()
        peer.ledger.close()


def test_no_example_or_ambiguous_user_is_a_clear_error(tmp_path: Path):
    empty = EventStore(f"sqlite:///{tmp_path / 'empty.db'}")
    with pytest.raises(AnonMLError, match="holds 0 users"):
        local_example(problem(), empty, None)
    with pytest.raises(AnonMLError, match="finds no example"):
        local_example(problem(), empty, "nobody")


def test_only_the_sources_the_person_offers_are_read(tmp_path: Path):
    peers, _ = simulate_peers(2, tmp_path, weeks=4, history_weeks=2, seed=1, features=["sessions"])
    p = problem(features=(FeatureSpec(name="sessions", low=0, high=60),))
    for peer in peers:
        everything = local_example(p, peer.store, peer.username)
        offered = local_example(p, peer.store, peer.username, sources=["edx"])
        assert offered.x.tolist() == everything.x.tolist() and offered.y == everything.y
        with pytest.raises(AnonMLError, match="finds no example"):  # no events of an offered source
            local_example(p, peer.store, peer.username, sources=["spotify"])
