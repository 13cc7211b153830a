"""Small, shared readers for importer authors: files, JSON, timestamps.

Every importer needs the same few things: open a file that may be gzipped,
peek at its head cheaply in ``detect``, walk JSON lines with line numbers,
load one JSON document with a located error, and turn a timestamp string into
an aware UTC datetime under an explicit timezone rule. They live here once so
built-in and third-party importers behave alike.
"""

from __future__ import annotations

import csv
import gzip
import io
import json
from collections.abc import Callable, Iterator, Sequence
from datetime import UTC, datetime, tzinfo
from pathlib import Path
from typing import IO, Annotated, Any, TypeVar
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

import orjson
from pydantic import AfterValidator, StringConstraints

from anonml.errors import RecordError

_F = TypeVar("_F")

__all__ = [
    "parse_json",
    "open_text",
    "open_checked",
    "csv_rows",
    "head",
    "iter_json_lines",
    "iter_line_chunks",
    "iter_line_blocks",
    "block_lines",
    "open_bytes",
    "json_values",
    "load_json",
    "parse_timestamp",
    "resolve_timezone",
    "TimeZoneName",
]

_GZIP_MAGIC = b"\x1f\x8b"


def _is_gzip(path: Path) -> bool:
    with open(path, "rb") as fh:
        return fh.read(2) == _GZIP_MAGIC


def open_text(path: Path, encoding: str = "utf-8") -> IO[str]:
    """Open ``path`` for reading text, transparently gunzipping ``.gz`` content.

    Decoding errors are not hidden: a non-UTF-8 byte raises where it is read.
    """
    if _is_gzip(path):
        return gzip.open(path, "rt", encoding=encoding, newline="")
    return open(path, encoding=encoding, newline="")


def open_checked(path: Path, opener: Callable[..., _F] = open_text, **options: Any) -> _F:
    """``opener(path, **options)`` (default :func:`open_text`), refusing an unopenable file.

    Raises
    ------
    RecordError
        ``cannot open: <reason>`` naming ``path`` (no line) when the opener raises :class:`OSError`.
    """
    try:
        return opener(path, **options)
    except OSError as exc:
        raise RecordError(path, None, f"cannot open: {exc.strerror or exc}") from None


def csv_rows(reader: Any, path: Path, width: int) -> Iterator[tuple[int, list[str]] | RecordError]:
    """The data rows left in ``reader`` (a :func:`csv.reader` past its header), each with its first line.

    Blank rows carry no record and are skipped; a row of another number of cells than
    ``width`` (the header's) is yielded as a :class:`RecordError` naming its line. A
    malformed row or a non-UTF-8 byte raises :class:`RecordError` at its line: what
    follows it cannot be split into rows with confidence.
    """
    last = reader.line_num
    while True:
        start = last + 1
        try:
            row = next(reader)
        except StopIteration:
            return
        except csv.Error as exc:
            raise RecordError(path, start, f"malformed CSV: {exc}") from None
        except UnicodeDecodeError as exc:
            raise RecordError(path, start, f"not UTF-8 text: {exc.reason}") from None
        last = reader.line_num
        if not any(cell.strip() for cell in row):
            continue
        if len(row) != width:
            yield RecordError(path, start, f"row has {len(row)} cells, header has {width}")
            continue
        yield start, row


def open_bytes(path: Path) -> IO[bytes]:
    """Open ``path`` for reading bytes, transparently gunzipping ``.gz`` content."""
    if _is_gzip(path):
        return gzip.open(path, "rb")
    return open(path, "rb")


def head(path: Path, size: int = 4096) -> str:
    """The first ``size`` bytes of (decompressed) ``path`` as text, for cheap detection.

    Returns ``""`` for anything unreadable, so ``detect`` can simply say 0.
    """
    try:
        if not path.is_file():
            return ""
        if _is_gzip(path):
            with gzip.open(path, "rb") as fh:
                raw = fh.read(size)
        else:
            with open(path, "rb") as fh:
                raw = fh.read(size)
    except (OSError, EOFError):
        return ""
    return raw.decode("utf-8", errors="replace").lstrip("\ufeff")


