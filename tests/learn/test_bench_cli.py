"""``anonml bench adult`` driven through Typer's CliRunner: exit codes, table, JSON."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from anonml.commands.bench import app

runner = CliRunner()


@pytest.mark.slow
def test_adult_command_prints_a_table_and_writes_json(adult_dir: Path, tmp_path: Path):
    out = tmp_path / "rows.json"
    result = runner.invoke(
        app,
        [
            "adult",
            "--methods",
            "default,majority",
            "--eps",
            "1",
            "--trials",
            "1",
            "--data",
            str(adult_dir),
            "--json",
            str(out),
            "--seed",
            "3",
        ],
    )
    assert result.exit_code == 0, result.output
    assert "default" in result.stdout and "majority" in result.stdout and "AUC" in result.stdout
    assert "ECE" in result.stdout and "shuffle ε" in result.stdout
    rows = json.loads(out.read_text())
    assert [r["method"] for r in rows] == ["majority", "default"]
    assert rows[1]["epsilon"] == 1.0 and rows[1]["auc_mean"] > 0.75


@pytest.mark.slow
def test_json_dash_prints_exactly_one_document(adult_dir: Path):
    result = runner.invoke(
        app,
        [
            "adult",
            "--methods",
            "default",
            "--eps",
            "2",
            "--trials",
            "1",
            "--data",
            str(adult_dir),
            "--json",
            "-",
        ],
    )
    assert result.exit_code == 0, result.output
    rows = json.loads(result.stdout)
    assert len(rows) == 1 and rows[0]["method"] == "default" and rows[0]["epsilon"] == 2.0


def test_bad_options_are_usage_errors():
    result = runner.invoke(app, ["adult", "--eps", "one"])
    assert result.exit_code == 2
    result = runner.invoke(app, ["adult", "--methods", "default,magic"])
    assert result.exit_code == 2 and "magic" in result.output


def test_missing_data_is_an_expected_failure(tmp_path: Path):
    result = runner.invoke(app, ["adult", "--trials", "1", "--data", str(tmp_path)])
    assert result.exit_code == 1
    assert "UCI Adult not found" in result.output and "Traceback" not in result.output
    assert "--data DIR" in result.output and "path=" not in result.output


def test_a_missing_plot_extra_fails_before_any_computation(monkeypatch, tmp_path: Path):
    import sys

    import anonml.learn.harness as harness
    import anonml.learn.multiparty.harness as mp_harness

    calls: list[str] = []
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # "import matplotlib" now raises ImportError
    monkeypatch.setattr(harness, "run_adult_benchmark", lambda **kw: calls.append("adult"))
    monkeypatch.setattr(mp_harness, "run_multiparty_benchmark", lambda *a, **kw: calls.append("multiparty"))
    result = runner.invoke(app, ["adult", "--trials", "1", "--plot", str(tmp_path / "a.png")])
    assert result.exit_code == 1 and "plotting needs matplotlib" in result.output
    result = runner.invoke(
        app, ["multiparty", "--dataset", "breast_cancer", "--plot", str(tmp_path / "m.png")]
    )
    assert result.exit_code == 1 and "plotting needs matplotlib" in result.output
    assert calls == []  # neither benchmark started
