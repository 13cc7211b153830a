"""uber: both CSV header styles, the timezone rule, the saved trips page, errors, a store."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

from anonml.errors import PluginError, RecordError
from anonml.model import Event, Text
from anonml.store import EventStore
from importers.uber import UberImporter
from tests.importers.helpers import check_store_round_trip, parse_failure, reject_reasons

FIX = Path(__file__).parent / "fixtures" / "uber"


def _items(path: Path, params: dict | None = None) -> list[Event | RecordError]:
    return list(UberImporter(params).parse(path))


@pytest.fixture()
def snake(samples_dir: Path) -> Path:
    return samples_dir / "uber" / "trips_snake_case.csv"


def test_snake_case_sample_needs_an_explicit_timezone(snake: Path) -> None:
    assert parse_failure(UberImporter(), snake) == (
        f"{snake}:1: this trips CSV (snake_case header) has times without a UTC offset; "
        "pass params timezone, an IANA name such as 'America/New_York' or 'UTC'")


def test_snake_case_sample_all_rows(snake: Path) -> None:
    items = _items(snake, {"timezone": "UTC"})
    assert len(items) == 1234 and all(isinstance(i, Event) for i in items)
    first = items[0]
    assert first.type == "trip" and first.timestamp == datetime(2017, 2, 27, 12, 18, tzinfo=UTC)
    assert first.fields == {
        "city": "New York", "product_type": "ubercomfort", "status": "completed",
        "begin_time": datetime(2017, 2, 27, 12, 31, tzinfo=UTC), "wait_minutes": 13.0,
        "dropoff_time": datetime(2017, 2, 27, 12, 44, tzinfo=UTC), "duration_minutes": 13.0,
        "begin_lat": 40.7587, "begin_lng": -73.9787, "dropoff_lat": 40.7127,
        "dropoff_lng": -74.0134, "distance_mi": 3.69, "fare_amount": 11.38,
        "fare_currency": "USD", "begin_address": Text("Rockefeller Center"),
        "dropoff_address": Text("One World Trade Center"),
    }
    statuses = [i.fields["status"] for i in items]
    assert statuses.count("completed") == 864 and statuses.count("rider_canceled") == 219
    assert {i.fields["fare_currency"] for i in items} == {"USD", "INR", "GBP", "SGD", "AUD"}


def test_snake_case_zone_shifts_every_time(snake: Path) -> None:
    first = _items(snake, {"timezone": "America/New_York"})[0]
    assert first.timestamp == datetime(2017, 2, 27, 17, 18, tzinfo=UTC)  # 12:18 EST
    assert first.fields["begin_time"] == datetime(2017, 2, 27, 17, 31, tzinfo=UTC)


def test_request_time_style_offsets_sentinels_and_bad_rows() -> None:
    items = _items(FIX / "trips_data.csv")
    done, canceled = items[0], items[1]
    assert done.timestamp == datetime(2019, 5, 9, 6, 26, 38, tzinfo=UTC)
    assert done.fields["wait_minutes"] == pytest.approx(4.4)
    assert done.fields["fare_currency"] == "USD"  # upper-cased
    assert done.fields["begin_address"] == Text("1 City Hall Sq, Boston, MA")
    # 1970-01-01 begin/dropoff sentinels and empty cells are left out.
    assert canceled.fields == {"city": "Boston", "product_type": "uberx", "status": "canceled",
                               "distance_mi": 0.0, "fare_amount": 5.0, "fare_currency": "USD"}
    assert reject_reasons(items, FIX / "trips_data.csv", events=2) == [
        ":4: Request Time: '2019-05-11 08:00:00' has no UTC offset; pass params timezone (IANA name)",
        ":5: Begin Trip Lat: '142.36' is not a coordinate within ±90",
        ":6: Fare Amount: 'free' is not a number",
        ":7: Request Time: missing request time",
        ":8: Request Time: 'yesterday' is not like '2019-05-09 06:26:38 +0000 UTC'",
    ]


def test_request_time_style_naive_cell_read_in_given_zone() -> None:
    items = _items(FIX / "trips_data.csv", {"timezone": "America/New_York"})
    pool = items[2]
    assert isinstance(pool, Event) and pool.timestamp == datetime(2019, 5, 11, 12, 0, tzinfo=UTC)


def test_saved_trips_page() -> None:
    with pytest.raises(RecordError, match="a saved trips page shows local times; pass params timezone"):
        _items(FIX / "trips_page.html")
    boston, paris, canceled, bad = _items(FIX / "trips_page.html", {"timezone": "America/New_York"})
    assert boston.timestamp == datetime(2019, 5, 9, 6, 26, tzinfo=UTC)  # 2:26 AM EDT
    assert boston.fields == {
        "city": "Boston", "product_type": "uberx", "fare_amount": 14.87, "fare_currency": "$",
        "status": "completed", "begin_address": Text("1 City Hall Sq, Boston, MA"),
        "begin_time": datetime(2019, 5, 9, 6, 26, tzinfo=UTC),
        "dropoff_address": Text("Harvard Square, Cambridge, MA"),
        "dropoff_time": datetime(2019, 5, 9, 6, 50, tzinfo=UTC), "duration_minutes": 24.0,
    }
    # €8,50 (decimal comma); the ride crosses midnight, so dropoff is the next day.
    assert paris.fields["fare_amount"] == 8.5 and paris.fields["fare_currency"] == "EUR"
    assert paris.fields["duration_minutes"] == 25.0
    assert canceled.fields["status"] == "canceled" and canceled.fields["fare_amount"] == 5.0
    assert canceled.timestamp == datetime(2019, 6, 1, 4, 0, tzinfo=UTC)  # no detail: date at 00:00
    assert str(bad) == f"{FIX / 'trips_page.html'}:42 [trip row 4]: date '2019-06-02' is not MM/DD/YY"


def test_saved_page_without_data_titles_uses_positions() -> None:
    toronto, short = _items(FIX / "trips_page_positional.html", {"timezone": "America/Toronto"})
    assert toronto.fields == {"city": "Toronto", "product_type": "uberxl", "fare_amount": 23.1,
                              "fare_currency": "CAD", "status": "completed"}
    assert "driver" not in str(toronto.fields).lower()  # the driver's name is never read
    assert short.reason == ("trip row has 3 cells and no data-title attributes; "
                            "expected arrow, date, driver, fare, car, city, payment")


def test_unrecognised_page_and_csv_raise(samples_dir: Path) -> None:
    assert parse_failure(UberImporter({"timezone": "UTC"}), FIX / "not_trips.html") == (
        f"{FIX / 'not_trips.html'}: page structure not recognised: no tr.trip-expand__origin "
        "trip rows (expected a saved riders.uber.com/trips page)")
    with pytest.raises(RecordError, match="not an Uber trips CSV"):
        _items(samples_dir / "fitbit" / "sleep_score.csv")


def test_bad_timezone_param() -> None:
    with pytest.raises(PluginError, match="unknown timezone"):
        UberImporter({"timezone": "Boston"})


def test_detect_scores(snake: Path) -> None:
    importer = UberImporter()
    assert importer.detect(snake) == 0.95
    assert importer.detect(FIX / "trips_data.csv") == 0.95
    assert importer.detect(FIX / "trips_page.html") == 0.9


def test_store_import_reimport_rollback_and_skip_bad(snake: Path, tmp_path: Path) -> None:
    store = EventStore(f"sqlite:///{tmp_path}/e.db")
    first, _, report = check_store_round_trip(
        store, UberImporter({"timezone": "UTC"}), snake, 1234,
        FIX / "trips_data.csv", r"trips_data.csv:5: Begin Trip Lat", (3, 4),
    )
    assert first.accepted == 1234
    assert [e.line for e in report.errors] == [5, 6, 7, 8]
    store.close()


def test_product_type_spellings_are_one_category() -> None:
    items = _items(FIX / "product_spellings.csv")
    assert all(isinstance(i, Event) for i in items)
    assert [i.fields.get("product_type") for i in items] == [
        "uberx", "uberx", "uberx", "uberx_share", "uberxl", None]
