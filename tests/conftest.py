"""Shared fixtures: the data the tests read (in the repository), a temp home, a fresh database.

Everything a test reads travels with the repository, so a clone with nothing beside it passes:
the real sample exports in ``tests/data/samples`` (their sources in ``SOURCES.md``, their
licences in ``LICENSES/``) and UCI Adult, gzip-compressed, in the package
(:data:`anonml.datasets.adult.BUNDLED_DIR`).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import settings
from threadpoolctl import threadpool_limits

from anonml.datasets.adult import BUNDLED_DIR
from tests.databases import fresh_database

# One BLAS/OpenMP thread per process. On a loaded 2-core machine threaded BLAS spins against the
# servers and child processes of the same test (one softmax fit was measured 100x slower, the
# multiparty tests 214 s against 33 s); child processes inherit the setting through the environment.
for _variable in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_variable, "1")
threadpool_limits(1)

REPO = Path(__file__).resolve().parents[1]
SAMPLES = REPO / "tests" / "data" / "samples"

settings.register_profile("anonml", derandomize=True, deadline=None, max_examples=60)
settings.load_profile("anonml")


@pytest.hookimpl(tryfirst=True)  # before xdist's own hook turns the group marks into node ids
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Under pytest-xdist (``--dist loadgroup``), keep each module that has a module-scoped fixture
    on one worker.

    The other tests are spread one by one; a module whose fixture builds something costly once
    (a Chromium, a protocol run, a parsed course log) would build it again on every worker that
    ran one of its tests, so its tests go as one group (``xdist_group``, named after the module).
    """
    if not config.pluginmanager.hasplugin("xdist"):
        return
    for item in items:
        definitions = getattr(item, "_fixtureinfo", None)
        if definitions is None:
            continue
        scopes = {d.scope for defs in definitions.name2fixturedefs.values() for d in defs}
        if scopes & {"module", "class", "package"}:
            item.add_marker(pytest.mark.xdist_group(item.nodeid.split("::", 1)[0]))


@pytest.fixture(scope="session")
def samples_dir() -> Path:
    """The real sample exports (``tests/data/samples``; where each came from: its ``SOURCES.md``)."""
    return SAMPLES


@pytest.fixture(scope="session")
def adult_dir() -> Path:
    """UCI Adult as shipped with the package: ``adult.data.gz`` and ``adult.test.gz``."""
    return BUNDLED_DIR


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
