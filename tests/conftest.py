"""Shared fixtures: where ``../shared`` (datasets, real sample exports) lives, and a temp home."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import settings
from threadpoolctl import threadpool_limits

from tests.databases import fresh_database

# One BLAS/OpenMP thread per process. On a loaded 2-core machine threaded BLAS spins against the
# servers and child processes of the same test (one softmax fit was measured 100x slower, the
# multiparty tests 214 s against 33 s); child processes inherit the setting through the environment.
for _variable in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_variable, "1")
threadpool_limits(1)

REPO = Path(__file__).resolve().parents[1]
SHARED = Path(os.environ.get("ANONML_SHARED_DIR", REPO.parent / "shared"))

settings.register_profile("anonml", derandomize=True, deadline=None, max_examples=60)
settings.load_profile("anonml")


@pytest.fixture(scope="session")
def shared_dir() -> Path:
    if not SHARED.is_dir():
        pytest.fail(f"../shared not found at {SHARED}; set ANONML_SHARED_DIR")
    return SHARED


@pytest.fixture(scope="session")
def samples_dir(shared_dir: Path) -> Path:
    return shared_dir / "samples"


@pytest.fixture(scope="session")
def adult_dir(shared_dir: Path) -> Path:
    return shared_dir / "datasets" / "adult"


@pytest.fixture(autouse=True)
def anonml_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Every test gets its own ANONML_HOME so nothing touches the real ~/.anonml."""
    home = tmp_path / "anonml-home"
    monkeypatch.setenv("ANONML_HOME", str(home))
    return home


@pytest.fixture
def database_url(tmp_path: Path) -> Iterator[str]:
    """A fresh, empty database for this test (``tests/databases.py``).

    A SQLite file in ``tmp_path`` by default; with ``ANONML_TEST_DATABASE_URL``
    set, a new PostgreSQL database on that server, dropped after the test.
    """
    with fresh_database(tmp_path) as url:
        yield url
