"""Chrome Takeout history importer: a real BrowserHistory.json against json.load, bad visits, store.

The real sample (tests/importers/samples/chrome_takeout/, see SOURCES.md) is an excerpt of a
2018 Takeout export; the hand-written fixtures cover what it lacks (redirect qualifiers, file:
URLs, bad records). The fields match the ``browser`` importer's Chrome visits.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from urllib.parse import urlsplit

from anonml.errors import RecordError
from anonml.model import Event
from anonml.store import EventStore
from importers.chrome_takeout import ChromeTakeoutImporter
from tests.importers.helpers import check_store_round_trip, only_events, parse_failure, reject_reasons

FIX = Path(__file__).parent / "fixtures" / "chrome_takeout"
GOOD = FIX / "BrowserHistory.json"
REAL = Path(__file__).parent / "samples" / "chrome_takeout" / "BrowserHistory.json"


def _parse(path: Path) -> list[Event | RecordError]:
    return list(ChromeTakeoutImporter().parse(path))


def test_visits_match_a_json_load() -> None:
    events = only_events(_parse(GOOD))
    visits = json.loads(GOOD.read_text(encoding="utf-8"))["Browser History"]
    assert len(events) == len(visits) == 3
    for event, visit in zip(events, visits, strict=True):
        epoch = datetime(1970, 1, 1, tzinfo=UTC)
        assert event.timestamp == epoch + timedelta(microseconds=visit["time_usec"])
        assert event.fields["url"] == visit["url"]
        assert event.fields["transition"] == visit["page_transition"].lower()
        assert event.fields.get("title", "") == visit["title"]
    python, docs, local = events
    assert python.timestamp == datetime(2020, 12, 1, 11, 0, tzinfo=UTC)
    assert python.fields["host"] == "www.python.org" and python.fields["scheme"] == "https"
    assert (docs.fields["typed"], docs.fields["redirect"]) == (True, True)
    assert "host" not in local.fields and local.fields["scheme"] == "file"
    assert all("client_id" not in e.fields and "favicon_url" not in e.fields for e in events)


def _independent(path: Path) -> list[tuple[object, ...]]:
    """The reading of a Takeout history by json.load and urlsplit alone, in file order."""
    epoch = datetime(1970, 1, 1, tzinfo=UTC)
    rows = []
    for visit in json.loads(path.read_text(encoding="utf-8"))["Browser History"]:
        parts = urlsplit(visit["url"])
        transition = visit["page_transition"].lower()
        rows.append((
            epoch + timedelta(microseconds=visit["time_usec"]), visit["url"], parts.scheme, parts.hostname,
            visit.get("title", ""), transition, transition == "typed",
            "REDIRECT" in visit.get("page_transition_qualifier", ""),
        ))
    return rows


def _reading(event: Event) -> tuple[object, ...]:
    f = event.fields
    return (event.timestamp, str(f["url"]), f.get("scheme"), None if "host" not in f else str(f["host"]),
            str(f.get("title", "")), f["transition"], f["typed"], f["redirect"])


def test_a_real_takeout_history_matches_json_load_in_the_parse_and_the_store(tmp_path: Path) -> None:
    importer = ChromeTakeoutImporter()
    assert importer.detect(REAL) == 0.95
    expected = _independent(REAL)
    events = only_events(_parse(REAL))
    assert [_reading(e) for e in events] == expected and len(expected) == 7
    # the export is not in time order, and one page was visited three times (link, link, reload)
    assert [e.timestamp for e in events] != sorted(e.timestamp for e in events)
    transitions = [r[5] for r in expected]
    assert transitions.count("link") == 4 and set(transitions) == {"link", "typed", "reload"}
    assert expected[1][1:4] == ("chrome://newtab/", "chrome", "newtab")
    assert all(e.type == "visit" and e.fields["browser"] == "chrome" for e in events)
    assert all(not ({"client_id", "favicon_url"} & set(e.fields)) for e in events)  # a device id, not stored
    store = EventStore(f"sqlite:///{tmp_path}/e.db")
    assert store.import_file(REAL, importer).inserted == 7
    assert store.import_file(REAL, importer).inserted == 0
    stored = store.events(source="chrome_takeout")
    assert sorted((_reading(e) for e in stored), key=repr) == sorted(expected, key=repr)
    assert "XXXXXXXX" not in repr(stored)


def test_bad_visits_name_their_line_and_index() -> None:
    items = _parse(FIX / "bad.json")
    assert reject_reasons(items, FIX / "bad.json", events=1) == [
        ":4 [Browser History[1]]: time_usec: 13255337781335930 is 2390-01-17, outside 1990-2100 "
        "(a wrong unit?)",
        ":5 [Browser History[2]]: missing field 'url'",
        ":6 [Browser History[3]]: time_usec: '1606820400000000' is not a whole number of microseconds",
        ":7 [Browser History[4]]: expected an object, got list",
    ]


def test_other_documents_are_refused() -> None:
    assert parse_failure(ChromeTakeoutImporter(), FIX / "MyActivity.json") == (
        f"{FIX / 'MyActivity.json'}:1: not a Chrome Takeout history: no 'Browser History' member"
    )


def test_detect(tmp_path: Path) -> None:
    imp = ChromeTakeoutImporter()
    assert imp.detect(GOOD) == 0.95
    assert imp.detect(FIX / "bad.json") == 0.9
    assert imp.detect(FIX / "MyActivity.json") == 0.0
    assert imp.detect(tmp_path) == 0.0 and imp.detect(tmp_path / "BrowserHistory.json") == 0.0


def test_store_round_trip_reimport_rollback_and_skip_bad(tmp_path: Path) -> None:
    store = EventStore(f"sqlite:///{tmp_path}/e.db")
    check_store_round_trip(
        store, ChromeTakeoutImporter(), GOOD, 3, FIX / "bad.json", r":4 \[Browser History\[1\]\]", (1, 4)
    )
