"""The witness: an independent service that co-signs at most one transcript per (aggregator, problem, stage).

A malicious aggregator can show different peers different signed documents,
and, knowing the seed while registration is open, grind the roster until a
victim lands where it wants (DESIGN §10, ``docs/threat-model.md``). Peers
release nothing for a stage until every witness the Problem declares has
co-signed the transcript they computed themselves, and the witnesses' VRF
outputs on the roster transcript form the beacon of the partition plan: one
value per witness key and roster, so with one honest witness among the
declared ones the aggregator gets one draw. Everything signed is kept in an
append-only log anyone can read.

The witness knows nothing about peers and imports no other role: its state is
one SQLite file (:mod:`witness.db`, 0600 in a 0700 home) and its identity a key
file; its rules are :class:`~witness.service.Witness`, its routes
:mod:`witness.routes`, its app and servers :mod:`witness.app`.
"""

from witness import app
from witness.app import *  # noqa: F403 - the module's __all__, listed once there
from witness.service import Witness, WitnessRefusal
from witness.settings import WitnessSettings

__all__ = [
    "WitnessSettings",
    "Witness",
    "WitnessRefusal",
    *app.__all__,
]
