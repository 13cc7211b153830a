"""The field readers several importers share (anonml.importer_kit): their values and exact messages."""

from __future__ import annotations

import csv
import math
from pathlib import Path

import pytest

from anonml.errors import RecordError
from anonml.importer_kit import csv_header, finite_number
from anonml.readers import open_lines


@pytest.mark.parametrize(
    ("value", "expected"), [("1.5", 1.5), (" -2 ", -2.0), (3, 3.0), (0.25, 0.25), ("1e3", 1000.0)]
)
def test_finite_number_reads_numbers_and_their_text(value: object, expected: float) -> None:
    assert finite_number(value, "x") == expected


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("north", "lat: 'north' is not a number"),
        ("", "lat: '' is not a number"),
        (None, "lat: None is not a number"),  # TypeError from float() is the same refusal
        ([1], "lat: [1] is not a number"),
        ("NaN", "lat: 'NaN' is not finite"),
        ("-inf", "lat: '-inf' is not finite"),
        (math.inf, "lat: inf is not finite"),
    ],
)
def test_finite_number_names_the_field_and_the_value(value: object, message: str) -> None:
    with pytest.raises(ValueError) as info:
        finite_number(value, "lat")
    assert str(info.value) == message


def _header(path: Path, name: str = "header") -> list[str] | None:
    with open_lines(path) as lines:
        reader = csv.reader(lines, strict=True)
        header = csv_header(reader, lines, path, name)
        assert reader.line_num <= 2  # the header row only: the data rows are left to the caller
        return header


def test_csv_header_is_the_first_row_or_none(tmp_path: Path) -> None:
    good = tmp_path / "good.csv"
    good.write_bytes(b"\xef\xbb\xbfa, b ,c\n1,2,3\n")
    assert _header(good) == ["a", " b ", "c"]  # the byte-order mark dropped, cells as written
    empty = tmp_path / "empty.csv"
    empty.write_bytes(b"")
    assert _header(empty) is None


def test_an_unreadable_header_refuses_the_file_at_its_line(tmp_path: Path) -> None:
    quoted = tmp_path / "quoted.csv"
    quoted.write_bytes(b'a,"b"c\n1,2\n')
    with pytest.raises(RecordError) as info:
        _header(quoted, "CSV header")
    assert str(info.value) == f"{quoted}:1: unreadable CSV header: ',' expected after '\"'"
    latin = tmp_path / "latin.csv"
    latin.write_bytes(b'"a\nb\xe9",c\n1,2\n')  # the header's second line holds the bad byte
    with pytest.raises(RecordError) as info:
        _header(latin)
    assert str(info.value).startswith(f"{latin}:2: unreadable header: not UTF-8 text: byte 0xe9 at column 2")
