"""A proposal's label spec is checked like every other parameter, on the wire and by the peer's policy."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest
import requests
from pydantic import ValidationError

from anonml.errors import AnonMLError, ProtocolError
from anonml.learn import Binning, PeerAssignment
from anonml.learn.histograms import domain_size
from anonml.protocol import MAX_LABEL_CLASSES, LabelSpec
from peer.client import AggregatorClient
from peer.features import LocalExample, label_index
from peer.policy import evaluate_problem
from peer.reports import make_reports
from tests.aggregator.helpers import ADMIN, bins_document, draft
from tests.peer.test_policy import AUTO, problem
from tests.scripted_http import ScriptedHandler, served

CLASSES = {"kind": "classes", "classes": ["low", "mid", "high"]}
NUMERIC = {"kind": "numeric", "low": 0.0, "high": 60.0, "bins": 4}

HOSTILE = [
    ({"kind": "classes", "classes": [f"c{i}" for i in range(MAX_LABEL_CLASSES + 1)]}, "at most 16 items"),
    ({"kind": "classes", "classes": ["only"]}, "2 to 16 classes"),
    ({"kind": "classes", "classes": ["a", "b", "a"]}, "distinct"),
    ({"kind": "classes", "classes": ["a", "b\n"]}, "printable ASCII"),
    ({"kind": "numeric", "low": 0.0, "high": "inf", "bins": 4}, "must be finite"),
    ({"kind": "numeric", "low": "nan", "high": 1.0, "bins": 4}, "must be finite"),
    ({"kind": "numeric", "low": -1e13, "high": 1.0, "bins": 4}, "within ±1e+12"),
    ({"kind": "numeric", "low": 5.0, "high": 5.0, "bins": 4}, "low < high"),
    ({"kind": "numeric", "low": 0.0, "high": 1.0, "bins": 1000}, "less than or equal to 16"),
    ({"kind": "numeric", "low": 0.0, "high": 1.0}, "needs its public range (low, high) and its bins"),
    ({"kind": "binary", "classes": ["a", "b"]}, "a binary label names no classes"),
    ({"kind": "classes", "classes": ["a", "b"], "bins": 2}, "has no range and no bins"),
]


@pytest.mark.parametrize(("spec", "reason"), HOSTILE)
def test_a_hostile_label_spec_is_not_a_valid_proposal(spec, reason):
    with pytest.raises(ValidationError) as info:
        LabelSpec.model_validate_json(json.dumps(spec))
    assert reason in str(info.value)


def test_paper_mode_learns_a_binary_label_only():
    with pytest.raises(ValidationError, match="paper mode learns a binary label"):
        problem(mode="paper", label=LabelSpec(**CLASSES))


@pytest.mark.parametrize(("spec", "reason"), HOSTILE[:6])
def test_the_aggregator_refuses_to_publish_a_hostile_label_with_the_reason(aggregator, spec, reason):
    body = json.loads(draft().model_dump_json())
    body["label"] = spec
    reply = requests.post(f"{aggregator.url}/problems", data=json.dumps(body), headers=ADMIN, timeout=30)
    assert reply.status_code == 422 and reason in reply.text


class _Served(ScriptedHandler):
    served = b""

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        self.reply(200, self.served)


@pytest.mark.parametrize(("spec", "reason"), HOSTILE[3:8])
def test_a_peer_refuses_a_problem_served_with_a_hostile_label(spec, reason):
    # A hostile aggregator signs what it likes; the peer parses the wire form before anything else.
    body = json.loads(problem().model_dump_json())
    body["draft"]["label"] = spec
    handler = type("Handler", (_Served,), {"served": json.dumps(body).encode()})
    with served(handler) as url, pytest.raises(ProtocolError, match="malformed answer") as info:
        AggregatorClient(url).problem("p-policy")
    assert reason in str(info.value)


def test_the_policy_bounds_the_label_domain_even_when_the_user_accepts():
    fine = problem(label=LabelSpec(kind="classes", classes=tuple(f"c{i}" for i in range(6))))
    strict = AUTO.model_copy(update={"max_label_classes": 4})
    for manual in (False, True):
        d = evaluate_problem(fine, strict, 0.0, manual=manual)
        assert d.verdict == "refuse" and "has 6 classes, more than this peer's maximum of 4" in d.reason
    assert evaluate_problem(fine, AUTO, 0.0).accept
    assert evaluate_problem(problem(label=LabelSpec(**NUMERIC)), AUTO, 0.0).accept


def test_label_index_reads_each_kind_and_names_what_does_not_fit():
    classes, numeric, binary = LabelSpec(**CLASSES), LabelSpec(**NUMERIC), LabelSpec()
    assert [label_index(v, classes) for v in ("low", "high", 1)] == [0, 2, 1]
    # Bins of width 15 over [0, 60]; out-of-range values go to the end bins (no behaviour change).
    assert [label_index(v, numeric) for v in (-3.0, 0.0, 14.9, 15.0, 59.0, 600, np.float32(31))] == [
        0, 0, 0, 1, 3, 3, 2,
    ]
    assert [label_index(v, binary) for v in (0, 1, True, 1.0)] == [0, 1, 1, 1]
    assert numeric.numeric_range() == (0.0, 60.0, 4) and numeric.k == 4
    for other in (classes, binary):  # no range to read: said, never a None in the arithmetic
        with pytest.raises(ValueError, match="has no public range and bins"):
            other.numeric_range()
    for value, spec, text in [
        ("huge", classes, "is none of the 3 classes: low, mid, high"),
        (3, classes, "is none of the 3 classes"),
        (True, classes, "is none of the 3 classes"),
        ("7", numeric, "is not a number (numeric in [0, 60], 4 bins)"),
        (float("nan"), numeric, "is not finite"),
        (2, binary, "is not a bit"),
    ]:
        with pytest.raises(AnonMLError, match=re.escape(text)):
            label_index(value, spec)


def test_reports_carry_the_label_domain_and_an_out_of_domain_label_sends_a_stand_in():
    d = draft(n_numeric=1, kp=1).model_copy(update={"label": LabelSpec(**CLASSES)})
    p = problem(features=d.features, label=LabelSpec(**CLASSES))
    bins = bins_document(p.id, ((5.0,), ()))
    assignment = PeerAssignment("report", 0, ((0,),))
    assert Binning.from_published(p.draft.features, bins.edges).n_bins[0] == 2
    good = LocalExample(np.array([7.0, 1.0]), 2)
    reports, specs, why = make_reports(p, assignment, good, bins, 50, "peer", np.random.default_rng(0))
    assert reports[0].mechanism.m == domain_size((2,), 3) == 6 and why == [""]
    bad = LocalExample(np.array([7.0, 1.0]), 3)
    reports, _, why = make_reports(p, assignment, bad, bins, 50, "peer", np.random.default_rng(0))
    assert reports[0].mechanism.m == 6 and why == ["label 3 is not a class index 0..2"]



def test_a_binary_problem_keeps_the_wire_form_and_signature_it_had_before_labels():
    from anonml.protocol import signing_bytes, verify_message

    binary = problem()
    assert "label" not in json.loads(binary.model_dump_json())["draft"]
    # A problem signed over the old form (no label key) verifies and parses as binary.
    old_form = json.loads(binary.model_dump_json())
    parsed = type(binary).model_validate(old_form)
    assert parsed.draft.label.kind == "binary" and signing_bytes(parsed) == signing_bytes(binary)
    verify_message(parsed, bytes(parsed.aggregator))
    named = problem(label=LabelSpec(**CLASSES))
    assert json.loads(named.model_dump_json())["draft"]["label"]["classes"] == ["low", "mid", "high"]
    verify_message(type(named).model_validate_json(named.model_dump_json()), bytes(named.aggregator))
