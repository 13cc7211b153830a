"""Data sets of the multiparty benchmark and their public preprocessing.

Three data sets, none downloaded at run time:

* ``breast_cancer``: scikit-learn's bundled Wisconsin diagnostic breast cancer
  data (569 × 30, two classes);
* ``digits``: scikit-learn's bundled 8×8 handwritten digits (1,797 × 64, ten
  classes);
* ``adult``: UCI Adult through :func:`anonml.datasets.adult.load` (32,561
  training and 16,281 test rows, the thesis's eleven features).

By default preprocessing never looks at private rows: a share of each training
split is the aggregator's *public* (auxiliary) set — Hamm et al.'s unlabeled
data, Xie et al.'s public labelled data — and the scaling is fitted on it alone
(or on the declared feature ranges for Adult). A paper reproduction whose
parties hold the whole training fold fits it on that fold instead (the
harness's ``scale_on="train"``), outside the privacy accounting. Then :class:`NormBallScaler` maps rows
into the unit ball with a bound fixed before any private row is seen, the
intercept inside the norm.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from sklearn.datasets import load_breast_cancer, load_digits
from sklearn.preprocessing import StandardScaler

from anonml.learn.multiparty.common import MultipartyError, NormBallScaler
from anonml.model import FeatureKind, FeatureSpec

__all__ = ["DATASETS", "RawDataset", "load_dataset", "Preprocessor", "public_ranges"]

DATASETS = ("breast_cancer", "adult", "digits")

# Numeric features spanning more than this ratio of their declared range get a
# log1p scale (Adult's capital gain/loss), so that a few large values do not
# squash every other row to zero.
_LOG_SCALE_RATIO = 1_000.0


@dataclass(frozen=True)
class RawDataset:
    """A data set before splitting: features, labels and, when fixed, a test split.

    Attributes
    ----------
    name : str
    X, y : ndarrays
        All rows (training rows only when ``X_test`` is given).
    X_test, y_test : ndarrays or None
        The data set's own test split (Adult), else ``None`` (use K-fold).
    features : tuple of FeatureSpec or None
        Declared feature types and public ranges (Adult), else ``None``.
    """

    name: str
    X: np.ndarray
    y: np.ndarray
    X_test: np.ndarray | None = None
    y_test: np.ndarray | None = None
    features: tuple[FeatureSpec, ...] | None = None

    @property
    def classes(self) -> np.ndarray:
        return np.unique(self.y)


def load_dataset(name: str, data_path: str | Path | None = None) -> RawDataset:
    """Load one of :data:`DATASETS`.

    Parameters
    ----------
    name : {"breast_cancer", "adult", "digits"}
    data_path : str or Path, optional
        Adult only: the folder with ``adult.data`` and ``adult.test``. Default:
        :func:`anonml.datasets.adult.load`'s search order (``$ANONML_ADULT_DIR``,
        ``$ANONML_SHARED_DIR``, ``../shared`` beside the checkout, the user
        cache); the loader itself never downloads here.
    """
    if name == "breast_cancer":
        X, y = load_breast_cancer(return_X_y=True)
        return RawDataset(name, X.astype(np.float64), y)
    if name == "digits":
        X, y = load_digits(return_X_y=True)
        return RawDataset(name, X.astype(np.float64), y)
    if name == "adult":
        from anonml.datasets.adult import load  # the adult module is optional here

        adult = load(data_path, download=False)
        return RawDataset(name, adult.X_train, adult.y_train, adult.X_test, adult.y_test, adult.features)
    raise MultipartyError(f"unknown dataset {name!r}; choose one of {', '.join(DATASETS)}")


def public_ranges(X_public: np.ndarray) -> tuple[FeatureSpec, ...]:
    """Numeric feature specs whose public ranges are the public rows' min and max.

    For data sets without declared ranges (AnonML's private median search needs
    a public range per numeric feature); private values outside are clipped by
    the binning.
    """
    low, high = X_public.min(axis=0), X_public.max(axis=0)
    return tuple(
        FeatureSpec(
            name=f"x{j}",
            low=float(low[j]) if high[j] > low[j] else float(low[j]) - 0.5,
            high=float(high[j]) if high[j] > low[j] else float(high[j]) + 0.5,
        )
        for j in range(X_public.shape[1])
    )


class Preprocessor:
    """Public feature map fitted on the public rows (or declared ranges), then the unit ball.

    With declared features (Adult): a categorical column becomes its one-hot
    vector over the declared categories, a numeric one is mapped to [0, 1] by
    its declared range (log1p first when the range spans over three orders of
    magnitude) and clipped. Without declared features: standardise with the
    public rows' mean and standard deviation.

    The norm bound B is the ``norm_quantile`` quantile of the encoded public
    rows' norms; rows beyond it are shrunk onto the sphere of radius B. With
    ``norm_quantile=1`` no public row is clipped; a lower quantile clips the
    few outlying rows and so keeps the typical row's norm — hence the signal
    the noise competes with — larger. For Adult ``norm_quantile=None`` uses
    the a-priori bound √(#features) (each encoded feature has norm ≤ 1).
    """

    def __init__(
        self, features: tuple[FeatureSpec, ...] | None = None, norm_quantile: float | None = 0.5
    ) -> None:
        self.features = features
        self.norm_quantile = norm_quantile

    def fit(self, X_public: np.ndarray) -> Preprocessor:
        if self.features is None:
            self._standard = StandardScaler().fit(X_public)
        if self.norm_quantile is None:
            if self.features is None:
                raise MultipartyError("an a-priori norm bound needs declared features")
            bound = math.sqrt(len(self.features))
        else:
            if not 0.0 < self.norm_quantile <= 1.0:
                raise MultipartyError(f"norm_quantile must be in (0, 1], got {self.norm_quantile}")
            norms = np.linalg.norm(self._encode(X_public), axis=1)
            bound = float(np.quantile(norms, self.norm_quantile))
            bound = bound if bound > 0 else 1.0
        self.scaler_ = NormBallScaler(bound=bound).fit(self._encode(X_public[:1]))
        return self

    def transform(self, X: np.ndarray) -> np.ndarray:
        return self.scaler_.transform(self._encode(X))

    def _encode(self, X: np.ndarray) -> np.ndarray:
        if self.features is None:
            return self._standard.transform(X)
        columns: list[np.ndarray] = []
        for j, spec in enumerate(self.features):
            column = X[:, j]
            if spec.kind is FeatureKind.CATEGORICAL:
                columns.append(np.eye(len(spec.categories))[column.astype(int)])
                continue
            low, high = float(spec.low), float(spec.high)  # type: ignore[arg-type]
            if low >= 0 and high / max(low, 1.0) > _LOG_SCALE_RATIO:
                column, low, high = np.log1p(column), math.log1p(low), math.log1p(high)
            columns.append(np.clip((column - low) / (high - low), 0.0, 1.0)[:, None])
        return np.hstack(columns)
