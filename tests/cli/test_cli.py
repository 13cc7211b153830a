"""The CLI on real SQLite files: exit codes, output, one-line errors and no tracebacks.

Most commands run in this process (:func:`run`: the same app as ``python -m anonml``); the
expected-failure messages run as a user runs them, in a real process (:func:`run_process`).
"""

from __future__ import annotations

import json
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
import pytest

from anonml.model import Event
from anonml.store import EventStore, ImportRow, add_events

T0 = datetime(2022, 1, 3, tzinfo=UTC)


def run(*args: str, home: Path) -> subprocess.CompletedProcess[str]:
    """``anonml ARGS`` in this process (Click's CliRunner: the same app, parser and error handling as
    ``python -m anonml``), its exit code and its separate stdout and stderr as a process would give.

    An exception the CLI does not turn into its one-line error is raised here, failing the test, as
    the traceback a real process would print would fail it. What only a process shows (start-up
    imports, signals, shell completion, a served port) runs as one: :func:`run_process`.
    """
    from typer.testing import CliRunner

    from anonml.cli import app

    result = CliRunner().invoke(app, list(args), prog_name="anonml", env={"ANONML_HOME": str(home)},
                                catch_exceptions=False)
    return subprocess.CompletedProcess(["anonml", *args], result.exit_code, result.stdout, result.stderr)


def run_process(*args: str, home: Path) -> subprocess.CompletedProcess[str]:
    """``python -m anonml ARGS`` as a user runs it: a real process, its exit code, stdout and stderr."""
    import os

    env = {**os.environ, "ANONML_HOME": str(home)}
    return subprocess.run([sys.executable, "-m", "anonml", *args], capture_output=True, text=True,
                          env=env, timeout=120)


@pytest.fixture
def populated(tmp_path: Path) -> str:
    """A store with three users' activity, written through the library."""
    url = f"sqlite:///{tmp_path / 'events.db'}"
    store = EventStore(url)
    events = []
    for user, days in {"ann": [0, 1, 2, 20], "bob": [0, 3], "cy": [5, 6, 16, 17]}.items():
        for d in days:
            events.append(Event(source="edx", type="play_video", timestamp=T0 + timedelta(days=d),
                                fields={"code": f"v{d}"}, user=user))
    with store.session() as s, s.begin():
        row = ImportRow(importer="test", importer_version="0", path="-", file_sha256="0" * 64,
                        user_id="-", started_at=datetime.now(UTC))
        s.add(row)
        s.flush()
        row.accepted = len(events)
        row.duplicate = len(events) - add_events(s, events, user="-", import_id=row.id)
    return url


def test_plugins_json_is_one_document(tmp_path: Path):
    result = run("plugins", "--json", home=tmp_path)
    assert result.returncode == 0
    names = {(p["kind"], p["name"]) for p in json.loads(result.stdout)}
    assert ("instancer", "user_window") in names and ("featurizer", "declarative") in names


def test_events_json_counts_and_ranges(populated: str, tmp_path: Path):
    result = run("events", "--store", populated, "--json", home=tmp_path)
    assert result.returncode == 0, result.stderr
    (row,) = json.loads(result.stdout)
    assert row == {"source": "edx", "type": "play_video", "count": 10,
                   "first": T0.isoformat(), "last": (T0 + timedelta(days=20)).isoformat()}


def test_events_by_import(populated: str, tmp_path: Path):
    result = run("events", "--store", populated, "--by-import", "--json", home=tmp_path)
    (rec,) = json.loads(result.stdout)
    assert rec["importer"] == "test" and rec["added"] == 10


def test_featurize_writes_npz_with_labels(populated: str, tmp_path: Path):
    params = {
        "instancer": {"origin": T0.isoformat(), "history_periods": 1, "label_start": 2, "label_end": 3},
        "featurizer": {"features": [{"name": "plays", "type": "play_video", "low": 0, "high": 50}]},
    }
    out = tmp_path / "m.npz"
    result = run("featurize", "--store", populated, "--instancer", "user_window", "--featurizer",
                 "declarative", "--params", json.dumps(params), "-o", str(out), home=tmp_path)
    assert result.returncode == 0, result.stderr
    with np.load(out) as data:
        assert list(data["entities"]) == ["ann", "bob", "cy"]
        np.testing.assert_array_equal(data["X"], [[3], [2], [2]])
        np.testing.assert_array_equal(data["y"], [0, 1, 0])  # bob alone is silent in week 2 (days 14-20)


