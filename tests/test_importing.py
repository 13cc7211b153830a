"""Import orchestration: per-path detection, stopping at a failed path, options checked once."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import ClassVar

import pytest

from anonml.detection import NotRecognised
from anonml.errors import AnonMLError, RecordError
from anonml.importing import ImportOptions, choose_for_file, import_paths
from anonml.model import Event
from anonml.plugins import Importer
from anonml.store import EventStore


class _Lines(Importer):
    """One event per line of a ``.lines`` file; a line ``bad`` is a bad record."""

    name: ClassVar[str] = "lines"
    version: ClassVar[str] = "0"

    def detect(self, path: Path) -> float:
        return 0.9 if path.suffix == ".lines" else 0.0

    def parse(self, path: Path) -> Iterator[Event | RecordError]:
        for number, line in enumerate(path.read_text().splitlines(), 1):
            if line == "bad":
                yield RecordError(path, number, "bad line")
            else:
                yield Event(source=self.name, type="line", fields={"text": line})


def _files(tmp_path: Path, *contents: str) -> list[Path]:
    paths = []
    for index, text in enumerate(contents):
        path = tmp_path / f"f{index}.lines"
        path.write_text(text)
        paths.append(path)
    return paths


def test_import_paths_stops_at_the_failed_path_and_names_what_was_committed(tmp_path: Path):
    paths = _files(tmp_path, "a\nb\n", "c\nbad\n", "d\n")
    store = EventStore(f"sqlite:///{tmp_path / 'e.db'}")
    result = import_paths(paths, store, [_Lines()], ImportOptions())
    assert [r.inserted for r in result.reports] == [2]
    assert result.failed == paths[1]
    assert isinstance(result.error, RecordError) and str(result.error) == f"{paths[1]}:2: bad line"
    assert result.not_tried == (paths[2],)
    assert store.count() == 2  # the failed file stored nothing


def test_import_paths_refuses_a_missing_path_before_committing(tmp_path: Path):
    paths = [*_files(tmp_path, "a\n"), tmp_path / "absent.lines"]
    store = EventStore(f"sqlite:///{tmp_path / 'e.db'}")
    with pytest.raises(RecordError, match="absent.lines: no such file or folder"):
        import_paths(paths, store, [_Lines()], ImportOptions())
    assert store.count() == 0


def test_dry_run_decides_and_stores_nothing(tmp_path: Path):
    paths = _files(tmp_path, "a\n")
    store = EventStore(f"sqlite:///{tmp_path / 'e.db'}")
    said: list[str] = []

    class Listener:
        def message(self, text: str) -> None:
            said.append(text)

        def planned(self, plan: object) -> None:
            raise AssertionError("a single file is not an archive")

        def progress(self, path: Path):  # pragma: no cover - not reached in a dry run
            raise AssertionError("nothing is imported in a dry run")

    result = import_paths(paths, store, [_Lines()], ImportOptions(dry_run=True), Listener())
    assert result.reports == () and result.error is None
    assert said == [f"{paths[0]}: lines (confidence 0.90)"]
    assert store.count() == 0


def test_choose_for_file_refuses_an_unrecognised_file(tmp_path: Path):
    other = tmp_path / "x.txt"
    other.write_text("a\n")
    with pytest.raises(NotRecognised, match="no importer recognises it"):
        choose_for_file(other, [_Lines()])
    assert choose_for_file(other, [_Lines()], named=True)[1] == "lines (as asked)"


def test_options_refuse_an_unknown_tie_rule():
    with pytest.raises(AnonMLError, match="--on-tie must be 'pick' or 'skip', not 'coin'"):
        ImportOptions(on_tie="coin")  # type: ignore[arg-type]
