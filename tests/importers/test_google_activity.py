"""google_activity: JSON and HTML My Activity, the explicit abbreviation table, errors, a store."""

from __future__ import annotations

import html
import json
import re
from datetime import UTC, datetime
from pathlib import Path

import pytest

from anonml.errors import PluginError, RecordError
from anonml.model import Event, Text
from anonml.store import EventStore
from importers.google_activity import (
    TZ_ABBREVIATIONS,
    GoogleActivityImporter,
    parse_activity_time,
)
from tests.importers.helpers import check_store_round_trip, reject_reasons

FIX = Path(__file__).parent / "fixtures" / "google_activity"
YOUTUBE = Path(__file__).parent / "samples" / "youtube" / "watch-history.json"
YOUTUBE_HTML = Path(__file__).parent / "samples" / "youtube" / "watch-history.html"


def _items(path: Path, params: dict | None = None) -> list[Event | RecordError]:
    return list(GoogleActivityImporter(params).parse(path))


@pytest.fixture()
def activity(samples_dir: Path) -> Path:
    return samples_dir / "google_takeout" / "Takeout" / "My Activity"


def test_search_sample_json(activity: Path) -> None:
    visited, searched = _items(activity / "Search" / "My Activity.json")
    assert visited.type == "search" and visited.source == "google_activity"
    assert visited.timestamp == datetime(2019, 5, 30, 15, 37, 18, 828000, tzinfo=UTC)
    assert visited.fields["action"] == "Visited"
    assert isinstance(visited.fields["url"], Text)
    assert "query" not in visited.fields and "location_source" not in visited.fields
    assert searched.fields == {
        "product": "Search", "header": "Search", "title": Text('Searched for "myactivity" google export'),
        "action": "Searched", "query": Text('"myactivity" google export'),
        "url": Text("https://www.google.com/search?q=%22myactivity%22+google+export"),
        "location_source": "From your places (Home)",
        "location_lat": 37.773692, "location_lng": -122.429737,
    }


def test_maps_sample_json(activity: Path) -> None:
    viewed, searched = _items(activity / "Maps" / "My Activity.json")
    assert viewed.type == searched.type == "maps"
    assert viewed.fields["title"] == Text("Viewed area around Pheba")
    assert searched.fields["query"] == Text("Oktibbeha County Lake, Mississippi, USA")
    assert searched.fields["location_source"] == "From your device"


def _youtube_reading(event: Event) -> tuple[object, ...]:
    f = event.fields
    return (event.timestamp, event.type, f["product"], f["header"], str(f["title"]), f["action"],
            str(f["url"]) if "url" in f else None, str(f["channel"]) if "channel" in f else None,
            f.get("from_ads"))


def test_a_real_youtube_watch_history_matches_json_load_in_the_parse_and_the_store(tmp_path: Path) -> None:
    """2,875 records of a real Takeout ``watch-history.json`` (2015-2021), read by json.loads alone."""
    records = json.loads(YOUTUBE.read_text(encoding="utf-8"))
    expected = [
        (datetime.fromisoformat(r["time"]), "youtube", r["products"][0], r["header"], r["title"],
         r["title"].split()[0], r.get("titleUrl"), r["subtitles"][0]["name"] if r.get("subtitles") else None,
         any("Google Ads" in d["name"] for d in r["details"]) if "details" in r else None)
        for r in records
    ]
    importer = GoogleActivityImporter()
    assert importer.detect(YOUTUBE) == 0.85  # found by its content: not called My Activity
    items = _items(YOUTUBE)
    assert all(isinstance(i, Event) for i in items) and len(items) == len(records) == 2875
    assert [_youtube_reading(e) for e in items] == expected  # type: ignore[arg-type]
    # what the real file holds: other headers under the one product, removed videos, ads
    assert {r[3] for r in expected} == {"YouTube", "YouTube Music", "YouTube Gaming"}
    assert {r[1] for r in expected} == {"youtube"}
    assert sum(r[7] is None for r in expected) == 195 and sum(r[6] is None for r in expected) == 85
    assert sum(r[8] is True for r in expected) == 8 and {r[5] for r in expected} == {"Watched", "Visited"}
    store = EventStore(f"sqlite:///{tmp_path}/e.db")
    assert store.import_file(YOUTUBE, importer).inserted == 2875
    assert store.import_file(YOUTUBE, importer).inserted == 0
    stored = sorted((_youtube_reading(e) for e in store.events(source="google_activity")), key=repr)
    assert stored == sorted(expected, key=repr)