def test_featurize_csv(populated: str, tmp_path: Path):
    params = {"featurizer": {"features": [{"name": "plays", "low": 0, "high": 50}]},
              "instancer": {"history_periods": 1, "label_start": 1, "label_end": 4}}
    out = tmp_path / "m.csv"
    result = run("featurize", "--store", populated, "--instancer", "user_window", "--featurizer",
                 "declarative", "--params", json.dumps(params), "-o", str(out), home=tmp_path)
    assert result.returncode == 0, result.stderr
    lines = out.read_text().splitlines()
    assert lines[0] == "entity,plays,label"
    assert lines[1:] == ["ann,3.0,0", "bob,2.0,1", "cy,2.0,0"]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["import", "{missing}"], "no such file or folder"),
        (["import", "{data}", "--importer", "nope"], "no importer named 'nope'"),
        (["import", "{data}"], "no importer recognises it"),
        (["featurize", "--instancer", "nope", "--featurizer", "declarative", "-o", "x.csv"],
         "no instancer named 'nope'; installed instancers: per_event, user_window"),
        (["featurize", "--instancer", "user_window", "--featurizer", "declarative", "-o", "x.csv",
          "--params", "{bad"], "--params: invalid JSON at column 2"),
        (["featurize", "--instancer", "user_window", "--featurizer", "declarative", "-o", "x.txt"],
         "unknown output format '.txt'"),
        (["featurize", "--instancer", "user_window", "--featurizer", "declarative", "-o", "x.csv",
          "--params", '{"featurizer": {"features": []}}'], "bad params for 'declarative'"),
    ],
)
def test_expected_failures_exit_1_with_one_line_and_no_traceback(tmp_path: Path, args, message):
    data = tmp_path / "mystery.bin"
    data.write_bytes(b"\x00\x01binary")
    args = [a.replace("{missing}", str(tmp_path / "absent.json")).replace("{data}", str(data))
            for a in args]
    result = run_process(*args, home=tmp_path)  # what a terminal shows: a real process's whole stderr
    assert result.returncode == 1
    assert message in result.stderr
    assert "Traceback" not in result.stderr


def test_usage_error_exits_2(tmp_path: Path):
    assert run("featurize", home=tmp_path).returncode == 2


def _zip_folder(folder: Path, target: Path) -> Path:
    import zipfile

    with zipfile.ZipFile(target, "w") as zf:
        for p in sorted(folder.rglob("*")):
            if p.is_file():
                zf.write(p, p.relative_to(folder))
    return target


def test_import_a_takeout_zip_dispatches_each_member(samples_dir: Path, tmp_path: Path):
    archive = _zip_folder(samples_dir / "google_takeout", tmp_path / "takeout.zip")
    store = f"sqlite:///{tmp_path / 'e.db'}"
    result = run("import", str(archive), "--store", store, "--json", home=tmp_path)
    assert result.returncode == 0, result.stderr
    reports = json.loads(result.stdout)
    assert sorted((r["importer"], r["inserted"]) for r in reports) == [
        ("google_activity", 2), ("google_activity", 2), ("google_location", 3)]
    assert all(r["path"].startswith(f"{archive}!/Takeout/") for r in reports)
    again = json.loads(run("import", str(archive), "--store", store, "--json", home=tmp_path).stdout)
    assert sum(r["inserted"] for r in again) == 0
    by_import = json.loads(run("events", "--store", store, "--by-import", "--json", home=tmp_path).stdout)
    assert sorted(r["added"] for r in by_import) == [0, 0, 0, 2, 2, 3]  # the second import adds nothing


def test_import_dry_run_stores_nothing(samples_dir: Path, tmp_path: Path):
    store = f"sqlite:///{tmp_path / 'e.db'}"
    result = run("import", str(samples_dir / "google_takeout"), "--dry-run", "--store", store,
                 home=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "google_location" in result.stderr and "0.95" in result.stderr
    assert EventStore(store).count() == 0


def test_import_params_name_unknown_importer(samples_dir: Path, tmp_path: Path):
    result = run("import", str(samples_dir / "google_takeout"), "--params", '{"nope": {}}',
                 "--store", f"sqlite:///{tmp_path / 'e.db'}", home=tmp_path)
    assert result.returncode == 1
    assert "no importer named 'nope' (named in --params)" in result.stderr
