"""FIT importer: a real Garmin fenix 5 run against upstream's own CSV of its records; damaged files; store."""

from __future__ import annotations

import csv
import gzip
from datetime import UTC, datetime
from pathlib import Path
from zoneinfo import ZoneInfo

import fitdecode
import pytest
from fitdecode.utils import compute_crc

from anonml.errors import RecordError
from anonml.model import Event
from anonml.store import EventStore
from importers.fit import SEMICIRCLE_DEG, FitImporter, _lap_start
from tests.importers.helpers import check_detect, only_events, parse_failure, reject_reasons

SAMPLES = Path(__file__).parent / "samples" / "fit"
SAMPLE = SAMPLES / "garmin-fenix-5-run.fit"


def _parse(path: Path) -> list[Event | RecordError]:
    return list(FitImporter().parse(path))


def _reference() -> list[dict[str, str]]:
    with open(SAMPLES / "garmin-fenix-5-run-records.csv", encoding="utf-8", newline="") as fh:
        return list(csv.DictReader(fh))


def test_records_match_upstreams_csv_of_the_same_file() -> None:
    events = only_events(_parse(SAMPLE))
    points = [e for e in events if e.type == "track_point"]
    rows = _reference()
    assert len(points) == len(rows) == 21
    pacific = ZoneInfo("America/Los_Angeles")
    for event, row in zip(points, rows, strict=True):
        local = datetime.strptime(row["timestamp"].replace(" PDT", ""), "%a %b %d %H:%M:%S %Y")
        assert event.timestamp == local.replace(tzinfo=pacific).astimezone(UTC)
        assert event.timestamp.tzinfo is UTC  # type: ignore[union-attr]
        assert event.fields == {
            "lat": int(row["position_lat"]) * SEMICIRCLE_DEG,
            "lon": int(row["position_long"]) * SEMICIRCLE_DEG,
            "elevation_m": pytest.approx(float(row["altitude"]), abs=1e-9),
            "distance_m": float(row["distance"]),
            "heart_rate": int(row["heart_rate"]),
            "cadence": int(row["cadence"]),
            "speed_mps": float(row["speed"]),
            "temperature_c": float(row["temperature"]),
            "sport": "running",
        }
    assert points[0].fields["lat"] == pytest.approx(38.2297873, abs=1e-7)  # Petaluma, California
    lap, activity = [e for e in events if e.type != "track_point"]
    assert lap.type == "lap" and lap.timestamp == points[0].timestamp
    assert activity.type == "activity" and activity.fields == {
        "sport": "running", "sub_sport": "generic", "duration_s": 56.887, "timer_s": 56.887,
        "distance_m": 157.56, "calories": 5, "avg_heart_rate": 90, "max_heart_rate": 112,
        "max_speed_mps": 3.658, "ascent_m": 2.0, "descent_m": 0.0, "trigger": "activity_end", "laps": 1,
        "device": "garmin fenix5",
    }
    assert activity.fields["distance_m"] == pytest.approx(float(rows[-1]["distance"]), abs=0.5)


def test_gzipped_file_gives_the_same_events(tmp_path: Path) -> None:
    packed = tmp_path / "1234567.fit.gz"
    packed.write_bytes(gzip.compress(SAMPLE.read_bytes()))
    assert _parse(packed) == _parse(SAMPLE)
    assert FitImporter().detect(packed) == 0.95


def _without_third_timestamp(target: Path) -> tuple[Path, int]:
    """The sample with its third record's timestamp set to FIT's "invalid" and the CRC recomputed."""
    data = bytearray(SAMPLE.read_bytes())
    with fitdecode.FitReader(SAMPLE, keep_raw_chunks=True) as reader:
        records = [f for f in reader if isinstance(f, fitdecode.FitDataMessage) and f.name == "record"]
    third = records[2]
    assert third.def_mesg.field_defs[0].def_num == 253  # timestamp first: right after the 1-byte header
    offset = third.chunk.offset
    data[offset + 1 : offset + 5] = b"\xff\xff\xff\xff"
    data[-2:] = compute_crc(data[:-2]).to_bytes(2, "little")
    target.write_bytes(bytes(data))
    return target, offset


