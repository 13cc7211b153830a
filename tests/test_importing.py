"""Import orchestration: per-path detection, stopping at a failed path, options checked once."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import ClassVar

import pytest

from anonml.detection import NotRecognised
from anonml.errors import AnonMLError, PluginNotFound, RecordError
from anonml.importing import (
    ImportOptions,
    ParamSpec,
    choose_for_file,
    import_paths,
    importer_params,
    resolve_candidates,
)
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


def test_flat_params_reach_the_importers_that_take_them(samples_dir: Path):
    candidates = resolve_candidates(None, {"timezone": "Europe/Amsterdam"})
    by_name = {c.name: c for c in candidates}
    assert by_name["fitbit"].params.timezone == by_name["uber"].params.timezone == "Europe/Amsterdam"
    assert {"google_activity", "edx", "spotify"} <= set(candidates.refused)
    assert "fitbit" not in candidates.refused and candidates.flat_keys == ("timezone",)
    chosen, _ = choose_for_file(samples_dir / "fitbit" / "sleep.json", candidates)
    assert chosen.name == "fitbit" and chosen.params.timezone == "Europe/Amsterdam"
    # Per importer, nothing is refused; a blank importer name is.
    assert resolve_candidates(None, {"fitbit": {"timezone": "UTC"}}).refused == {}
    with pytest.raises(AnonMLError, match="--importer is empty"):
        resolve_candidates("  ", {})
    with pytest.raises(AnonMLError, match="--importer is empty"):
        ImportOptions(importer="")


def test_an_archive_member_read_by_an_importer_refusing_flat_params_stops_the_archive(
    samples_dir: Path, tmp_path: Path
):
    folder = tmp_path / "export"
    folder.mkdir()
    shutil.copy(samples_dir / "fitbit" / "sleep.json", folder / "sleep.json")
    shutil.copy(samples_dir / "google_takeout" / "Takeout" / "My Activity" / "Search" / "My Activity.json",
                folder / "My Activity.json")
    store = EventStore(f"sqlite:///{tmp_path / 'e.db'}")
    candidates = resolve_candidates(None, {"timezone": "UTC"})
    result = import_paths([folder], store, candidates, ImportOptions())
    assert result.reports == () and store.count() == 0
    assert str(result.error).startswith(
        f"{folder}: My Activity.json: read by 'google_activity', which does not take the --params given"
    )


def test_importer_params_describe_each_field():
    (abbreviations,) = importer_params("google_activity")
    assert abbreviations == ParamSpec("abbreviations", "dict[str, str]", "{}", "≤ 200 entries", "")
    csv = {spec.name: spec for spec in importer_params("csv")}
    assert csv["required"].type == "list[str]" and csv["required"].default == "[]"
    assert csv["event_type"].bounds == "matches ^[a-z][a-z0-9_]{0,63}$"
    assert csv["fields"].type.startswith('dict[str, one of "float", "int"')
    assert importer_params("edx") == []
    with pytest.raises(PluginNotFound, match="no importer named 'icl'"):
        importer_params("icl")
