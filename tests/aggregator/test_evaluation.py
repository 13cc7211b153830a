"""Held-out quality: the operator's labelled rows parsed strictly, the published model scored beside the
best constant predictor (checked against scikit-learn), through the API, the console and the CLI."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import numpy as np
import pytest
import requests
from sklearn.metrics import accuracy_score, brier_score_loss, log_loss, roc_auc_score
from typer.testing import CliRunner

from aggregator.evaluation import read_evaluation_csv, score_model
from anonml.cli import app as cli
from anonml.crypto import Identity
from anonml.errors import AnonMLError
from anonml.learn import AnonMLClassifier, AnonMLRegressor
from anonml.model import FeatureKind, FeatureSpec
from anonml.protocol import LabelSpec, ModelDocument, ModelEvaluation, Problem
from tests.aggregator.helpers import ADMIN, TOKEN, draft, post, signed_problem, wait_phase
from tests.aggregator.test_report_account import _send_all, _train
from tests.aggregator.test_tokens_intake import _open_round
from tests.webpages import csrf_of, login

FEATURES = (
    FeatureSpec(name="hours", low=0.0, high=10.0),
    FeatureSpec(name="forum", kind=FeatureKind.BOOL),
    FeatureSpec(name="track", kind=FeatureKind.CATEGORICAL, categories=("audit", "verified", "honor")),
)


def _problem(label: LabelSpec | None = None) -> Problem:
    d = draft().model_copy(update={"features": FEATURES, "label": label or LabelSpec()})
    return signed_problem(d, Identity.generate(), pid="p-eval")


def _data(n: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Encoded rows (hours, forum 0/1, track index) and a latent score that drives the label."""
    X = np.column_stack([rng.uniform(0, 10, n), rng.integers(0, 2, n), rng.integers(0, 3, n)]).astype(float)
    return X, X[:, 0] / 10 + 0.3 * X[:, 1] + rng.normal(0, 0.15, n)


def _document(model: AnonMLClassifier) -> ModelDocument:
    return ModelDocument(
        problem_id="p-eval",
        created_at=datetime.now(UTC),
        model=json.loads(model.to_json()),
        signature=bytes(64),  # scoring reads no signature
    )


def _csv(X: np.ndarray, labels: list[str], *, track_names: bool = False) -> str:
    lines = ["entity,hours,forum,track,label"]
    for i, (row, label) in enumerate(zip(X, labels, strict=True)):
        track = FEATURES[2].categories[int(row[2])] if track_names else str(int(row[2]))
        forum = "true" if row[1] else "false"
        lines.append(f"u{i},{row[0]:.6f},{forum},{track},{label}")
    return "\n".join(lines) + "\n"


def test_rows_as_featurize_writes_them_parse_in_the_problems_feature_order():
    problem = _problem()
    text = "label,track,entity,forum,hours\n1,verified,u1,true,2.5\n0,0,u2,0,7\n\n"
    rows = read_evaluation_csv(text, problem)
    assert rows.X.tolist() == [[2.5, 1.0, 1.0], [7.0, 0.0, 0.0]]  # names and indices alike
    assert rows.y.tolist() == [1.0, 0.0]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "empty"),
        ("hours,forum,label\n1,0,1\n2,1,0\n", "no column ['track']"),
        ("hours,forum,track\n1,0,0\n2,1,0\n", "no column ['label']"),
        ("hours,forum,track,label\n1,0,0,1\n2,1,0\n", "line 3: 3 cells for the header's 4"),
        ("hours,forum,track,label\n1,0,0,1\nabc,1,0,0\n", "line 3, column 'hours'"),
        ("hours,forum,track,label\n1,0,0,1\n2,maybe,0,0\n", "line 3, column 'forum'"),
        ("hours,forum,track,label\n1,0,0,1\n2,1,premium,0\n", "line 3, column 'track'"),
        ("hours,forum,track,label\n1,0,7,1\n2,1,0,0\n", "no category index 0..2"),
        ("hours,forum,track,label\n1,0,0,1\n2,1,0,2\n", "line 3, column 'label'"),
        ("hours,forum,track,label\n1,0,0,1\n", "1 labelled rows; at least 2"),
        ("hours,hours,forum,track,label\n1,1,0,0,1\n", "named twice"),
        ("hours,forum,track,label\n1,0,0,1\ninf,1,0,0\n", "not a finite number"),
    ],
)
def test_bad_rows_are_refused_naming_the_line_and_the_column(text: str, message: str):
    with pytest.raises(AnonMLError, match="evaluation data") as exc:
        read_evaluation_csv(text, _problem())
    assert message in str(exc.value)