def test_a_record_without_its_time_is_a_bad_record_named_by_index_and_byte(tmp_path: Path) -> None:
    path, offset = _without_third_timestamp(tmp_path / "bad.fit")
    items = _parse(path)
    assert reject_reasons(
        [i for i in items if isinstance(i, RecordError)], path
    ) == [f" [record[2] at byte {offset}]: missing timestamp"]
    assert sum(isinstance(i, Event) for i in items) == 22


def test_damaged_files(tmp_path: Path) -> None:
    data = SAMPLE.read_bytes()
    truncated = tmp_path / "truncated.fit"
    truncated.write_bytes(data[:2200])
    items = _parse(truncated)
    assert [i.type for i in items if isinstance(i, Event)] == ["track_point"] * 3
    assert isinstance(items[-1], RecordError) and "truncated after byte" in str(items[-1])
    assert str(items[-1]).endswith("; parsing stopped")
    corrupt = tmp_path / "corrupt.fit"
    corrupt.write_bytes(data[:-1] + bytes([data[-1] ^ 0xFF]))
    items = _parse(corrupt)
    assert sum(isinstance(i, Event) for i in items) == 23
    assert isinstance(items[-1], RecordError) and "CRC mismatch" in str(items[-1])
    text = tmp_path / "notes.fit"
    text.write_text("not a FIT file at all\n")
    assert parse_failure(FitImporter(), text).startswith(f"{text}: not a FIT file: ")


def test_device_relative_times_are_refused_not_guessed() -> None:
    path = SAMPLES / "compressed-speed-distance.fit"  # a Garmin Forerunner 70 that never learned the date
    items = _parse(path)
    assert items and all(isinstance(i, RecordError) for i in items)
    assert len(items) == 767  # 755 records, 11 laps, 1 session
    assert reject_reasons(items[:1], path) == [
        " [session[0] at byte 160]: start_time: 17217864 counts seconds from the device's power-on, "
        "not a UTC time"
    ]
    assert all("power-on" in str(i) for i in items)


class _Message:
    """What :func:`importers.fit._lap_start` reads of a FIT message: named field values."""

    def __init__(self, **values: object) -> None:
        self.values = values

    def has_field(self, name: str) -> bool:
        return name in self.values

    def get_value(self, name: str, fallback: object = None) -> object:
        return self.values.get(name, fallback)


def test_a_lap_without_start_time_starts_its_elapsed_time_before_its_end() -> None:
    end = datetime(2020, 9, 12, 12, 30, tzinfo=UTC)
    lap = _Message(timestamp=end, total_elapsed_time=90.5)
    assert _lap_start(lap) == datetime(2020, 9, 12, 12, 28, 29, 500000, tzinfo=UTC)  # type: ignore[arg-type]
    assert _lap_start(_Message(start_time=end, timestamp=end)) == end  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="missing start_time"):
        _lap_start(_Message(timestamp=end))  # type: ignore[arg-type]


def test_detect(tmp_path: Path) -> None:
    csv_export = SAMPLES / "garmin-fenix-5-run-records.csv"
    check_detect(FitImporter(), SAMPLE, tmp_path, "activity.bin", [csv_export])


def test_store_reimport_rollback_and_skip_bad(tmp_path: Path) -> None:
    store = EventStore(f"sqlite:///{tmp_path}/e.db")
    bad, _ = _without_third_timestamp(tmp_path / "bad.fit")
    with pytest.raises(RecordError, match=r"record\[2\] at byte \d+\]: missing timestamp"):
        store.import_file(bad, FitImporter())
    assert store.count() == 0
    report = store.import_file(bad, FitImporter(), skip_bad=True)
    assert (report.inserted, report.rejected) == (22, 1)
    assert store.import_file(SAMPLE, FitImporter()).inserted == 1  # the record the bad copy lacked
    assert store.import_file(SAMPLE, FitImporter()).inserted == 0
