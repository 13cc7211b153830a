"""``anonml aggregator …`` and ``anonml peer …`` against a real aggregator and real local state."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from anonml.commands.aggregator import app as aggregator_cli
from anonml.commands.peer import app as peer_cli
from anonml.crypto import Identity
from anonml.demo import DEMO_FEATURES, simulate_peers
from anonml.learn import AnonMLClassifier
from anonml.model import FeatureSpec
from anonml.plugins import PluginRef
from anonml.protocol import ModelDocument, Problem, ProblemDraft, Schedule, sign_message
from anonml.serving import free_port
from peer.db import PeerDB
from tests.aggregator.helpers import TOKEN, draft, signed_problem
from tests.waiting import wait_until

runner = CliRunner()


def _draft_file(tmp_path: Path, **changes) -> Path:
    body = draft(**changes).model_dump(mode="json")
    del body["schedule"]["registration_deadline"]  # the CLI sets it from --registration-seconds
    path = tmp_path / "problem.json"
    path.write_text(json.dumps(body), encoding="utf-8")
    return path


def test_propose_status_close_and_refusals(aggregator, tmp_path: Path):
    url = ["--url", aggregator.url]
    file = _draft_file(tmp_path)
    result = runner.invoke(
        aggregator_cli, ["propose", str(file), *url, "--token", TOKEN, "--registration-seconds", "60"]
    )
    assert result.exit_code == 0, result.output
    pid = result.stdout.strip().splitlines()[0]
    assert pid.startswith("p-")

    status = runner.invoke(aggregator_cli, ["status", pid, *url, "--json"])
    assert status.exit_code == 0 and json.loads(status.stdout)["phase"] == "registration"
    table = runner.invoke(aggregator_cli, ["status", pid, *url])
    assert "registration" in table.stdout

    wrong = runner.invoke(aggregator_cli, ["propose", str(file), *url, "--token", "nope"])
    assert wrong.exit_code == 1 and "HTTP 401" in wrong.output

    bad = tmp_path / "bad.json"
    bad.write_text('{"title": "x",\n "epsilon": }', encoding="utf-8")
    broken = runner.invoke(aggregator_cli, ["propose", str(bad), *url, "--token", TOKEN])
    assert broken.exit_code == 1 and "bad.json:2: invalid JSON" in broken.output

    invalid = _draft_file(tmp_path)
    doc = json.loads(invalid.read_text())
    doc["epsilon"] = -1
    invalid.write_text(json.dumps(doc))
    refused = runner.invoke(aggregator_cli, ["propose", str(invalid), *url, "--token", TOKEN])
    assert refused.exit_code == 1 and "epsilon" in refused.output

    no_model = runner.invoke(aggregator_cli, ["model", pid, *url, "-o", str(tmp_path / "m.json")])
    assert no_model.exit_code == 1 and "no model yet" in no_model.output
    assert runner.invoke(aggregator_cli, ["close", pid, *url, "--token", TOKEN]).exit_code == 0
    assert runner.invoke(aggregator_cli, ["train", pid, *url, "--token", TOKEN]).exit_code == 1


def test_peer_proposals_accept_and_ledger(aggregator, tmp_path: Path):
    file = _draft_file(tmp_path, epsilon=1.0)
    (tmp_path / "greedy").mkdir()
    greedy = _draft_file(tmp_path / "greedy", epsilon=5.0)
    for f in (file, greedy):
        assert (
            runner.invoke(
                aggregator_cli, ["propose", str(f), "--url", aggregator.url, "--token", TOKEN]
            ).exit_code
            == 0
        )
    listed = runner.invoke(peer_cli, ["proposals", "-a", aggregator.url, "--json"])
    assert listed.exit_code == 0, listed.output
    rows = {r["epsilon"]: r for r in json.loads(listed.stdout)}
    # The plugins are installed, but x0, x1 and flag are not features mooc_engagement
    # computes: the peer refuses to run the problem and says why.
    assert rows[1.0]["decision"] == "(refuse)" and "x0" in rows[1.0]["reason"]
    accept = runner.invoke(peer_cli, ["accept", rows[1.0]["id"]])
    assert accept.exit_code == 1 and "x0" in accept.output
    unknown = runner.invoke(peer_cli, ["accept", "p-unknown"])
    assert unknown.exit_code == 1 and "no proposal" in unknown.output
    ledger = runner.invoke(peer_cli, ["ledger", "--json"])
    assert ledger.exit_code == 0 and json.loads(ledger.stdout)["releases"] == []


def _mooc_problem(aggregator: Identity) -> Problem:
    features = tuple(FeatureSpec(name=n, low=lo, high=hi) for n, (lo, hi) in DEMO_FEATURES.items())
    d = ProblemDraft(
        title="dropout",
        instancer=PluginRef(name="user_window", params={"label_end": 6}),
        featurizer=PluginRef(name="mooc_engagement", params={"weeks": 2}),
        features=features,
        epsilon=1.0,
        kp=4,
        schedule=Schedule(registration_deadline=datetime(2030, 1, 1, tzinfo=UTC)),
    )
    return signed_problem(d, aggregator, pid="p-cli-predict", seed=bytes(32), round_id=3)


def test_peer_accepts_within_policy_and_predicts_with_a_verified_model(
    tmp_path: Path, anonml_home: Path, monkeypatch: pytest.MonkeyPatch
):
    peers, _ = simulate_peers(1, tmp_path, weeks=6, history_weeks=2, seed=2, features=list(DEMO_FEATURES))
    me = peers[0]
    monkeypatch.setenv("ANONML_PEER_STORE_URL", str(me.store.url))
    monkeypatch.setenv("ANONML_PEER_USER", me.username)
    # This problem declares no witness (no round runs here): the peer opts out of requiring one.
    monkeypatch.setenv("ANONML_PEER_POLICY", json.dumps({"require_witnesses": False}))
    aggregator = Identity.generate()
    problem = _mooc_problem(aggregator)
    rng = np.random.default_rng(0)
    X = np.column_stack([rng.uniform(lo, hi, 400) for lo, hi in DEMO_FEATURES.values()])
    model = AnonMLClassifier(
        epsilon=4.0, features=list(problem.draft.features), n_bins=2, random_state=0
    ).fit(X, (X[:, 0] < 100).astype(int))
    document = sign_message(
        ModelDocument(
            problem_id=problem.id,
            created_at=datetime.now(UTC),
            model=json.loads(model.to_json()),
            signature=bytes(64),
        ),
        aggregator,
    )
    db = PeerDB(f"sqlite:///{anonml_home / 'peer' / 'peer.db'}")
    db.record_proposal(problem.id, "http://127.0.0.1:9", problem.model_dump_json())
    accepted = runner.invoke(peer_cli, ["accept", problem.id])
    assert accepted.exit_code == 0, accepted.output
    node = next(r for r in json.loads(runner.invoke(peer_cli, ["proposals", "--json"]).stdout))
    assert node["decision"] == "accept"

    identity = json.loads((anonml_home / "peer" / "identity.json").read_text())["fingerprint"]
    db.save_participation(problem.id, identity, "done", "{}", None, model_json=document.model_dump_json())
    predicted = runner.invoke(peer_cli, ["predict", problem.id, "--json"])
    assert predicted.exit_code == 0, predicted.output
    out = json.loads(predicted.stdout)
    expected = model.predict_proba(np.clip(me.x, 0, [hi for _, hi in DEMO_FEATURES.values()])[None, :])[0, 1]
    assert out["probability"] == pytest.approx(expected)

    forged = document.model_copy(update={"metrics": {"auc": 1.0}})  # altered after signing
    db.save_participation(problem.id, identity, "done", "{}", None, model_json=forged.model_dump_json())
    refused = runner.invoke(peer_cli, ["predict", problem.id])
    assert refused.exit_code == 1 and "signature" in refused.output
    db.close()
    me.store.close()
    me.ledger.close()


def _serve(args: list[str], module: str, health: str, home: Path) -> tuple[dict, str]:
    """Run ``anonml <group> …`` until its health endpoint answers, stop it: (health, what it printed)."""
    import os
    import subprocess
    import sys

    import requests

    env = {**os.environ, "ANONML_HOME": str(home)}
    code = f"from anonml.commands.{module} import app; app()"
    proc = subprocess.Popen([sys.executable, "-c", code, *args], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    answer: dict = {}
    try:
        def health_or_exit() -> bool:
            nonlocal answer
            if proc.poll() is not None:
                return True
            try:
                answer = requests.get(health, timeout=5).json()
            except requests.ConnectionError:
                return False
            return True

        wait_until(health_or_exit, 60, f"{health} to answer")
        assert answer, proc.communicate()[1]
    finally:
        proc.terminate()
        _, stderr = proc.communicate(timeout=30)
    return answer, stderr


def test_serve_and_start_run_the_services(tmp_path: Path, anonml_home: Path):
    port = free_port()
    db = f"sqlite:///{tmp_path / 'a.db'}"
    health, said = _serve(["serve", "--port", str(port), "--db", db], "aggregator",
                          f"http://127.0.0.1:{port}/healthz", anonml_home)
    assert health["status"] == "ok" and len(bytes.fromhex(health["identity"])) == 64
    assert f"console at http://127.0.0.1:{port}/console" in " ".join(said.split())
    assert (anonml_home / "aggregator" / "admin-token").stat().st_mode & 0o077 == 0
    peer_port = free_port()
    health, _ = _serve(["start", "--port", str(peer_port), "-a", f"http://127.0.0.1:{port}"], "peer",
                       f"http://127.0.0.1:{peer_port}/healthz", anonml_home)
    assert health == {"status": "ok"}
    assert (anonml_home / "peer" / "identity.json").stat().st_mode & 0o077 == 0
