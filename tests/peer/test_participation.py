""":class:`peer.participant.Participant` has every member of :class:`peer.participation.Participation`.

The step modules take a ``Participation`` (the structural type of what they use) so that they need
not import the participant that imports them; this checks, without a type checker, that the one
implementation keeps up with it: each protocol attribute is a dataclass field of the same declared
type (a protocol attribute is invariant), each property a read-only attribute, each method a method
with the same parameters.
"""

from __future__ import annotations

import dataclasses
import inspect

from peer.participant import Participant
from peer.participation import Participation

FIELDS = {f.name: f.type for f in dataclasses.fields(Participant)}
MEMBERS = {name: value for name, value in vars(Participation).items() if not name.startswith("__")}


def test_every_protocol_attribute_is_a_field_of_the_same_type():
    attributes = Participation.__annotations__
    assert {"phase", "roster", "preparation", "_payloads"} <= set(attributes)
    wrong = {name: (kind, FIELDS.get(name)) for name, kind in attributes.items() if FIELDS.get(name) != kind}
    assert not wrong, f"Participation attribute and Participant field differ: {wrong}"


def test_every_protocol_property_is_readable_and_every_method_matches():
    properties = [name for name, value in MEMBERS.items() if isinstance(value, property)]
    methods = [name for name, value in MEMBERS.items() if inspect.isfunction(value)]
    assert {"relaying", "paths", "in_median_pool"} <= set(properties)
    assert {"facts", "_move", "_into_round", "compute_example"} <= set(methods)
    for name in properties:
        assert hasattr(Participant, name) and not inspect.isfunction(getattr(Participant, name)), name
    for name in methods:
        ours = inspect.signature(getattr(Participant, name))
        assert list(ours.parameters) == list(inspect.signature(MEMBERS[name]).parameters), name
