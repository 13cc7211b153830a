"""Held-out quality: the published model scored on labelled rows its operator supplies.

The rows are a CSV as ``anonml featurize --output eval.csv`` writes it: a header
naming every feature of the problem and a label column (``label`` unless told
otherwise); other columns, such as ``entity``, are ignored. A feature's cell is
its matrix value (a number; a category's index or name; ``0``/``1``/``true``/
``false`` for a boolean); the label is ``0``/``1`` (or ``true``/``false``) for a
binary problem, a class name or its index for named classes, a number for a
numeric label. The rows stay with the aggregator's operator: nothing here
reaches a peer, and the scores are stored (:class:`aggregator.db.EvaluationRow`)
only to be shown on the console.

Scores (:class:`~anonml.protocol.ModelEvaluation`) come beside the best
constant predictor on the same rows — its own base rate, class shares or
median — so "better than guessing" is read off the page.
"""

from __future__ import annotations

import csv
import io
import json
import math
from dataclasses import dataclass
from datetime import UTC, datetime

import numpy as np

from anonml.errors import AnonMLError
from anonml.model import FeatureKind, FeatureSpec
from anonml.protocol import LabelSpec, ModelDocument, ModelEvaluation, Problem

__all__ = ["EvaluationRows", "read_evaluation_csv", "score_model", "MIN_ROWS"]

#: Fewest rows scored: with fewer, every figure is noise.
MIN_ROWS = 2

_TRUE = frozenset({"1", "1.0", "true", "yes"})
_FALSE = frozenset({"0", "0.0", "false", "no"})


@dataclass(frozen=True)
class EvaluationRows:
    """Labelled rows in the problem's feature order: ``X`` encoded as the model reads it,
    ``y`` as class indices (binary, classes) or numbers (numeric label)."""

    X: np.ndarray
    y: np.ndarray


def _flag(text: str) -> float | None:
    word = text.strip().lower()
    return 1.0 if word in _TRUE else 0.0 if word in _FALSE else None


def _feature_value(text: str, spec: FeatureSpec) -> float:
    """One cell's matrix value (the spec's own encoding for names and numbers)."""
    if spec.kind is FeatureKind.BOOL:
        value = _flag(text)
        if value is None:
            raise ValueError(f"feature {spec.name!r}: {text[:40]!r} is not 0/1 or true/false")
        return value
    if spec.kind is FeatureKind.CATEGORICAL:
        name = text.strip()
        if name in spec.categories:
            return spec.encode(name)
        try:
            index = float(name)
        except ValueError:
            return spec.encode(name)  # raises, naming the categories
        if not (index.is_integer() and 0 <= index < len(spec.categories)):
            raise ValueError(
                f"feature {spec.name!r}: {text[:40]!r} is no category index 0..{len(spec.categories) - 1}"
            )
        return index
    try:
        return spec.encode(text.strip())
    except ValueError:
        raise ValueError(f"feature {spec.name!r}: {text[:40]!r} is not a finite number") from None


def _label_value(text: str, spec: LabelSpec) -> float:
    """The label as a class index (binary, classes) or a finite number (numeric)."""
    word = text.strip()
    if spec.kind == "binary":
        value = _flag(word)
        if value is None:
            raise ValueError(f"label {word[:40]!r} is not 0/1 or true/false")
        return value
    if spec.kind == "classes":
        if word in spec.classes:
            return float(spec.classes.index(word))
        if word.isdigit() and int(word) < len(spec.classes):
            return float(word)
        raise ValueError(f"label {word[:40]!r} is none of the classes {list(spec.classes)} nor their index")
    try:
        number = float(word)
    except ValueError:
        raise ValueError(f"label {word[:40]!r} is not a number") from None
    if not math.isfinite(number):
        raise ValueError(f"label {word[:40]!r} is not finite")
    return number


