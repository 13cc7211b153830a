"""AnonMLClassifier: the scikit-learn contract, versioned byte-stable JSON, privacy accounting."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from scipy.stats import norm
from sklearn.metrics import roc_auc_score

from anonml.errors import ProtocolError
from anonml.learn.binning import Binning, relative_cell_error
from anonml.learn.ensemble import vote_ensemble
from anonml.learn.model import MODEL_FORMAT, MODEL_VERSION, AnonMLClassifier
from anonml.learn.simulation import MAX_CALIBRATION_CELL_ERROR, calibration_pool_size
from anonml.model import FeatureKind, FeatureSpec
from anonml.privacy import best_mechanism
from tests.learn.helpers import sklearn_contract

SPECS = [
    FeatureSpec(name="a", kind=FeatureKind.CATEGORICAL, categories=("x", "y", "z")),
    FeatureSpec(name="b", kind=FeatureKind.CATEGORICAL, categories=("no", "yes")),
    FeatureSpec(name="c", low=-4.0, high=4.0),
]


def _world(n: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Two categorical features and one numeric, conditionally independent given y."""
    y = (rng.random(n) < 0.35).astype(np.int64)
    a = np.where(y == 1, rng.choice(3, n, p=[0.2, 0.3, 0.5]), rng.choice(3, n, p=[0.6, 0.3, 0.1]))
    b = np.where(y == 1, rng.choice(2, n, p=[0.3, 0.7]), rng.choice(2, n, p=[0.7, 0.3]))
    c = rng.normal(loc=np.where(y == 1, 1.0, -0.5), scale=1.0)
    return np.column_stack([a, b, np.clip(c, -4, 4)]).astype(float), y


# High ε only so that the accuracy checks on 30-row toy data are not decided by LDP noise;
# the toy data carry no public ranges, so they are read from the rows (not private).
test_sklearn_contract = sklearn_contract([AnonMLClassifier(epsilon=20.0, ranges="from-data", random_state=0)])


def test_fit_learns_a_real_signal_under_privacy():
    rng = np.random.default_rng(0)
    X, y = _world(20_000, rng)
    X_test, y_test = _world(10_000, rng)
    clf = AnonMLClassifier(epsilon=2.0, features=SPECS, random_state=1).fit(X, y)
    la = np.log(np.array([0.2, 0.3, 0.5]) / np.array([0.6, 0.3, 0.1]))
    lb = np.log(np.array([0.3, 0.7]) / np.array([0.7, 0.3]))
    lc = norm.logpdf(X_test[:, 2], 1.0, 1.0) - norm.logpdf(X_test[:, 2], -0.5, 1.0)
    bayes = roc_auc_score(y_test, la[X_test[:, 0].astype(int)] + lb[X_test[:, 1].astype(int)] + lc)
    # Bayes-optimal ≈ 0.927. Binning c into at most 5 private-quantile bins and LDP noise at
    # ε=2 with ~5,700 reports per feature cost a little; a broken pipeline loses far more.
    auc = roc_auc_score(y_test, clf.decision_function(X_test))
    assert bayes - 0.03 < auc <= bayes + 0.01
    proba = clf.predict_proba(X_test)
    assert proba.shape == (10_000, 2) and np.allclose(proba.sum(axis=1), 1.0)
    assert np.array_equal(clf.predict(X_test), clf.classes_[(proba[:, 1] > 0.5).astype(int)])


