"""The importer author's kit: a scaffolded package installs, is listed and used, passes its tests."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from anonml.errors import AnonMLError
from anonml.importer_kit import check_importer, scaffold_importer


def _run(args: list[str], env: dict[str, str], cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(args, capture_output=True, text=True, env=env, cwd=cwd, timeout=300)


@pytest.mark.slow
def test_scaffold_installs_is_discovered_and_its_tests_pass(tmp_path: Path):
    env = {**os.environ, "ANONML_HOME": str(tmp_path / "home")}
    made = _run([sys.executable, "-m", "anonml", "importer", "new", "garmin_daily", "--dir",
                 str(tmp_path)], env)
    assert made.returncode == 0, made.stderr
    root = tmp_path / "anonml-importer-garmin-daily"
    assert (root / "pyproject.toml").read_text().count('garmin_daily = "anonml_importer_garmin_daily:') == 1

    site = tmp_path / "site"
    installed = _run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps",
                      "--no-build-isolation", "--target", str(site), str(root)], env)
    assert installed.returncode == 0, installed.stderr
    env["PYTHONPATH"] = os.pathsep.join([str(site), env.get("PYTHONPATH", "")])

    listed = _run([sys.executable, "-m", "anonml", "plugins", "--json"], env)
    assert listed.returncode == 0, listed.stderr
    assert [p for p in json.loads(listed.stdout) if p["name"] == "garmin_daily"] == [{
        "kind": "importer", "name": "garmin_daily", "version": "0.1",
        "description": "garmin_daily exports (JSON lines of time, kind, value)",
        "distribution": "anonml-importer-garmin-daily",
        "target": "anonml_importer_garmin_daily:GarminDailyImporter",
    }]
    imported = _run([sys.executable, "-m", "anonml", "import", str(root / "tests" / "sample.jsonl"),
                     "--store", f"sqlite:///{tmp_path / 'e.db'}", "--json"], env)
    assert imported.returncode == 0, imported.stderr
    assert json.loads(imported.stdout)[0]["inserted"] == 3
    assert "garmin_daily (confidence 0.80)" in imported.stderr

    tests = _run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests"], env, cwd=root)
    assert tests.returncode == 0, tests.stdout + tests.stderr
    assert "4 passed" in tests.stdout

    checked = _run([sys.executable, "-m", "anonml", "importer", "check",
                    str(root / "tests" / "sample.jsonl"), "--json"], env)
    assert checked.returncode == 0, checked.stderr
    report = json.loads(checked.stdout)
    assert report["importer"] == "garmin_daily"
    assert report["events"] == 3
    assert report["types"] == {"heart_rate": 1, "steps": 2}
    assert report["fields"]["steps"] == {"value": ["float"]}
    assert report["first"] == "2024-05-01T07:30:00+00:00"
    assert report["idempotent"] is True and report["first_import_added"] == 3


def test_check_reports_rejects_with_lines_and_fatal_errors(tmp_path: Path):
    import importlib.util

    root = scaffold_importer("demo_kit", tmp_path)
    init = root / "anonml_importer_demo_kit" / "__init__.py"
    spec = importlib.util.spec_from_file_location("kit_mod", init)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    importer = module.DemoKitImporter()
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"time": "2024-01-01T00:00:00Z", "kind": "a", "value": 1}\n{oops\n'
                   '{"time": "2024-01-01T00:00:00", "kind": "a", "value": 1}\n')
    report = check_importer(bad, importer)
    assert report.events == 1
    assert [r["line"] for r in report.rejects] == [2, 3]
    assert "no UTC offset" in report.rejects[1]["reason"]
    assert report.idempotent is True


def test_scaffold_refuses_bad_names_and_existing_folders(tmp_path: Path):
    with pytest.raises(AnonMLError, match="snake_case"):
        scaffold_importer("Bad-Name", tmp_path)
    scaffold_importer("ok", tmp_path)
    with pytest.raises(AnonMLError, match="already exists"):
        scaffold_importer("ok", tmp_path)
