"""The demo's students start from blank databases at their schemas' heads (anonml.demo_peers)."""

from __future__ import annotations

import sqlite3
import stat
from pathlib import Path

import numpy as np

from anonml.demo import DEMO_FEATURES, simulate_peers
from anonml.featurize import featurize_dataset
from anonml.plugins import PluginRef, create
from anonml.privacy import PrivacyLedger
from anonml.store import EventStore


def _schema(db: Path) -> tuple[list[tuple[str, str]], list[tuple]]:
    """Every table's and index's SQL, and every version table's rows: what a migration leaves."""
    with sqlite3.connect(db) as con:
        objects = sorted(con.execute("SELECT name, sql FROM sqlite_master WHERE sql IS NOT NULL"))
        versions = [
            (name, *row)
            for (name,) in con.execute("SELECT name FROM sqlite_master WHERE name LIKE 'anonml_schema_%'")
            for row in con.execute(f'SELECT * FROM "{name}"')
        ]
    return objects, sorted(versions)


def test_every_student_store_and_ledger_is_what_a_new_file_migrates_to(tmp_path: Path) -> None:
    peers, events = simulate_peers(
        8, tmp_path / "demo", weeks=6, history_weeks=2, seed=3, features=list(DEMO_FEATURES)
    )
    assert peers and events > 0
    stores = tmp_path / "demo" / "stores"
    assert not list(stores.glob(".blank*")), "the blank files are removed after the import"
    # The same schema, down to the version rows, as a store and a ledger migrated from nothing.
    EventStore(f"sqlite:///{tmp_path / 'fresh.db'}").close()
    PrivacyLedger(f"sqlite:///{tmp_path / 'fresh-ledger.db'}").close()
    fresh, fresh_ledger = _schema(tmp_path / "fresh.db"), _schema(tmp_path / "fresh-ledger.db")
    assert fresh[1] and fresh_ledger[1]  # versioned: a copy of an unversioned file would differ here
    for peer in peers:
        assert _schema(stores / f"{peer.username}.db")[0] == fresh[0]
        assert _schema(stores / f"{peer.username}.db")[1] == fresh[1]
        assert _schema(stores / f"{peer.username}-ledger.db") == fresh_ledger
        for copy in (stores / f"{peer.username}.db", stores / f"{peer.username}-ledger.db"):
            assert stat.S_IMODE(copy.stat().st_mode) == 0o600, copy  # private, as every store file
    # Every event landed in its own student's store, and each example is what that store gives.
    counted = sum(p.store.count() for p in peers)
    assert counted <= events
    instancer = create(
        "instancer",
        PluginRef(name="user_window", params={"history_periods": 2, "label_start": 2, "label_end": 6}),
    )
    featurizer = create("featurizer", PluginRef(name="mooc_engagement", params={"weeks": 2}))
    names = [spec.name for spec in featurizer.features()]
    for peer in peers:
        assert set(peer.store.users()) == {peer.username}
        (row,) = featurize_dataset(peer.store.dataset(peer.username), instancer, featurizer)
        assert np.array_equal(peer.x, [row.values[names.index(f)] for f in DEMO_FEATURES])
        peer.store.close()
        peer.ledger.close()


def test_a_second_run_into_the_same_folder_opens_the_stores_it_finds(tmp_path: Path) -> None:
    first, events = simulate_peers(
        4, tmp_path, weeks=6, history_weeks=2, seed=1, features=list(DEMO_FEATURES)
    )
    held = {p.username: p.store.count() for p in first}
    for p in first:
        p.store.close()
        p.ledger.close()
    again, events_again = simulate_peers(
        4, tmp_path, weeks=6, history_weeks=2, seed=1, features=list(DEMO_FEATURES)
    )
    # Not replaced by blank copies: the events are there already, so the import adds none.
    assert events > 0 and events_again == 0
    assert {p.username: p.store.count() for p in again} == held
    for p in again:
        p.store.close()
        p.ledger.close()
