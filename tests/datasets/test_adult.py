"""UCI Adult loader: where it looks, what it reads, and what it says when the files are missing."""

from __future__ import annotations

import gzip
import hashlib
import re
import shutil
from pathlib import Path

import numpy as np
import pytest

from anonml.datasets import adult
from anonml.errors import DatasetNotFound, RecordError
from anonml.model import FeatureKind


@pytest.fixture(scope="module")
def data(adult_dir: Path) -> adult.AdultDataset:
    return adult.load(adult_dir)


def test_reads_the_thesis_features_from_both_files(data):
    assert data.X_train.shape == (32_561, 11) and data.X_test.shape == (16_281, 11)
    assert data.feature_names[:5] == [
        "age",
        "education-num",
        "hours-per-week",
        "capital-gain",
        "capital-loss",
    ]
    assert data.feature_names[5:] == [
        "sex",
        "marital-status",
        "relationship",
        "workclass",
        "race",
        "native-country",
    ]
    # Class balance of the UCI files (">50K." in adult.test is the same label as ">50K").
    assert data.y_train.sum() == 7841 and data.y_test.sum() == 3846
    assert data.X_train[0, :5].tolist() == [39.0, 13.0, 40.0, 2174.0, 0.0]
    for j, spec in enumerate(data.features):
        if spec.kind is FeatureKind.CATEGORICAL:
            codes = np.unique(data.X_train[:, j])
            assert set(codes) <= set(range(len(spec.categories)))
        else:
            assert spec.low <= data.X_train[:, j].min() and data.X_train[:, j].max() <= spec.high


def test_groups_are_low_cardinality_and_missing_values_join_other(data):
    names = data.feature_names
    country = data.X_train[:, names.index("native-country")]
    # 29,170 rows are United-States in adult.data; "?" and every other country are group 1.
    assert int((country == 0).sum()) == 29_170
    married = data.X_train[:, names.index("marital-status")]
    assert int((married == 0).sum()) == 14_976 + 23  # Married-civ-spouse + Married-AF-spouse
    assert all(len(f.categories) == 2 for f in data.features if f.kind is FeatureKind.CATEGORICAL)


def _lines(folder: Path, name: str) -> list[str]:
    """The decompressed lines of a bundled Adult file."""
    with gzip.open(folder / f"{name}.gz", "rt", encoding="utf-8") as handle:
        return handle.read().splitlines()


def _unpack(source: Path, target: Path) -> Path:
    """Plain ``adult.data`` and ``adult.test`` in ``target``, decompressed from ``source``."""
    target.mkdir(parents=True, exist_ok=True)
    for name in adult.FILES:
        (target / name).write_bytes(gzip.decompress((source / f"{name}.gz").read_bytes()))
    return target


@pytest.fixture
def no_shared(monkeypatch, tmp_path):
    """No bundled copy and a ``$ANONML_SHARED_DIR`` with no data sets: the cache and download are reached."""
    empty = tmp_path / "no-shared"
    empty.mkdir()
    monkeypatch.setenv(adult.SHARED_ENV_VAR, str(empty))
    monkeypatch.setattr(adult, "BUNDLED_DIR", tmp_path / "no-bundle")
    return empty


def test_the_bundled_copy_is_read_by_default_and_is_the_uci_files(adult_dir, monkeypatch, tmp_path):
    monkeypatch.delenv(adult.ENV_VAR, raising=False)
    monkeypatch.setenv(adult.SHARED_ENV_VAR, str(tmp_path / "nothing-here"))
    assert adult.load(download=False).source == adult.BUNDLED_DIR == adult_dir
    # The compressed files decompress to exactly the UCI files whose digests the attribution lists.
    notice = (adult_dir / "LICENSE.md").read_text()
    assert "CC BY 4.0" in notice and "Becker" in notice and "Kohavi" in notice
    listed = {name: digest for digest, name in re.findall(r"^([0-9a-f]{64})  (adult\.\w+)$", notice, re.M)}
    assert set(listed) == {"adult.data", "adult.test", "adult.names"}
    for name in adult.FILES:
        digest = hashlib.sha256(gzip.decompress((adult_dir / f"{name}.gz").read_bytes())).hexdigest()
        assert listed[name] == digest
    assert hashlib.sha256((adult_dir / "adult.names").read_bytes()).hexdigest() == listed["adult.names"]


