"""Cost of the anonymity primitives, in units of one bare X25519 scalar multiplication.

Every operation is timed against the baseline (``crypto_scalarmult`` on a
random scalar and point) in the same run: batches of the operation alternate
with batches of the baseline, each pair gives a ratio, and the median ratio
over ``--repeats`` pairs is reported (alternating cancels the drift of a shared,
loaded machine; times are CPU time of the benchmark thread, so time spent
preempted by other processes is not counted; the microseconds are medians too):

* token issuance per slot (server: validate the blinded element, evaluate with
  the slot-tweaked key, record the issuance, one DLEQ proof per request), for
  a one-slot request (``k_h = 1``, the default) and, per slot, for a request
  covering four slots (``k_h = 4``: one proof for the four);
* token request (client blind) and finalize (client: verify proof, unblind, hash);
* redemption check (server: hash-to-group, one scalar multiplication, MAC,
  in-memory spent set); also with the SQLite spent set, one transaction per
  redemption, for information;
* packet build for k = 3 (sender) and packet processing per hop (relay, an
  intermediate hop), and at the final hop.

Targets: redemption check <= 4 units; per-hop processing <= 3 units; token
issuance <= 6 units per slot (also for a one-slot request);
10,000 redemptions verified in <= 3 s on one core (timed end to end, separately).
Results go to ``benchmarks/results/crypto.json``.

Run: ``python -m benchmarks.crypto`` from the repository root.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import nacl
import nacl.bindings as b
import numpy as np
from sqlalchemy import create_engine, event

from anonml.crypto.group import Element, random_scalar
from anonml.crypto.identity import Identity
from anonml.crypto.onion import Hop, SphinxRelay, build_packet
from anonml.crypto.poprf import TokenKey, evaluate
from anonml.crypto.spent import MemoryIssuanceLedger, MemorySpentSet, SqlSpentSet
from anonml.crypto.tokens import (
    Redemption,
    Token,
    TokenIssuer,
    TokenVerifier,
    finalize_tokens,
    request_token_batch,
    request_tokens,
)
from benchmarks.reporting import machine, now, write_json

RESULTS = Path(__file__).resolve().parent / "results" / "crypto.json"
TARGETS_UNITS = {
    "redemption_check": 4.0,
    "packet_per_hop": 3.0,
    "token_issuance_per_slot (server)": 6.0,
    "token_issuance_per_slot, 4-slot request (server)": 6.0,
}
BATCH_SLOTS = tuple(b"p1/r0/s%d" % k for k in range(4))
TARGET_10K_SECONDS = 3.0
SLOT = b"p1/r0/s0"
REPORT = bytes(200)


def _batch(fn: Callable[[int], object], start: int, n: int) -> float:
    # CPU time of this thread: on a shared machine, time spent preempted is not the operation's.
    t0 = time.thread_time()
    for i in range(start, start + n):
        fn(i)
    return (time.thread_time() - t0) / n


class _Meter:
    """Times operations in batches alternating with baseline batches of the same wall time."""

    def __init__(self, baseline: Callable[[int], object], repeats: int) -> None:
        self.baseline, self.repeats = baseline, repeats
        self.baseline_times: list[float] = []

    def __call__(self, fn: Callable[[int], object], n: int) -> tuple[float, float]:
        """(median seconds per call of ``fn``, median ratio to the baseline)."""
        times, ratios = [], []
        for r in range(self.repeats):
            t = _batch(fn, r * n, n)
            base = _batch(self.baseline, 0, max(4, int(n * t / 50e-6)))  # ~ same wall time
            self.baseline_times.append(base)
            times.append(t)
            ratios.append(t / base)
        return statistics.median(times), statistics.median(ratios)


def _tokens(key: TokenKey, count: int, rng: np.random.Generator) -> list[tuple[Redemption, bytes]]:
    """Distinct valid redemptions, made with the server's direct evaluation (same output as
    finalize, see tests/crypto/test_poprf.py) to keep the set-up short."""
    out = []
    for _ in range(count):
        nonce = rng.bytes(32)
        token = Token(key.key_id, SLOT, nonce, evaluate(key, nonce, SLOT))
        out.append((token.redeem(REPORT), REPORT))
    return out


def run(n: int, repeats: int) -> dict:
    load_before = round(os.getloadavg()[0], 2)  # context: this machine is shared
    rng = np.random.default_rng(0)
    k_x, u_x = rng.bytes(32), b.crypto_scalarmult_base(rng.bytes(32))
    meter = _Meter(lambda i: b.crypto_scalarmult(k_x, u_x), repeats)
    ops: dict[str, tuple[float, float]] = {}

    P, s = Element.base_mul(random_scalar(rng)), random_scalar(rng)
    ops["ed25519_scalarmult (info)"] = meter(lambda i: P * s, n)

    key = TokenKey.generate(rng)
    issuer = TokenIssuer(key, MemoryIssuanceLedger())
    requests = [request_tokens(key.public_key, SLOT, rng=rng) for _ in range(n * repeats)]
    ops["token_request (client)"] = meter(lambda i: request_tokens(key.public_key, SLOT), n)
    responses: list = []
    ops["token_issuance_per_slot (server)"] = meter(
        lambda i: responses.append(issuer.issue(b"peer-%d" % i, SLOT, requests[i].message())), n
    )
    ops["token_finalize (client)"] = meter(lambda i: finalize_tokens(requests[i], responses[i]), n)
    k = len(BATCH_SLOTS)
    batches = [request_token_batch(key.public_key, BATCH_SLOTS, rng=rng) for _ in range(n * repeats // k + 1)]
    batch_responses: list = []
    t, ratio = meter(
        lambda i: batch_responses.append(
            issuer.issue_batch(
                b"batch-peer-%d" % i, list(zip(BATCH_SLOTS, map(bytes, batches[i].blinded), strict=True))
            )
        ),
        n // k,
    )
    ops["token_issuance_per_slot, 4-slot request (server)"] = (t / k, ratio / k)
    t, ratio = meter(lambda i: finalize_tokens(batches[i], batch_responses[i]), n // k)
    ops["token_finalize_per_slot, 4-slot request (client)"] = (t / k, ratio / k)

    redemptions = _tokens(key, n * repeats, rng)
    verifier = TokenVerifier(key, MemorySpentSet())
    ops["redemption_check"] = meter(lambda i: verifier.redeem(*redemptions[i]), n)

    with tempfile.TemporaryDirectory() as tmp:
        # A service would open its database like this: WAL, synchronous=NORMAL.
        engine = create_engine(f"sqlite:///{Path(tmp) / 'spent.db'}")
        event.listen(engine, "connect", _sqlite_wal)
        sql_verifier = TokenVerifier(key, SqlSpentSet(engine))
        ops["redemption_check_sqlite_wal_commit_each (info)"] = meter(
            lambda i: sql_verifier.redeem(*redemptions[i]), max(n // 4, 10)
        )
        engine.dispose()

    relays, hops = [], []
    for _ in range(3):
        ident = Identity.generate(rng)
        rkey, cert = ident.new_round_relay_key(1, rng)
        relays.append(SphinxRelay(rkey))
        hops.append(Hop.from_certificate(cert, 1))
    red = redemptions[0][0]
    dest = bytes(16)
    intake = Identity.generate(rng).public.relay_key  # the aggregator's intake key
    packets: list[bytes] = []
    ops["packet_build_k3 (sender)"] = meter(
        lambda i: packets.append(
            build_packet(hops, red, REPORT, round_id=1, destination=dest, intake_key=intake)
        ),
        n,
    )
    forwarded: list[bytes] = []
    ops["packet_per_hop"] = meter(lambda i: forwarded.append(relays[0].process(packets[i]).packet), n)
    second = [relays[1].process(p).packet for p in forwarded]
    ops["packet_final_hop"] = meter(lambda i: relays[2].process(second[i]), n)

    # 10,000 redemptions end to end, one core, in-memory spent set.
    batch = _tokens(key, 10_000, np.random.default_rng(1))
    fresh = TokenVerifier(key, MemorySpentSet())
    start, wall = time.thread_time(), time.perf_counter()
    for red_i, rep in batch:
        fresh.redeem(red_i, rep)
    seconds_10k, wall_10k = time.thread_time() - start, time.perf_counter() - wall
    baseline = statistics.median(meter.baseline_times)

    operations = {}
    for name, (t, ratio) in ops.items():
        entry: dict[str, object] = {"microseconds": round(t * 1e6, 2), "units": round(ratio, 3)}
        if name in TARGETS_UNITS:
            entry["target_units"] = TARGETS_UNITS[name]
            entry["meets_target"] = ratio <= TARGETS_UNITS[name]
        operations[name] = entry
    return {
        "benchmark": "anonml.crypto per-operation cost",
        "date": now(),
        "load_average_1min_before_after": [load_before, round(os.getloadavg()[0], 2)],
        "machine": machine(pynacl=nacl.__version__),
        "method": (
            f"median over {repeats} pairs of (operation batch of {n} calls, baseline batch of "
            "similar duration); unit = one X25519 scalar multiplication"
        ),
        "baseline_x25519_microseconds": round(baseline * 1e6, 2),
        "operations": operations,
        "redeem_10000": {
            "seconds": round(seconds_10k, 3),
            "wall_seconds": round(wall_10k, 3),
            "target_seconds": TARGET_10K_SECONDS,
            "meets_target": seconds_10k <= TARGET_10K_SECONDS,
            "x25519_units_each": round(seconds_10k / 10_000 / baseline, 3),
        },
    }


def _sqlite_wal(dbapi_connection, _record) -> None:
    cursor = dbapi_connection.cursor()
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute("PRAGMA synchronous=NORMAL")
    cursor.close()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=300, help="calls per batch (at least 40)")
    parser.add_argument("--repeats", type=int, default=5, help="batches per operation")
    args = parser.parse_args(argv)
    if args.n < 40 or args.repeats < 1:
        # The SQLite check runs max(n / 4, 10) calls per batch out of n per batch: n >= 40 keeps it inside.
        parser.error(f"--n must be at least 40 and --repeats at least 1 (got {args.n}, {args.repeats})")
    result = run(args.n, args.repeats)
    write_json(RESULTS, result)
    print(f"X25519 baseline: {result['baseline_x25519_microseconds']} us")
    for name, entry in result["operations"].items():
        flag = "" if "meets_target" not in entry else (" ok" if entry["meets_target"] else " MISSED")
        print(f"{name:45s} {entry['microseconds']:10.1f} us {entry['units']:8.2f} units{flag}")
    r = result["redeem_10000"]
    print(f"10,000 redemptions: {r['seconds']} s CPU, {r['wall_seconds']} s wall", end=" ")
    print(f"(target {r['target_seconds']} s)")
    print(f"wrote {RESULTS}")


if __name__ == "__main__":
    main()
