"""Bursts of concurrent requests at one aggregator on loopback: no 5xx, and every answer before the deadline.

Setup: one aggregator process (``python -m aggregator``, SQLite in a temporary
directory, one worker) and one problem. Then, each burst started at once from one asyncio
client (raw HTTP/1.1 on asyncio streams, one connection per request, everything in flight
together):

1. ``--concurrency`` polls of ``GET /problems/{id}/status`` (what that many
   peers polling do);
2. ``--concurrency`` registrations of distinct, validly signed peers;
3. ``--concurrency`` polls and ``/healthz`` mixed with the close of
   registration (the phase machine writing while peers read);
4. ``--concurrency`` token batch requests (one slot each), once the roster is
   out.

Each client is a patient peer: its request has the peer's deadline (``--timeout``, the peer
client's 15 s), and an answer ``503`` with ``Retry-After`` (the aggregator's admission gate
shedding what it cannot serve before that deadline, :class:`anonml.serving.Admission`) is
tried again after Retry-After plus jittered backoff (:func:`peer.client.retry_wait`) until
``--phase-seconds`` have passed. Per burst: clients, tries, how many answers were 5xx other than
a shed 503 (the target is 0), shed 503s, tries past the deadline (``timeouts``, the target is
0), latency p50 / p99 / max of every try's answer (what a client waits before it hears
anything), the share of tries shed, and how many clients got through and when the last did.
Before each burst the aggregator must answer ``/healthz`` (a database query); its admission
counts are read at the end. The load average is sampled before and after. Loopback only.

Prints a table and writes ``benchmarks/results/aggregator_load.json``.
Run: ``python -m benchmarks.aggregator_load [--concurrency 1000]`` from the repository root.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import os
import tempfile
import time
from collections import Counter
from dataclasses import asdict, dataclass
from pathlib import Path
from urllib.parse import urlsplit

import numpy as np
import requests

from aggregator.app import start_server_process
from anonml.outbound import AGGREGATOR_DEADLINE, retry_after_seconds
from anonml.phases import ProblemPhase
from benchmarks.reporting import machine, now, print_table, write_json
from peer.client import AggregatorClient, HTTPRefusal, retry_wait
from tests.aggregator.helpers import TOKEN, WirePeer, aggregator_settings, draft, propose, slots

RESULTS = Path(__file__).resolve().parent / "results" / "aggregator_load.json"


@dataclass
class Burst:
    """What one burst of concurrent patient clients got back (module docstring)."""

    name: str
    clients: int
    tries: int
    server_errors: int  # 5xx other than a shed 503 with Retry-After
    shed: int  # 503 with Retry-After
    timeouts: int
    statuses: dict[str, int]
    p50_ms: float
    p99_ms: float
    max_ms: float
    shed_share: float  # of all tries
    first_try_shed_share: float
    got_through: int
    last_through_s: float
    wall_s: float


def _raw(method: str, url: str, body: str | None) -> tuple[str, int, bytes]:
    """The host, port and bytes of one ``Connection: close`` HTTP/1.1 request, built before the burst."""
    parts = urlsplit(url)
    data = (body or "").encode()
    head = (
        f"{method} {parts.path}{'?' + parts.query if parts.query else ''} HTTP/1.1\r\n"
        f"host: {parts.netloc}\r\nconnection: close\r\ncontent-type: application/json\r\n"
        f"content-length: {len(data)}\r\n\r\n"
    )
    return parts.hostname or "127.0.0.1", parts.port or 80, head.encode() + data


async def _exchange(host: str, port: int, raw: bytes) -> tuple[int, float | None]:
    """Send ``raw`` on a new connection; the answer's status and Retry-After (read to the close)."""
    reader, writer = await asyncio.open_connection(host, port)
    try:
        writer.write(raw)
        await writer.drain()
        answer = await reader.read()
    finally:
        writer.close()
    head = answer.split(b"\r\n\r\n", 1)[0].decode("latin-1").split("\r\n")
    status = int(head[0].split(" ", 2)[1])
    headers = dict(line.split(":", 1) for line in head[1:] if ":" in line)
    after = next((v for k, v in headers.items() if k.strip().lower() == "retry-after"), None)
    return status, retry_after_seconds(after)


