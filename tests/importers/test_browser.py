"""Browser-history importer: real Chrome/Firefox samples, epochs, copies that never disturb, store."""

from __future__ import annotations

import hashlib
import shutil
import sqlite3
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from anonml.errors import RecordError
from anonml.model import Event, Text
from anonml.store import EventStore
from importers.browser import BrowserHistoryImporter
from tests.importers.helpers import (
    check_store_round_trip,
    only_events,
    parse_failure,
    reject_reasons,
    rejects,
)

FIX = Path(__file__).parent / "fixtures" / "browser"
WEBKIT = datetime(1601, 1, 1, tzinfo=UTC)
UNIX = datetime(1970, 1, 1, tzinfo=UTC)


def _parse(path: Path) -> list[Event | RecordError]:
    return list(BrowserHistoryImporter().parse(path))


def _events(path: Path) -> list[Event]:
    return only_events(_parse(path))


def _build(tmp_path: Path, script: str, name: str) -> Path:
    """A SQLite database from one of the text fixtures (kept as SQL so they stay reviewable)."""
    db = tmp_path / name
    conn = sqlite3.connect(db)
    conn.executescript((FIX / script).read_text())
    conn.close()
    return db


def _folder_state(folder: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.iterdir())}


def test_chrome_sample_visits_and_webkit_epoch(samples_dir: Path) -> None:
    visits = _events(samples_dir / "browser" / "chrome.sqlite")
    assert len(visits) == 6
    typed = visits[1]
    assert typed.timestamp == WEBKIT + timedelta(microseconds=13255337781335930)
    assert typed.timestamp == datetime(2021, 1, 17, 6, 16, 21, 335930, tzinfo=UTC)
    # transition 838860801 = 0x32000001: TYPED | FROM_ADDRESS_BAR | CHAIN_START | CHAIN_END
    assert typed.fields == {
        "browser": "chrome",
        "transition": "typed",
        "typed": True,
        "redirect": False,
        "forward_back": False,
        "from_address_bar": True,
        "url": Text("http://localhost:9999/"),
        "scheme": "http",
        "host": Text("localhost"),
        "title": Text("Development Server"),
    }
    last = visits[-1]
    assert last.fields["host"] == "www.discogs.com"
    assert last.fields["duration_s"] == 16.603249  # visit_duration µs
    assert [v.fields["transition"] for v in visits] == ["link", "typed"] * 2 + ["link", "link"]


def test_firefox_desktop_sample_in_wal_mode(samples_dir: Path) -> None:
    visits = _events(samples_dir / "browser" / "firefox_desktop_repaged.sqlite")
    assert len(visits) == 4
    assert visits[0].timestamp == UNIX + timedelta(microseconds=1593250194513750)
    assert visits[0].fields["browser"] == "firefox" and "title" not in visits[0].fields
    assert visits[2].fields["transition"] == "redirect_permanent"
    assert visits[2].fields["redirect"] is True
    assert visits[2].fields["title"] == "Firefox Privacy Notice — Mozilla"
    assert visits[3].fields["typed"] is True and visits[3].fields["host"] == "github.com"


def test_firefox_mobile_sample_uses_milliseconds(samples_dir: Path) -> None:
    visits = _events(samples_dir / "browser" / "firefox_mobile.sqlite")
    assert len(visits) == 5
    assert visits[0].timestamp == UNIX + timedelta(milliseconds=1644656134611)
    assert visits[0].timestamp == datetime(2022, 2, 12, 8, 55, 34, 611000, tzinfo=UTC)
    assert visits[0].fields["browser"] == "firefox_mobile"
    assert visits[2].fields["transition"] == "redirect_permanent"


def test_parsing_leaves_the_original_folder_untouched(samples_dir: Path, tmp_path: Path) -> None:
    profile = tmp_path / "profile"
    profile.mkdir()
    shutil.copyfile(samples_dir / "browser" / "firefox_desktop_repaged.sqlite", profile / "places.sqlite")
    before = _folder_state(profile)
    assert len(_events(profile / "places.sqlite")) == 4
    assert _folder_state(profile) == before  # no -wal, -shm or -journal appeared, bytes unchanged


def test_a_live_wal_database_is_read_with_its_wal_and_not_disturbed(tmp_path: Path) -> None:
    db = _build(tmp_path, "firefox_awkward.sql", "places.sqlite")
    live = sqlite3.connect(db)
    live.execute("PRAGMA journal_mode=WAL")
    live.execute("PRAGMA wal_autocheckpoint=0")  # keep the new visit only in the -wal file
    live.execute("INSERT INTO moz_historyvisits VALUES (5, 0, 1, 1700000000000000, 1, 0)")
    live.commit()
    assert (tmp_path / "places.sqlite-wal").stat().st_size > 0
    times = [e.timestamp for e in _parse(db) if isinstance(e, Event)]
    assert datetime(2023, 11, 14, 22, 13, 20, tzinfo=UTC) in times  # the row in the WAL
    live.execute("INSERT INTO moz_historyvisits VALUES (6, 0, 1, 1700000000000001, 1, 0)")
    live.commit()  # the "browser" still writes: nothing was locked
    assert live.execute("SELECT count(*) FROM moz_historyvisits").fetchone() == (6,)
    live.close()


