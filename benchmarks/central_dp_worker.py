"""diffprivlib's central-DP logistic regression on prepared splits, in its own interpreter.

Run by :mod:`benchmarks.central_dp` as a subprocess whose ``PYTHONPATH`` starts with a directory
holding diffprivlib 0.6.6 and scikit-learn 1.5.2 (diffprivlib 0.6.6 fails to import beside
scikit-learn 1.9: ``ImportError: DOUBLE``). It imports nothing from ``anonml`` (which needs the newer
scikit-learn): it reads an ``.npz`` of encoded splits, fits
``diffprivlib.models.LogisticRegression(epsilon=ε, data_norm=√d)`` (Chaudhuri, Monteleoni & Sarwate
2011 objective perturbation, ε-DP with δ = 0; every encoded coordinate is in [0, 1], so ‖x‖ ≤ √d) and a
non-private ``LogisticRegression`` on the same encoding, and writes their test AUC and Brier score
as JSON: ``python benchmarks/central_dp_worker.py SPLITS.npz EPSILON OUT.json``.
"""

from __future__ import annotations

import json
import sys
import warnings

import numpy as np


def main(argv: list[str]) -> None:
    from diffprivlib.models import LogisticRegression as DPLogisticRegression  # noqa: PLC0415
    from sklearn.linear_model import LogisticRegression  # noqa: PLC0415
    from sklearn.metrics import brier_score_loss, roc_auc_score  # noqa: PLC0415

    path, epsilon, out = argv[0], float(argv[1]), argv[2]
    data = np.load(path)
    n_splits = int(data["n_splits"])
    rows = []
    for s in range(n_splits):
        X_tr, y_tr = data[f"X_train_{s}"], data[f"y_train_{s}"]
        X_te, y_te = data[f"X_test_{s}"], data[f"y_test_{s}"]
        norm = float(np.sqrt(X_tr.shape[1]))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # diffprivlib's notes on its defaults
            dp = DPLogisticRegression(epsilon=epsilon, data_norm=norm, random_state=s).fit(X_tr, y_tr)
        plain = LogisticRegression(max_iter=2000).fit(X_tr, y_tr)
        row = {"split": s}
        for name, model in (("diffprivlib", dp), ("nonprivate_same_encoding", plain)):
            p = model.predict_proba(X_te)[:, 1]
            row[name] = {"auc": float(roc_auc_score(y_te, p)), "brier": float(brier_score_loss(y_te, p))}
        rows.append(row)
    import diffprivlib  # noqa: PLC0415
    import sklearn  # noqa: PLC0415

    doc = {"diffprivlib": diffprivlib.__version__, "sklearn": sklearn.__version__, "rows": rows}
    with open(out, "w", encoding="utf-8") as f:
        json.dump(doc, f)


if __name__ == "__main__":
    main(sys.argv[1:])
