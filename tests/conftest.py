"""Shared fixtures: the data the tests read (in the repository), a temp home, a fresh database.

Everything a test reads travels with the repository, so a clone with nothing beside it passes:
the real sample exports in ``tests/data/samples`` (their sources in ``SOURCES.md``, their
licences in ``LICENSES/``) and UCI Adult, gzip-compressed, in the package
(:data:`anonml.datasets.adult.BUNDLED_DIR`).
"""

from __future__ import annotations

import json
import os
from collections import defaultdict
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


#: The suite's longest tests as last measured (``python -m benchmarks.suite_time --durations-to``):
#: node id -> seconds (setup + call + teardown), the order in which pytest-xdist is handed the work.
DURATIONS = Path(__file__).with_name("durations.json")


def known_seconds(path: Path = DURATIONS) -> dict[str, float]:
    """The measured seconds per node id in ``path`` (none when it is absent)."""
    if not path.exists():
        return {}
    try:
        seconds = json.loads(path.read_text(encoding="utf-8"))["seconds"]
        return {str(nodeid): float(s) for nodeid, s in seconds.items()}
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        shape = "{'seconds': {node id: seconds}}"
        raise pytest.UsageError(f"{path}: not a durations file ({shape}): {exc}") from exc


def longest_first(items: list[pytest.Item], unit_of: dict[str, str], seconds: dict[str, float]) -> None:
    """Sort ``items`` in place so that the work units (``unit_of``: node id -> its xdist unit) that took
    longest start first; a unit's tests stay together and in their order, unmeasured units keep
    collection order after the measured ones.

    ``--dist loadgroup`` hands units to idle workers in collection order (with
    ``--no-loadscope-reorder``), so a 150 s test collected last starts near the end and the run
    waits for it alone; longest-processing-time-first bounds that tail by the longest unit
    (Graham 1969: within 4/3 of the optimal makespan).
    """
    totals: dict[str, float] = defaultdict(float)
    first: dict[str, int] = {}
    for index, item in enumerate(items):
        unit = unit_of[item.nodeid]
        totals[unit] += seconds.get(item.nodeid, 0.0)
        first.setdefault(unit, index)
    items.sort(key=lambda item: (-totals[unit_of[item.nodeid]], first[unit_of[item.nodeid]]))


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--longest-first", action="store_true",
        help="hand the xdist workers the longest tests first (tests/durations.json); off by default: "
             "measured once, the heaviest fault tests piled up at the start and each ran far longer",
    )


def pytest_configure(config: pytest.Config) -> None:
    if config.getoption("--longest-first") and hasattr(config.option, "loadscopereorder"):
        config.option.loadscopereorder = False  # xdist's reorder (by tests per unit) would undo it


@pytest.hookimpl(tryfirst=True)  # before xdist's own hook turns the group marks into node ids
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark every test that takes a database (``database_url``) ``database`` (``.ci/run`` runs those
    again on PostgreSQL); under pytest-xdist (``--dist loadgroup``), keep each module that has a
    module-scoped fixture on one worker and, with ``--longest-first``, hand the longest units out first.

    The other tests are spread one by one; a module whose fixture builds something costly once
    (a Chromium, a protocol run, a parsed course log) would build it again on every worker that
    ran one of its tests, so its tests go as one group (``xdist_group``, named after the module).
    """
    for item in items:
        if DATABASE_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.database)
    if not config.pluginmanager.hasplugin("xdist"):
        return
    unit_of: dict[str, str] = {}
    for item in items:
        unit_of[item.nodeid] = item.nodeid
        definitions = getattr(item, "_fixtureinfo", None)
        if definitions is None:
            continue
        scopes = {d.scope for defs in definitions.name2fixturedefs.values() for d in defs}
        if scopes & {"module", "class", "package"}:
            group = item.nodeid.split("::", 1)[0]
            item.add_marker(pytest.mark.xdist_group(group))
            unit_of[item.nodeid] = group
    if config.getoption("--longest-first") and hasattr(config, "workerinput"):  # the order scheduled
        longest_first(items, unit_of, known_seconds())


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


#: The fixtures through which a test reaches a database: a test that takes one (directly or through
#: another fixture) is marked ``database``.
DATABASE_FIXTURES = {"database_url", "module_database_url"}


@pytest.fixture
def database_url(tmp_path: Path) -> Iterator[str]:
    """A fresh, empty database for this test (``tests/databases.py``).

    A SQLite file in ``tmp_path`` by default; with ``ANONML_TEST_DATABASE_URL``
    set, a new PostgreSQL database on that server, dropped after the test.
    """
    with fresh_database(tmp_path) as url:
        yield url


@pytest.fixture
def calibration_aggregator_url(tmp_path: Path, database_url: str) -> Iterator[str]:
    """A real aggregator (uvicorn, this test's database) whose proposals keep their own waits, for
    the calibration rounds of ``tests/aggregator/calibration_helpers.py``: the floors for their
    560-member rosters would hold a test for minutes. Yields its URL."""
    from aggregator.app import create_app, start_server  # the service: only for the tests that use it
    from tests.aggregator.helpers import aggregator_settings

    settings = aggregator_settings(tmp_path, db_url=database_url, scale_schedule=False)
    handle = start_server(create_app(settings))
    try:
        yield handle.url
    finally:
        handle.stop()


@pytest.fixture(scope="module")
def module_database_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """One fresh database for a whole module (as :func:`database_url`), for a module whose tests
    share one server because none of them reads what another wrote."""
    with fresh_database(tmp_path_factory.mktemp("database")) as url:
        yield url