def test_privacy_accounting_is_each_peers_total():
    rng = np.random.default_rng(1)
    X, y = _world(6000, rng)
    clf = AnonMLClassifier(epsilon=1.0, n_subsets=1, features=SPECS, random_state=0).fit(X, y)
    acct = clf.privacy_
    assert acct.epsilon_total == pytest.approx(1.0)  # sequential composition, ledger headline
    assert acct.report_epsilon == pytest.approx(1.0) and acct.reports_per_peer == 1
    assert acct.median_epsilon == pytest.approx(1.0) and 0 < acct.median_peers <= 900
    # median_fraction 0.15 of 6000 is a separate pool; a calibration pool at its cap (1200 peers)
    # would estimate its 20 cells at ε = 1 with a relative error of 1.06 > 0.5: no pool.
    assert acct.calibration_peers == 0 and acct.report_peers == 6000 - 900
    assert calibration_pool_size(0.2, 40_000, 1.0) == 7025  # ⌈1500 / 0.2135⌉ < the cap: cells err by 0.44
    assert calibration_pool_size(0.2, 20_000, 1.0) == 0  # its cap of 4,000 errs by 0.58
    assert calibration_pool_size(0.2, 60_000, 4.0) == 1615  # ⌈1500 / ((e⁴−1)/(e⁴+1))²⌉: below the cap
    assert calibration_pool_size(0.2, 3000, 4.0) == 600  # the cap: cells err by 0.24
    assert calibration_pool_size(0.2, 3000, 0.5) == 0  # 600 peers at ε = 0.5: cells err by 3.1
    # 112 peers at ε = 4: privacy noise 0.39 alone would pass; with the sample's own 0.41, 0.57 does not.
    assert calibration_pool_size(0.2, 560, 4.0) == 0
    cases = [(3000, 4.0), (560, 4.0), (20_000, 1.0), (40_000, 1.0), (3000, 0.5)]
    for n, epsilon in cases:  # the rule, written out
        n_c = min(round(0.2 * n), math.ceil(1500 / ((math.exp(epsilon) - 1) / (math.exp(epsilon) + 1)) ** 2))
        error = math.hypot(relative_cell_error(best_mechanism(epsilon, 20, n_c), n_c), math.sqrt(19 / n_c))
        assert (calibration_pool_size(0.2, n, epsilon) > 0) == (error <= MAX_CALIBRATION_CELL_ERROR)
    # K ≥ 3 keeps the binary-RR-equivalent rule (≥ 500): 4,000 rows at ε = 4 give two classes a pool
    # (800 peers, cells erring by 0.21) and ten classes too (743 equivalents); 2,000 rows give two
    # classes one (0.30) and ten none (372).
    assert calibration_pool_size(0.2, 4000, 4.0) == calibration_pool_size(0.2, 4000, 4.0, n_classes=10) == 800
    assert calibration_pool_size(0.2, 2000, 4.0) == 400
    assert calibration_pool_size(0.2, 2000, 4.0, n_classes=10) == 0
    paper = AnonMLClassifier(
        mode="paper",
        epsilon=1.0,
        n_partitions=3,
        subset_size=1,
        n_subsets=2,
        features=SPECS,
        random_state=0,
    ).fit(X, y)
    assert paper.privacy_.report_epsilon == pytest.approx(0.5)
    assert paper.privacy_.epsilon_total == pytest.approx(1.0)


@pytest.mark.parametrize("mode", ["default", "paper"])
def test_json_round_trip_gives_identical_predictions_and_bytes(mode):
    rng = np.random.default_rng(2)
    X, y = _world(8000, rng)
    labels = np.where(y == 1, "spam", "ham")
    kw = dict(n_partitions=3, subset_size=1, n_subsets=2) if mode == "paper" else {}
    clf = AnonMLClassifier(mode=mode, epsilon=2.0, features=SPECS, random_state=3, **kw).fit(X, labels)
    text = clf.to_json()
    clone = AnonMLClassifier.from_json(text)
    assert clone.to_json() == text  # byte-for-byte stable
    assert np.array_equal(clone.predict(X), clf.predict(X))
    assert np.array_equal(clone.predict_proba(X), clf.predict_proba(X))
    assert np.array_equal(clone.decision_function(X), clf.decision_function(X))
    assert clone.classes_.tolist() == ["ham", "spam"] and clone.get_params() == clf.get_params()
    doc = json.loads(text)
    assert doc["format"] == MODEL_FORMAT and doc["version"] == MODEL_VERSION
    # The document a signed message carries is the same one, as JSON-native values.
    assert clf.to_document() == doc and json.dumps(clf.to_document(), allow_nan=False)
    # Same seed, same data: the same document.
    again = AnonMLClassifier(mode=mode, epsilon=2.0, features=SPECS, random_state=3, **kw).fit(X, labels)
    assert again.to_json() == text


def test_from_json_refuses_bad_documents():
    rng = np.random.default_rng(4)
    X, y = _world(3000, rng)
    doc = json.loads(AnonMLClassifier(epsilon=2.0, features=SPECS, random_state=0).fit(X, y).to_json())
    with pytest.raises(ProtocolError, match="not a valid"):
        AnonMLClassifier.from_json("[1, 2]")
    with pytest.raises(ProtocolError, match="v99"):
        AnonMLClassifier.from_json(json.dumps({**doc, "version": 99}))
    bad = json.loads(json.dumps(doc))
    bad["ensemble"]["components"][0]["shape"] = [7]  # table no longer fits its own shape
    with pytest.raises(ProtocolError, match="bad contents: component"):
        AnonMLClassifier.from_json(json.dumps(bad))
    for feature in (7, -1):  # a feature the bins do not have
        bad = json.loads(json.dumps(doc))
        bad["ensemble"]["components"][0]["features"] = [feature]
        with pytest.raises(ProtocolError, match="does not match the published bins"):
            AnonMLClassifier.from_json(json.dumps(bad))
    bad = json.loads(json.dumps(doc))
    bad["params"]["features"] = [{"name": ""}]
    with pytest.raises(ProtocolError, match="bad contents"):
        AnonMLClassifier.from_json(json.dumps(bad))
    with pytest.raises(ProtocolError, match="not a valid"):
        AnonMLClassifier.from_json(json.dumps({**doc, "pickle": "gASV"}))


