"""The central-target mode against diffprivlib's central-DP logistic regression at equal central ε.

Issue 25: on the binary sets with ≥ 20,000 rows (``randhie``, ``hi``: ``benchmarks/PUBLIC_SETS.md``),
``AnonMLClassifier(central_epsilon=(ε, δ), features=specs)`` — the largest local ε whose
shuffle-amplified bound for the unlinkable pools meets (ε, δ) (FMT 2021), every other parameter at its
default — against ``diffprivlib.models.LogisticRegression(epsilon=ε)`` (objective perturbation,
Chaudhuri et al. 2011: ε-DP with δ = 0, a trusted curator holding every row), on the same
stratified 70/30 splits as ``benchmarks/public_sets.py`` (seed = split index).

The two guarantees differ and the table says so: AnonML's central figure holds only if each group's
reports are unlinkable to their senders and every member is an honest peer, and its median pool's
peers keep their local ε (outside the bound); diffprivlib's is pure ε-DP for a curator that sees the
raw rows. diffprivlib sees the rows encoded to [0, 1] (numeric features by their public range,
clipped; booleans as 0/1; categorical ones one-hot), ``data_norm = √d``, ``C = 1`` (its default: a
choice of C on the data would not be private). A non-private logistic regression on that encoding is
the reference.

diffprivlib 0.6.6 fails to import beside scikit-learn 1.9 (``ImportError: DOUBLE``), so it runs in a
subprocess (:mod:`benchmarks.central_dp_worker`) whose ``PYTHONPATH`` starts with ``--dp-path``, a
directory holding diffprivlib 0.6.6 and scikit-learn 1.5.2, made with
``pip install --no-deps --target DIR diffprivlib==0.6.6 scikit-learn==1.5.2`` (numpy, scipy and
joblib come from this environment).

Run from the repository root: ``python -m benchmarks.central_dp --dp-path DIR [--splits 10]``;
writes ``benchmarks/results/central_dp.json`` and ``.md``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any

import numpy as np
from sklearn.metrics import brier_score_loss, roc_auc_score

from anonml.datasets.tabular import TabularData, random_split
from anonml.learn.model import AnonMLClassifier
from anonml.learn.notices import DataWarning, SmallGroupWarning
from anonml.model import FeatureKind, FeatureSpec
from benchmarks.public_sets import load_sets
from benchmarks.reporting import RESULTS, machine, now, write_json
from benchmarks.trivial_floors import summarise

SETS = ("randhie", "hi")
TARGET = (1.0, 1e-6)


def encode_unit(X: np.ndarray, specs: tuple[FeatureSpec, ...]) -> np.ndarray:
    """Rows in [0, 1]^d: numeric by public range (clipped), booleans as they are, categories one-hot."""
    columns: list[np.ndarray] = []
    for j, spec in enumerate(specs):
        x = X[:, j]
        if spec.kind is FeatureKind.CATEGORICAL:
            columns.extend((x == k).astype(float) for k in range(len(spec.categories or ())))
        elif spec.kind is FeatureKind.BOOL:
            columns.append(x.astype(float))
        else:
            low, high = float(spec.low), float(spec.high)
            columns.append(np.clip((x - low) / (high - low), 0.0, 1.0))
    return np.column_stack(columns)


def anonml_rows(data: TabularData, splits: int, target: tuple[float, float]) -> list[dict[str, Any]]:
    """The central-target mode's test AUC, Brier and chosen local ε per split."""
    rows = []
    for s in range(splits):
        split = random_split(data, seed=s)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", SmallGroupWarning)
            warnings.simplefilter("ignore", DataWarning)
            model = AnonMLClassifier(central_epsilon=target, features=list(data.features), random_state=s)
            model.fit(split.X_train, split.y_train)
        p = model.predict_proba(split.X_test)[:, 1]
        record = model.privacy_.central_target
        rows.append(
            {
                "split": s,
                "auc": float(roc_auc_score(split.y_test, p)),
                "brier": float(brier_score_loss(split.y_test, p)),
                "local_epsilon": float(model.epsilon_),
                "central_epsilon_met": None if record is None else float(record.central_epsilon),
            }
        )
    return rows


