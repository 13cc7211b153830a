"""``anonml demo`` never prints success for a run that fell short: it explains and exits non-zero."""

from __future__ import annotations

import dataclasses

import pytest
from typer.testing import CliRunner

from anonml import cli
from anonml.demo import DemoResult
from anonml.phases import ProblemPhase
from anonml.protocol import ReportAccount


def _result(**changes) -> DemoResult:
    healthy = DemoResult(
        students=400,
        peers=300,
        held_out=100,
        events_imported=1000,
        examples=400,
        dropout_rate=0.4,
        features=["a"],
        epsilon=3.0,
        auc=0.78,
        auc_central=0.82,
        auc_simulation=(0.79, 0.01),
        epsilon_per_peer={"min": 3.0, "mean": 3.0, "max": 3.0},
        packets_sent=10,
        packets_relayed=30,
        tokens_issued=225,
        tokens_verified=225,
        median_answers=70,
        rejects={},
        relay_rejects={},
        problem_id="p-x",
        median_pool=75,
        reports=ReportAccount(expected=225, received=225, lost=0),
    )
    return dataclasses.replace(healthy, **changes)


def test_a_healthy_run_has_no_shortfall() -> None:
    assert _result().shortfalls() == [] and _result().explanation() == ""
    assert _result(auc_aggregator=0.78).shortfalls() == []  # the aggregator scored what the demo did


@pytest.mark.parametrize(
    ("changes", "says"),
    [
        ({"median_answers": 0}, "none of the 75 median-pool peers answered"),
        (
            {"reports": ReportAccount(expected=225, received=190, lost=35, not_arrived=35)},
            "35 of 225 reports lost",
        ),
        ({"auc": 0.546}, "below the in-process simulation's range"),
        ({"phase": "degraded", "message": "too many lost"}, "ended 'degraded'"),
        ({"phase": ProblemPhase.DEGRADED, "message": "too many lost"}, "ended 'degraded'"),  # run_demo
        ({"auc_aggregator": 0.7799}, "the aggregator scored its model at AUC 0.779900"),
    ],
)
def test_each_shortfall_is_named(changes: dict, says: str) -> None:
    text = _result(**changes).explanation()
    assert text.startswith("THE PROTOCOL RUN FELL SHORT") and says in text


def test_the_cli_exits_non_zero_with_the_explanation(monkeypatch) -> None:
    import anonml.demo

    monkeypatch.setattr(anonml.demo, "run_demo", lambda *a, **k: _result(median_answers=0, auc=0.454))
    result = CliRunner().invoke(cli.app, ["demo", "--students", "40"])
    assert result.exit_code == 1
    assert "FELL SHORT" in result.output and "median-pool peers answered" in result.output
    assert "[bold" not in result.output  # styled, never printed as markup
    monkeypatch.setattr(anonml.demo, "run_demo", lambda *a, **k: _result())
    ok = CliRunner().invoke(cli.app, ["demo", "--students", "40"])
    assert ok.exit_code == 0 and "FELL SHORT" not in ok.output


def test_the_table_shows_the_round_s_fixed_waits_as_the_aggregator_kept_them() -> None:
    what = "roster / witness / report delay (the round's fixed waits)"
    waits = {"roster_seconds": 8.52, "witness_seconds": 3.0, "report_delay_seconds": 24.76}
    assert dict(_result(round_waits=waits).rows())[what] == "8.5 s / 3.0 s / 24.8 s"
    assert dict(_result().rows())[what] == "not known"  # no schedule in the status: said, not invented