async def _burst(
    name: str, calls: list[tuple[str, str, str | None]], timeout: float, phase_seconds: float
) -> Burst:
    """Send every ``(method, url, body)`` at once, each client retrying shed tries per Retry-After.

    The clients speak HTTP/1.1 on raw asyncio streams with requests built beforehand: one Python
    process plays a thousand peers on the same two cores as the server, and a full HTTP client's
    own work (httpx took seconds per burst at load 19) would be measured as the server's latency.
    """
    statuses: Counter[str] = Counter()
    latencies: list[float] = []
    first_shed = 0
    through: list[float] = []
    start = asyncio.Event()
    t0 = 0.0

    async def one(method: str, url: str, body: str | None) -> None:
        nonlocal first_shed
        host, port, raw = _raw(method, url, body)
        await start.wait()
        began = time.perf_counter()
        for attempt in itertools.count():
            t = time.perf_counter()
            try:  # the peer's total deadline, not a per-read one
                status, after = await asyncio.wait_for(_exchange(host, port, raw), timeout)
            except TimeoutError:
                statuses["timeout"] += 1
                latencies.append(time.perf_counter() - t)
                return
            except (OSError, ValueError, IndexError) as exc:
                statuses[f"transport error: {exc.__class__.__name__}"] += 1
                latencies.append(time.perf_counter() - t)
                return
            latencies.append(time.perf_counter() - t)
            if status == 503 and after is not None:
                statuses["503 shed"] += 1
                first_shed += attempt == 0
                wait = retry_wait(attempt, HTTPRefusal(url, 503, "shed", after))
                if time.perf_counter() + wait - began > phase_seconds:
                    return
                await asyncio.sleep(wait)
                continue
            statuses[str(status)] += 1
            if status < 300:
                through.append(time.perf_counter() - t0)
            return

    tasks = [asyncio.create_task(one(*call)) for call in calls]
    await asyncio.sleep(0.5)  # every request built, every task waiting at the start
    t0 = time.perf_counter()
    start.set()
    await asyncio.gather(*tasks)
    wall = time.perf_counter() - t0
    ms = np.asarray(latencies) * 1000
    tries = len(latencies)
    return Burst(
        name=name,
        clients=len(calls),
        tries=tries,
        server_errors=sum(v for k, v in statuses.items() if k.isdigit() and int(k) >= 500),
        shed=statuses.get("503 shed", 0),
        timeouts=statuses.get("timeout", 0),
        statuses=dict(sorted(statuses.items())),
        p50_ms=round(float(np.percentile(ms, 50)), 1),
        p99_ms=round(float(np.percentile(ms, 99)), 1),
        max_ms=round(float(ms.max()), 1),
        shed_share=round(statuses.get("503 shed", 0) / tries, 4),
        first_try_shed_share=round(first_shed / len(calls), 4),
        got_through=len(through),
        last_through_s=round(max(through, default=0.0), 2),
        wall_s=round(wall, 2),
    )


def _healthy(url: str) -> dict:
    response = requests.get(f"{url}/healthz", timeout=60)
    if response.status_code != 200:
        raise SystemExit(f"error: /healthz answered {response.status_code}: {response.text[:200]}")
    return response.json()


def run(concurrency: int, timeout: float, phase_seconds: float) -> dict:
    load_before = [round(x, 2) for x in os.getloadavg()]
    with tempfile.TemporaryDirectory(prefix="anonml-load-") as tmp:
        root = Path(tmp)
        settings = aggregator_settings(root, port=0, tick_seconds=0.1)
        server = start_server_process(settings)
        try:
            url = server.url
            client = AggregatorClient(url, TOKEN)
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

            def burst(name: str, calls: list[tuple[str, str, str | None]]) -> Burst:
                return asyncio.run(_burst(name, calls, timeout, phase_seconds))

            _healthy(url)
            bursts.append(burst("status polls", [("GET", status_url, None)] * concurrency))
            _healthy(url)
            reg_url = f"{url}/problems/{problem.id}/registrations"
            bursts.append(burst("registrations", [("POST", reg_url, b) for b in bodies]))
            _healthy(url)
            client.close(problem.id)
            mixed = [("GET", status_url, None), ("GET", f"{url}/healthz", None)] * (concurrency // 2)
            bursts.append(burst("status polls + healthz during close", mixed))
            deadline = time.monotonic() + 120
            while client.status(problem.id).phase != ProblemPhase.REPORTING:
                if time.monotonic() > deadline:
                    raise SystemExit("error: the problem did not reach the report round in 120 s")
                time.sleep(0.1)
            roster = client.roster(problem.id)
            token_url = f"{url}/problems/{problem.id}/tokens"
            batches = [p.token_batch(problem, roster, slots(problem))[0].model_dump_json() for p in peers]
            _healthy(url)
            bursts.append(burst("token requests", [("POST", token_url, b) for b in batches]))
            final = client.status(problem.id).model_dump(mode="json")
            admission = _healthy(url)["admission"]
        finally:
            server.stop()
    return {
        "when": now(),
        "machine": machine(load_before=load_before, load_after=[round(x, 2) for x in os.getloadavg()]),
        "database": "sqlite, 1 worker",
        "concurrency": concurrency,
        "client_timeout_s": timeout,
        "phase_seconds": phase_seconds,
        "bursts": [asdict(b) for b in bursts],
        "registered": final["registered"],
        "tokens_issued": final["tokens_issued"],
        "total_tries": sum(b.tries for b in bursts),
        "total_5xx": sum(b.server_errors for b in bursts),
        "total_shed": sum(b.shed for b in bursts),
        "total_timeouts": sum(b.timeouts for b in bursts),
        "aggregator_admission": admission,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--concurrency", type=int, default=1000, help="Requests in flight per burst.")
    parser.add_argument(
        "--timeout", type=float, default=AGGREGATOR_DEADLINE, help="Client deadline per request (s)."
    )
    parser.add_argument(
        "--phase-seconds", type=float, default=180.0, help="How long a shed client keeps retrying (s)."
    )
    parser.add_argument("--output", type=Path, default=RESULTS)
    args = parser.parse_args()
    if not 1 <= args.concurrency <= 5000:
        raise SystemExit("error: --concurrency must be in [1, 5000]")
    result = run(args.concurrency, args.timeout, args.phase_seconds)
    print_table(
        result["bursts"],
        "{name:40} {tries:>6} {server_errors:>4} {shed:>5} {timeouts:>8} {p50_ms:>8} {p99_ms:>8} "
        "{got_through:>7} {last_through_s:>8}",
        ("burst", "tries", "5xx", "shed", "timeouts", "p50 ms", "p99 ms", "through", "last s"),
    )
    print(f"load average before {result['machine']['load_before']}, after {result['machine']['load_after']}")
    print(f"registered {result['registered']}, tokens issued {result['tokens_issued']}")
    write_json(args.output, result)


if __name__ == "__main__":
    main()