def _html_text(fragment: str) -> str:
    """A fragment's text as a browser shows it: tags dropped, entities decoded, white space collapsed."""
    return " ".join(html.unescape(re.sub(r"<[^>]+>", " ", fragment)).split())


def _independent_html(path: Path) -> list[tuple[object, ...]]:
    """A real en-GB watch-history.html read with re, html.unescape and strptime alone."""
    page = path.read_text(encoding="utf-8")
    rows = []
    for cell in page.split('<div class="outer-cell ')[1:]:
        header = _html_text(re.search(r'<p class="mdl-typography--title">(.*?)</p>', cell, re.S)[1])
        body = re.search(r'mdl-cell--6-col mdl-typography--body-1">(.*?)</div>', cell, re.S)[1]
        lines = [line for line in body.split("<br>") if line.strip()]
        title, when = _html_text(lines[0]), _html_text(lines[-1])
        links = re.findall(r'<a href="([^"]*)"', lines[0])
        channel = _html_text(lines[1]) if len(lines) == 3 else None
        caption = cell.split("mdl-typography--caption", 1)[1]
        products = re.search(r"<b>Products:</b><br>(.*?)<b>", caption, re.S)[1]
        ads = "From Google Ads" in caption if "<b>Details:</b>" in caption else None
        stamp = datetime.strptime(when.replace("Sept", "Sep"), "%d %b %Y, %H:%M:%S GMT%z")
        rows.append((stamp.astimezone(UTC), "youtube", _html_text(products), header, title, title.split()[0],
                     html.unescape(links[0]) if links else None, channel, ads))
    return rows


def test_a_real_youtube_watch_history_page_matches_an_independent_reading(tmp_path: Path) -> None:
    """340 records of a real 2025 watch-history.html (en-GB, ``GMT+05:30``), after 141 KB of CSS."""
    expected = _independent_html(YOUTUBE_HTML)
    importer = GoogleActivityImporter()
    assert importer.detect(YOUTUBE_HTML) == 0.95
    assert YOUTUBE_HTML.read_bytes().find(b'class="outer-cell') > 140_000  # past a 4 KiB look
    items = _items(YOUTUBE_HTML)
    assert all(isinstance(i, Event) for i in items) and len(items) == len(expected) == 340
    assert [_youtube_reading(e) for e in items] == expected  # type: ignore[arg-type]
    assert items[0].timestamp == datetime(2025, 12, 8, 14, 17, 35, tzinfo=UTC)  # 19:47:35 GMT+05:30
    actions = [r[5] for r in expected]
    assert (actions.count("Watched"), actions.count("Viewed"), actions.count("Used")) == (335, 4, 1)
    assert sum(r[8] is True for r in expected) > 0 and sum(r[7] is None for r in expected) > 0
    store = EventStore(f"sqlite:///{tmp_path}/e.db")
    assert store.import_file(YOUTUBE_HTML, importer).inserted == 340
    assert store.import_file(YOUTUBE_HTML, importer).inserted == 0
    stored = sorted((_youtube_reading(e) for e in store.events(source="google_activity")), key=repr)
    assert stored == sorted(expected, key=repr)


def test_json_subtitles_details_and_folder_product() -> None:
    watched, ad = _items(FIX / "youtube.json")
    assert watched.type == "youtube"
    assert watched.fields["channel"] == Text("Bakery Channel") and watched.fields["subtitle_count"] == 1
    assert ad.fields["from_ads"] is True
    (drive,) = _items(FIX / "Drive" / "My Activity.json")
    assert drive.type == "drive" and drive.fields["product"] == "Drive"  # from the folder name


def test_json_bad_records_name_index_and_line() -> None:
    items = _items(FIX / "bad.json")
    events = [i for i in items if isinstance(i, Event)]
    errors = [i for i in items if isinstance(i, RecordError)]
    assert len(events) == 2
    assert reject_reasons(errors, FIX / "bad.json") == [
        ":3 [[1]]: missing field 'time'",
        ":4 [[2]]: timestamp '2020-01-01 10:00:00' has no UTC offset and no timezone was given",
        ":5 [[3]]: expected an object, got str",
    ]


