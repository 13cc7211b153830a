"""The importer author's kit: scaffold a plugin package, check an importer on a file, shared field readers.

``anonml importer new NAME`` writes a complete third-party package (pyproject
with the entry point, a working importer, a sample file and a test), and
``anonml importer check PATH`` reports what an importer makes of a file:
events, types, fields with their inferred kinds, the time range, rejects with
their line numbers, and whether importing it a second time adds nothing.

Beside :mod:`anonml.readers` (files, JSON, timestamps), two checks that several
importers make the same way, with the same messages: :func:`finite_number` (a
field's value as a finite float) and :func:`csv_header` (a CSV file's header
row, whose bad byte or malformed quoting refuses the file).
"""

from __future__ import annotations

import csv
import math
import re
import tempfile
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from string import Template
from typing import Any

from anonml.errors import AnonMLError, RecordError
from anonml.model import Event, field_kind
from anonml.plugins import Importer
from anonml.readers import TextLines

__all__ = ["CheckReport", "check_importer", "csv_header", "finite_number", "scaffold_importer"]

_NAME = re.compile(r"^[a-z][a-z0-9_]{0,40}$")


@dataclass
class CheckReport:
    """What an importer made of one file."""

    path: str
    importer: str
    version: str
    confidence: float
    events: int = 0
    static_events: int = 0
    users: list[str] = field(default_factory=list)
    types: dict[str, int] = field(default_factory=dict)
    fields: dict[str, dict[str, list[str]]] = field(default_factory=dict)
    first: str | None = None
    last: str | None = None
    timezone: str = "UTC (every timestamp is normalised to UTC on import)"
    rejects: list[dict[str, object]] = field(default_factory=list)
    fatal: str | None = None
    first_import_added: int = 0
    second_import_added: int | None = None

    @property
    def idempotent(self) -> bool | None:
        return None if self.second_import_added is None else self.second_import_added == 0

    def as_dict(self) -> dict[str, object]:
        return {**self.__dict__, "idempotent": self.idempotent}


def check_importer(path: Path, importer: Importer) -> CheckReport:
    """Run ``importer`` over ``path`` twice into a scratch store and describe the result.

    Nothing is written to the user's own store. A file-level failure is
    recorded in ``fatal`` instead of raised, so the report always comes back.
    """
    # Imported here, not at the top: importers import this module for its field readers,
    # and the store (SQLAlchemy) costs about 0.6 s to import, which parsing never needs.
    from anonml.store import EventStore

    report = CheckReport(
        path=str(path),
        importer=importer.name,
        version=importer.version,
        confidence=float(importer.detect(path)),
    )
    types: Counter[str] = Counter()
    kinds: dict[str, dict[str, set[str]]] = defaultdict(lambda: defaultdict(set))
    users: set[str] = set()
    times: list[datetime] = []
    try:
        for item in importer.parse(path):
            if isinstance(item, RecordError):
                report.rejects.append(
                    {"line": item.line, "record": item.record, "reason": item.reason}
                )
                continue
            _describe(item, types, kinds, users, times)
    except RecordError as exc:
        report.fatal = str(exc)
    except Exception as exc:  # a plugin bug must show up in the report, not kill the check
        report.fatal = f"importer raised {type(exc).__name__}: {exc} (a bug: parse must yield RecordError)"
    report.events = sum(types.values())
    report.static_events = report.events - len(times)
    report.types = dict(sorted(types.items()))
    report.fields = {t: {f: sorted(k) for f, k in sorted(fs.items())} for t, fs in sorted(kinds.items())}
    report.users = sorted(users)
    if times:
        report.first, report.last = min(times).isoformat(), max(times).isoformat()
    if report.fatal is None:
        with tempfile.TemporaryDirectory() as scratch:
            store = EventStore(f"sqlite:///{Path(scratch) / 'check.db'}")
            try:
                first = store.import_file(path, importer, skip_bad=True)
                second = store.import_file(path, importer, skip_bad=True)
            finally:
                store.close()
        report.first_import_added = first.inserted
        report.second_import_added = second.inserted
    return report


def finite_number(value: object, name: str) -> float:
    """``value`` (a number, or a number's text) as a finite float.

    Raises
    ------
    ValueError
        ``"<name>: <value!r> is not a number"`` when :func:`float` refuses it,
        ``"<name>: <value!r> is not finite"`` for NaN and ±inf.
    """
    try:
        number = float(value)  # type: ignore[arg-type]  # float() says what it accepts
    except (TypeError, ValueError):
        raise ValueError(f"{name}: {value!r} is not a number") from None
    if not math.isfinite(number):
        raise ValueError(f"{name}: {value!r} is not finite")
    return number


def csv_header(reader: Any, lines: TextLines, path: Path, name: str = "header") -> list[str] | None:
    """The first row of ``reader``, a :func:`csv.reader` over ``lines`` (:func:`anonml.readers.open_lines`).

    ``None`` for an empty file. The header names every column, so a header that
    cannot be read refuses the whole file (no ``--skip-bad`` can keep its rows).

    Raises
    ------
    RecordError
        At line 1, ``"unreadable <name>: <csv error>"`` for a :class:`csv.Error`; at
        the bad line, ``"unreadable <name>: not UTF-8 text: …"`` for a byte that is not UTF-8.
    """
    try:
        header = next(reader, None)
    except csv.Error as exc:
        raise RecordError(path, 1, f"unreadable {name}: {exc}") from None
    if lines.bad and (bad := lines.undecodable(1, reader.line_num)) is not None:
        raise RecordError(path, bad.line, f"unreadable {name}: {bad.reason}")
    return header