def read_evaluation_csv(text: str, problem: Problem, *, label: str = "label") -> EvaluationRows:
    """Parse the operator's labelled rows for ``problem`` (format: the module's docstring).

    Raises
    ------
    AnonMLError
        A missing feature or label column, a cell that is not a value of its
        column's spec (naming the line and column), a row of another width, or
        fewer than :data:`MIN_ROWS` rows.
    """
    draft = problem.draft
    reader = csv.reader(io.StringIO(text))
    try:
        header = [h.strip() for h in next(reader)]
    except StopIteration:
        raise AnonMLError("evaluation data: empty (a header naming the features and the label)") from None
    except csv.Error as exc:
        raise AnonMLError(f"evaluation data, line 1: malformed CSV: {exc}") from None
    if len(set(header)) != len(header):
        raise AnonMLError(f"evaluation data, line 1: a column is named twice in {header[:30]}")
    names = [f.name for f in draft.features]
    missing = [n for n in [*names, label] if n not in header]
    if missing:
        raise AnonMLError(
            f"evaluation data, line 1: no column {missing[:10]} (the problem's features are {names[:30]}, "
            f"the label column {label!r})"
        )
    where = [header.index(n) for n in names]
    at_label = header.index(label)
    X: list[list[float]] = []
    y: list[float] = []
    line = 1
    try:
        for row in reader:
            line = reader.line_num
            if not any(cell.strip() for cell in row):
                continue
            if len(row) != len(header):
                raise AnonMLError(
                    f"evaluation data, line {line}: {len(row)} cells for the header's {len(header)}"
                )
            column = label
            try:
                y.append(_label_value(row[at_label], draft.label))
                values = []
                for spec, j in zip(draft.features, where, strict=True):
                    column = spec.name
                    values.append(_feature_value(row[j], spec))
            except ValueError as exc:
                raise AnonMLError(f"evaluation data, line {line}, column {column!r}: {exc}") from None
            X.append(values)
    except csv.Error as exc:
        raise AnonMLError(f"evaluation data, line {line + 1}: malformed CSV: {exc}") from None
    if len(y) < MIN_ROWS:
        raise AnonMLError(f"evaluation data: {len(y)} labelled rows; at least {MIN_ROWS} are needed")
    return EvaluationRows(np.asarray(X, dtype=np.float64).reshape(len(y), len(names)), np.asarray(y))


def _log_loss(proba: np.ndarray, y: np.ndarray) -> float:
    """Mean −log p̂(yᵢ | xᵢ), probabilities clipped at 1e-15 (as scikit-learn's ``log_loss``)."""
    picked = proba[np.arange(y.size), y.astype(np.int64)]
    return float(-np.mean(np.log(np.clip(picked, 1e-15, 1.0))))


def _constant_log_loss(y: np.ndarray, k: int) -> float:
    """Log loss of the rows' own class shares: −Σ s_c log s_c, the best any constant predictor does."""
    shares = np.bincount(y.astype(np.int64), minlength=k) / y.size
    nonzero = shares[shares > 0]
    return float(-np.sum(nonzero * np.log(nonzero)))


def score_model(
    document: ModelDocument, problem: Problem, rows: EvaluationRows, *, name: str = ""
) -> ModelEvaluation:
    """Score the published model on ``rows`` beside the best constant predictor on them.

    Binary: AUC (when both classes occur; the constant's is 0.5), accuracy at
    ``P(1) > 0.5`` against the majority share, Brier score against
    ``b(1 − b)`` for the base rate ``b``, log loss against the base rate's.
    Classes: accuracy against the majority share, log loss against the shares'
    entropy. Numeric: mean absolute error of
    :class:`~anonml.learn.AnonMLRegressor`'s prediction against that of the rows' median.
    """
    from sklearn.metrics import roc_auc_score

    from anonml.learn import AnonMLClassifier, AnonMLRegressor

    spec = problem.draft.label
    model = AnonMLClassifier.from_json(json.dumps(document.model))
    # Columns in the label domain's order (0/1, the class names, the bins), whatever order the model keeps.
    classes = [str(c.item() if isinstance(c, np.generic) else c) for c in model.classes_]
    domain = [str(c) for c in spec.model_classes()]
    if sorted(classes) != sorted(domain):
        raise AnonMLError(
            f"the model's classes {classes[:20]} are not the problem's label domain ({spec.describe()})"
        )
    proba = np.asarray(model.predict_proba(rows.X), dtype=np.float64)[:, [classes.index(c) for c in domain]]
    y = rows.y
    metrics: dict[str, float] = {}
    trivial: dict[str, float] = {}
    if spec.kind == "numeric":
        if spec.low is None or spec.high is None or spec.bins is None:
            raise AnonMLError(f"the numeric label has no public range and bins ({spec.describe()})")
        regressor = AnonMLRegressor.from_classifier(model, (spec.low, spec.high), spec.bins)
        metrics["mae"] = float(np.mean(np.abs(regressor.predict(rows.X) - y)))
        trivial["mae"] = float(np.mean(np.abs(np.median(y) - y)))
    else:
        k = spec.k
        shares = np.bincount(y.astype(np.int64), minlength=k) / y.size
        metrics["accuracy"] = float(np.mean(np.argmax(proba, axis=1) == y))
        trivial["accuracy"] = float(shares.max())
        metrics["log_loss"] = _log_loss(proba, y)
        trivial["log_loss"] = _constant_log_loss(y, k)
        if spec.kind == "binary":
            base = float(shares[1])
            metrics["brier"] = float(np.mean((proba[:, 1] - y) ** 2))
            trivial["brier"] = base * (1.0 - base)
            if 0.0 < base < 1.0:
                metrics["auc"] = float(roc_auc_score(y, proba[:, 1]))
                trivial["auc"] = 0.5
    return ModelEvaluation(
        problem_id=problem.id,
        name=name[:200],
        evaluated_at=datetime.now(UTC),
        model_created_at=document.created_at,
        rows=int(y.size),
        label=spec.describe(),
        metrics=metrics,
        trivial=trivial,
    )
