"""The console's series: a problem's public counts, stored when they change, at most once a period."""

from __future__ import annotations

from sqlalchemy.orm import Session

from aggregator.db import count_reject, create_tables
from aggregator.timeline import Sampler, samples
from anonml.database import make_engine


def test_a_sample_is_stored_when_a_count_changed_and_at_most_once_a_period(tmp_path):
    engine = make_engine(f"sqlite:///{tmp_path / 'aggregator.db'}")
    create_tables(engine)
    sampler = Sampler(seconds=1.0)
    with Session(engine) as s:
        assert sampler.record(s, "p-1", 100.0)  # the first look stores the counts
        count_reject(s, "p-1", "intake: bad token")
        s.commit()
        assert not sampler.record(s, "p-1", 100.5)  # changed, but within the period
        assert sampler.record(s, "p-1", 101.0)
        assert not sampler.record(s, "p-1", 103.0)  # a period later, nothing changed
        count_reject(s, "p-1", "intake: bad token")
        s.commit()
        assert not sampler.record(s, "p-1", 103.5)  # the unchanged look at 103 starts the period
        assert sampler.record(s, "p-1", 104.0)
        stored = samples(s, "p-1")
    assert [(x.at, x.counts.rejects) for x in stored] == [
        (100.0, {}), (101.0, {"bad token": 1}), (104.0, {"bad token": 2})
    ]
    assert all(x.counts.registered == x.counts.received == 0 for x in stored)
    # A restarted driver looks again from nothing: the repeat of the last point draws the same chart.
    with Session(engine) as s:
        assert Sampler().record(s, "p-1", 110.0)
        last = samples(s, "p-1")[-1]
    assert (last.at, last.counts.rejects) == (110.0, {"bad token": 2})
