"""``anonml bench multiparty`` driven through Typer's CliRunner."""

from __future__ import annotations

import json
from pathlib import Path

import typer
from typer.testing import CliRunner

from anonml.commands.bench_multiparty import multiparty

# Mounted the way anonml.commands.bench mounts it on the bench group.
app = typer.Typer()
app.command("multiparty")(multiparty)
app.command("noop")(lambda: None)  # a second command keeps "multiparty" a subcommand

runner = CliRunner()


def test_table_json_and_plot(tmp_path: Path) -> None:
    out, png = tmp_path / "mp.json", tmp_path / "mp.png"
    result = runner.invoke(
        app,
        [
            "multiparty",
            "--dataset",
            "breast_cancer",
            "--methods",
            "batch,gop",
            "--parties",
            "5",
            "--skew",
            "uniform",
            "--skew",
            "0.01,0.29,0.2,0.25,0.25",
            "--eps",
            "1",
            "--folds",
            "2",
            "--json",
            str(out),
            "--plot",
            str(png),
        ],
    )
    assert result.exit_code == 0, result.output
    assert "multiparty baselines on breast_cancer" in result.stdout and "record" in result.stdout
    rows = json.loads(out.read_text())["rows"]
    assert {(r["method"], r["skew"]) for r in rows} == {
        ("batch", "uniform"),
        ("gop", "uniform"),
        ("batch", "[0.01,0.29,0.2,0.25,0.25]"),
        ("gop", "[0.01,0.29,0.2,0.25,0.25]"),
    }
    assert png.stat().st_size > 1000 and png.read_bytes()[:4] == b"\x89PNG"


def test_json_to_stdout_is_one_document() -> None:
    result = runner.invoke(
        app, ["multiparty", "--methods", "batch", "--eps", "1", "--folds", "2", "--json", "-"]
    )
    assert result.exit_code == 0, result.output
    document = json.loads(result.stdout)
    assert [r["method"] for r in document["rows"]] == ["batch"]
    assert document["rows"][0]["privacy_unit"] == "none"


def test_bad_input_exit_codes() -> None:
    unknown = runner.invoke(app, ["multiparty", "--methods", "nope"])
    assert unknown.exit_code == 2 and "unknown method(s) ['nope']" in unknown.output
    skew = runner.invoke(app, ["multiparty", "--parties", "2", "--skew", "0.5,0.2"])
    assert skew.exit_code == 2 and "sum to 0.7" in skew.output
    eps = runner.invoke(app, ["multiparty", "--eps", "a,b"])
    assert eps.exit_code == 2