def test_html_us_export_with_locations_ads_and_offsets() -> None:
    weather, visited, train = _items(FIX / "search_us.html")
    # 3:04:05 PM PST = 15:04:05 − 8 h → 23:04:05 UTC
    assert weather.timestamp == datetime(2020, 1, 5, 23, 4, 5, tzinfo=UTC)
    assert weather.fields == {
        "product": "Search", "header": "Search", "title": Text("Searched for weather zurich"),
        "action": "Searched",
        "query": Text("weather zurich"), "url": Text("https://www.google.com/search?q=weather+zurich"),
        "location_source": "From your places (Home)",
        "location_lat": 37.773692, "location_lng": -122.429737,
    }
    # Narrow no-break space before AM; PDT = −7 h.
    assert visited.timestamp == datetime(2020, 7, 4, 18, 59, 59, tzinfo=UTC)
    assert visited.fields["from_ads"] is True
    # GMT+5:30 written out, past midnight back into the previous UTC day (leap day).
    assert train.timestamp == datetime(2020, 2, 28, 18, 30, tzinfo=UTC)


def test_html_gb_export_channel_and_bad_cells() -> None:
    items = _items(FIX / "youtube_gb.html")
    watched = items[0]
    assert watched.timestamp == datetime(2020, 1, 5, 14, 4, 5, tzinfo=UTC)  # CET = +1
    assert watched.fields["channel"] == Text("Bakery Channel")
    assert watched.fields["url"] == Text("https://www.youtube.com/watch?v=abc123")
    assert reject_reasons(items, FIX / "youtube_gb.html", events=1) == [
        ":7 [outer-cell[1]]: unknown timezone abbreviation 'XYZ' in '6 Jan 2020, 09:00:00 XYZ'; "
        'add it to params abbreviations (e.g. {"XYZ": "+01:00"})',
        ":11 [outer-cell[2]]: time '7 Jan 2020, 09:00:00' has no timezone abbreviation",
        ":15 [outer-cell[3]]: no .content-cell.mdl-typography--body-1 (title and time)",
    ]


def test_params_abbreviations_extend_the_table() -> None:
    items = _items(FIX / "youtube_gb.html", {"abbreviations": {"XYZ": "-03:30"}})
    mystery = items[1]
    assert isinstance(mystery, Event)
    assert mystery.timestamp == datetime(2020, 1, 6, 12, 30, tzinfo=UTC)
    with pytest.raises(PluginError, match="offset"):
        GoogleActivityImporter({"abbreviations": {"XYZ": "+25:00"}})
    with pytest.raises(PluginError, match="1-6 letters"):
        GoogleActivityImporter({"abbreviations": {"X Y": "+01:00"}})


def test_html_without_records_raises() -> None:
    with pytest.raises(RecordError, match="not a My Activity HTML page: no div.outer-cell"):
        _items(FIX / "not_activity.html")


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("Jan 5, 2020, 3:04:05 PM PST", datetime(2020, 1, 5, 23, 4, 5, tzinfo=UTC)),
        ("Dec 31, 2019, 11:59:59 PM EST", datetime(2020, 1, 1, 4, 59, 59, tzinfo=UTC)),
        ("Jun 1, 2021, 12:30:00 AM AEST", datetime(2021, 5, 31, 14, 30, tzinfo=UTC)),
        ("Sept 5, 2020, 3:04:05 a.m. IST", datetime(2020, 9, 4, 21, 34, 5, tzinfo=UTC)),
        ("5 Jan 2020, 15:04:05 GMT", datetime(2020, 1, 5, 15, 4, 5, tzinfo=UTC)),
        ("5 Jan 2020, 15:04:05 UTC-03", datetime(2020, 1, 5, 18, 4, 5, tzinfo=UTC)),
        # a real en-US page from a Turkish account (2024): every record said TRT
        ("Jan 9, 2024, 2:14:04\u202fPM TRT", datetime(2024, 1, 9, 11, 14, 4, tzinfo=UTC)),
    ],
)
def test_abbreviation_table_is_explicit(text: str, expected: datetime) -> None:
    assert parse_activity_time(text) == expected


def test_unknown_abbreviation_is_an_error_and_table_documents_offsets() -> None:
    with pytest.raises(ValueError, match="unknown timezone abbreviation 'QQT'"):
        parse_activity_time("Jan 5, 2020, 3:04:05 PM QQT")
    with pytest.raises(ValueError, match="not like"):
        parse_activity_time("yesterday")
    assert TZ_ABBREVIATIONS["PST"] == -480 and TZ_ABBREVIATIONS["CEST"] == 120


