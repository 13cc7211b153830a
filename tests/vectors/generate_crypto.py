"""Generate the frozen known-answer vectors of ``anonml.crypto`` from seeded generators.

Run from the repository root after an *intended* wire-format change::

    python -m tests.vectors.generate_crypto

and commit the rewritten ``tests/vectors/crypto_*.json``. ``tests/crypto/test_vectors.py``
recomputes every value with the same seeds and fails on any difference, so an
accidental change to hashing, encodings, key derivation, the POPRF transcript,
the onion layout or the keystream shows up as a failing test.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np

from anonml.crypto.group import expand_message_xmd, hash_to_group, hash_to_scalar
from anonml.crypto.identity import Identity
from anonml.crypto.onion import (
    Deliver,
    Forward,
    Hop,
    SphinxRelay,
    build_cover_packet,
    build_packet,
    open_payload,
)
from anonml.crypto.poprf import CONTEXT_STRING, TokenKey, evaluate
from anonml.crypto.spent import MemoryIssuanceLedger
from anonml.crypto.tokens import (
    Redemption,
    TokenIssuer,
    finalize_tokens,
    request_token_batch,
    request_tokens,
)

HERE = Path(__file__).resolve().parent
FILES = {
    "group": HERE / "crypto_group.json",
    "identity": HERE / "crypto_identity.json",
    "tokens": HERE / "crypto_tokens.json",
    "onion": HERE / "crypto_onion.json",
}
_MESSAGES = [b"", b"abc", b"p1/r0/s0", bytes(range(64))]


def group_vectors() -> dict:
    dst_g = b"HashToGroup-" + CONTEXT_STRING
    dst_s = b"HashToScalar-" + CONTEXT_STRING
    return {
        "suite": CONTEXT_STRING.decode("latin-1"),
        "cases": [
            {
                "msg": m.hex(),
                "expand_message_xmd_64": expand_message_xmd(m, dst_g, 64).hex(),
                "hash_to_group": bytes(hash_to_group(m, dst_g)).hex(),
                "hash_to_scalar": bytes(hash_to_scalar(m, dst_s)).hex(),
            }
            for m in _MESSAGES
        ],
    }


def identity_vectors(seed: int = 20250501) -> dict:
    rng = np.random.default_rng(seed)
    ident = Identity.generate(rng)
    relay_key, cert = ident.new_round_relay_key(3, rng)
    return {
        "seed": seed,
        "secret": ident._secret_bytes().hex(),
        "public": bytes(ident.public).hex(),
        "fingerprint": ident.fingerprint.hex(),
        "node_id": ident.public.node_id.hex(),
        "signature_roster": ident.sign(b"roster body", context=b"roster").hex(),
        "round_relay_public": relay_key.public_key.hex(),
        "relay_certificate": bytes(cert).hex(),
    }


def token_vectors(seed: int = 20250502) -> dict:
    key = TokenKey.derive(hashlib.sha256(b"AnonML KAT seed").digest(), b"AnonML KAT key")
    rng = np.random.default_rng(seed)
    issuer = TokenIssuer(key, MemoryIssuanceLedger(), max_tokens_per_slot=2)
    cases = []
    for slot, count in ((b"p1/r0/s0", 1), (b"p1/r0/s1", 2)):
        request = request_tokens(key.public_key, slot, count=count, rng=rng)
        response = issuer.issue(b"peer-kat", slot, request.message(), rng=rng)
        tokens = finalize_tokens(request, bytes(response))
        cases.append(
            {
                "slot": slot.hex(),
                "nonces": [n.hex() for n in request.nonces],
                "blinds": [bytes(r).hex() for r in request.blinds],
                "request": request.message().hex(),
                "response": bytes(response).hex(),
                "outputs": [t.output.hex() for t in tokens],
                "direct_outputs": [evaluate(key, n, slot).hex() for n in request.nonces],
                "redemptions": [bytes(t.redeem(b"report %d" % i)).hex() for i, t in enumerate(tokens)],
            }
        )
    # One request over two slots: one proof covers both evaluations.
    slots = (b"p1/r0/s2", b"p1/r0/s3")
    request = request_token_batch(key.public_key, slots, rng=rng)
    response = issuer.issue_batch(
        b"peer-kat", [(s, bytes(b)) for s, b in zip(slots, request.blinded, strict=True)], rng=rng
    )
    tokens = finalize_tokens(request, bytes(response))
    cases.append(
        {
            "slots": [s.hex() for s in slots],
            "nonces": [n.hex() for n in request.nonces],
            "blinds": [bytes(r).hex() for r in request.blinds],
            "request": request.message().hex(),
            "response": bytes(response).hex(),
            "outputs": [t.output.hex() for t in tokens],
            "direct_outputs": [evaluate(key, n, s).hex() for n, s in zip(request.nonces, slots, strict=True)],
            "redemptions": [bytes(t.redeem(b"report %d" % i)).hex() for i, t in enumerate(tokens)],
        }
    )
    return {
        "seed": seed,
        "secret_key": bytes(key).hex(),
        "public_key": bytes(key.public_key).hex(),
        "key_id": key.key_id.hex(),
        "cases": cases,
    }


def onion_vectors(seed: int = 20250503) -> dict:
    rng = np.random.default_rng(seed)
    round_id = 9
    relays, hops = {}, []
    for _ in range(4):
        ident = Identity.generate(rng)
        key, cert = ident.new_round_relay_key(round_id, rng)
        relays[cert.node_id] = SphinxRelay(key)
        hops.append(Hop.from_certificate(cert, round_id, delay_ms=len(hops) * 250))
    aggregator = Identity.generate(rng)  # its X25519 half is the intake key payloads are sealed to
    intake_key = aggregator.public.relay_key
    destination = hashlib.sha256(b"aggregator").digest()[:16]
    redemption = Redemption(b"p1/r9/s2", rng.bytes(32), rng.bytes(32))
    cases = []
    for k, cover in ((1, False), (2, False), (3, False), (4, False), (3, True)):
        path = hops[:k]
        if cover:
            packet = build_cover_packet(
                path, round_id=round_id, destination=destination, intake_key=intake_key, rng=rng
            )
        else:
            packet = build_packet(
                path,
                redemption,
                b"report k=%d" % k,
                round_id=round_id,
                destination=destination,
                intake_key=intake_key,
                rng=rng,
            )
        case = {"k": k, "cover": cover, "packet": packet.hex(), "hops": []}
        node, current = path[0].node_id, packet
        while True:
            out = relays[node].process(current)
            if isinstance(out, Forward):
                case["hops"].append(
                    {
                        "next_hop": out.next_hop.hex(),
                        "delay_ms": out.delay_ms,
                        "packet_sha256": hashlib.sha256(out.packet).hexdigest(),
                    }
                )
                node, current = out.next_hop, out.packet
                continue
            assert isinstance(out, Deliver)
            payload = open_payload(aggregator, out.sealed, round_id=out.round_id)
            case["delivered"] = {
                "destination": out.destination.hex(),
                "delay_ms": out.delay_ms,
                "round_id": out.round_id,
                "sealed": out.sealed.hex(),
                "redemption": None if payload.redemption is None else bytes(payload.redemption).hex(),
                "report": None if payload.report is None else payload.report.hex(),
            }
            break
        cases.append(case)
    return {
        "seed": seed,
        "round_id": round_id,
        "aggregator_secret": aggregator._secret_bytes().hex(),
        "hops": [
            {"node_id": h.node_id.hex(), "public_key": h.public_key.hex(), "delay_ms": h.delay_ms}
            for h in hops
        ],
        "cases": cases,
    }


def build_vectors() -> dict[str, dict]:
    """Every vector set, keyed like :data:`FILES`."""
    return {
        "group": group_vectors(),
        "identity": identity_vectors(),
        "tokens": token_vectors(),
        "onion": onion_vectors(),
    }


def main() -> None:
    for name, data in build_vectors().items():
        FILES[name].write_text(json.dumps(data, indent=1, sort_keys=True) + "\n", encoding="utf-8")
        print(f"wrote {FILES[name]}")


if __name__ == "__main__":
    main()
