"""The store contract every importer test checks: import, re-import, roll back, skip bad records."""

from __future__ import annotations

from pathlib import Path

import pytest

from anonml.errors import RecordError
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
