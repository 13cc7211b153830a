"""The demo's simulated students: edX logs imported into one event store per student.

Each student gets its own store, identity and privacy ledger
(:func:`simulate_peers`); a seeded share is held out to score the models
(:func:`split_held_out`).
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from anonml.crypto import Identity
from anonml.datasets.mooc import simulate_students, write_edx_logs
from anonml.featurize import featurize_dataset
from anonml.paths import FILE_MODE
from anonml.plugins import PluginRef, create
from anonml.privacy import PrivacyLedger
from anonml.randomness import generator_from
from anonml.store import EventStore

__all__ = ["Progress", "SimulatedPeer", "scratch_parent", "simulate_peers", "split_held_out"]

Progress = Callable[[str, int, int], None]

@dataclass
class SimulatedPeer:
    """One simulated student: its store, identity, ledger, and (for scoring only) true example."""

    username: str
    store: EventStore
    identity: Identity
    ledger: PrivacyLedger
    x: np.ndarray
    y: int


def scratch_parent() -> str | None:
    # Hundreds of small SQLite files: on tmpfs their fsyncs cost nothing.
    shm = Path("/dev/shm")
    return str(shm) if shm.is_dir() and os.access(shm, os.W_OK) else None


def simulate_peers(
    students: int,
    root: Path,
    *,
    weeks: int,
    history_weeks: int,
    seed: int,
    features: Sequence[str],
    progress: Progress | None = None,
    shared: bool = False,
) -> tuple[list[SimulatedPeer], int]:
    """Simulate students and import each one's log into its own store (with its own keys and ledger).

    Also computes each student's true example (for the non-private reference and
    for scoring; the peers compute their own again inside the protocol).
    ``shared``: one event store and one ledger file for all the students
    instead of two files each (each student's events still under its own
    user, each identity's releases under its own fingerprint): opening a
    SQLite file and bringing its schema up to date costs about 0.1 s, which
    at 10,000 students is most of the preparation. Every identity still
    computes its own example from its own events and keeps its own budget.

    Returns
    -------
    peers : list of SimulatedPeer
        Students with an example (active in the history window), in username order.
    events : int
        Events imported over all stores.
    """
    sim = simulate_students(students, weeks=weeks, seed=seed)
    logs = write_edx_logs(sim, root / "logs")
    importer = create("importer", "edx")
    instancer = create(
        "instancer",
        PluginRef(
            name="user_window",
            params={"history_periods": history_weeks, "label_start": history_weeks, "label_end": weeks},
        ),
    )
    featurizer = create("featurizer", PluginRef(name="mooc_engagement", params={"weeks": history_weeks}))
    names = [spec.name for spec in featurizer.features()]
    columns = [names.index(f) for f in features]
    rng = generator_from(seed, name="seed")
    stores = root / "stores"
    stores.mkdir(parents=True, exist_ok=True)
    peers, events = [], 0
    common: tuple[EventStore, PrivacyLedger] | None = None
    blank = _BlankSchemas(stores) if not shared else None
    if shared:
        common = (
            EventStore(f"sqlite:///{stores / 'events.db'}"),
            PrivacyLedger(f"sqlite:///{stores / 'ledger.db'}"),
        )
        events = sum(r.inserted for r in common[0].import_files([(log.path, importer, None) for log in logs]))
    for i, log in enumerate(logs):
        if common is not None:
            store = common[0]
        else:
            store = EventStore(blank.copy("events", stores / (log.username + ".db")))
            events += store.import_file(log.path, importer).inserted
        rows = featurize_dataset(store.dataset(log.username), instancer, featurizer)
        if rows:
            ledger = (
                common[1]
                if common is not None
                else PrivacyLedger(blank.copy("ledger", stores / (log.username + "-ledger.db")))
            )
            x = np.asarray([rows[0].values[c] for c in columns], dtype=float)
            peers.append(
                SimulatedPeer(log.username, store, Identity.generate(rng), ledger, x, int(rows[0].label))
            )
        elif common is None:
            store.close()
        if progress is not None:
            progress("import", i + 1, len(logs))
    if blank is not None:
        blank.remove()
    return peers, events


class _BlankSchemas:
    """Empty event-store and ledger files at their schemas' heads, copied for every student.

    Bringing a new SQLite file to its schema runs every Alembic revision, two
    files per student: simulating and importing the 400 demo students took
    34.6 s of CPU that way and 13.7–14.4 s with the blanks (same seed, load
    22–26). A copy of a blank file already at the head costs a page copy,
    and :func:`anonml.database.migrate` then only reads its version. Each
    blank is made once by its own class (so it is exactly what that class
    creates) and closed, which checkpoints its write-ahead log into the file
    and removes it; the file is then copied byte for byte into a new file
    created 0600 (0.05 ms a copy against 0.9–3.6 ms for SQLite's online backup).
    """

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self._made: dict[str, Path] = {}

    def copy(self, kind: str, target: Path) -> str:
        """A SQLite URL for ``target``, a copy of the blank ``kind`` (``events``, ``ledger``) if new."""
        blank = self._made.get(kind)
        if blank is None:
            blank = self.folder / f".blank-{kind}.db"
            opener = {"events": EventStore, "ledger": PrivacyLedger}[kind]
            opener(f"sqlite:///{blank}").close()
            self._made[kind] = blank
        if not target.exists():  # one that exists is opened as it is, as before the blanks
            with blank.open("rb") as source, open(target, "xb", opener=_private_opener) as copy:
                shutil.copyfileobj(source, copy)
        return f"sqlite:///{target}"

    def remove(self) -> None:
        """Delete the blanks (and any journal files SQLite left beside them)."""
        for blank in self._made.values():
            for path in blank.parent.glob(blank.name + "*"):
                path.unlink()


def _private_opener(path: str, flags: int) -> int:
    """``open``'s opener for a new file that is mode 0600 from its creation (:data:`FILE_MODE`)."""
    return os.open(path, flags, FILE_MODE)


def split_held_out(
    everyone: list[SimulatedPeer], fraction: float, seed: int
) -> tuple[list[SimulatedPeer], list[SimulatedPeer]]:
    """(peers, held out): a seeded ``fraction`` of the students scores the models; their stores close."""
    order = generator_from(seed, name="seed").permutation(len(everyone))
    n_held = int(round(fraction * len(everyone)))
    held = [everyone[i] for i in sorted(order[:n_held])]
    peers = [everyone[i] for i in sorted(order[n_held:])]
    for p in held:
        p.store.close()
    return peers, held

