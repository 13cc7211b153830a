"""The aggregator's status read against the roster's size (issue 31: CPU per peer flat).

A status poll is what every waiting peer does, over and over, for the whole round; its cost should
not grow with the roster (the response carries counts, not the roster). In one process, on an
SQLite file, for a problem in its report round whose roster (signed, cosigned, parsed once into the
process's context) has ``--small`` (100) and ``--large`` (10,000) members: ``--reads`` status reads
each, timed, as the route does them (a session, :func:`aggregator.routes.problems.get_row`, then
:func:`~aggregator.routes.problems.problem_status`). The two sizes alternate, ``--rounds`` times,
and the best round's ms per read is kept for each. Reports ms per read and the ratio large / small.

The roster entries hold fresh identities and random bytes of a real entry's sizes (136-byte relay
certificate, 64-byte signature) and a relay URL: what is stored and parsed is as large as a real
roster (~0.6 kB per member), and nothing here verifies a signature.

Writes ``benchmarks/results/status_read.json``. Run: ``python -m benchmarks.status_read``.
"""

from __future__ import annotations

import argparse
import os
import secrets
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from aggregator.db import ProblemRow, publish_document
from aggregator.routes.problems import get_row, problem_status
from aggregator.state import AggregatorState
from anonml.crypto import Identity, TokenKey
from anonml.phases import ProblemPhase
from anonml.protocol import CosignatureBundle, RosterEntry
from benchmarks.reporting import RESULTS, machine, now, write_json
from tests.aggregator.helpers import (
    aggregator_settings,
    bins_document,
    draft,
    roster_document,
    signed_problem,
)

PID = "p-status-read"
ROUND_ID = 7


def _entries(members: int) -> tuple[RosterEntry, ...]:
    return tuple(
        RosterEntry(
            identity=bytes(Identity.generate().public),  # parsed as keys when the roster is loaded
            relay_url=f"https://relay-{i}.example.org/relay/{secrets.token_hex(16)}",
            relay_certificate=secrets.token_bytes(136),
            registration_signature=secrets.token_bytes(64),
        )
        for i in range(members)
    )


def aggregator_with_roster(root: Path, members: int) -> AggregatorState:
    """An aggregator state on a fresh SQLite file holding :data:`PID` in its report round, its
    roster (``members`` entries) and bins published and co-signed (by no witness: none declared)."""
    state = AggregatorState(aggregator_settings(root))
    seed, token_key = secrets.token_bytes(32), TokenKey.generate()
    d = draft(min_peers=2, registration_seconds=-1.0, send_window=3600.0)
    problem = signed_problem(d, state.identity, pid=PID, seed=seed, round_id=ROUND_ID)
    roster = roster_document(
        PID,
        _entries(members),
        signer=state.identity,
        round_id=ROUND_ID,
        seed=seed,
        token_key=bytes(token_key.public_key),
        median_pool_size=d.median_pool_size(members),
    )
    t_s = time.time()
    edges = ((5.0,), (5.0,), ())  # the draft's two numeric features and its boolean
    bins = bins_document(PID, edges, t_s=t_s, delta=3600.0, t_r=t_s + 7200.0, signer=state.identity)
    with state.sessions() as s, s.begin():
        s.add(
            ProblemRow(
                id=PID,
                problem_json=problem.model_dump_json(),
                seed=seed,
                token_secret=bytes(token_key),
                round_id=ROUND_ID,
                phase=ProblemPhase.REPORTING,
                created_at=datetime.now(UTC),
                phase_started=t_s,
                phase_seconds_json='{"registration": 1.0, "witnessing": 0.1, "medians": 1.0}',
                close_requested=True,
                roster_cosignatures_json=CosignatureBundle(
                    problem_id=PID, stage="roster", cosignatures=()
                ).model_dump_json(),
                bins_cosignatures_json=CosignatureBundle(
                    problem_id=PID, stage="bins", cosignatures=()
                ).model_dump_json(),
                t_r=bins.t_r,
            )
        )
        s.flush()
        publish_document(s, PID, "roster", roster.model_dump_json())
        publish_document(s, PID, "bins", bins.model_dump_json())
    return state


def read_status(state: AggregatorState) -> int:
    """One status read as ``GET /problems/{id}/status`` does it; the roster size it reports."""
    with state.sessions() as s:
        return problem_status(state, s, get_row(s, PID)).roster_size


def ms_per_read(state: AggregatorState, reads: int) -> float:
    start = time.perf_counter()
    for _ in range(reads):
        read_status(state)
    return (time.perf_counter() - start) / reads * 1e3


def _load() -> list[float]:
    """The 1-, 5- and 15-minute load averages (``/proc/loadavg``), to two places."""
    return [round(x, 2) for x in os.getloadavg()]


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--small", type=int, default=100)
    parser.add_argument("--large", type=int, default=10_000)
    parser.add_argument("--reads", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--out", type=Path, default=RESULTS / "status_read.json")
    args = parser.parse_args(argv)
    load_start = _load()
    with tempfile.TemporaryDirectory() as tmp:
        states = {n: aggregator_with_roster(Path(tmp) / str(n), n) for n in (args.small, args.large)}
        try:
            database_bytes = {}
            for n, state in states.items():
                assert read_status(state) == n  # the roster is parsed into the context: warm, as a server is
                database_bytes[n] = sum(f.stat().st_size for f in (Path(tmp) / str(n)).glob("aggregator.db*"))
            rounds: dict[int, list[float]] = {n: [] for n in states}
            for _ in range(args.rounds):  # interleaved: a load change hits both sizes alike
                for n, state in states.items():
                    rounds[n].append(ms_per_read(state, args.reads))
        finally:
            for state in states.values():
                state.engine.dispose()
    best = {n: min(times) for n, times in rounds.items()}
    ratio = best[args.large] / best[args.small]
    for n in states:
        print(f"{n:>6} members: {best[n]:.3f} ms per status read (rounds: "
              f"{', '.join(f'{t:.3f}' for t in rounds[n])}); database {database_bytes[n] / 1e6:.2f} MB")
    print(f"ratio {args.large} / {args.small}: {ratio:.2f}")
    doc = {
        "benchmark": "status_read",
        "when": now(),
        "machine": machine(load_average_at_start=load_start, load_average_at_end=_load()),
        "reads_per_round": args.reads,
        "rounds": args.rounds,
        "sizes": [
            {"members": n, "ms_per_read": round(best[n], 4), "rounds_ms": [round(t, 4) for t in rounds[n]],
             "database_bytes": database_bytes[n]}
            for n in states
        ],
        "ratio_large_to_small": round(ratio, 3),
    }
    write_json(args.out, doc)
    return doc


if __name__ == "__main__":
    main()