def test_a_copied_hot_journal_is_rolled_back_in_the_private_copy(tmp_path: Path) -> None:
    db = _build(tmp_path, "chrome_awkward.sql", "History")
    writer = sqlite3.connect(db, isolation_level=None)
    writer.execute("PRAGMA cache_size=1")  # spill dirty pages to the file mid-transaction
    writer.execute("BEGIN")
    writer.executemany(
        "INSERT INTO urls VALUES (?, ?, '', 0, 0, 0, 0)",
        [(100 + i, "https://uncommitted.example/" + "x" * 400) for i in range(2000)],
    )
    writer.execute("INSERT INTO visits VALUES (100, 100, 13300000500000000, 0, 0, 0, 0)")
    snapshot = tmp_path / "snapshot"
    snapshot.mkdir()
    shutil.copyfile(db, snapshot / "History")
    shutil.copyfile(tmp_path / "History-journal", snapshot / "History-journal")  # hot journal
    writer.execute("ROLLBACK")
    writer.close()
    probe = tmp_path / "probe"
    shutil.copytree(snapshot, probe)
    with pytest.raises(sqlite3.OperationalError, match="readonly"):  # the journal is hot
        sqlite3.connect(f"{(probe / 'History').as_uri()}?mode=ro", uri=True).execute(
            "SELECT count(*) FROM visits"
        ).fetchone()
    before = _folder_state(snapshot)
    items = _parse(snapshot / "History")
    assert sum(isinstance(i, Event) for i in items) == 4  # the committed visits only
    assert all("uncommitted" not in str(i) for i in items)
    assert _folder_state(snapshot) == before  # the journal was replayed in the copy, not here


def test_awkward_chrome_rows_are_reported(tmp_path: Path) -> None:
    db = _build(tmp_path, "chrome_awkward.sql", "History")
    items = _parse(db)
    events = [i for i in items if isinstance(i, Event)]
    assert [e.timestamp for e in events] == [
        datetime(2022, 6, 18, 4, 26, 40, tzinfo=UTC),
        datetime(2022, 6, 18, 4, 28, 20, tzinfo=UTC),
        datetime(2022, 6, 18, 4, 30, tzinfo=UTC),
        datetime(2022, 6, 18, 4, 33, 20, tzinfo=UTC),
    ]
    assert events[0].fields["duration_s"] == 2.5
    assert events[1].fields["scheme"] == "file" and "host" not in events[1].fields
    assert "title" not in events[1].fields  # empty title omitted
    assert "host" not in events[2].fields and events[2].fields["url"] == "https://[::1/broken"
    assert events[3].fields["redirect"] is True  # signed 0x80000000: server redirect
    assert reject_reasons(rejects(items), db) == [
        " [visits.id=4]: visit_time 0 is not a time in 1990-2100 (WebKit µs since 1601)",
        " [visits.id=5]: url id 99 is not in urls",
    ]


def test_awkward_firefox_rows_are_reported(tmp_path: Path) -> None:
    db = _build(tmp_path, "firefox_awkward.sql", "places.sqlite")
    items = _parse(db)
    assert [e.fields["transition"] for e in items if isinstance(e, Event)] == ["typed", "download"]
    assert reject_reasons(rejects(items), db) == [
        " [moz_historyvisits.id=2]: visit_date 1600000000000 is not a time in 1990-2100 (µs since 1970)",
        " [moz_historyvisits.id=3]: place id 7 is not in moz_places",
    ]


def test_files_that_are_not_history_raise(tmp_path: Path, samples_dir: Path) -> None:
    cookies = _build(tmp_path, "cookies.sql", "Cookies")
    assert parse_failure(BrowserHistoryImporter(), cookies) == (
        f"{cookies}: not a browser history: no urls/visits (Chrome) or "
        "moz_places/moz_historyvisits (Firefox) tables"
    )
    with pytest.raises(RecordError, match=r"not a SQLite database \(no 'SQLite format 3' header\)"):
        _parse(samples_dir / "fitbit" / "sleep.json")
    torn = tmp_path / "History"
    torn.write_bytes((samples_dir / "browser" / "chrome.sqlite").read_bytes()[:60000])
    with pytest.raises(RecordError, match="no consistent copy after 3 attempts"):
        _parse(torn)


def test_detect(samples_dir: Path, tmp_path: Path) -> None:
    imp = BrowserHistoryImporter()
    for sample in (samples_dir / "browser").iterdir():
        assert imp.detect(sample) == 0.95, sample
    assert imp.detect(_build(tmp_path, "cookies.sql", "Cookies")) == 0.0


def test_store_round_trip_reimport_rollback_and_skip_bad(tmp_path: Path, samples_dir: Path) -> None:
    store = EventStore(f"sqlite:///{tmp_path}/e.db")
    imp = BrowserHistoryImporter()
    bad = _build(tmp_path, "chrome_awkward.sql", "History")
    good = samples_dir / "browser" / "chrome.sqlite"
    _, _, report = check_store_round_trip(store, imp, good, 6, bad, r"\[visits.id=4\]", (4, 2))
    assert store.count() == 10
    assert [e.record for e in report.errors] == ["visits.id=4", "visits.id=5"]