def test_class_labels_are_names_or_indices_and_numeric_labels_numbers():
    classes = _problem(LabelSpec(kind="classes", classes=("low", "mid", "high")))
    head = "hours,forum,track,label\n"
    assert read_evaluation_csv(head + "1,0,0,mid\n2,1,0,2\n", classes).y.tolist() == [1.0, 2.0]
    with pytest.raises(AnonMLError, match="none of the classes"):
        read_evaluation_csv(head + "1,0,0,top\n2,1,0,low\n", classes)
    numeric = _problem(LabelSpec(kind="numeric", low=0.0, high=60.0, bins=4))
    assert read_evaluation_csv(head + "1,0,0,12.5\n2,1,0,70\n", numeric).y.tolist() == [12.5, 70.0]
    with pytest.raises(AnonMLError, match="not a number"):
        read_evaluation_csv(head + "1,0,0,lots\n2,1,0,3\n", numeric)


def test_a_binary_model_is_scored_as_scikit_learn_scores_it_beside_the_base_rate():
    rng = np.random.default_rng(1)
    X, score = _data(3000, rng)
    y = (score > 0.6).astype(int)
    model = AnonMLClassifier(epsilon=4.0, features=list(FEATURES), random_state=0).fit(X[:2000], y[:2000])
    problem = _problem()
    rows = read_evaluation_csv(_csv(X[2000:], [str(v) for v in y[2000:]]), problem)
    ev = score_model(_document(model), problem, rows, name="held out")
    p = model.predict_proba(X[2000:])[:, 1]
    truth = y[2000:]
    assert ev.rows == 1000 and ev.label == "binary" and ev.name == "held out"
    assert ev.metrics["auc"] == pytest.approx(roc_auc_score(truth, p), abs=1e-12)
    assert ev.metrics["brier"] == pytest.approx(brier_score_loss(truth, p), abs=1e-12)
    assert ev.metrics["log_loss"] == pytest.approx(log_loss(truth, p), abs=1e-9)
    assert ev.metrics["accuracy"] == pytest.approx(accuracy_score(truth, p > 0.5), abs=1e-12)
    base = truth.mean()
    assert ev.trivial["brier"] == pytest.approx(base * (1 - base), abs=1e-12)
    assert ev.trivial["log_loss"] == pytest.approx(log_loss(truth, np.full(truth.size, base)), abs=1e-9)
    assert ev.trivial["accuracy"] == pytest.approx(max(base, 1 - base)) and ev.trivial["auc"] == 0.5
    assert ev.metrics["auc"] > 0.75  # a real signal, learnt at ε = 4: above the constant's 0.5


def test_a_class_model_and_a_numeric_model_are_scored_against_their_constants():
    rng = np.random.default_rng(2)
    X, score = _data(3000, rng)
    names = np.array(["low", "mid", "high"])[np.digitize(score, [0.45, 0.85])]
    model = AnonMLClassifier(epsilon=4.0, features=list(FEATURES), random_state=0).fit(X[:2000], names[:2000])
    problem = _problem(LabelSpec(kind="classes", classes=("low", "mid", "high")))
    rows = read_evaluation_csv(_csv(X[2000:], list(names[2000:])), problem)
    ev = score_model(_document(model), problem, rows)
    proba = model.predict_proba(X[2000:])
    assert list(model.classes_) == ["high", "low", "mid"]  # scikit-learn's sorted order, not the label's
    order = [list(model.classes_).index(c) for c in ("low", "mid", "high")]
    truth = np.array([("low", "mid", "high").index(c) for c in names[2000:]])
    expected = log_loss(truth, proba[:, order], labels=[0, 1, 2])
    assert ev.metrics["log_loss"] == pytest.approx(expected, abs=1e-9)
    assert ev.metrics["accuracy"] == pytest.approx(np.mean(np.argmax(proba[:, order], axis=1) == truth))
    shares = np.bincount(truth, minlength=3) / truth.size
    assert ev.trivial["log_loss"] == pytest.approx(-np.sum(shares * np.log(shares)))
    assert ev.trivial["accuracy"] == pytest.approx(shares.max()) and "auc" not in ev.metrics

    target = np.clip(score * 40, 0, 60)
    bins = np.minimum((target / 15).astype(int), 3)
    binned = AnonMLClassifier(epsilon=4.0, features=list(FEATURES), random_state=0).fit(X[:2000], bins[:2000])
    numeric = _problem(LabelSpec(kind="numeric", low=0.0, high=60.0, bins=4))
    text = _csv(X[2000:], [f"{v:.4f}" for v in target[2000:]], track_names=True)
    ev = score_model(_document(binned), numeric, read_evaluation_csv(text, numeric))
    predicted = AnonMLRegressor.from_classifier(binned, (0.0, 60.0), 4).predict(X[2000:])
    truth = np.round(target[2000:], 4)
    assert ev.metrics["mae"] == pytest.approx(np.mean(np.abs(predicted - truth)), abs=1e-9)
    assert ev.trivial["mae"] == pytest.approx(np.mean(np.abs(truth - np.median(truth))), abs=1e-9)
    assert set(ev.metrics) == {"mae"}


