"""ical: a floating RDATE with no timezone is a bad record naming RDATE, as a floating DTSTART is.

It used to reach ``_Series.utc`` (all-day DTSTART) and fail an ``assert`` there — a traceback, or
under ``python -O`` a time read in the machine's own zone — or (zoned DTSTART) fail comparing naive
with aware times.
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

from anonml.errors import RecordError
from importers.ical import IcalImporter

REASON = ("property RDATE: floating time (no TZID, no Z) and no timezone; "
          "set params timezone or X-WR-TIMEZONE")


def _calendar(tmp_path: Path, start: str) -> Path:
    path = tmp_path / "rdate.ics"
    path.write_text("BEGIN:VCALENDAR\r\nBEGIN:VEVENT\r\nUID:r\r\n" + start + "\r\n"
                    "RDATE:20240105T100000\r\nEND:VEVENT\r\nEND:VCALENDAR\r\n", encoding="utf-8")
    return path


@pytest.mark.parametrize("start", ["DTSTART;VALUE=DATE:20240101", "DTSTART:20240101T100000Z"])
def test_a_floating_rdate_without_a_zone_is_a_bad_record(tmp_path: Path, start: str) -> None:
    path = _calendar(tmp_path, start)
    (error,) = IcalImporter().parse(path)
    assert isinstance(error, RecordError)
    assert str(error) == f"{path}:2 [VEVENT #1 UID r]: {REASON}"


def test_a_floating_rdate_is_read_in_the_given_zone(tmp_path: Path) -> None:
    path = _calendar(tmp_path, "DTSTART;VALUE=DATE:20240101")
    first, extra = IcalImporter({"timezone": "Europe/Paris"}).parse(path)
    assert first.timestamp == datetime(2023, 12, 31, 23, 0, tzinfo=UTC)  # midnight in Paris (UTC+1)
    assert extra.timestamp == datetime(2024, 1, 5, 9, 0, tzinfo=UTC)


def test_an_rdate_with_an_unknown_tzid_is_a_bad_record_naming_it(tmp_path: Path) -> None:
    # It was read silently as a floating time (in the given zone), as DTSTART's unknown TZID is not.
    path = tmp_path / "rdate.ics"
    path.write_text("BEGIN:VCALENDAR\r\nBEGIN:VEVENT\r\nUID:r\r\nDTSTART:20240101T100000Z\r\n"
                    "RDATE;TZID=Mars/Olympus_Mons:20240105T100000\r\nEND:VEVENT\r\nEND:VCALENDAR\r\n",
                    encoding="utf-8")
    (error,) = IcalImporter({"timezone": "Europe/Paris"}).parse(path)
    assert isinstance(error, RecordError)
    assert str(error) == (f"{path}:2 [VEVENT #1 UID r]: property RDATE: unknown TZID 'Mars/Olympus_Mons' "
                          "(no VTIMEZONE in the file and not an IANA name)")
