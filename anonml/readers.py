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
import re
import zlib
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
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
    "TextLines",
    "open_lines",
    "undecodable",
    "json_values",
    "load_json",
    "parse_timestamp",
    "resolve_timezone",
    "TimeZoneName",
]

_GZIP_MAGIC = b"\x1f\x8b"


#: What reading a damaged file raises: OSError (a bad gzip header, a read failure), EOFError (a gzip
#: stream cut short) and zlib.error (a gzip stream corrupt in its middle: "invalid stored block lengths").
READ_ERRORS: tuple[type[Exception], ...] = (OSError, EOFError, zlib.error)


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


def csv_rows(
    reader: Any, path: Path, width: int, lines: TextLines | None = None
) -> Iterator[tuple[int, list[str]] | RecordError]:
    """The data rows left in ``reader`` (a :func:`csv.reader` past its header), each with its first line.

    Blank rows carry no record and are skipped; a row of another number of cells than
    ``width`` (the header's) is yielded as a :class:`RecordError` naming its line. With
    the reader reading ``lines`` (:func:`open_lines`), a row holding a line that is not
    UTF-8 is a bad record at that line too (``--skip-bad`` imports the other rows). A
    malformed row raises :class:`RecordError` at its line: what follows it cannot be
    split into rows with confidence.
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
        if lines is not None and lines.bad and (bad := lines.undecodable(start, last)) is not None:
            yield bad
            continue
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


#: Lines as text mode with ``newline=""`` ends them: ``\r\n``, ``\n`` or a lone ``\r``.
_LINE = re.compile(rb"[^\r\n]*(?:\r\n|\r|\n)|[^\r\n]+")


def _split_lines(data: bytes) -> list[bytes]:
    """``data`` cut into lines, each with its end, as :func:`open_text` cuts the decoded text."""
    return _LINE.findall(data)


def undecodable(path: Path, line: int, raw: bytes, exc: UnicodeDecodeError) -> RecordError:
    """The bad record of line ``line`` of ``path`` (bytes ``raw``, not UTF-8): the byte and its column."""
    column = len(raw[: exc.start].decode("utf-8", errors="replace")) + 1
    return RecordError(
        path, line, f"not UTF-8 text: byte 0x{raw[exc.start]:02x} at column {column} ({exc.reason})"
    )


class TextLines:
    """The lines of a binary stream, each decoded on its own, for :func:`csv.reader`.

    Decoding line by line (not in 8 KiB chunks, as a text-mode file does) keeps a
    bad byte at its own line: the line is handed on decoded with
    ``surrogateescape`` (so the CSV reader still splits its row correctly) and
    its reason recorded in :attr:`bad`, line number → :class:`RecordError`, for
    the caller to report the row as a bad record (:func:`csv_rows`). Lines end
    as text mode with ``newline=""`` ends them; a UTF-8 byte-order mark opening
    the first line is dropped.
    """

    def __init__(self, path: Path, stream: IO[bytes], encoding: str = "utf-8") -> None:
        self.path = path
        self.bad: dict[int, RecordError] = {}
        self._stream = stream
        self._encoding = encoding

    def __iter__(self) -> Iterator[str]:
        number = 0
        try:
            for physical in self._stream:
                # A lone \r inside ends a line too (rare: one more pass only then).
                lone_cr = physical.count(b"\r") > physical.endswith(b"\r\n")
                for raw in _split_lines(physical) if lone_cr else (physical,):
                    number += 1
                    yield self._decode(number, raw)
        except READ_ERRORS as exc:
            raise RecordError(self.path, number + 1, f"cannot read: {exc}") from None

    def _decode(self, number: int, raw: bytes) -> str:
        if number == 1 and raw.startswith(b"\xef\xbb\xbf"):
            raw = raw[3:]
        try:
            return raw.decode(self._encoding)
        except UnicodeDecodeError as exc:
            self.bad[number] = undecodable(self.path, number, raw, exc)
            return raw.decode(self._encoding, errors="surrogateescape")

    def undecodable(self, first: int, last: int) -> RecordError | None:
        """The bad record of the first undecodable line in lines ``first``..``last``, if any."""
        return next((self.bad[n] for n in range(first, last + 1) if n in self.bad), None)


@contextmanager
def open_lines(path: Path, encoding: str = "utf-8") -> Iterator[TextLines]:
    """:class:`TextLines` of (possibly gzipped) ``path``; an unopenable file raises :class:`RecordError`."""
    with open_checked(path, open_bytes) as stream:
        yield TextLines(path, stream, encoding)


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
    except READ_ERRORS:
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


def json_values(
    path: Path, lines: Sequence[str | RecordError], first_line: int
) -> Iterator[tuple[int, Any]]:
    """:func:`iter_json_lines` over a run of ``lines`` whose first is line ``first_line`` of ``path``.

    Each line goes straight to :func:`parse_json`; only a line it refuses is
    looked at again: blank (skipped, not an error), a line that was not UTF-8
    (:func:`block_lines` put its :class:`RecordError` in its place), a ``#``
    comment, or JSON broken at a column (both bad records).
    """
    for lineno, line in enumerate(lines, first_line):
        try:
            value = parse_json(line)
        except (json.JSONDecodeError, TypeError) as exc:
            if isinstance(line, RecordError):  # not UTF-8 (block_lines): a bad record already
                value = line
            elif not line.strip():
                continue
            elif line.lstrip().startswith("#"):
                value = RecordError(
                    path, lineno, "a '#' comment line, not JSON (--skip-bad reports it and imports the rest)"
                )
            else:  # a str, so exc is a JSONDecodeError
                value = _json_line_error(path, lineno, line, exc)  # type: ignore[arg-type]
        yield lineno, value


def _json_line_error(path: Path, lineno: int, line: str, exc: json.JSONDecodeError) -> RecordError:
    """A line that is not JSON, with the column where parsing stopped; a line cut short says so."""
    text = line.rstrip("\r\n")
    reason = f"invalid JSON at column {min(exc.pos, len(text)) + 1}: {exc.msg}"
    if exc.pos >= len(text) or exc.msg.startswith("Unterminated string"):
        reason += f" (the line ends at column {len(text)}, inside a value: cut short?)"
    return RecordError(path, lineno, reason)


def iter_line_chunks(
    path: Path, size: int = 2000, *, first_size: int | None = None
) -> Iterator[tuple[int, list[str | RecordError]]]:
    """``(number of the first line, up to size lines)`` for the whole (possibly gzipped) file.

    The unit a :class:`~anonml.plugins.ChunkedImporter` parses. Lines are decoded as
    :func:`block_lines` decodes them: a line that is not UTF-8 stands in its chunk
    as the :class:`RecordError` naming its true line (a bad record, like a line
    that is not JSON). ``first_size`` makes the first chunk shorter. An
    unopenable file or a truncated gzip stream raises :class:`RecordError`.
    """
    first, pending, want = 1, [], first_size or size
    try:
        for block_first, block in iter_line_blocks(path, 1 << 16):
            pending.extend(block_lines(path, block, block_first))
            while len(pending) >= want:
                yield first, pending[:want]
                first, pending, want = first + want, pending[want:], size
    except RecordError:
        if pending:  # the lines read whole before the failure are parsed first
            yield first, pending
        raise
    if pending:
        yield first, pending


def iter_line_blocks(
    path: Path, size: int = 1 << 20, *, first_size: int | None = None
) -> Iterator[tuple[int, bytes]]:
    """``(number of the first line, bytes of whole lines)`` for the whole (possibly gzipped) file.

    Blocks of about ``size`` bytes (``first_size`` for the first), each cut
    after its last ``\n``, so no line is split; undecoded, so the reader does
    no per-line work at all (:func:`block_lines` decodes and splits, in the
    worker process that parses the block). Lines are counted as text mode
    with universal newlines counts them (``\n``, ``\r\n`` or a lone ``\r``).
    A read that fails (a truncated gzip stream) first yields the whole lines
    read before it, then raises :class:`RecordError` naming the line the data
    stops in.
    """
    with open_checked(path, open_bytes) as fh:
        first, rest, want = 1, b"", first_size or size
        while True:
            piece, failure = _read_up_to(fh, want)
            if failure is not None:
                # What was read whole goes on; the error names the line the data stops in.
                data = rest + piece
                cut = max(data.rfind(b"\n"), data.rfind(b"\r")) + 1
                if cut:
                    yield first, data[:cut]
                    first += _count_lines(data[:cut])
                raise RecordError(path, first, f"cannot read on from this line: {failure}")
            if not piece:  # end of file: the last line, if any, has no end
                if rest:
                    yield first, rest
                return
            cut = piece.rfind(b"\n") + 1  # rest holds no "\n": the block ends in this piece
            if cut == 0:  # no line ends in it yet: read on
                rest += piece
                continue
            # One copy of the piece (joined to the line begun before it), not two.
            block = b"".join((rest, memoryview(piece)[:cut])) if rest else piece[:cut]
            rest = piece[cut:]
            yield first, block
            first += _count_lines(block)
            want = size


def _read_up_to(fh: IO[bytes], size: int) -> tuple[bytes, Exception | None]:
    """Up to ``size`` bytes (fewer only at the end), and the error that stopped the reading, if any.

    Read in the stream's own pieces (``read1``), so bytes decompressed before a
    truncated gzip stream's end are kept, not lost with the failing call.
    """
    data = bytearray()
    try:
        piece = fh.read1(size)  # type: ignore[attr-defined]
        if len(piece) == size or not piece:  # a plain file's one read: kept, not copied twice
            return piece, None
        data += piece
        while len(data) < size and (piece := fh.read1(size - len(data))):  # type: ignore[attr-defined]
            data += piece
    except READ_ERRORS as exc:
        return bytes(data), exc
    return bytes(data), None


def _count_lines(block: bytes) -> int:
    """Lines in ``block`` as universal newlines split it.

    UTF-8 never puts 0x0A or 0x0D inside a multi-byte character. Without a
    ``\r`` (the common case) the lines are counted as ``BytesIO`` cuts them,
    finding each ``\n`` with memchr: a third of the time of ``bytes.count``,
    which tests every byte (0.35 us per edX line in the importing process).
    """
    if b"\r" not in block:
        return len(io.BytesIO(block).readlines()) or 1  # an empty block counts as one line
    ends = block.count(b"\n") + block.count(b"\r") - block.count(b"\r\n")
    return ends + (not block.endswith((b"\n", b"\r")))


def block_lines(path: Path, block: bytes, first_line: int) -> list[str | RecordError]:
    """The lines of a block of :func:`iter_line_blocks`, split as :func:`open_text` splits them.

    The block is decoded whole (the fast path); when that fails it is decoded
    line by line, and a line that is not UTF-8 is replaced by the
    :class:`RecordError` naming its true line, the byte and its column, so one
    bad byte costs one record, not the file (:func:`json_values` yields it as a
    bad record).
    """
    try:
        return io.StringIO(block.decode("utf-8"), newline="").readlines()  # type: ignore[return-value]
    except UnicodeDecodeError:
        pass
    lines: list[str | RecordError] = []
    for lineno, raw in enumerate(_split_lines(block), first_line):
        try:
            lines.append(raw.decode("utf-8"))
        except UnicodeDecodeError as exc:
            lines.append(undecodable(path, lineno, raw, exc))
    return lines


def load_json(path: Path) -> Any:
    """One whole JSON document; a syntax error names its line and column."""
    try:
        with open_text(path) as fh:
            return json.load(fh)
    except json.JSONDecodeError as exc:
        raise RecordError(path, exc.lineno, f"invalid JSON at column {exc.colno}: {exc.msg}") from None
    except UnicodeDecodeError as exc:
        raise RecordError(path, None, f"not UTF-8 text: {exc.reason}") from None
    except READ_ERRORS as exc:
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