def test_detect_scores(activity: Path) -> None:
    importer = GoogleActivityImporter()
    assert importer.detect(activity / "Search" / "My Activity.json") == 0.95
    assert importer.detect(activity / "Maps" / "My Activity.json") == 0.95
    assert importer.detect(FIX / "search_us.html") == 0.95
    assert importer.detect(FIX / "youtube.json") == 0.85  # right shape, other name
    assert importer.detect(FIX / "not_activity.html") == 0.0


def test_store_import_reimport_rollback_and_skip_bad(activity: Path, tmp_path: Path) -> None:
    store = EventStore(f"sqlite:///{tmp_path}/e.db")
    importer = GoogleActivityImporter()
    good, bad = activity / "Search" / "My Activity.json", FIX / "youtube_gb.html"
    _, again, _ = check_store_round_trip(
        store, importer, good, 2, bad, r"youtube_gb.html:7 \[outer-cell\[1\]\]", (1, 3)
    )
    assert again.duplicate == 2
    assert store.count(type="youtube") == 1
    store.close()


def test_the_type_comes_from_products_and_the_header_is_kept(tmp_path: Path) -> None:
    """A real Ads export: every record says products ["Ads"], the headers name the site or app."""
    records = [
        {"header": header, "title": f"Viewed an ad from {header}", "time": f"2021-03-0{i + 1}T10:00:00Z",
         "products": ["Ads"], "details": [{"name": "From Google Ads"}]}
        for i, header in enumerate(["youtube.com", "AirBattery", "Ads"])
    ] + [
        {"header": "Google Play Music", "title": "Listened to Song", "time": "2021-03-05T10:00:00Z",
         "products": ["Google Play Music"]},
        {"header": "Play Music", "title": "Listened to Song 2", "time": "2021-03-06T10:00:00Z",
         "products": ["Google Play Music"]},
        {"header": "Maps", "title": "Viewed area", "time": "2021-03-07T10:00:00Z"},  # no products
        {"title": "Searched for x", "time": "2021-03-08T10:00:00Z", "products": []},  # neither
    ]
    path = tmp_path / "Ads" / "My Activity.json"
    path.parent.mkdir()
    path.write_text(json.dumps(records))
    items = _items(path)
    assert [e.type for e in items] == ["ads"] * 3 + ["google_play_music"] * 2 + ["maps", "ads"]
    assert [e.fields.get("header") for e in items] == [
        "youtube.com", "AirBattery", "Ads", "Google Play Music", "Play Music", "Maps", None
    ]
    assert [e.fields["product"] for e in items][:3] == ["Ads"] * 3
    records[0]["products"] = "Ads"
    path.write_text(json.dumps(records))
    assert reject_reasons(_items(path)[:1], path) == [":1 [[0]]: 'products' is a str, not a list"]


def test_html_type_from_the_products_caption(tmp_path: Path) -> None:
    page = (FIX / "search_us.html").read_text()
    assert page.count('<p class="mdl-typography--title">Search<br></p>') == 3
    path = tmp_path / "page.html"
    path.write_text(page.replace('<p class="mdl-typography--title">Search<br></p>',
                                 '<p class="mdl-typography--title">www.example.com<br></p>', 1))
    first, *rest = _items(path)
    assert first.type == "search" and first.fields["header"] == "www.example.com"
    assert [e.type for e in rest] == ["search", "search"]


def test_a_real_pages_inline_css_does_not_hide_it_from_detection(tmp_path: Path) -> None:
    """Google's stylesheet pushes the first record to byte 141,460: past any 4 KiB head."""
    page = (FIX / "search_us.html").read_text()
    css = "".join(f".mdl-cell--{i}-col{{width:calc({i}% - 16px)}}\n" for i in range(4000))
    big = page.replace("<style type=\"text/css\">", "<style type=\"text/css\">" + css, 1)
    path = tmp_path / "Search-activity.html"  # not called My Activity
    path.write_text(big)
    assert big.index('class="outer-cell') > 141_460
    importer = GoogleActivityImporter()
    assert importer.detect(path) == 0.95
    assert [e.type for e in _items(path)] == ["search"] * 3
    # Bounded: a page whose first record lies past HTML_DETECT_BYTES is not claimed by its content.
    filler = "<!--" + "x" * (1 << 20) + "-->"
    path.write_text(big.replace("<body>", "<body>" + filler, 1))
    assert importer.detect(path) == 0.0
