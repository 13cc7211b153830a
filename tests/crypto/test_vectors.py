"""Frozen known-answer vectors: recompute from the seeds and compare byte for byte.

A failure here means the wire format or a derivation changed. If that was
intended, regenerate with ``python -m tests.vectors.generate_crypto`` and say so
in the change; otherwise it is a bug.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from anonml.crypto.identity import Identity, PublicIdentity, RelayKeyCertificate
from anonml.crypto.onion import Deliver, Forward, SphinxRelay, open_payload
from anonml.crypto.poprf import TokenKey
from anonml.crypto.spent import MemorySpentSet
from anonml.crypto.tokens import Redemption, TokenVerifier
from tests.vectors import generate_crypto as gen


def _frozen(name: str) -> dict:
    return json.loads(gen.FILES[name].read_text(encoding="utf-8"))


@pytest.mark.parametrize(
    ("name", "build"),
    [
        ("group", gen.group_vectors),
        ("identity", gen.identity_vectors),
        ("tokens", gen.token_vectors),
        ("onion", gen.onion_vectors),
    ],
)
def test_recomputed_vectors_match_the_frozen_files(name: str, build) -> None:
    recomputed = json.loads(json.dumps(build()))  # same JSON normalisation as the files
    frozen = _frozen(name)
    assert recomputed.keys() == frozen.keys()
    for field in frozen:
        assert recomputed[field] == frozen[field], f"{name}.{field} changed"


def test_frozen_identity_parses_and_verifies() -> None:
    v = _frozen("identity")
    secret = bytes.fromhex(v["secret"])
    ident = Identity(secret[:32], secret[32:])
    assert bytes(ident.public).hex() == v["public"]
    public = PublicIdentity.from_bytes(bytes.fromhex(v["public"]))
    assert public.verify(b"roster body", bytes.fromhex(v["signature_roster"]), context=b"roster")
    cert = RelayKeyCertificate.from_bytes(bytes.fromhex(v["relay_certificate"]))
    assert cert.verify(public, round_id=3).hex() == v["round_relay_public"]


def test_frozen_tokens_redeem_under_the_frozen_key() -> None:
    v = _frozen("tokens")
    key = TokenKey(bytes.fromhex(v["secret_key"]))
    assert bytes(key.public_key).hex() == v["public_key"] and key.key_id.hex() == v["key_id"]
    verifier = TokenVerifier(key, MemorySpentSet())
    for case in v["cases"]:
        assert case["outputs"] == case["direct_outputs"]
        for i, wire in enumerate(case["redemptions"]):
            report = b"report %d" % i
            assert verifier.redeem(Redemption.from_bytes(bytes.fromhex(wire)), report) == report


def test_frozen_packets_peel_to_the_frozen_results() -> None:
    v = _frozen("onion")
    rng = np.random.default_rng(v["seed"])
    relays = {}
    for _ in range(4):  # the generator's first draws: four identities and their round keys
        ident = Identity.generate(rng)
        key, cert = ident.new_round_relay_key(v["round_id"], rng)
        relays[cert.node_id.hex()] = key
    aggregator = Identity.generate(rng)  # the next draw: the aggregator, whose X25519 half is the intake key
    assert aggregator._secret_bytes().hex() == v["aggregator_secret"]
    for case in v["cases"]:
        packet = bytes.fromhex(case["packet"])
        node = v["hops"][0]["node_id"]
        for expected in case["hops"]:
            out = SphinxRelay(relays[node]).process(packet)
            assert isinstance(out, Forward) and out.next_hop.hex() == expected["next_hop"]
            node, packet = expected["next_hop"], out.packet
        out = SphinxRelay(relays[node]).process(packet)
        assert isinstance(out, Deliver)
        want = case["delivered"]
        assert out.destination.hex() == want["destination"] and out.delay_ms == want["delay_ms"]
        assert out.round_id == want["round_id"] == v["round_id"] and out.sealed.hex() == want["sealed"]
        payload = open_payload(aggregator, out.sealed, round_id=out.round_id)  # only the aggregator can
        assert payload.is_cover == case["cover"]
        assert (None if payload.report is None else payload.report.hex()) == want["report"]
        assert (None if payload.redemption is None else bytes(payload.redemption).hex()) == want["redemption"]
