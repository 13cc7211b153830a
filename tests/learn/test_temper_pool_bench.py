"""benchmarks.temper_pool: the paired comparison behind the README's temper-pool figures."""

from __future__ import annotations

import numpy as np
import pytest

from benchmarks import temper_pool
from benchmarks.trivial_floors import load_sets


def test_one_split_pairs_the_pool_with_none_on_the_same_rows():
    (data,) = load_sets(["correlated_reg"])
    run = temper_pool.paired_split(data, 2.0, 0)
    # eight copies of one signal: untempered worse than the median, the pool's temperature fixes it
    assert run["none"] > run["median"] > run["pool"]
    assert run["temperature"] <= 0.5 and run["answers"] > 0
    assert run == temper_pool.paired_split(data, 2.0, 0)  # seeded: the same split, pools and draws


def test_rows_summarise_the_splits_and_the_table_shows_every_row(monkeypatch):
    (data,) = load_sets(["skewed_reg"])
    fake = iter(
        [
            {"none": 3.0, "pool": 2.0, "median": 2.5, "temperature": 0.5, "answers": 90.0},
            {"none": 5.0, "pool": 5.0, "median": 2.5, "temperature": 1.0, "answers": 30.0},
        ]
        * 4
    )
    monkeypatch.setattr(temper_pool, "paired_split", lambda d, e, s: next(fake))
    rows = temper_pool.rows_of(data, splits=2, jobs=1)
    assert [r["epsilon"] for r in rows] == list(temper_pool.EPSILONS)
    first = rows[0]
    assert first["difference"]["mean"] == pytest.approx(-0.5)
    assert first["difference"]["se"] == pytest.approx(np.std([-1.0, 0.0], ddof=1) / np.sqrt(2))
    assert first["temperatures"] == [0.5, 1.0] and first["answers"]["mean"] == 60.0
    table = temper_pool.markdown(rows)
    assert table.count("| skewed_reg (2000) |") == 4 and "| 1/2 |" in table


def test_a_classification_set_is_refused():
    with pytest.raises(SystemExit, match="not regression"):
        temper_pool._sets(["fishing"])
