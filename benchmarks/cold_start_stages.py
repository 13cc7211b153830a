"""Where the aggregator's start-up CPU goes: each stage of ``anonml aggregator serve`` until ``/healthz``.

:mod:`benchmarks.cold_start` times whole starts; this splits one start, as the CLI runs it, into
the CPU seconds (``time.process_time``: every thread of the server's process) of its stages —
the interpreter, the CLI, FastAPI + uvicorn (the floor a bare app pays too), SQLAlchemy, the
protocol's models and crypto, the aggregator's own modules (routes, tables), settings and
identity, :func:`aggregator.app.create_app` (engine, migration check) and serving until the first
``/healthz`` answer. The first start of each run is not counted (it creates the database and
writes the compiled modules into a private cache, as :mod:`benchmarks.cold_start` does); the
others restart on that database. Reported: each stage's median and the machine's load.

Run: ``python -m benchmarks.cold_start_stages [--repeats 5] [--before DIR]`` from the repository
root (``--before``: another checkout, e.g. the code before a change, measured the same way with its
starts interleaved with this one's, so both see the same load). Results go to
``benchmarks/results/cold_start_stages.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from anonml.serving import free_port
from benchmarks.reporting import RESULTS, machine, now, write_json

#: Runs in the server's process: marks the CPU clock after each stage, then serves; a thread
#: polls /healthz (stdlib only) and prints the stages as JSON once it answers.
_STAGES = """
import json, os, sys, threading, time, urllib.request
marks = {"interpreter": time.process_time()}
db, port = sys.argv[1], int(sys.argv[2])
import anonml.cli, anonml.commands.aggregator
marks["cli"] = time.process_time()
import fastapi, uvicorn
marks["fastapi+uvicorn"] = time.process_time()
import sqlalchemy.orm
marks["sqlalchemy"] = time.process_time()
import anonml.protocol
marks["anonml.protocol (+crypto)"] = time.process_time()
import aggregator.app
marks["aggregator (routes, tables)"] = time.process_time()
from aggregator.settings import AggregatorSettings
from aggregator.state import load_or_create_identity
settings = AggregatorSettings.from_env(db_url=f"sqlite:///{db}", host="127.0.0.1", port=port)
load_or_create_identity(settings)
settings.resolved_admin_token()
marks["settings+identity"] = time.process_time()
app = aggregator.app.create_app(settings)
marks["create_app (engine, migration check)"] = time.process_time()

def probe():
    while True:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=5) as answer:
                if answer.status == 200:
                    break
        except OSError:
            time.sleep(0.02)
    marks["uvicorn start, lifespan, first /healthz"] = time.process_time()
    names = list(marks)
    stages = {n: marks[n] - (marks[names[i - 1]] if i else 0.0) for i, n in enumerate(names)}
    print(json.dumps(stages), flush=True)
    os._exit(0)

threading.Thread(target=probe, daemon=True).start()
from anonml import serving
serving.run_foreground(app, "127.0.0.1", port)
"""


def _stages(root: Path, tmp: Path) -> dict[str, float]:
    """One start of the checkout at ``root`` on ``tmp``'s database: CPU seconds per stage."""
    env = {**os.environ, "ANONML_HOME": str(tmp), "PYTHONPATH": str(root)}
    env["PYTHONPYCACHEPREFIX"] = str(tmp / "pycache")
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    port = free_port("127.0.0.1")
    done = subprocess.run(
        [sys.executable, "-c", _STAGES, str(tmp / "aggregator.db"), str(port)],
        cwd=root, env=env, capture_output=True, text=True, timeout=300,
    )
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if not lines:
        raise SystemExit(f"error: {root}: no stages (exit {done.returncode}): {done.stderr[-500:]}")
    return json.loads(lines[-1])


def measure(roots: dict[str, Path], repeats: int) -> dict[str, object]:
    """Median CPU seconds per stage over ``repeats`` restarts of each checkout, interleaved."""
    runs: dict[str, list[dict[str, float]]] = {name: [] for name in roots}
    loads = []
    with tempfile.TemporaryDirectory(prefix="anonml-stages-") as tmp:
        for i in range(repeats + 1):
            loads.append(os.getloadavg()[0])
            for name, root in roots.items():
                (Path(tmp) / name).mkdir(exist_ok=True)
                stages = _stages(root, Path(tmp) / name)
                if i:  # the first created the database and wrote the compiled modules
                    runs[name].append(stages)
    out: dict[str, object] = {
        name: {
            "root": str(roots[name]),
            "stages_cpu_median_s": {s: round(statistics.median(r[s] for r in got), 3) for s in got[0]},
            "total_cpu_median_s": round(statistics.median(sum(r.values()) for r in got), 3),
            "runs": got,
        }
        for name, got in runs.items()
    }
    out["load_average_1m"] = {"min": min(loads), "max": max(loads)}
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--before", type=Path, help="another checkout, measured interleaved with this one")
    parser.add_argument("--out", type=Path, default=RESULTS / "cold_start_stages.json")
    args = parser.parse_args()
    roots = {"this_code": Path.cwd().resolve()}
    if args.before is not None:
        roots = {"before": args.before.resolve(), **roots}
    result = {
        "benchmark": "cold_start_stages",
        "when": now(),
        "machine": machine(),
        **measure(roots, args.repeats),
    }
    write_json(args.out, result)
    def brief(part: object) -> object:  # each checkout's figures without its every run
        return {k: v for k, v in part.items() if k != "runs"} if isinstance(part, dict) else part

    summary = {name: brief(part) for name, part in result.items()}
    print(json.dumps(summary, indent=2))


if __name__ == "__main__":
    main()
