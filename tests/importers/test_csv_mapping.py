"""csv: the declarative mapping, every field type, the timezone rule, located errors, a store."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

from anonml.errors import PluginError, RecordError
from anonml.model import Event, Text
from anonml.store import EventStore
from importers.csv_mapping import CsvImporter, snake_case
from tests.importers.helpers import parse_failure, reject_reasons, rejects

FIX = Path(__file__).parent / "fixtures" / "csv"

PURCHASES = {
    "timestamp_column": "Date", "timestamp_format": "%d/%m/%Y %H:%M", "timezone": "Europe/Zurich",
    "event_type_column": "Kind", "delimiter": ";", "user_column": "Customer",
    "fields": {"Amount": "float", "Items": "int", "Refunded": "bool", "Shop": "categorical",
               "Note": "text", "Shipped": "datetime"},
}
BAD = {"timestamp_column": "when", "required": ["label"],
       "fields": {"price": "float", "count": "int", "flag": "bool", "label": "categorical"}}


def _items(params: dict, name: str) -> list[Event | RecordError]:
    return list(CsvImporter(params).parse(FIX / name))


def test_every_field_type_user_column_bom_multiline_and_blank_lines() -> None:
    page, purchase = _items(PURCHASES, "purchases.csv")
    assert page.type == "page_view" and page.user == "alice"
    assert page.timestamp == datetime(2020, 1, 5, 9, 0, tzinfo=UTC)  # 10:00 CET
    assert page.fields == {"note": Text("multi\nline note")}  # empty cells are left out
    assert purchase.user == "bob" and purchase.type == "purchase"
    assert purchase.fields == {"amount": 12.5, "items": 3, "refunded": True, "shop": "Migros",
                               "note": Text("plain"),
                               "shipped": datetime(2020, 1, 7, 7, 0, tzinfo=UTC)}
    assert isinstance(purchase.fields["note"], Text)
    assert not isinstance(purchase.fields["shop"], Text)
    assert type(purchase.fields["items"]) is int and type(purchase.fields["refunded"]) is bool


def test_offsets_in_column_rule_refuses_naive_values() -> None:
    items = _items({"timestamp_column": "time", "fields": {"value": "int"}}, "offsets.csv")
    assert [i.timestamp for i in items[:3]] == [
        datetime(2021, 3, 28, 0, 30, tzinfo=UTC), datetime(2021, 3, 28, 1, 30, tzinfo=UTC),
        datetime(2021, 3, 28, 12, 0, tzinfo=UTC)]
    assert str(items[3]) == (f"{FIX / 'offsets.csv'}:5: column 'time': '2021-03-28T13:00:00' "
                             "has no UTC offset and the mapping sets no timezone")


def test_iana_zone_applies_to_naive_values_only() -> None:
    params = {"timestamp_column": "time", "timezone": "America/New_York", "fields": {"value": "int"}}
    items = _items(params, "offsets.csv")
    assert all(isinstance(i, Event) for i in items)
    assert items[0].timestamp == datetime(2021, 3, 28, 0, 30, tzinfo=UTC)  # its own +01:00 kept
    assert items[3].timestamp == datetime(2021, 3, 28, 17, 0, tzinfo=UTC)  # 13:00 EDT


def test_bad_cells_name_line_and_column() -> None:
    items = _items(BAD, "bad_cells.csv")
    assert reject_reasons(items, FIX / "bad_cells.csv", events=1) == [
        ":3: column 'price': '1;5' is not a float",
        ":4: column 'count': '2.0' is not an int",
        ":5: column 'flag': 'maybe' is not a bool",
        ":6: column 'when': 'not a date' is not an ISO 8601 time",
        ":7: row has 4 cells, header has 5",
        ":8: column 'price': 'nan' is not a float",
        ":9: column 'label': empty cell in a required column",
    ]


def test_epoch_milliseconds_and_constant_type() -> None:
    params = {"timestamp_column": "ts_ms", "timestamp_format": "epoch_ms", "event_type": "steps",
              "fields": {"steps": "int"}}
    first, second = _items(params, "epoch.csv")
    assert first.type == second.type == "steps"
    assert second.timestamp == datetime(2020, 1, 1, 0, 1, 0, 500000, tzinfo=UTC)
    assert second.fields == {"steps": 20}


def test_file_level_problems_raise() -> None:
    with pytest.raises(RecordError, match=r"unterminated.csv:2: malformed CSV: unexpected end of data"):
        _items({"timestamp_column": "a", "fields": {"b": "text"}}, "unterminated.csv")
    importer = CsvImporter({"timestamp_column": "x", "fields": {"b": "text"}})
    assert parse_failure(importer, FIX / "epoch.csv") == (
        f"{FIX / 'epoch.csv'}:1: header lacks mapped column(s) ['b', 'x']; it has ['ts_ms', 'steps']"
    )
    with pytest.raises(RecordError, match="needs a mapping"):
        list(CsvImporter().parse(FIX / "epoch.csv"))


def test_params_are_validated() -> None:
    with pytest.raises(PluginError, match="unknown timezone 'Mars/Olympus'"):
        CsvImporter({"timezone": "Mars/Olympus"})
    with pytest.raises(PluginError, match="fields.Amount"):
        CsvImporter({"fields": {"Amount": "money"}})
    with pytest.raises(PluginError, match="strptime pattern"):
        CsvImporter({"timestamp_format": "dd/mm/yyyy"})
    with pytest.raises(PluginError, match="share one snake_case name"):
        CsvImporter({"fields": {"Unit Price": "float", "unit_price": "float"}})
    with pytest.raises(PluginError, match="delimiter"):
        CsvImporter({"delimiter": ";;"})
    assert snake_case("Unit Price (€)") == "unit_price"


def test_real_fitbit_sleep_score_sample(samples_dir: Path) -> None:
    params = {"timestamp_column": "timestamp", "event_type": "sleep_score",
              "fields": {"overall_score": "int", "deep_sleep_in_minutes": "int",
                         "restlessness": "float", "sleep_log_entry_id": "categorical"}}
    items = list(CsvImporter(params).parse(samples_dir / "fitbit" / "sleep_score.csv"))
    assert len(items) == 2 and all(isinstance(i, Event) for i in items)
    assert items[0].timestamp == datetime(2019, 8, 29, 6, 30, 30, tzinfo=UTC)
    assert items[0].fields == {"overall_score": 75, "deep_sleep_in_minutes": 77,
                               "restlessness": 0.070093458, "sleep_log_entry_id": "23644226806"}


def test_real_uber_sample_through_a_generic_mapping(samples_dir: Path) -> None:
    params = {"timestamp_column": "request_time", "timestamp_format": "%Y-%m-%d %H:%M:%S",
              "timezone": "UTC", "event_type_column": "status",
              "fields": {"fare_amount": "float", "city": "categorical", "begintrip_address": "text"}}
    items = list(CsvImporter(params).parse(samples_dir / "uber" / "trips_snake_case.csv"))
    assert len(items) == 1234 and all(isinstance(i, Event) for i in items)
    assert {i.type for i in items} == {"completed", "rider_canceled", "driver_canceled", "unfulfilled"}
    assert items[0].fields == {"fare_amount": 11.38, "city": "New York",
                               "begintrip_address": Text("Rockefeller Center")}


def test_detect_is_low_so_specific_importers_win(samples_dir: Path) -> None:
    uber = samples_dir / "uber" / "trips_snake_case.csv"
    assert CsvImporter().detect(uber) == 0.05
    assert CsvImporter({"timestamp_column": "request_time", "fields": {"city": "categorical"}}
                       ).detect(uber) == 0.25
    assert CsvImporter({"timestamp_column": "nope"}).detect(uber) == 0.05


def test_store_import_reimport_rollback_and_skip_bad(tmp_path: Path) -> None:
    store = EventStore(f"sqlite:///{tmp_path}/e.db")
    good = CsvImporter(PURCHASES)
    first = store.import_file(FIX / "purchases.csv", good)
    assert (first.inserted, first.rejected) == (2, 0)
    assert store.users() == ["alice", "bob"]
    assert store.import_file(FIX / "purchases.csv", good).inserted == 0
    bad = CsvImporter(BAD)
    with pytest.raises(RecordError, match=r"bad_cells.csv:3: column 'price'"):
        store.import_file(FIX / "bad_cells.csv", bad)
    assert store.count() == 2
    report = store.import_file(FIX / "bad_cells.csv", bad, skip_bad=True)
    assert (report.inserted, report.rejected) == (1, 7)
    assert [e.line for e in report.errors] == [3, 4, 5, 6, 7, 8, 9]
    assert store.count(source="csv") == 3
    store.close()


def test_a_latin1_byte_in_a_data_row_is_that_rows_bad_record(samples_dir: Path, tmp_path: Path) -> None:
    """A cp1252 'é' in row 60 of the real Uber sample, 5.6 KB in: read in 8 KiB chunks it failed the
    header; decoded line by line it is the bad record of line 60 and --skip-bad keeps the other rows."""
    lines = (samples_dir / "uber" / "trips_snake_case.csv").read_bytes().splitlines(keepends=True)
    assert b"Bangalore Palace" in lines[59]
    lines[59] = lines[59].replace(b"Bangalore Palace", b"Caf\xe9 Bangalore")
    path = tmp_path / "trips.csv"
    path.write_bytes(b"".join(lines))
    params = {"timestamp_column": "request_time", "timestamp_format": "%Y-%m-%d %H:%M:%S",
              "timezone": "UTC", "fields": {"begintrip_address": "text"}, "event_type": "trip"}
    column = lines[59].index(b"\xe9") + 1
    assert reject_reasons(rejects(list(CsvImporter(params).parse(path))), path) == [
        f":60: not UTF-8 text: byte 0xe9 at column {column} (invalid continuation byte)"
    ]
    store = EventStore(f"sqlite:///{tmp_path / 'events.db'}")
    with pytest.raises(RecordError, match=r"trips\.csv:60: not UTF-8 text"):
        store.import_file(path, CsvImporter(params))
    report = store.import_file(path, CsvImporter(params), skip_bad=True)
    assert (report.accepted, report.rejected) == (1233, 1)
    # A bad byte in the header still refuses the file, at line 1.
    lines[0] = lines[0].replace(b"city", b"cit\xe9")
    path.write_bytes(b"".join(lines))
    with pytest.raises(RecordError, match=r"trips\.csv:1: unreadable header: not UTF-8 text: byte 0xe9"):
        list(CsvImporter(params).parse(path))