def test_plain_files_are_read_like_compressed_ones_and_preferred(adult_dir, tmp_path, data):
    plain = _unpack(adult_dir, tmp_path / "plain")
    unpacked = adult.load(plain)
    assert np.array_equal(unpacked.X_train, data.X_train) and np.array_equal(unpacked.y_test, data.y_test)
    # Both forms in one folder: the plain file is the one read (here it holds 3 rows).
    shutil.copy(adult_dir / "adult.data.gz", plain / "adult.data.gz")
    (plain / "adult.data").write_text("\n".join(_lines(adult_dir, "adult.data")[:3]) + "\n")
    assert adult.load(plain).X_train.shape == (3, 11)


def test_the_shared_folder_is_searched_when_the_bundled_copy_is_gone(adult_dir, monkeypatch, tmp_path):
    monkeypatch.delenv(adult.ENV_VAR, raising=False)
    monkeypatch.setattr(adult, "BUNDLED_DIR", tmp_path / "removed")
    shared = tmp_path / "shared"
    _unpack(adult_dir, shared / "datasets" / "adult")
    monkeypatch.setenv(adult.SHARED_ENV_VAR, str(shared))
    assert adult.load(download=False).source == shared / "datasets" / "adult"
    monkeypatch.delenv(adult.SHARED_ENV_VAR)
    # Without the variable: ../shared/datasets/adult beside the checkout.
    beside = Path(adult.__file__).resolve().parents[2].parent / "shared" / "datasets" / "adult"
    assert adult.shared_adult_dir() == beside


def test_environment_variable_and_user_cache_are_searched(no_shared, adult_dir, monkeypatch, anonml_home):
    monkeypatch.setenv(adult.ENV_VAR, str(adult_dir))
    assert adult.load(download=False).source == adult_dir
    monkeypatch.delenv(adult.ENV_VAR)
    cache = adult.default_cache_dir()
    cache.mkdir(parents=True)
    for name in adult.FILES:
        shutil.copy(adult_dir / f"{name}.gz", cache / f"{name}.gz")
    assert adult.load(download=False).source == cache
    assert str(cache).startswith(str(anonml_home))


def test_missing_files_say_where_to_put_them(no_shared, monkeypatch, tmp_path):
    monkeypatch.delenv(adult.ENV_VAR, raising=False)
    with pytest.raises(DatasetNotFound) as info:
        adult.load(download=False)
    message = str(info.value)
    assert "adult.data and adult.test" in message and adult.ENV_VAR in message
    assert str(adult.BUNDLED_DIR) in message
    assert str(adult.default_cache_dir()) in message and "download disabled" in message
    assert isinstance(info.value, FileNotFoundError)
    with pytest.raises(DatasetNotFound, match=str(tmp_path)):
        adult.load(tmp_path)


def test_failed_download_is_reported_and_leaves_no_files(no_shared, monkeypatch):
    monkeypatch.delenv(adult.ENV_VAR, raising=False)

    def offline(url: str) -> bytes:
        raise adult._DownloadFailed(f"download of {url} failed: network unreachable")

    monkeypatch.setattr(adult, "_http_get", offline)
    with pytest.raises(DatasetNotFound, match="network unreachable"):
        adult.load()
    assert not any(adult.default_cache_dir().glob("adult.*"))


def test_download_fills_the_cache(no_shared, adult_dir, monkeypatch):
    monkeypatch.delenv(adult.ENV_VAR, raising=False)
    heads = {name: ("\n".join(_lines(adult_dir, name)[:60]) + "\n").encode() for name in adult.FILES}
    fetched = []

    def fake_get(url: str) -> bytes:
        fetched.append(url)
        return heads[url.rsplit("/", 1)[1]]

    monkeypatch.setattr(adult, "_http_get", fake_get)
    data = adult.load()
    assert fetched == [adult.UCI_URL + name for name in adult.FILES]
    assert data.source == adult.default_cache_dir() and data.X_train.shape == (60, 11)
    assert data.X_test.shape == (59, 11)  # the "|1x3 Cross validator" line is not a row


def test_malformed_line_names_file_and_line(tmp_path, adult_dir):
    lines = _lines(adult_dir, "adult.data")[:5]
    lines[2] = "39, State-gov, 77516"
    (tmp_path / "adult.data").write_text("\n".join(lines) + "\n")
    shutil.copy(adult_dir / "adult.test.gz", tmp_path / "adult.test.gz")
    with pytest.raises(RecordError, match=r"adult\.data:3: expected 15 fields, got 3"):
        adult.load(tmp_path)
    lines[2] = lines[3].replace("<=50K", "maybe")
    (tmp_path / "adult.data").write_text("\n".join(lines) + "\n")
    with pytest.raises(RecordError, match=r"adult\.data:3: unknown income label 'maybe'"):
        adult.load(tmp_path)