def test_a_published_vote_ensemble_predicts_by_eq_6_2_on_raw_vectors():
    binning = Binning.from_thresholds(SPECS, {2: [0.0]})
    ens = vote_ensemble([(0,), (2,)], [(3,), (2,)], [np.array([-1, 1, 1]), np.array([-1, 1])], [0.8, 0.2])
    clf = AnonMLClassifier.from_ensemble(binning, ens, classes=["neg", "pos"], mode="paper")
    X = np.array([[0.0, 1.0, 3.0], [2.0, 0.0, -1.0], [0.0, 0.0, -2.0]])
    # Row 1: 0.8*(-1) + 0.2*(+1) = -0.6; row 2: 0.8 - 0.2 = 0.6; row 3: -1.
    assert np.allclose(clf.decision_function(X), [-0.6, 0.6, -1.0])
    assert clf.predict(X).tolist() == ["neg", "pos", "neg"]
    assert np.allclose(clf.predict_proba(X)[:, 1], [0.2, 0.8, 0.0])


def test_bad_input_is_named():
    rng = np.random.default_rng(5)
    X, y = _world(3000, rng)
    clf = AnonMLClassifier(epsilon=2.0, features=SPECS, random_state=0).fit(X, y)
    X_bad = X[:3].copy()
    X_bad[1, 0] = 5
    with pytest.raises(ValueError, match=r"feature 'a' .* row 1 holds 5.0"):
        clf.predict(X_bad)
    with pytest.raises(ValueError, match="3 specs for 2 columns"):
        AnonMLClassifier(features=SPECS).fit(X[:, :2], y)
    with pytest.raises(ValueError, match="paper mode needs exactly 2 classes"):
        AnonMLClassifier(mode="paper", features=SPECS).fit(X, np.arange(X.shape[0]) % 3)
    with pytest.raises(ValueError, match="at least 2 classes"):
        AnonMLClassifier(features=SPECS).fit(X, np.zeros(X.shape[0]))


def test_version_1_documents_still_load():
    rng = np.random.default_rng(9)
    X, y = _world(3000, rng)
    model = AnonMLClassifier(epsilon=2.0, features=SPECS, calibration_fraction=0.0, random_state=0).fit(X, y)
    doc = json.loads(model.to_json())
    doc["version"] = 1
    del doc["feature_names"], doc["features"]
    for key in ("calibration_peers", "private", "shuffle"):
        doc["privacy"].pop(key)
    old = AnonMLClassifier.from_json(json.dumps(doc))
    assert np.array_equal(old.predict_proba(X), model.predict_proba(X))
    assert old.privacy_.private and old.privacy_.shuffle is None


def test_discriminant_weighting_reaches_the_model_and_its_json():
    rng = np.random.default_rng(6)
    X, y = _world(6000, rng)
    equal = AnonMLClassifier(epsilon=2.0, features=SPECS, calibration_fraction=0.0, random_state=3).fit(X, y)
    lda = AnonMLClassifier(
        epsilon=2.0, features=SPECS, calibration_fraction=0.0, weighting="lda", random_state=3
    ).fit(X, y)
    # Same seed, same reports: the tables agree and the weights are the equal ones times factors of mean 1.
    pairs = list(zip(lda.ensemble_.components, equal.ensemble_.components, strict=True))
    factors = [a.weight / b.weight for a, b in pairs]
    assert np.mean(factors) == pytest.approx(1.0) and not np.allclose(factors, 1.0)
    assert all(np.allclose(a.table, b.table) for a, b in pairs)
    back = AnonMLClassifier.from_json(lda.to_json())
    assert np.allclose(back.decision_function(X[:50]), lda.decision_function(X[:50]))
    with pytest.raises(ValueError, match="'weighting' parameter of AnonMLClassifier"):
        AnonMLClassifier(features=SPECS, weighting="inverse").fit(X, y)  # type: ignore[arg-type]
