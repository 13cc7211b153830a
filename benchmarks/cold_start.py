"""Cold start of ``anonml aggregator serve``: process start until ``/healthz`` answers 200.

Each repeat, interleaved so both run under the same background load:

* **aggregator, first start** — a fresh state database (migrations run);
* **aggregator, restart** — the same database again, already at the migrations' head
  (what a restart after a kill costs);
* **baseline** — a bare FastAPI app with one ``/healthz`` route served by uvicorn from a
  fresh ``python -c`` process: the floor the framework and the interpreter set.

Reported: the median and the best of each, the ratio aggregator ÷ baseline, the machine's load
beside them, and the CPU seconds each server process had used when it first answered — a
figure the other processes on the machine move much less than the wall time (they still slow
each CPU second: caches, a shared core), and roughly the wall time of a start on an idle
machine (start-up runs in one thread). Issue 31's targets: ≤ 2 s quiet, ≤ 5 s
beside ``stress-ng --cpu 2``.
Results go to ``benchmarks/results/cold_start.json``.

Bytecode. An installed package carries its modules compiled (pip writes ``__pycache__`` at install),
and a source checkout writes them on its first run — unless ``PYTHONDONTWRITEBYTECODE`` is set, as
in some shells and containers, when every start compiles each project module again (measured here:
within the run-to-run noise of a shared machine, at most about 0.1 s of CPU for the aggregator's
modules). ``--bytecode cached`` (the default) measures the installed case: every
server runs with its compiled modules in a private cache (``PYTHONPYCACHEPREFIX`` in the run's
temporary directory, written by one untimed start of each command first); ``--bytecode inherit``
runs them with this process's environment as it is.

Run: ``python -m benchmarks.cold_start [--stress 2] [--bytecode cached|inherit]`` from the
repository root (``--stress N``: the starts beside ``stress-ng --cpu N``, as
:mod:`benchmarks.demo_under_load` runs it).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

import requests

from anonml.serving import ChildServer, free_port
from benchmarks.demo_under_load import cpu_stress
from benchmarks.reporting import process_cpu_seconds

BASELINE = """
import sys
import uvicorn
from fastapi import FastAPI
app = FastAPI()
@app.get("/healthz")
def healthz() -> dict[str, str]:
    return {"status": "ok"}
uvicorn.run(app, host="127.0.0.1", port=int(sys.argv[1]), log_level="warning")
"""


def _time_until_healthy(
    command: list[str], port: int, env: dict[str, str], deadline: float = 120.0
) -> tuple[float, float]:
    """Seconds from starting ``command`` until ``/healthz`` on ``port`` answers 200 (then stopped),
    and the CPU seconds the process had used by then (see the module's docstring)."""
    start = time.perf_counter()
    process = subprocess.Popen(
        command, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env
    )
    try:
        while time.perf_counter() - start < deadline:
            if process.poll() is not None:
                raise SystemExit(f"error: {command[:4]} exited: {process.stderr.read().decode()[-500:]}")
            try:
                if requests.get(f"http://127.0.0.1:{port}/healthz", timeout=1).status_code == 200:
                    return time.perf_counter() - start, process_cpu_seconds(process.pid)
            except requests.RequestException:
                pass
            time.sleep(0.02)
        raise SystemExit(f"error: {command[:4]} did not answer /healthz within {deadline:g} s")
    finally:
        ChildServer(f"http://127.0.0.1:{port}", process).stop()


def _aggregator(db: Path) -> tuple[list[str], int]:
    port = free_port("127.0.0.1")
    command = [sys.executable, "-m", "anonml", "aggregator", "serve", "--db", f"sqlite:///{db}"]
    return [*command, "--host", "127.0.0.1", "--port", str(port)], port


def _environment(tmp: str, bytecode: str) -> dict[str, str]:
    """The servers' environment: ``ANONML_HOME`` in ``tmp`` (the identity key file goes there, not
    into the user's home) and, with ``bytecode == "cached"``, compiled modules kept in ``tmp``."""
    env = {**os.environ, "ANONML_HOME": tmp}
    if bytecode == "cached":
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        env["PYTHONPYCACHEPREFIX"] = str(Path(tmp) / "pycache")
    return env


def measure(repeats: int, bytecode: str = "cached") -> dict[str, object]:
    times: dict[str, list[float]] = {"aggregator_first_start": [], "aggregator_restart": [], "baseline": []}
    cpu: dict[str, list[float]] = {name: [] for name in times}
    loads = []

    with tempfile.TemporaryDirectory(prefix="anonml-cold-") as tmp:
        env = _environment(tmp, bytecode)

        def record(name: str, command: list[str], port: int) -> None:
            wall, used = _time_until_healthy(command, port, env)
            times[name].append(wall)
            cpu[name].append(used)

        if bytecode == "cached":  # untimed: writes the compiled modules every timed start then reads
            _time_until_healthy(*_aggregator(Path(tmp) / "warm-up.db"), env)
            port = free_port("127.0.0.1")
            _time_until_healthy([sys.executable, "-c", BASELINE, str(port)], port, env)
        for i in range(repeats):
            loads.append(os.getloadavg()[0])
            db = Path(tmp) / f"state-{i}.db"
            record("aggregator_first_start", *_aggregator(db))
            record("aggregator_restart", *_aggregator(db))
            port = free_port("127.0.0.1")
            record("baseline", [sys.executable, "-c", BASELINE, str(port)], port)
    summary: dict[str, object] = {
        name: {"median_s": round(statistics.median(v), 3), "best_s": round(min(v), 3), "runs_s": v,
               "cpu_median_s": round(statistics.median(cpu[name]), 3), "cpu_runs_s": cpu[name]}
        for name, v in times.items()
    }
    base = statistics.median(times["baseline"])
    for name in ("aggregator_first_start", "aggregator_restart"):
        summary[f"ratio_{name.removeprefix('aggregator_')}_to_baseline"] = round(
            statistics.median(times[name]) / base, 2
        )
    summary["load_average_1m"] = {"min": min(loads), "max": max(loads)}
    return summary


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/cold_start.json"))
    parser.add_argument(
        "--stress", type=int, default=0, help="CPU-bound stressors (stress-ng --cpu N) beside every start"
    )
    parser.add_argument(
        "--bytecode",
        choices=("cached", "inherit"),
        default="cached",
        help="cached: servers read compiled modules, as an installed package does; inherit: this "
        "environment as it is (PYTHONDONTWRITEBYTECODE=1 compiles every project module at each start)",
    )
    args = parser.parse_args()
    with cpu_stress(args.stress) as stressor:
        measured = measure(args.repeats, args.bytecode)
    result = {
        "benchmark": "cold_start",
        "when": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": {
            "python": platform.python_version(),
            "platform": platform.platform(),
            "cpus": os.cpu_count(),
        },
        "targets": {"quiet_s": 2.0, "stress_ng_cpu_2_s": 5.0},
        "stressor": stressor,
        "bytecode": args.bytecode,
        **measured,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps({k: v for k, v in result.items() if k != "machine"}, indent=2))


if __name__ == "__main__":
    main()