def diffprivlib_rows(data: TabularData, splits: int, epsilon: float, dp_path: str) -> dict[str, Any]:
    """The worker's rows for this set's splits (module docstring)."""
    arrays: dict[str, np.ndarray] = {"n_splits": np.array(splits)}
    for s in range(splits):
        split = random_split(data, seed=s)
        arrays[f"X_train_{s}"] = encode_unit(split.X_train, data.features)
        arrays[f"y_train_{s}"] = split.y_train
        arrays[f"X_test_{s}"] = encode_unit(split.X_test, data.features)
        arrays[f"y_test_{s}"] = split.y_test
    worker = Path(__file__).with_name("central_dp_worker.py")
    with tempfile.TemporaryDirectory(prefix="anonml-central-dp-") as tmp:
        npz, out = Path(tmp) / "splits.npz", Path(tmp) / "out.json"
        np.savez(npz, **arrays)
        env = {**os.environ, "PYTHONPATH": dp_path}
        done = subprocess.run(
            [sys.executable, str(worker), str(npz), str(epsilon), str(out)],
            env=env,
            capture_output=True,
            text=True,
            check=False,
        )
        if done.returncode != 0:
            raise SystemExit(f"the diffprivlib worker failed on {data.name}:\n{done.stderr}")
        return json.loads(out.read_text(encoding="utf-8"))


def markdown(doc: dict[str, Any]) -> str:
    """The results as a table, with the guarantees each method gives."""
    eps, delta = doc["target"]
    lines = [
        f"# Central-target mode vs diffprivlib at central ε = {eps:g} (`python -m benchmarks.central_dp`)",
        "",
        f"{doc['splits']} stratified 70/30 splits per set (seed = split index), run {doc['when']} "
        f"({doc['seconds']} s). AnonML: `central_epsilon=({eps:g}, {delta:g})`, conditional on unlinkable "
        "groups of honest peers, median-pool peers outside the bound at their local ε. diffprivlib "
        f"{doc['diffprivlib']} (scikit-learn {doc['dp_sklearn']}): `LogisticRegression(epsilon={eps:g})`, "
        "pure ε-DP for a curator holding the raw rows.",
        "",
        "| set | method | AUC | Brier | local ε chosen |",
        "| --- | --- | --- | --- | --- |",
    ]
    for name, block in doc["sets"].items():
        for label, key in (
            ("AnonML central target", "anonml"),
            ("diffprivlib LR", "diffprivlib"),
            ("non-private LR, same encoding", "nonprivate_same_encoding"),
        ):
            s = block["summary"][key]
            local = block["summary"].get("local_epsilon") if key == "anonml" else None
            local_text = f"{local['mean']:.3f}" if local else "-"
            lines.append(
                f"| {name} | {label} | {s['auc']['mean']:.3f}±{s['auc']['se']:.3f} | "
                f"{s['brier']['mean']:.3f}±{s['brier']['se']:.3f} | {local_text} |"
            )
        d = block["summary"]["auc_difference"]
        lines.append(f"| {name} | AnonML − diffprivlib (paired AUC) | {d['mean']:+.3f}±{d['se']:.3f} | | |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--dp-path", required=True, help="directory with diffprivlib 0.6.6 and scikit-learn 1.5.2"
    )
    parser.add_argument("--splits", type=int, default=10)
    parser.add_argument("--sets", default=",".join(SETS))
    parser.add_argument("--out", default=str(RESULTS / "central_dp.json"))
    args = parser.parse_args(argv)
    started = time.perf_counter()
    sets: dict[str, Any] = {}
    versions: dict[str, str] = {}
    for data in load_sets(args.sets.split(",")):
        if not isinstance(data, TabularData):
            raise SystemExit(f"{data.name} is not a binary set")
        ours = anonml_rows(data, args.splits, TARGET)
        theirs = diffprivlib_rows(data, args.splits, TARGET[0], args.dp_path)
        versions = {"diffprivlib": theirs["diffprivlib"], "dp_sklearn": theirs["sklearn"]}
        summary: dict[str, Any] = {
            "anonml": {m: summarise([r[m] for r in ours]) for m in ("auc", "brier")},
            "local_epsilon": summarise([r["local_epsilon"] for r in ours]),
            "auc_difference": summarise(
                [a["auc"] - b["diffprivlib"]["auc"] for a, b in zip(ours, theirs["rows"], strict=True)]
            ),
        }
        for key in ("diffprivlib", "nonprivate_same_encoding"):
            summary[key] = {m: summarise([r[key][m] for r in theirs["rows"]]) for m in ("auc", "brier")}
        sets[data.name] = {
            "rows": int(data.X.shape[0]),
            "anonml": ours,
            "other": theirs["rows"],
            "summary": summary,
        }
        print(f"{data.name} done ({time.perf_counter() - started:.0f} s)", flush=True)
    doc = {
        "benchmark": "central_dp",
        "when": now(),
        "machine": machine(load_1min=os.getloadavg()[0]),
        "target": list(TARGET),
        "splits": args.splits,
        "seconds": round(time.perf_counter() - started, 1),
        **versions,
        "sets": sets,
    }
    out = Path(args.out)
    write_json(out, doc)
    table = markdown(doc)
    out.with_suffix(".md").write_text(table, encoding="utf-8")
    print(table)


if __name__ == "__main__":
    main()
