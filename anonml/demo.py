"""``anonml demo``: the personal-data pipeline end to end, with no data needed.

Simulated MOOC students write real edX tracking logs; each student's log goes
through the ``edx`` importer into that student's *own* event store (as it would
on their own machine); each student instances and featurizes locally
(``user_window`` dropout problem × ``mooc_engagement`` features); the rows are
pooled and a scikit-learn model is trained and scored on held-out students.
"""

from __future__ import annotations

import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import roc_auc_score
from sklearn.model_selection import train_test_split
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler

from anonml.datasets.mooc import simulate_students, write_edx_logs
from anonml.featurize import featurize_dataset
from anonml.model import FeatureMatrix, FeatureVector
from anonml.plugins import PluginRef, create
from anonml.store import EventStore

__all__ = ["DemoResult", "run_demo"]


@dataclass
class DemoResult:
    """What the demo did and how well the model predicts dropout."""

    students: int
    events_imported: int
    examples: int
    dropout_rate: float
    features: list[str]
    auc: float
    phase_seconds: dict[str, float] = field(default_factory=dict)


def run_demo(
    students: int = 300,
    *,
    weeks: int = 8,
    history_weeks: int = 2,
    seed: int = 0,
    workdir: Path | None = None,
    progress=None,
) -> DemoResult:
    """Simulate, import per student, featurize locally, train, and score on held-out students.

    ``progress`` is an optional callable ``(phase: str, done: int, total: int)``.
    """
    timer: dict[str, float] = {}
    with tempfile.TemporaryDirectory(prefix="anonml-demo-") as scratch:
        root = Path(workdir) if workdir is not None else Path(scratch)
        t = time.perf_counter()
        sim = simulate_students(students, weeks=weeks, seed=seed)
        logs = write_edx_logs(sim, root / "logs")
        timer["simulate"] = time.perf_counter() - t

        instancer = create("instancer", PluginRef(
            name="user_window",
            params={"history_periods": history_weeks, "label_start": history_weeks,
                    "label_end": weeks},
        ))
        featurizer = create("featurizer", PluginRef(
            name="mooc_engagement", params={"weeks": history_weeks}
        ))
        importer = create("importer", "edx")

        t = time.perf_counter()
        rows: list[FeatureVector] = []
        imported = 0
        stores = root / "stores"
        stores.mkdir(parents=True, exist_ok=True)
        for i, log in enumerate(logs):
            store = EventStore(f"sqlite:///{stores / (log.username + '.db')}")
            try:
                imported += store.import_file(log.path, importer).inserted
                rows.extend(featurize_dataset(store.dataset(log.username), instancer, featurizer))
            finally:
                store.close()
            if progress is not None:
                progress("import+featurize", i + 1, len(logs))
        timer["import+featurize"] = time.perf_counter() - t

        t = time.perf_counter()
        matrix = FeatureMatrix.from_rows(featurizer.features(), rows)
        X, y = matrix.to_numpy()
        y = y.astype(int)
        X_train, X_test, y_train, y_test = train_test_split(
            X, y, test_size=0.3, random_state=seed, stratify=y
        )
        model = make_pipeline(StandardScaler(), LogisticRegression(max_iter=1000))
        model.fit(X_train, y_train)
        auc = float(roc_auc_score(y_test, model.predict_proba(X_test)[:, 1]))
        timer["train"] = time.perf_counter() - t

    return DemoResult(
        students=students,
        events_imported=imported,
        examples=len(matrix),
        dropout_rate=float(np.mean(y)),
        features=matrix.feature_names,
        auc=auc,
        phase_seconds=timer,
    )

