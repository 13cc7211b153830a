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
    monkeypatch.setattr(harness, "run_benchmark", lambda *a, **kw: calls.append("adult"))
    monkeypatch.setattr(mp_harness, "run_multiparty_benchmark", lambda *a, **kw: calls.append("multiparty"))
    result = runner.invoke(app, ["adult", "--trials", "1", "--plot", str(tmp_path / "a.png")])
    assert result.exit_code == 1 and "plotting needs matplotlib" in result.output
    result = runner.invoke(
        app, ["multiparty", "--dataset", "breast_cancer", "--plot", str(tmp_path / "m.png")]
    )
    assert result.exit_code == 1 and "plotting needs matplotlib" in result.output
    assert calls == []  # neither benchmark started


def test_multiparty_runs_on_full_folds_pooled_and_labels_the_printed_condition_non_private():
    result = runner.invoke(
        app,
        [
            "multiparty", "--dataset", "breast_cancer", "--methods", "gop_printed,gop,batch", "--eps", "0.1",
            "--parties", "5,10", "--trials", "1", "--folds", "2", "--scale-on", "train",
            "--public-fraction", "0", "--pool-party-free", "--json", "-",
        ],
    )
    assert result.exit_code == 0, result.output
    rows = {r["method"]: r for r in json.loads(result.stdout)["rows"]}
    assert set(rows) == {"gop_printed", "gop", "batch"}  # one pooled row each, over K = 5 and 10
    assert rows["gop_printed"]["privacy_unit"] == "none" and rows["gop_printed"]["epsilon"] is None
    assert rows["gop"]["epsilon"] == 0.1 and rows["gop"]["privacy_unit"] == "record"
    table = runner.invoke(
        app,
        ["multiparty", "--dataset", "breast_cancer", "--methods", "gop_printed", "--eps", "0.1",
         "--trials", "1", "--folds", "2", "--scale-on", "train", "--public-fraction", "0",
         "--pool-party-free"],
    )
    assert table.exit_code == 0, table.output
    assert "0.1 (NON-PRIVATE)" in " ".join(table.stdout.split()) and "│ all │" in table.stdout
