"""Chrome Takeout history importer: visits against json.load, bad visits, other documents, store.

No redistributable real ``BrowserHistory.json`` was found, so the fixtures are hand-written to the
documented format; the fields match the ``browser`` importer's Chrome visits.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

from anonml.errors import RecordError
from anonml.model import Event
from anonml.store import EventStore
from importers.chrome_takeout import ChromeTakeoutImporter
from tests.importers.helpers import check_store_round_trip, only_events, parse_failure, reject_reasons

FIX = Path(__file__).parent / "fixtures" / "chrome_takeout"
GOOD = FIX / "BrowserHistory.json"


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
