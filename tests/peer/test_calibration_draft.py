"""A draft's calibration share: on the wire only when set, the pool the library would size, and
counted wherever the report partitions' size is."""

from __future__ import annotations

import hashlib
import json
from datetime import UTC, datetime
from types import SimpleNamespace

import numpy as np
import pytest
from pydantic import ValidationError

from anonml.crypto import Identity
from anonml.errors import AnonMLError
from anonml.learn.settings import roster_plan
from anonml.learn.simulation import calibration_pool_size
from anonml.protocol import LabelSpec, signing_bytes, verify_message
from peer.policy import check_roster_floors
from tests.aggregator.helpers import signed_problem
from tests.peer.test_policy import AUTO, problem

#: SHA-256 of the signed bytes of the draft below as main signed it before ``calibration_fraction``
#: existed (computed on 19654e3): a problem that leaves calibration off signs exactly those bytes.
SIGNED_BEFORE = "36bc6ca883c3061653b99c86bdfeb338c2fd8355deca51b03471c1f5fe4d9623"


def _vector_problem(**changes):
    draft = problem(**changes).draft
    return signed_problem(
        draft,
        Identity.generate(np.random.default_rng(0)),
        pid="p-vector",
        seed=bytes(32),
        round_id=7,
        created_at=datetime(2029, 6, 1, tzinfo=UTC),
    )


#: SHA-256 of the signed bytes of drafts signed on 4ca9690, before K >= 3 labels could ask for a pool:
#: a binary draft with a pool, and a three-class and a binned-numeric label without one.
SIGNED_ON_MAIN = {
    "binary, pool 0.25": "d69aa4649b937161e8d9dee636b1122772a1c8a50d6c02b5ad301c254b1bcc02",
    "classes": "b338292e8add4e18679829d771ec6e939f8885046e7ad82f4b2a185bed440f1d",
    "numeric": "aeef9d3f5ebe99fb99eb060eff40f5d9e839b53747d7f0b623aaf02905b24422",
}


def test_drafts_that_could_be_signed_before_k3_calibration_sign_the_same_bytes():
    drafts = {
        "binary, pool 0.25": _vector_problem(calibration_fraction=0.25),
        "classes": _vector_problem(label=LabelSpec(kind="classes", classes=("a", "b", "c"))),
        "numeric": _vector_problem(label=LabelSpec(kind="numeric", low=0.0, high=1.0, bins=4)),
    }
    signed = {name: hashlib.sha256(signing_bytes(p)).hexdigest() for name, p in drafts.items()}
    assert signed == SIGNED_ON_MAIN


def test_calibration_off_signs_the_bytes_of_before_and_on_round_trips():
    off = _vector_problem()
    assert hashlib.sha256(signing_bytes(off)).hexdigest() == SIGNED_BEFORE
    assert "calibration_fraction" not in json.loads(off.model_dump_json())["draft"]
    on = _vector_problem(calibration_fraction=0.25)
    assert json.loads(on.model_dump_json())["draft"]["calibration_fraction"] == 0.25
    parsed = type(on).model_validate_json(on.model_dump_json())
    assert parsed.draft.calibration_fraction == 0.25 and signing_bytes(parsed) == signing_bytes(on)
    verify_message(parsed, bytes(parsed.aggregator))
    # The share is signed: changing it breaks the aggregator's signature.
    changed = parsed.draft.model_copy(update={"calibration_fraction": 0.5})
    forged = parsed.model_copy(update={"draft": changed})
    with pytest.raises(Exception, match="signature"):
        verify_message(forged, bytes(parsed.aggregator))


def test_the_pool_is_the_librarys_and_counted_out_of_the_report_partitions():
    # The library's pool carries at least 500 exact-equivalent reports, so it takes thousands of peers.
    d = problem(calibration_fraction=0.3, epsilon=2.0).draft
    assert d.calibration_pool_size(4000) == calibration_pool_size(0.3, 4000, 2.0) > 0
    assert d.report_pool_size(4000, 10) == 4000 - 10 - d.calibration_pool_size(4000)
    off = problem(epsilon=2.0).draft
    assert off.calibration_pool_size(4000) == 0 and off.report_pool_size(4000, 10) == 3990
    # Too few to carry a signal: no pool at all (the library's rule).
    assert d.calibration_pool_size(400) == calibration_pool_size(0.3, 400, 2.0) == 0


@pytest.mark.parametrize("label", [{"kind": "classes", "classes": ["a", "b", "c"]},
                                   {"kind": "numeric", "low": 0.0, "high": 1.0, "bins": 4}])
def test_a_label_of_three_or_more_classes_gets_the_librarys_pool_for_its_k(label):
    spec = LabelSpec(**label)
    d = problem(calibration_fraction=0.3, epsilon=2.0, label=spec).draft
    assert d.calibration_pool_size(4000) == calibration_pool_size(0.3, 4000, 2.0, spec.k) > 0
    assert d.report_pool_size(4000, 10) == 4000 - 10 - d.calibration_pool_size(4000)


def test_a_two_class_label_that_is_not_binary_cannot_ask_for_calibration():
    with pytest.raises(ValidationError, match="calibrates binary labels and labels of 3 or more classes"):
        problem(calibration_fraction=0.2, label=LabelSpec(kind="classes", classes=("a", "b")))


@pytest.mark.parametrize("fraction", [-0.1, 1.0])
def test_the_share_is_bounded(fraction):
    with pytest.raises(ValidationError):
        problem(calibration_fraction=fraction)


def test_the_roster_plan_sets_the_drafts_calibration_pool_apart():
    d = problem(calibration_fraction=0.3, epsilon=4.0).draft
    keys = [hashlib.sha256(b"member-%d" % i).digest() for i in range(2000)]
    roster = SimpleNamespace(
        entries=[SimpleNamespace(identity=k) for k in keys], seed=bytes(range(32)), median_pool_size=5
    )
    plan = roster_plan(d, roster)
    assert plan.median_pool_size == 5 and plan.calibration_pool_size == d.calibration_pool_size(2000) > 0
    assert sum(plan.partition_sizes()) == d.report_pool_size(2000, 5)
    plain = roster_plan(problem(epsilon=4.0).draft, roster)
    assert plain.calibration_pool_size == 0 and sum(plain.partition_sizes()) == 1995


def test_the_anonymity_floor_counts_the_calibration_pool_out():
    policy = AUTO.model_copy(update={"min_anonymity_set": 1500, "min_roster_size": 2})
    on = problem(calibration_fraction=0.5, epsilon=4.0, min_peers=2)
    pool = on.draft.calibration_pool_size(2000)
    assert pool > 500
    check_roster_floors(problem(epsilon=4.0, min_peers=2), 2000, 0, policy)  # all 2,000 in one partition
    with pytest.raises(AnonMLError, match=rf"holds {2000 - pool} peers \(\(n=2000 − pool {pool}\)"):
        check_roster_floors(on, 2000, 0, policy)