def parse_json(text: str | bytes) -> Any:
    """``json.loads`` semantics and error messages at orjson's speed.

    orjson parses the common case about 3x faster; what it refuses (a syntax
    error, ``NaN`` literals, integers past 64 bits) is handed to ``json.loads``,
    which either accepts it too or raises its own, clearer ``JSONDecodeError``.
    """
    try:
        return orjson.loads(text)
    except orjson.JSONDecodeError:
        return json.loads(text)


def iter_json_lines(path: Path) -> Iterator[tuple[int, Any]]:
    """``(line_number, value)`` for each non-blank line; a bad line yields a RecordError value.

    Line numbers are 1-based. The caller yields the ``RecordError`` on so the
    import can abort or skip it.
    """
    for first_line, lines in iter_line_chunks(path):
        yield from json_values(path, lines, first_line)


def json_values(path: Path, lines: Sequence[str], first_line: int) -> Iterator[tuple[int, Any]]:
    """:func:`iter_json_lines` over a run of ``lines`` whose first is line ``first_line`` of ``path``.

    Each line goes straight to :func:`parse_json`; only a line it refuses is
    checked for being blank (skipped, not an error).
    """
    for lineno, line in enumerate(lines, first_line):
        try:
            value = parse_json(line)
        except json.JSONDecodeError as exc:
            if not line.strip():
                continue
            value = RecordError(path, lineno, f"invalid JSON: {exc.msg}")
        yield lineno, value


def iter_line_chunks(
    path: Path, size: int = 2000, *, first_size: int | None = None
) -> Iterator[tuple[int, list[str]]]:
    """``(number of the first line, up to size lines)`` for the whole (possibly gzipped) file.

    The unit parallel parsing hands to a worker process (:mod:`anonml.parallel_import`);
    memory stays at one chunk per consumer. ``first_size`` makes the first
    chunk shorter (the one parsed before the workers start). An unreadable
    file, a non-UTF-8 byte or a truncated gzip stream raises
    :class:`RecordError` naming the line where reading stopped.
    """
    with open_checked(path) as fh:
        first, lines, want = 1, [], first_size or size
        try:
            for line in fh:
                lines.append(line)
                if len(lines) == want:
                    yield first, lines
                    first, lines, want = first + want, [], size
            if lines:
                yield first, lines
        except (UnicodeDecodeError, OSError, EOFError) as exc:
            # The lines read whole come first (their own bad records are reported as
            # they would be line by line), then the error at the line after them.
            if lines:
                yield first, lines
            lineno = first + len(lines)
            if isinstance(exc, UnicodeDecodeError):
                raise RecordError(path, lineno, f"not UTF-8 text: {exc.reason}") from None
            raise RecordError(path, lineno, f"cannot read: {exc}") from None


def iter_line_blocks(
    path: Path, size: int = 1 << 20, *, first_size: int | None = None
) -> Iterator[tuple[int, bytes]]:
    """``(number of the first line, bytes of whole lines)`` for the whole (possibly gzipped) file.

    Blocks of about ``size`` bytes (``first_size`` for the first), each cut
    after its last ``\n``, so no line is split; undecoded, so the reader does
    no per-line work at all (:func:`block_lines` decodes and splits, in the
    worker process that parses the block). Lines are counted as text mode
    with universal newlines counts them (``\n``, ``\r\n`` or a lone ``\r``).
    """
    with open_checked(path, open_bytes) as fh:
        first, rest, want = 1, b"", first_size or size
        try:
            while data := fh.read(want):
                data = rest + data
                cut = data.rfind(b"\n") + 1
                if cut == 0:  # no line ends in it yet: read on
                    rest = data
                    continue
                block, rest = data[:cut], data[cut:]
                yield first, block
                first += _count_lines(block)
                want = size
        except (OSError, EOFError) as exc:
            raise RecordError(path, first, f"cannot read: {exc}") from None
        if rest:
            yield first, rest


