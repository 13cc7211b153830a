"""The suite's own scheduling: longest work units first, the ``database`` mark, the durations file.

With ``--longest-first``, ``tests/conftest.py`` hands pytest-xdist its work units longest first (from
``tests/durations.json``, written by ``benchmarks/suite_time.py`` from a ``--durations`` table); it
marks every test that takes ``database_url`` ``database`` (the tests ``.ci/run`` repeats on PostgreSQL).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import pytest

from benchmarks.suite_time import durations, plain_nodeid, write_order
from tests.conftest import DURATIONS, known_seconds, longest_first


@dataclass
class Item:
    """What :func:`longest_first` reads of a pytest item."""

    nodeid: str


def _order(nodeids: list[str], unit_of: dict[str, str], seconds: dict[str, float]) -> list[str]:
    items = [Item(n) for n in nodeids]
    longest_first(items, {n: unit_of.get(n, n) for n in nodeids}, seconds)  # type: ignore[arg-type]
    return [item.nodeid for item in items]


def test_the_longest_units_start_first_whole_and_in_order_and_the_unmeasured_keep_theirs():
    nodeids = ["a.py::one", "g.py::x", "b.py::two", "g.py::y", "c.py::three", "d.py::four"]
    groups = {"g.py::x": "g.py", "g.py::y": "g.py"}
    # The group's 30 s (20 + 10) outweigh b's 25 s though neither of its tests does alone.
    seconds = {"b.py::two": 25.0, "g.py::x": 20.0, "g.py::y": 10.0, "d.py::four": 90.0}
    assert _order(nodeids, groups, seconds) == [
        "d.py::four", "g.py::x", "g.py::y", "b.py::two", "a.py::one", "c.py::three",
    ]


def test_equal_or_unmeasured_units_keep_collection_order():
    nodeids = [f"t.py::test_{i}" for i in range(6)]
    assert _order(nodeids, {}, {}) == nodeids
    assert _order(nodeids, {}, {n: 5.0 for n in nodeids}) == nodeids


def test_an_absent_durations_file_orders_nothing_and_a_malformed_one_is_an_error_naming_it(tmp_path: Path):
    assert known_seconds(tmp_path / "absent.json") == {}
    bad = tmp_path / "durations.json"
    for text in ("{", '{"runs": {}}', '{"seconds": [1, 2]}', '{"seconds": {"t.py::a": "slow"}}'):
        bad.write_text(text)
        with pytest.raises(pytest.UsageError, match="durations.json: not a durations file"):
            known_seconds(bad)


def test_the_committed_durations_file_reads_and_lists_tests_of_this_suite():
    seconds = known_seconds(DURATIONS)
    assert seconds, f"{DURATIONS} lists no test"
    assert all(s > 0 for s in seconds.values())
    # Node ids as pytest names them (no xdist @group suffix), of files that exist.
    root = DURATIONS.parents[1]
    assert all(plain_nodeid(n) == n and (root / n.split("::", 1)[0]).is_file() for n in seconds), seconds


TABLE = """
============================= slowest durations ==============================
101.50s call     tests/e2e/test_under_load.py::test_no_report_is_lost
12.00s setup    tests/browser/test_pages.py::test_person@tests/browser/test_pages.py
30.25s call     tests/browser/test_pages.py::test_person@tests/browser/test_pages.py
0.75s teardown tests/browser/test_pages.py::test_person@tests/browser/test_pages.py
1.20s call     tests/test_x.py::test_y[a@b]
0.30s call     tests/test_x.py::test_fast
=========== 2 passed in 150.00s (0:02:30) ===========
"""


def test_durations_sum_each_tests_phases_without_the_xdist_group_and_drop_the_short_ones():
    assert durations(TABLE) == {
        "tests/e2e/test_under_load.py::test_no_report_is_lost": 101.5,
        "tests/browser/test_pages.py::test_person": 43.0,
        "tests/test_x.py::test_y[a@b]": 1.2,  # an @ inside the parameter id is the id's own
    }
    assert list(durations(TABLE, at_least=0.0))[-1] == "tests/test_x.py::test_fast"
    assert durations("=== 3 passed in 1.00s ===") == {}


def test_the_order_file_keeps_the_long_tests_and_refuses_a_run_without_a_table(tmp_path: Path):
    out = tmp_path / "durations.json"
    entry = {"workers": "4", "load_1min_mean": 5.0, "durations": durations(TABLE)}
    write_order(out, "after", entry)
    written = json.loads(out.read_text())
    assert written["seconds"] == {
        "tests/e2e/test_under_load.py::test_no_report_is_lost": 101.5,
        "tests/browser/test_pages.py::test_person": 43.0,
    }
    assert known_seconds(out) == written["seconds"] and written["runs"]["after"]["workers"] == "4"
    # A later run of one file replaces its tests' figures and keeps the others'.
    again = {**entry, "durations": {"tests/browser/test_pages.py::test_person": 61.0, "t.py::new": 3.0}}
    write_order(out, "browser", again)
    rewritten = json.loads(out.read_text())
    assert rewritten["seconds"] == {
        "tests/e2e/test_under_load.py::test_no_report_is_lost": 101.5,
        "tests/browser/test_pages.py::test_person": 61.0,
        "t.py::new": 3.0,
    }
    assert list(rewritten["seconds"]) == sorted(rewritten["seconds"], key=lambda n: -rewritten["seconds"][n])
    assert set(rewritten["runs"]) == {"after", "browser"}
    with pytest.raises(SystemExit, match="no --durations table"):
        write_order(tmp_path / "none.json", "after", {**entry, "durations": {}})


def test_a_test_taking_a_database_is_marked_database(database_url: str, request: pytest.FixtureRequest):
    assert request.node.get_closest_marker("database") is not None


def test_a_test_taking_none_is_not(request: pytest.FixtureRequest):
    assert request.node.get_closest_marker("database") is None
