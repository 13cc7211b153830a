"""The partition plan at scale: ``make_plan`` and a host's per-identity ``verify_assignment``.

Every fit simulates the protocol's plan (:func:`anonml.learn.partition.make_plan`: the roster
digest, then every peer ranked by ``H(seed ‖ beacon ‖ digest ‖ key)``), and every identity a peer
host checks re-derives its assignment against the signed roster
(:func:`~anonml.learn.partition.verify_assignment`). Both are timed here against the rule written
out directly in this file (``reference_*``: two hash updates per key for the digest, one SHA-256
object per rank, Python's ``sorted`` over the ranks, and the digest recomputed for every identity
— what the library did before), in the same process, and checked equal to it:

* ``make_plan`` on 10,000 / 200,000 / 1,000,000 simulated peer keys (best of three each, interleaved);
* a host of 2,500 identities on a 10,000-member roster checking its assignments (the
  10,000-peer round's hosts).

Writes ``benchmarks/results/plan.json``. Run: ``python -m benchmarks.plan``.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import time
from collections.abc import Callable, Sequence

import numpy as np

from anonml.learn.partition import _sha256, commit_seed, make_plan, verify_assignment  # the old per-rank hash
from anonml.learn.simulation import simulated_peer_keys
from benchmarks.reporting import RESULTS, machine, now, write_json

SEED = bytes(range(32))
DOMAIN = b"anonml/partition/v1/"


def reference_digest(keys: Sequence[bytes]) -> bytes:
    """DESIGN §6's roster digest as the library computed it before: checks, then two updates per key."""
    keys = [bytes(k) for k in keys]
    if len(set(keys)) != len(keys) or any(len(k) == 0 for k in keys):
        raise ValueError("duplicate or empty key")
    h = hashlib.sha256(DOMAIN + b"roster")
    for key in sorted(keys):
        h.update(len(key).to_bytes(4, "big"))
        h.update(key)
    return h.digest()


def reference_order(keys: Sequence[bytes]) -> np.ndarray:
    """Peers sorted by ``H(seed ‖ digest ‖ key)`` (no beacon), one SHA-256 object per rank and Python's
    ``sorted``; the plan computed the digest a second time for its record, as here."""
    digest = reference_digest(keys)
    ranks = [_sha256(SEED, b"", digest, bytes(key)) for key in keys]
    order = np.asarray(sorted(range(len(ranks)), key=ranks.__getitem__), dtype=np.int64)
    reference_digest(keys)
    return order


def reference_host_check(keys: Sequence[bytes], identities: Sequence[int]) -> int:
    """Each identity's roster check as it was: the digest and the key's index found anew."""
    digest = reference_digest(keys)
    found = 0
    for i in identities:
        listed = [bytes(k) for k in keys]
        if reference_digest(listed) == digest and listed.index(keys[i]) == i:
            found += 1
    return found


def _timed(call: Callable[[], object]) -> tuple[float, object]:
    started = time.perf_counter()
    out = call()
    return time.perf_counter() - started, out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="10000,200000,1000000")
    parser.add_argument("--host-identities", type=int, default=2_500)
    parser.add_argument("--roster", type=int, default=10_000)
    args = parser.parse_args(argv)
    load_before = os.getloadavg()[0]
    plans = []
    for n in (int(s) for s in args.sizes.split(",")):
        keys = simulated_peer_keys(n)
        # best of three each, interleaved: the machine is shared
        t_ref = t_new = float("inf")
        for _ in range(3):
            t, expected = _timed(lambda keys=keys: reference_order(keys))
            t_ref = min(t_ref, t)
            t, plan = _timed(lambda keys=keys: make_plan(SEED, keys, 20, n_partitions=20))
            t_new = min(t_new, t)
        assert plan.order.tolist() == expected.tolist() and plan.roster == reference_digest(keys)
        plans.append(
            {
                "peers": n,
                "reference_seconds": round(t_ref, 4),
                "make_plan_seconds": round(t_new, 4),
                "speedup": round(t_ref / t_new, 2),
            }
        )
        print(plans[-1])
    keys = simulated_peer_keys(args.roster)
    plan = make_plan(SEED, keys, 20, n_partitions=20)
    hosted = list(range(args.host_identities))
    t_ref, found = _timed(lambda: reference_host_check(keys, hosted))
    assert found == len(hosted)

    def check_all() -> None:
        for i in hosted:
            verify_assignment(
                plan.assignment(i), plan, commitment=commit_seed(SEED), peer_keys=keys, my_key=keys[i]
            )

    t_new, _ = _timed(check_all)
    host = {
        "roster": args.roster,
        "identities": len(hosted),
        "reference_seconds": round(t_ref, 3),
        "verify_assignment_seconds": round(t_new, 3),
        "speedup": round(t_ref / t_new, 2),
    }
    print(host)
    write_json(
        RESULTS / "plan.json",
        {
            "benchmark": "plan",
            "when": now(),
            "machine": machine(load_1min_before=load_before, load_1min_after=os.getloadavg()[0]),
            "make_plan": plans,
            "host_roster_check": host,
            "note": "reference_* is the rule written out in benchmarks/plan.py as the library computed it "
            "before (two hash updates per key, sorted() over the ranks, the digest recomputed per "
            "identity); each result is checked equal to it",
        },
    )


if __name__ == "__main__":
    main()
