"""Intake throughput of ``anonml aggregator serve --workers N`` on PostgreSQL, against the redemption check.

For each worker count (default 1 and 2), on a fresh database of one
throwaway PostgreSQL server (:mod:`benchmarks.postgres`; or ``--database-url``):

1. ``anonml aggregator serve --workers N`` starts (a real child process,
   settings from ``ANONML_AGGREGATOR_*`` variables, loopback only);
2. one problem (k_p = 1, k_h = 2) is proposed, ``--reports / 2`` peers
   register and take their two tokens each (concurrent requests), and honest
   reports are built — none of this is timed;
3. **timed**: the deliveries are POSTed to ``/intake/batch`` in batches of
   ``--batch`` (100 by default, as last-hop relays release what falls due
   together; ``--batch 1``: one ``POST /intake`` each) by ``--concurrency``
   concurrent clients over keep-alive connections; reports/s = accepted
   deliveries / wall time of the whole run.

Baseline, in the same run and process: the redemption check alone
(:meth:`anonml.crypto.TokenVerifier.redeem` with an in-memory spent set, one
core, the operation the intake cannot avoid), as checks per second. The
ratios are reports/s ÷ checks/s, overall and per worker.

The client (httpx, asyncio) runs in this process (its CPU seconds during the
timed part are recorded) and shares the machine with the workers and
PostgreSQL: on a 2-core machine two workers, the server and the client share
two cores, so a second worker cannot add a core's worth (the machine's core
count and load average are recorded beside the figures).

Prints a table and writes ``benchmarks/results/intake_workers.json``.
Run from the repository root:
``python -m benchmarks.intake_workers [--reports 2000] [--workers 1 2] [--batch 100]``.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import statistics
import tempfile
import time
from collections import Counter
from pathlib import Path

import httpx
import numpy as np

from aggregator.app import start_workers_process
from anonml.crypto import MemorySpentSet, TokenKey, TokenVerifier, finalize_tokens
from anonml.protocol import (
    MAX_BATCH_ITEMS,
    BatchResults,
    IntakeBatch,
    IntakeDelivery,
    TokenBatchResponse,
)
from benchmarks.crypto import _tokens
from benchmarks.postgres import PostgresUnavailable, throwaway_postgresql
from benchmarks.reporting import now, print_table, write_json
from tests.aggregator.helpers import (
    ADMIN,
    JSON,
    WirePeer,
    aggregator_settings,
    assignment_of,
    bins_of,
    draft,
    propose,
    random_deliveries,
    roster_of,
    slots,
    wait_phase,
)
from tests.databases import postgresql_database

RESULTS = Path(__file__).resolve().parent / "results" / "intake_workers.json"


async def _post_all(
    calls: list[tuple[str, str]], concurrency: int, timeout: float
) -> tuple[list[tuple[int, bytes]], float]:
    """POST every ``(url, body)`` with ``concurrency`` clients on keep-alive connections.

    Returns each call's ``(status, body)`` in order (status 0: a transport error or
    timeout, named in the body) and the wall time of the whole batch.
    """
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    results: list[tuple[int, bytes]] = [(0, b"")] * len(calls)
    pending = iter(range(len(calls)))
    async with httpx.AsyncClient(limits=limits, timeout=timeout, headers=JSON) as client:

        async def client_loop() -> None:
            for i in pending:
                url, body = calls[i]
                try:
                    response = await client.post(url, content=body)
                    results[i] = (response.status_code, response.content)
                except httpx.HTTPError as exc:  # status 0, the error's class as the body
                    results[i] = (0, exc.__class__.__name__.encode())

        t0 = time.perf_counter()
        await asyncio.gather(*(client_loop() for _ in range(concurrency)))
        wall = time.perf_counter() - t0
    return results, wall


def _prepared_deliveries(url: str, reports: int, concurrency: int, timeout: float) -> list[str]:
    """A problem in its report round and ``reports`` valid deliveries for it (untimed set-up)."""
    problem = propose(
        url, draft(kp=1, kh=2, min_peers=4, registration_seconds=3600, send_window=3600, release_window=600)
    )
    peers = [WirePeer() for _ in range(max(4, reports // 2))]
    registrations = [
        (f"{url}/problems/{problem.id}/registrations", p.registration(problem).model_dump_json())
        for p in peers
    ]
    answers, _ = asyncio.run(_post_all(registrations, concurrency, timeout))
    refused = [status for status, _ in answers if status != 201]
    if refused:
        raise SystemExit(f"error: {len(refused)} registrations refused (e.g. HTTP {refused[0]})")
    httpx.post(f"{url}/problems/{problem.id}/close", headers=ADMIN, timeout=timeout).raise_for_status()
    wait_phase(url, problem.id, ("reporting",), timeout=300)
    roster, bins = roster_of(url, problem.id), bins_of(url, problem.id)
    assignment = assignment_of(url, problem.id, peers[0])  # k_p = 1: every report peer's partition
    batches = [p.token_batch(problem, roster, slots(problem, assignment.index)) for p in peers]
    token_calls = [(f"{url}/problems/{problem.id}/tokens", batch.model_dump_json()) for batch, _ in batches]
    answers, _ = asyncio.run(_post_all(token_calls, concurrency, timeout))
    rng = np.random.default_rng(0)
    bodies = []
    for i, ((status, content), (_, pending)) in enumerate(zip(answers, batches, strict=True)):
        if status != 200:
            raise SystemExit(f"error: a token request answered HTTP {status}: {content[:200]!r}")
        tokens = finalize_tokens(pending, TokenBatchResponse.model_validate_json(content).wire())
        deliveries = random_deliveries(problem, bins, assignment, tokens, i, rng)
        bodies.extend(d.model_dump_json() for d in deliveries)
    return bodies[:reports]


def _intake_calls(url: str, bodies: list[str], batch: int) -> list[tuple[str, str]]:
    """One ``POST /intake`` per delivery (``batch`` 1), or ``POST /intake/batch`` of ``batch`` each."""
    if batch == 1:
        return [(f"{url}/intake", b) for b in bodies]
    deliveries = [IntakeDelivery.model_validate_json(b) for b in bodies]
    return [
        (f"{url}/intake/batch", IntakeBatch(deliveries=tuple(deliveries[i : i + batch])).model_dump_json())
        for i in range(0, len(deliveries), batch)
    ]


def _item_statuses(results: list[tuple[int, bytes]], batch: int) -> Counter[str]:
    """Each delivery's status: its own answer, or its item of its batch's answer."""
    statuses: Counter[str] = Counter()
    for status, body in results:
        if not status:
            statuses[f"error: {body.decode()}"] += 1
        elif batch > 1 and status == 200:
            statuses.update(str(item.status) for item in BatchResults.model_validate_json(body).results)
        else:
            statuses[str(status)] += 1
    return statuses


def _intake_run(
    server_url: str, workers: int, reports: int, concurrency: int, timeout: float, batch: int
) -> dict:
    with postgresql_database(server_url) as db_url, tempfile.TemporaryDirectory(prefix="anonml-iw-") as tmp:
        settings = aggregator_settings(Path(tmp), db_url=db_url, port=0, tick_seconds=0.1)
        server = start_workers_process(settings, workers)
        try:
            bodies = _prepared_deliveries(server.url, reports, concurrency, timeout)
            calls = _intake_calls(server.url, bodies, batch)
            cpu = time.process_time()
            results, wall = asyncio.run(_post_all(calls, concurrency, timeout))
            client_cpu = time.process_time() - cpu
        finally:
            server.stop()
    statuses = _item_statuses(results, batch)
    accepted = statuses.get("201", 0)
    return {
        "workers": workers,
        "batch": batch,
        "deliveries": len(bodies),
        "accepted": accepted,
        "statuses": dict(sorted(statuses.items())),
        "wall_s": round(wall, 3),
        "reports_per_s": round(accepted / wall, 1),
        "client_cpu_s": round(client_cpu, 3),  # this process sending: a core the workers do not get
    }


def redemption_checks_per_second(n: int, repeats: int = 5) -> float:
    """The redemption check alone (MAC + in-memory spend) on one core: median of ``repeats`` runs of ``n``."""
    rng = np.random.default_rng(1)
    key = TokenKey.generate(rng)
    redemptions = _tokens(key, n * repeats, rng)
    rates = []
    for r in range(repeats):
        verifier = TokenVerifier(key, MemorySpentSet())
        batch = redemptions[r * n : (r + 1) * n]
        t0 = time.perf_counter()
        for redemption, report in batch:
            verifier.redeem(redemption, report)
        rates.append(n / (time.perf_counter() - t0))
    return statistics.median(rates)


def run(
    server_url: str, worker_counts: list[int], reports: int, concurrency: int, timeout: float, batch: int
) -> dict:
    load_before = round(os.getloadavg()[0], 2)
    check = redemption_checks_per_second(max(200, reports // 4))
    runs = [_intake_run(server_url, w, reports, concurrency, timeout, batch) for w in worker_counts]
    check_after = redemption_checks_per_second(max(200, reports // 4))
    baseline = statistics.mean([check, check_after])
    for r in runs:
        r["ratio_to_redemption_check"] = round(r["reports_per_s"] / baseline, 4)
        r["ratio_per_worker"] = round(r["reports_per_s"] / baseline / r["workers"], 4)
    first = runs[0]["reports_per_s"]
    return {
        "when": now(),
        "machine": {"python": platform.python_version(), "cpus": os.cpu_count()},
        "load_before": load_before,
        "load_after": round(os.getloadavg()[0], 2),
        "reports": reports,
        "concurrency": concurrency,
        "batch": batch,
        "redemption_checks_per_s": {"before": round(check, 1), "after": round(check_after, 1)},
        "runs": runs,
        "speedup_over_first": {str(r["workers"]): round(r["reports_per_s"] / first, 3) for r in runs},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reports", type=int, default=2000, help="Deliveries timed per worker count.")
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2], help="Worker counts to measure.")
    parser.add_argument("--concurrency", type=int, default=32, help="Concurrent intake clients.")
    parser.add_argument(
        "--batch", type=int, default=100, help="Deliveries per POST /intake/batch (1: one POST /intake each)."
    )
    parser.add_argument("--timeout", type=float, default=120.0, help="Client deadline per request (s).")
    parser.add_argument(
        "--database-url", help="A PostgreSQL server to use (default: a throwaway one, as .ci/run starts)."
    )
    parser.add_argument("--output", type=Path, default=RESULTS)
    args = parser.parse_args()
    if not 10 <= args.reports <= 100_000 or not all(1 <= w <= 16 for w in args.workers):
        raise SystemExit("error: --reports must be in [10, 100000] and each --workers in [1, 16]")
    if not 1 <= args.batch <= MAX_BATCH_ITEMS:
        raise SystemExit(f"error: --batch must be in [1, {MAX_BATCH_ITEMS}]")
    if args.database_url:
        result = run(
            args.database_url, args.workers, args.reports, args.concurrency, args.timeout, args.batch
        )
    else:
        try:
            with throwaway_postgresql() as url:
                result = run(url, args.workers, args.reports, args.concurrency, args.timeout, args.batch)
        except PostgresUnavailable as exc:
            print(f"skipped: the intake-workers benchmark needs PostgreSQL: {exc}")
            return
    checks = result["redemption_checks_per_s"]
    print(f"redemption check alone: {checks['before']:,} /s before, {checks['after']:,} /s after (one core)")
    print_table(
        result["runs"],
        "{workers:>7} {accepted:>9} {wall_s:>8} {reports_per_s:>10} "
        "{ratio_to_redemption_check:>8.1%} {ratio_per_worker:>10.1%}",
        ("workers", "accepted", "wall s", "reports/s", "÷ check", "per worker"),
    )
    print(f"speedup over {result['runs'][0]['workers']} worker(s): {result['speedup_over_first']}")
    write_json(args.output, result)


if __name__ == "__main__":
    main()
