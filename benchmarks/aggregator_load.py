"""Bursts of concurrent requests at one aggregator on loopback: no 5xx, and how long each waits.

Setup: one aggregator process (``python -m aggregator``, SQLite in a temporary
directory) and one problem. Then, each burst started at once from one asyncio
client (httpx, one connection per request, everything in flight together):

1. ``--concurrency`` polls of ``GET /problems/{id}/status`` (what that many
   peers polling do);
2. ``--concurrency`` registrations of distinct, validly signed peers;
3. ``--concurrency`` polls and ``/healthz`` mixed with the close of
   registration (the phase machine writing while peers read);
4. ``--concurrency`` token batch requests (one slot each), once the roster is
   out.

Before each burst the aggregator must answer ``/healthz`` (a database query).
Per burst: requests, how many answered 5xx (the target is 0), the other
statuses, latency p50 / p99 and the burst's wall time. Every request has a
client deadline (``--timeout``); one that hits it counts as ``timeout`` (a
failure like a 5xx). Loopback only: the client talks to 127.0.0.1.

Prints a table and writes ``benchmarks/results/aggregator_load.json``.
Run: ``python -m benchmarks.aggregator_load [--concurrency 1000]`` from the repository root.
"""

from __future__ import annotations

import argparse
import asyncio
import platform
import tempfile
import time
from collections import Counter
from dataclasses import asdict, dataclass
from pathlib import Path

import httpx
import numpy as np
import requests

from aggregator.app import start_server_process
from anonml.protocol import Roster
from benchmarks.reporting import now, print_table, write_json
from tests.aggregator.helpers import ADMIN, WirePeer, aggregator_settings, draft, propose, slots

RESULTS = Path(__file__).resolve().parent / "results" / "aggregator_load.json"


@dataclass
class Burst:
    """What one burst of concurrent requests got back."""

    name: str
    requests: int
    server_errors: int
    timeouts: int
    statuses: dict[str, int]
    p50_ms: float
    p99_ms: float
    max_ms: float
    wall_s: float


async def _burst(name: str, calls: list[tuple[str, str, str | None]], timeout: float) -> Burst:
    """Send every ``(method, url, body)`` at once; count statuses and time each answer."""
    limits = httpx.Limits(max_connections=len(calls), max_keepalive_connections=0)
    statuses: Counter[str] = Counter()
    latencies: list[float] = []
    async with httpx.AsyncClient(limits=limits, timeout=timeout) as client:
        start = asyncio.Event()

        async def one(method: str, url: str, body: str | None) -> None:
            await start.wait()
            t = time.perf_counter()
            try:
                response = await client.request(
                    method, url, content=body, headers={"content-type": "application/json"}
                )
                statuses[str(response.status_code)] += 1
            except httpx.TimeoutException:
                statuses["timeout"] += 1
            except httpx.TransportError as exc:
                statuses[f"transport error: {exc.__class__.__name__}"] += 1
            latencies.append(time.perf_counter() - t)

        tasks = [asyncio.create_task(one(*call)) for call in calls]
        await asyncio.sleep(0)
        t0 = time.perf_counter()
        start.set()
        await asyncio.gather(*tasks)
        wall = time.perf_counter() - t0
    ms = np.asarray(latencies) * 1000
    return Burst(
        name=name,
        requests=len(calls),
        server_errors=sum(v for k, v in statuses.items() if k.isdigit() and int(k) >= 500),
        timeouts=statuses.get("timeout", 0),
        statuses=dict(sorted(statuses.items())),
        p50_ms=round(float(np.percentile(ms, 50)), 1),
        p99_ms=round(float(np.percentile(ms, 99)), 1),
        max_ms=round(float(ms.max()), 1),
        wall_s=round(wall, 2),
    )


def _healthy(url: str) -> None:
    response = requests.get(f"{url}/healthz", timeout=60)
    if response.status_code != 200:
        raise SystemExit(f"error: /healthz answered {response.status_code}: {response.text[:200]}")


def run(concurrency: int, timeout: float) -> dict:
    with tempfile.TemporaryDirectory(prefix="anonml-load-") as tmp:
        root = Path(tmp)
        settings = aggregator_settings(root, port=0, tick_seconds=0.1)
        server = start_server_process(settings)
        try:
            url = server.url
            problem = propose(
                url,
                draft(
                    kp=1, kh=1, min_peers=4, registration_seconds=3600, send_window=3600, release_window=60
                ),
            )
            status_url = f"{url}/problems/{problem.id}/status"
            peers = [WirePeer() for _ in range(concurrency)]
            bodies = [p.registration(problem).model_dump_json() for p in peers]
            bursts = []
            _healthy(url)
            bursts.append(
                asyncio.run(_burst("status polls", [("GET", status_url, None)] * concurrency, timeout))
            )
            _healthy(url)
            reg_url = f"{url}/problems/{problem.id}/registrations"
            bursts.append(
                asyncio.run(_burst("registrations", [("POST", reg_url, b) for b in bodies], timeout))
            )
            _healthy(url)
            requests.post(f"{url}/problems/{problem.id}/close", headers=ADMIN, timeout=60).raise_for_status()
            mixed = [("GET", status_url, None), ("GET", f"{url}/healthz", None)] * (concurrency // 2)
            bursts.append(asyncio.run(_burst("status polls + healthz during close", mixed, timeout)))
            deadline = time.monotonic() + 120
            while requests.get(status_url, timeout=60).json()["phase"] != "reporting":
                if time.monotonic() > deadline:
                    raise SystemExit("error: the problem did not reach the report round in 120 s")
                time.sleep(0.1)
            roster = Roster.model_validate_json(
                requests.get(f"{url}/problems/{problem.id}/roster", timeout=60).content
            )
            token_url = f"{url}/problems/{problem.id}/tokens"
            batches = [p.token_batch(problem, roster, slots(problem))[0].model_dump_json() for p in peers]
            _healthy(url)
            bursts.append(
                asyncio.run(_burst("token requests", [("POST", token_url, b) for b in batches], timeout))
            )
            _healthy(url)
            final = requests.get(status_url, timeout=60).json()
        finally:
            server.stop()
    return {
        "when": now(),
        "machine": {"python": platform.python_version(), "cpus": __import__("os").cpu_count()},
        "concurrency": concurrency,
        "client_timeout_s": timeout,
        "bursts": [asdict(b) for b in bursts],
        "registered": final["registered"],
        "tokens_issued": final["tokens_issued"],
        "total_requests": sum(b.requests for b in bursts),
        "total_5xx": sum(b.server_errors for b in bursts),
        "total_timeouts": sum(b.timeouts for b in bursts),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--concurrency", type=int, default=1000, help="Requests in flight per burst.")
    parser.add_argument("--timeout", type=float, default=120.0, help="Client deadline per request (s).")
    parser.add_argument("--output", type=Path, default=RESULTS)
    args = parser.parse_args()
    if not 1 <= args.concurrency <= 5000:
        raise SystemExit("error: --concurrency must be in [1, 5000]")
    result = run(args.concurrency, args.timeout)
    print_table(
        result["bursts"],
        "{name:40} {requests:>8} {server_errors:>5} {timeouts:>8} {p50_ms:>8} {p99_ms:>8} {wall_s:>7}",
        ("burst", "requests", "5xx", "timeouts", "p50 ms", "p99 ms", "wall s"),
    )
    print(f"registered {result['registered']}, tokens issued {result['tokens_issued']}")
    write_json(args.output, result)


if __name__ == "__main__":
    main()
