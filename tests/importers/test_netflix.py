"""Netflix importer: ViewingActivity.csv rows, profiles, old layout, bad rows, store."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

from anonml.errors import PluginError, RecordError
from anonml.model import Event, Text
from anonml.store import EventStore
from importers.netflix import NetflixImporter, parse_elapsed
from tests.importers.helpers import check_store_round_trip, parse_failure, reject_reasons, rejects

FIX = Path(__file__).parent / "fixtures" / "netflix"


def _parse(path: Path, **params: object) -> list[Event | RecordError]:
    return list(NetflixImporter(params or None).parse(path))


def test_rows_become_viewings_with_parsed_fields() -> None:
    items = _parse(FIX / "ViewingActivity.csv")
    assert len(items) == 4 and all(isinstance(i, Event) for i in items)
    pilot, trailer, film, hook = items  # the blank line between rows is skipped
    assert pilot.type == "viewing" and pilot.timestamp == datetime(2021, 1, 2, 20, 15, 33, tzinfo=UTC)
    assert pilot.fields == {
        "profile": "Alex",
        "title": Text('The Show: Season 1: "Pilot" (Episode 1)'),
        "duration_s": 45 * 60 + 12,
        "supplemental": False,
        "device_type": "Netflix Windows App - Cadmium Windows Mobile",
        "bookmark_s": 2712,
        "is_latest_view": True,
        "latest_bookmark_s": 2712,
        "country": "DE",
        "autoplayed": False,
        "branched": False,
    }
    assert trailer.fields["supplemental_type"] == "trailer"
    assert trailer.fields["is_latest_view"] is False and "latest_bookmark_s" not in trailer.fields
    assert trailer.fields["autoplayed"] is True and trailer.fields["autoplay_user_action"] == "none"
    assert film.fields["title"] == "A Film, With A Comma" and film.fields["branched"] is True
    assert film.fields["duration_s"] == 3723 and film.fields["country"] == "NL"
    assert hook.fields["autoplay_user_action"] == "user_interaction"


def test_profiles_param_keeps_only_the_named_profiles() -> None:
    items = _parse(FIX / "ViewingActivity.csv", profiles=["Kim"])
    assert [i.fields["profile"] for i in items] == ["Kim", "Kim"]  # type: ignore[union-attr]
    assert all(i.user is None for i in items)  # type: ignore[union-attr]


def test_older_layout_without_optional_columns() -> None:
    (view,) = _parse(FIX / "old" / "ViewingActivity.csv")
    assert isinstance(view, Event)
    assert view.fields == {
        "profile": "Alex",
        "title": Text("Old Show: Episode 3"),
        "duration_s": 1800,
        "supplemental": False,
        "device_type": "Chrome PC (Cadmium)",
        "bookmark_s": 1800,
    }


def test_bad_rows_name_the_line_their_record_starts_on() -> None:
    items = _parse(FIX / "bad" / "ViewingActivity.csv")
    assert [i.fields["title"] for i in items if isinstance(i, Event)] == ["Fine", "Fine again"]
    assert reject_reasons(rejects(items), FIX / "bad" / "ViewingActivity.csv") == [
        ":3: Start Time: '02/01/2021 20:15' is not 'YYYY-MM-DD HH:MM:SS'",
        ":4: Duration: '45 minutes' is not H:MM:SS",
        ":5: Title: empty",
        ":6: Latest Bookmark: '00:10:61' is not H:MM:SS",  # a two-line quoted title
        ":8: 5 cells for 10 columns",
    ]


def test_other_netflix_csv_raises() -> None:
    assert parse_failure(NetflixImporter(), FIX / "other" / "SearchHistory.csv") == (
        f"{FIX / 'other' / 'SearchHistory.csv'}:1: not a Netflix ViewingActivity.csv: "
        "missing columns ['Start Time', 'Duration', 'Title']"
    )


@pytest.mark.parametrize(("text", "seconds"), [("0:45:12", 2712), ("00:00:05", 5), ("12:00:00", 43200)])
def test_parse_elapsed(text: str, seconds: int) -> None:
    assert parse_elapsed(text, "Duration") == seconds


@pytest.mark.parametrize("text", ["45:12", "0:60:00", "1:2:3", "", "-0:01:00"])
def test_parse_elapsed_refuses(text: str) -> None:
    with pytest.raises(ValueError, match="Duration: .* is not H:MM:SS"):
        parse_elapsed(text, "Duration")


def test_detect(tmp_path: Path) -> None:
    imp = NetflixImporter()
    assert imp.detect(FIX / "ViewingActivity.csv") == 0.95  # with a byte-order mark
    assert imp.detect(FIX / "old" / "ViewingActivity.csv") == 0.95
    renamed = tmp_path / "netflix.csv"
    renamed.write_bytes((FIX / "ViewingActivity.csv").read_bytes())
    assert imp.detect(renamed) == 0.9
    assert imp.detect(FIX / "other" / "SearchHistory.csv") == 0.0


def test_profiles_param_is_bounded() -> None:
    with pytest.raises(PluginError, match="profiles"):
        NetflixImporter({"profiles": [f"p{i}" for i in range(65)]})


def test_store_round_trip_reimport_rollback_and_skip_bad(tmp_path: Path) -> None:
    store = EventStore(f"sqlite:///{tmp_path}/e.db")
    imp = NetflixImporter()
    good, bad = FIX / "ViewingActivity.csv", FIX / "bad" / "ViewingActivity.csv"
    _, _, report = check_store_round_trip(store, imp, good, 4, bad, r":3: Start Time", (2, 5))
    assert [e.line for e in report.errors] == [3, 4, 5, 6, 8]


def test_a_latin1_byte_in_a_data_row_is_that_rows_bad_record(tmp_path: Path) -> None:
    """Once reported as 'unreadable CSV header ... position 5610': a cp1252 byte 5.6 KB into the file."""
    header, row = (FIX / "ViewingActivity.csv").read_bytes().splitlines(keepends=True)[:2]
    rows = [row.replace(b"20:15:33", f"20:15:{i % 60:02d}".encode()) for i in range(40)]
    rows[29] = rows[29].replace(b"Pilot", b"Pilot \xe0 Paris")
    path = tmp_path / "ViewingActivity.csv"
    path.write_bytes(header + b"".join(rows))
    assert path.read_bytes().index(b"\xe0") > 4096
    items = _parse(path)
    column = rows[29].index(b"\xe0") + 1
    assert reject_reasons(rejects(items), path) == [
        f":31: not UTF-8 text: byte 0xe0 at column {column} (invalid continuation byte)"
    ]
    assert len([i for i in items if isinstance(i, Event)]) == 39