def test_the_running_aggregator_scores_its_model_keeps_only_the_figures_and_shows_them(aggregator, tmp_path):
    round_ = _open_round(aggregator, n=6, kh=2)
    pid, url = round_.problem.id, round_.url
    body = (f"{i % 10},{(3 * i) % 10},{i % 2},{int(i % 10 > 4)}\n" for i in range(40))
    rows = "x0,x1,flag,label\n" + "".join(body)
    early = post(f"{url}/problems/{pid}/evaluation", rows.encode(), {**ADMIN, "content-type": "text/csv"})
    assert early.status_code == 409 and "no model yet" in early.json()["detail"]
    _send_all(round_, 6, np.random.default_rng(8))
    _train(round_)
    assert wait_phase(url, pid, ("done", "degraded", "failed")).phase == "done"

    csv_headers = {"content-type": "text/csv"}
    anonymous = requests.post(f"{url}/problems/{pid}/evaluation", data=rows, headers=csv_headers, timeout=30)
    assert anonymous.status_code == 401
    wrong_type = post(f"{url}/problems/{pid}/evaluation", rows.encode(), ADMIN)  # JSON content type
    assert wrong_type.status_code == 415
    admin_csv = {**ADMIN, **csv_headers}
    bad = post(f"{url}/problems/{pid}/evaluation", (rows + "1,2,maybe,0\n").encode(), admin_csv)
    assert bad.status_code == 422 and "line 42, column 'flag'" in bad.json()["detail"]
    assert requests.get(f"{url}/problems/{pid}/evaluation", headers=ADMIN, timeout=30).status_code == 404

    reply = requests.post(
        f"{url}/problems/{pid}/evaluation?name=week+1", data=rows, headers=admin_csv, timeout=60
    )
    assert reply.status_code == 200, reply.text
    ev = ModelEvaluation.model_validate_json(reply.content)
    published = requests.get(f"{url}/problems/{pid}/model", timeout=30)
    document = ModelDocument.model_validate_json(published.content)
    model = AnonMLClassifier.from_json(json.dumps(document.model))
    X = np.array([[i % 10, (3 * i) % 10, i % 2] for i in range(40)], dtype=float)
    y = np.array([int(i % 10 > 4) for i in range(40)])
    assert ev.rows == 40 and ev.name == "week 1" and ev.model_created_at == document.created_at
    assert ev.metrics["auc"] == pytest.approx(roc_auc_score(y, model.predict_proba(X)[:, 1]), abs=1e-12)
    assert ev.trivial["brier"] == pytest.approx(0.25)
    stored = requests.get(f"{url}/problems/{pid}/evaluation", headers=ADMIN, timeout=30)
    assert ModelEvaluation.model_validate_json(stored.content) == ev
    assert not any("0,0,0" in str(r) for r in round_.rows("SELECT * FROM model_evaluations"))  # figures only

    http, csrf = login(url, "/console", TOKEN)
    page = http.get(f"{url}/console/problems/{pid}", timeout=30).text
    assert 'id="held-out"' in page and "40 labelled rows (week 1)" in page
    assert f"{ev.metrics['auc']:.4f}" in page
    # The console's form scores pasted rows through the same code; a bad cell is flashed, not a 500.
    form = {"csrf": csrf_of(page), "rows": rows.replace("x1,", "x9,"), "label": "label", "name": "pasted"}
    refused = http.post(f"{url}/console/problems/{pid}/evaluate", data=form, timeout=30)
    assert refused.status_code == 200 and "no column [&#39;x1&#39;]" in refused.text
    form["rows"] = rows
    done = http.post(f"{url}/console/problems/{pid}/evaluate", data=form, timeout=60)
    assert done.status_code == 200 and "40 labelled rows (pasted)" in done.text

    path = tmp_path / "rows.csv"
    path.write_text(rows, encoding="utf-8")
    result = CliRunner().invoke(
        cli, ["aggregator", "evaluate", pid, str(path), "--url", url, "--token", TOKEN, "--json"]
    )
    assert result.exit_code == 0, result.output
    printed = json.loads(result.stdout)
    assert printed["name"] == "rows.csv" and printed["metrics"]["auc"] == pytest.approx(ev.metrics["auc"])
    missing = CliRunner().invoke(
        cli, ["aggregator", "evaluate", pid, str(tmp_path / "nope.csv"), "--url", url, "--token", TOKEN]
    )
    assert missing.exit_code != 0 and "cannot read the evaluation rows" in missing.output
