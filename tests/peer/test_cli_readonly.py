"""Read-only peer commands create no state: no ledger, no identity, no peer database."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from anonml.commands.peer import app as peer_cli

runner = CliRunner()


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    home = tmp_path / "home"
    monkeypatch.setenv("ANONML_HOME", str(home))
    for name in ("ANONML_PEER_LEDGER_URL", "ANONML_PEER_STATE_URL", "ANONML_PEER_IDENTITY_FILE",
                 "ANONML_PEER_STORE_URL", "ANONML_PEER_POLICY"):
        monkeypatch.delenv(name, raising=False)
    return home


def _files(home: Path) -> list[str]:
    return sorted(str(p.relative_to(home)) for p in home.rglob("*") if p.is_file()) if home.exists() else []


def test_ledger_proposals_and_predict_create_nothing(home: Path):
    ledger = runner.invoke(peer_cli, ["ledger"])
    assert ledger.exit_code == 0 and "nothing released" in ledger.output
    as_json = runner.invoke(peer_cli, ["ledger", "--json"])
    assert as_json.exit_code == 0
    assert json.loads(as_json.stdout) == {
        "releases": [], "problems": {}, "lifetime_total": 0, "lifetime_cap": None
    }
    proposals = runner.invoke(peer_cli, ["proposals"])
    assert proposals.exit_code == 0 and "no local peer state yet" in proposals.output
    assert json.loads(runner.invoke(peer_cli, ["proposals", "--json"]).stdout) == []
    predict = runner.invoke(peer_cli, ["predict", "p-none"])
    assert predict.exit_code == 1 and "no problem 'p-none' seen by this peer" in predict.output
    assert _files(home) == []  # no ledger.db, events.db, peer/identity.json, peer/peer.db


def test_saved_policy_is_read_by_every_command(home: Path):
    from peer.settings import PeerSettings

    saved = PeerSettings.from_env().model_copy(
        update={"policy": PeerSettings.from_env().policy.model_copy(update={"min_hops": 4})}
    ).save_policy()
    assert saved == home / "peer" / "policy.json" and saved.stat().st_mode & 0o777 == 0o600
    assert PeerSettings.from_env().policy.min_hops == 4
    shown = runner.invoke(peer_cli, ["proposals"])
    assert shown.exit_code == 0
    saved.write_text("{not json", encoding="utf-8")
    broken = runner.invoke(peer_cli, ["proposals"])
    assert broken.exit_code == 1 and "policy.json: not a valid saved peer policy" in broken.output


def test_ledger_marks_releases_whose_problem_failed_or_whose_reports_were_lost(home: Path):
    from anonml.crypto import load_or_create_identity
    from anonml.privacy import BinaryRandomizedResponse, PrivacyLedger
    from peer.db import PeerDB
    from peer.settings import PeerSettings

    settings = PeerSettings.from_env()
    me = load_or_create_identity(settings.identity_file, settings.identity_passphrase).fingerprint.hex()
    ledger, db = PrivacyLedger(settings.ledger_url), PeerDB(settings.state_url)
    for problem in ("p-failed", "p-lossy", "p-fine"):
        rr = BinaryRandomizedResponse(1.0)
        ledger.record(peer=me, problem=problem, round=0, attributes=["x"], mechanism=rr)
    db.save_participation("p-failed", me, "failed", json.dumps({"reason": "the problem failed: boom"}), None)
    lossy = {"lost": 2, "token_nonces": ["00", "01", "02"]}
    db.save_participation("p-lossy", me, "done", json.dumps(lossy), None)
    db.save_participation("p-fine", me, "done", json.dumps({"lost": 0, "token_nonces": ["00"]}), None)
    ledger.close()
    db.close()
    result = runner.invoke(peer_cli, ["ledger", "--json"])
    assert result.exit_code == 0, result.output
    marks = {r["problem"]: r["mark"] for r in json.loads(result.stdout)["releases"]}
    assert marks == {"p-failed": "problem failed", "p-lossy": "2 of 3 reports lost", "p-fine": ""}
    table = runner.invoke(peer_cli, ["ledger"])
    assert "problem failed" in table.output and "2 of 3 reports lost" in table.output


def test_ledger_shows_the_local_epsilon_and_beside_it_the_labelled_shuffle_bound(home: Path):
    from anonml.crypto import load_or_create_identity
    from anonml.privacy import PrivacyLedger
    from anonml.privacy.amplification import report_pool_bound, shuffle_epsilon
    from peer.db import PeerDB
    from peer.settings import PeerSettings

    settings = PeerSettings.from_env()
    me = load_or_create_identity(settings.identity_file, settings.identity_passphrase).fingerprint.hex()
    ledger, db = PrivacyLedger(settings.ledger_url), PeerDB(settings.state_url)
    # Two reports of ε = 1 each in partitions of 200; one median answer of ε = 2; a report whose
    # roster was never checked here.
    for h in range(2):
        ledger.record(peer=me, problem="p-report", round=1, attributes=[f"x{h}", "label"],
                      mechanism="k_rr", epsilon=1.0, pool="partition-3")
    ledger.record(peer=me, problem="p-median", round=0, attributes=["x0"], mechanism="binary_rr",
                  epsilon=2.0, pool="median")
    ledger.record(peer=me, problem="p-unknown", round=1, attributes=["x0", "label"], mechanism="k_rr",
                  epsilon=1.0, pool="partition-0")
    db.save_participation("p-report", me, "done", json.dumps({"report_group": 200}), None)
    db.save_participation("p-median", me, "done", json.dumps({"report_group": 200}), None)
    ledger.close()
    db.close()
    result = runner.invoke(peer_cli, ["ledger", "--json"])
    assert result.exit_code == 0, result.output
    problems = json.loads(result.stdout)["problems"]
    report = problems["p-report"]
    assert report["total"] == pytest.approx(2.0)  # the local ε, sequential composition
    expected = report_pool_bound(1.0, 2, 200)
    assert report["shuffle"]["epsilon"] == pytest.approx(expected.epsilon)
    # Two shuffled reports compose to 2·ε_c(1.0, n = 200, δ/2): well below the local 2.0.
    assert expected.epsilon == pytest.approx(2 * shuffle_epsilon(1.0, 200, expected.delta / 2))
    assert 0 < report["shuffle"]["epsilon"] < 1.0
    assert "unlinkable" in report["shuffle"]["assumptions"] and "honest" in report["shuffle"]["assumptions"]
    assert report["shuffle_note"] == "partitions of ≥ 200 peers"
    assert problems["p-median"]["shuffle"] is None
    assert "median answers are signed" in problems["p-median"]["shuffle_note"]
    unknown = problems["p-unknown"]
    assert unknown["shuffle"] is None and "local ε only" in unknown["shuffle_note"]
    table = runner.invoke(peer_cli, ["ledger"], terminal_width=250)
    assert table.exit_code == 0, table.output
    assert "local ε (the guarantee)" in table.output and "central (ε, δ) if shuffled*" in table.output
    assert f"({expected.epsilon:.3g}, {expected.delta:.1e})" in table.output
    footnote = " ".join(table.output.split())
    assert "unlinkable to their senders and every member is an honest peer" in footnote
    # A peer's problems are protocol rounds, whose calibration answers are signed, not shuffled.
    assert "median and calibration answers are signed" in footnote
    assert "calibration pool where" not in footnote