def _count_lines(block: bytes) -> int:
    """Lines in ``block`` as universal newlines split it.

    UTF-8 never puts 0x0A or 0x0D inside a multi-byte character.
    """
    ends = block.count(b"\n")
    if b"\r" in block:  # rare in JSON lines: one more pass to count lone \r
        ends += block.count(b"\r") - block.count(b"\r\n")
    return ends + (not block.endswith((b"\n", b"\r")))


def block_lines(path: Path, block: bytes, first_line: int) -> tuple[list[str], RecordError | None]:
    """The lines of a block of :func:`iter_line_blocks`, split as :func:`open_text` splits them.

    A non-UTF-8 byte ends the block: the lines before the one holding it are
    returned with a :class:`RecordError` naming that line.
    """
    try:
        return io.StringIO(block.decode("utf-8"), newline="").readlines(), None
    except UnicodeDecodeError as exc:
        good = block[: exc.start]
        cut = max(good.rfind(b"\n"), good.rfind(b"\r")) + 1
        lines = io.StringIO(good[:cut].decode("utf-8"), newline="").readlines()
        return lines, RecordError(path, first_line + len(lines), f"not UTF-8 text: {exc.reason}")


def load_json(path: Path) -> Any:
    """One whole JSON document; a syntax error names its line and column."""
    try:
        with open_text(path) as fh:
            return json.load(fh)
    except json.JSONDecodeError as exc:
        raise RecordError(path, exc.lineno, f"invalid JSON at column {exc.colno}: {exc.msg}") from None
    except UnicodeDecodeError as exc:
        raise RecordError(path, None, f"not UTF-8 text: {exc.reason}") from None
    except (OSError, EOFError) as exc:
        raise RecordError(path, None, f"cannot read: {exc}") from None


def resolve_timezone(name: str) -> tzinfo:
    """An IANA zone (``"Europe/Berlin"``) or ``"UTC"``; unknown names raise ``ValueError``."""
    if name.upper() in {"UTC", "Z", "GMT"}:
        return UTC
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        raise ValueError(f"unknown timezone {name!r} (use an IANA name such as 'Europe/Paris')") from None


def _known_timezone(name: str) -> str:
    resolve_timezone(name)  # ValueError names the bad zone
    return name


#: A param naming a time zone: an IANA name (``"Europe/Paris"``) or ``"UTC"``,
#: checked once when the params are validated and kept as the name given, so
#: params stay plain data. Importers resolve it with :func:`resolve_timezone`.
TimeZoneName = Annotated[
    str, StringConstraints(min_length=1, max_length=64), AfterValidator(_known_timezone)
]


def parse_timestamp(
    value: str,
    *,
    fmt: str | None = None,
    assume_tz: tzinfo | None = None,
) -> datetime:
    """Parse a timestamp string to an aware UTC datetime.

    Parameters
    ----------
    value : str
        ISO 8601 (``Z`` and ``±HH:MM`` / ``±HHMM`` offsets accepted) unless
        ``fmt`` is given, then ``datetime.strptime`` with ``fmt``.
    assume_tz : tzinfo, optional
        The zone a value *without* an offset is in. Without it such a value
        raises ``ValueError``: a timezone is never guessed.

    Raises
    ------
    ValueError
        Unparseable text, or no offset and no ``assume_tz``.
    """
    text = value.strip()
    if fmt is None:
        if text.endswith(("Z", "z")):
            text = text[:-1] + "+00:00"
        parsed = datetime.fromisoformat(text)
    else:
        parsed = datetime.strptime(text, fmt)
    if parsed.tzinfo is None:
        if assume_tz is None:
            raise ValueError(f"timestamp {value!r} has no UTC offset and no timezone was given")
        parsed = parsed.replace(tzinfo=assume_tz)
    return parsed.astimezone(UTC)
