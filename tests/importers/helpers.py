"""What every importer test checks the same way.

The store contract (import, re-import, roll back, skip bad records), how sure
``detect`` is of a file under its own name and another, and what a parse says of
a file: its events, the reasons of its bad records, the message of the error
that ends it.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pytest

from anonml.errors import RecordError
from anonml.model import Event
from anonml.plugins import Importer
from anonml.store import EventStore, ImportReport


def check_store_round_trip(
    store: EventStore,
    importer: Importer,
    good: Path,
    inserted: int,
    bad: Path,
    error: str,
    skipped: tuple[int, int],
) -> tuple[ImportReport, ImportReport, ImportReport]:
    """Import ``good`` (``inserted`` new events), re-import it (none new), then ``bad``.

    ``bad`` raises :class:`RecordError` matching ``error`` and leaves the store as it was
    (the whole file rolls back); with ``skip_bad`` its good records go in and the bad are
    reported: ``skipped`` = (inserted, rejected).

    Returns
    -------
    (first, again, report)
        The three import reports, for the caller's own checks.
    """
    first = store.import_file(good, importer)
    assert first.inserted == inserted
    again = store.import_file(good, importer)
    assert again.inserted == 0
    before = store.count()
    with pytest.raises(RecordError, match=error):
        store.import_file(bad, importer)
    assert store.count() == before
    report = store.import_file(bad, importer, skip_bad=True)
    assert (report.inserted, report.rejected) == skipped
    return first, again, report


def check_detect(
    importer: Importer, sample: Path, folder: Path, renamed: str, others: Sequence[Path]
) -> None:
    """``detect`` is sure of ``sample`` (0.95) and of its bytes under the name ``renamed`` less so (0.9).

    It says 0 for each of ``others`` (another format), for ``folder`` itself (a
    directory) and for a file of ``sample``'s suffix that does not exist in it.
    The renamed copy is written into ``folder``.
    """
    assert importer.detect(sample) == 0.95
    copy = folder / renamed
    copy.write_bytes(sample.read_bytes())
    assert importer.detect(copy) == 0.9
    for other in others:
        assert importer.detect(other) == 0.0, other
    assert importer.detect(folder) == 0.0
    assert importer.detect(folder / f"missing{sample.suffix}") == 0.0


def only_events(items: Sequence[Event | RecordError]) -> list[Event]:
    """``items`` as events; the test fails, showing every item, if any is a bad record."""
    assert all(isinstance(i, Event) for i in items), items
    return list(items)  # type: ignore[arg-type]


def rejects(items: Sequence[Event | RecordError]) -> list[RecordError]:
    """The bad records among ``items``, in order."""
    return [i for i in items if isinstance(i, RecordError)]


def reject_reasons(items: Sequence[Event | RecordError], path: Path, *, events: int = 0) -> list[str]:
    """What each bad record of ``items`` says after naming ``path``: ``":3: …"`` or ``" [$[1]]: …"``.

    The first ``events`` items must be events (the good records a file starts
    with) and every later one a :class:`RecordError` whose message starts with
    ``path``; the test fails on the first item that is not.
    """
    assert all(isinstance(i, Event) for i in items[:events]), items[:events]
    reasons = []
    for item in items[events:]:
        assert isinstance(item, RecordError), item
        message = str(item)
        assert message.startswith(str(path)), message
        reasons.append(message[len(str(path)) :])
    return reasons


def parse_failure(importer: Importer, path: Path) -> str:
    """The message of the :class:`RecordError` that parsing ``path`` raises; the test fails if none is."""
    with pytest.raises(RecordError) as info:
        list(importer.parse(path))
    return str(info.value)