def _describe(
    event: Event,
    types: Counter[str],
    kinds: dict[str, dict[str, set[str]]],
    users: set[str],
    times: list[datetime],
) -> None:
    types[event.type] += 1
    for name, value in event.fields.items():
        kinds[event.type][name].add(field_kind(value).value)
    if event.user is not None:
        users.add(event.user)
    if event.timestamp is not None:
        times.append(event.timestamp)


_PYPROJECT = Template('''\
[build-system]
requires = ["setuptools>=70.1"]
build-backend = "setuptools.build_meta"

[project]
name = "anonml-importer-$dash"
version = "0.1.0"
description = "AnonML importer for $name exports"
requires-python = ">=3.11"
dependencies = ["anonml"]

[project.optional-dependencies]
dev = ["pytest>=8"]

[project.entry-points."anonml.importers"]
$name = "$package:$cls"

[tool.setuptools]
packages = ["$package"]
''')

_MODULE = Template('''\
"""AnonML importer for $name exports.

Format (JSON lines; one object per line; write yours here field by field):

* ``time`` — ISO 8601 with a UTC offset (``2024-05-01T09:30:00+02:00``);
  a time without an offset is rejected, never guessed;
* ``kind`` — the event type, a short lowercase word;
* ``value`` — a number.

Sample::

    {"time": "2024-05-01T09:30:00+02:00", "kind": "steps", "value": 1200}
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from anonml.errors import RecordError
from anonml.model import Event
from anonml.plugins import Importer
from anonml.readers import head, iter_json_lines, parse_timestamp


class $cls(Importer):
    """Reads $name JSON-lines exports."""

    name = "$name"
    version = "0.1"
    description = "$name exports (JSON lines of time, kind, value)"
    patterns = ("*.jsonl",)

    def detect(self, path: Path) -> float:
        start = head(path, 512)
        if path.suffix == ".jsonl" and '"kind"' in start and '"time"' in start:
            return 0.8
        return 0.0

    def parse(self, path: Path) -> Iterator[Event | RecordError]:
        for line, record in iter_json_lines(path):
            if isinstance(record, RecordError):
                yield record
                continue
            try:
                yield Event(
                    source=self.name,
                    type=str(record["kind"]),
                    timestamp=parse_timestamp(str(record["time"])),
                    fields={"value": float(record["value"])},
                )
            except KeyError as exc:
                yield RecordError(path, line, f"missing field {exc.args[0]!r}")
            except (TypeError, ValueError) as exc:
                yield RecordError(path, line, str(exc))
''')

_SAMPLE = """\
{"time": "2024-05-01T09:30:00+02:00", "kind": "steps", "value": 1200}
{"time": "2024-05-01T10:00:00+02:00", "kind": "steps", "value": 800}
{"time": "2024-05-01T10:05:00Z", "kind": "heart_rate", "value": 71}
"""

_TEST = Template('''\
"""Tests for the $name importer, on the sample file and on malformed input."""

from pathlib import Path

from anonml.errors import RecordError
from anonml.store import EventStore
from $package import $cls

SAMPLE = Path(__file__).parent / "sample.jsonl"


def test_sample_parses_to_typed_events():
    events = list($cls().parse(SAMPLE))
    assert [e.type for e in events] == ["steps", "steps", "heart_rate"]
    assert events[0].fields == {"value": 1200.0}
    assert events[0].timestamp.isoformat() == "2024-05-01T07:30:00+00:00"


def test_detects_its_own_files_only(tmp_path: Path):
    other = tmp_path / "other.jsonl"
    other.write_text('{"a": 1}\\n')
    assert $cls().detect(SAMPLE) >= 0.5
    assert $cls().detect(other) == 0.0


def test_bad_line_is_reported_with_its_line(tmp_path: Path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"time": "2024-05-01T09:30:00Z", "kind": "steps", "value": 1}\\n{"kind": "x"}\\n')
    items = list($cls().parse(bad))
    assert isinstance(items[1], RecordError)
    assert str(items[1]) == f"{bad}:2: missing field 'time'"


def test_reimport_adds_nothing(tmp_path: Path):
    store = EventStore(f"sqlite:///{tmp_path / 'e.db'}")
    assert store.import_file(SAMPLE, $cls()).inserted == 3
    assert store.import_file(SAMPLE, $cls()).inserted == 0
''')

_README = Template('''\
# anonml-importer-$dash

An [AnonML](https://pypi.org/project/anonml/) importer plugin for $name exports.

    pip install -e ".[dev]"      # registers the importer under the entry point "$name"
    anonml plugins               # lists it
    anonml importer check tests/sample.jsonl --importer $name
    pytest
''')


def scaffold_importer(name: str, parent: Path) -> Path:
    """Write a ready-to-install plugin package ``anonml-importer-<name>`` under ``parent``.

    Returns the package folder. Refuses a bad name or an existing folder.
    """
    if not _NAME.match(name):
        raise AnonMLError(f"importer name {name!r} must be snake_case: [a-z][a-z0-9_]*, at most 41 chars")
    dash = name.replace("_", "-")
    root = Path(parent) / f"anonml-importer-{dash}"
    if root.exists():
        raise AnonMLError(f"{root} already exists; remove it or choose another name")
    package = f"anonml_importer_{name}"
    cls = "".join(part.capitalize() for part in name.split("_")) + "Importer"
    values = {"name": name, "dash": dash, "package": package, "cls": cls}
    (root / package).mkdir(parents=True)
    (root / "tests").mkdir()
    (root / "pyproject.toml").write_text(_PYPROJECT.substitute(values))
    (root / "README.md").write_text(_README.substitute(values))
    (root / package / "__init__.py").write_text(_MODULE.substitute(values))
    (root / "tests" / "sample.jsonl").write_text(_SAMPLE)
    (root / "tests" / f"test_{name}.py").write_text(_TEST.substitute(values))
    return root
