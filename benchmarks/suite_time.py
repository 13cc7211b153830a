"""The test suite's wall time: the README's command on N pytest-xdist workers, the load beside it.

``python -m benchmarks.suite_time --label after`` runs ``python3 -m pytest`` (the suite's own
``addopts``: pytest-xdist workers) from the repository root; ``--workers 0`` runs it serially
(``-n 0``), the baseline. The 1-, 5- and 15-minute load averages are sampled every 30 s while it
runs, so each figure stands beside the load it was measured at. A run's entry (wall seconds,
workers, pass/fail/skip counts from pytest's summary line, load samples) replaces the entry of the
same label in ``benchmarks/results/suite_time.json`` and keeps the others, so a baseline and a
later run stay side by side.

``--from-output FILE --load-samples FILE`` records a run made by hand instead (pytest's output and
``uptime`` lines taken every 30 s beside it), for a run that also had to keep ``--durations=0``.
When the output holds pytest's ``--durations`` table, the entry keeps each test's seconds (setup +
call + teardown, at least :data:`KEPT_SECONDS`), and ``--durations-to tests/durations.json`` writes
those of at least :data:`ORDER_SECONDS` as the order the suite hands its work to the xdist workers
in (longest first: ``tests/conftest.py``).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from benchmarks.reporting import RESULTS, machine, now, write_json

REPO = Path(__file__).resolve().parents[1]
OUT = RESULTS / "suite_time.json"
SAMPLE_SECONDS = 30.0

#: pytest's closing line, ``== 2 failed, 2686 passed, 12 skipped, 6 warnings in 1585.63s (0:26:25) ==``
#: (without the ``=`` under ``-q``).
SUMMARY = re.compile(
    r"^(?:=+ )?(?P<counts>\d+ (?:passed|failed|skipped|errors?)\b.*) in (?P<seconds>[\d.]+)s"
    r"(?: \([\d:]+\))?(?: =+)?$",
    re.MULTILINE,
)
COUNT = re.compile(r"(\d+) (passed|failed|skipped|errors?|xfailed|xpassed|deselected)")
UPTIME = re.compile(r"load average: ([\d.]+), ([\d.]+), ([\d.]+)")
#: A row of pytest's ``--durations`` table: ``12.34s call     tests/x.py::test_y[a]``.
DURATION = re.compile(r"^(?P<seconds>\d+(?:\.\d+)?)s (?P<when>setup|call|teardown) +(?P<nodeid>\S.*?)\s*$",
                      re.MULTILINE)
#: The shortest test whose seconds an entry keeps, and the shortest the order file lists.
KEPT_SECONDS = 0.5
ORDER_SECONDS = 2.0


def summary(output: str) -> dict[str, Any]:
    """The counts and pytest's own wall seconds from the last summary line of ``output``."""
    found = list(SUMMARY.finditer(output))
    if not found:
        raise ValueError("no pytest summary line (`== … in N s ==`) in the output")
    last = found[-1]
    counts = {kind.rstrip("s") if kind.startswith("error") else kind: int(n)
              for n, kind in COUNT.findall(last["counts"])}
    return {"counts": counts, "pytest_seconds": float(last["seconds"])}


def plain_nodeid(nodeid: str) -> str:
    """``nodeid`` without the ``@group`` pytest-xdist appends under ``--dist loadgroup`` (split as
    xdist splits it: an ``@`` inside a parameter id's brackets is the id's own)."""
    return nodeid.rsplit("@", 1)[0] if nodeid.rfind("@") > nodeid.rfind("]") else nodeid


def durations(output: str, at_least: float = KEPT_SECONDS) -> dict[str, float]:
    """Each test's seconds (setup + call + teardown) from the ``--durations`` table in ``output``,
    those of at least ``at_least``, longest first."""
    total: dict[str, float] = {}
    for row in DURATION.finditer(output):
        nodeid = plain_nodeid(row["nodeid"])
        total[nodeid] = total.get(nodeid, 0.0) + float(row["seconds"])
    kept = [(nodeid, round(seconds, 2)) for nodeid, seconds in total.items() if seconds >= at_least]
    return dict(sorted(kept, key=lambda pair: (-pair[1], pair[0])))


def load_figures(samples: list[tuple[float, float, float]]) -> dict[str, Any]:
    """The 1-minute load average's mean and range over ``samples``, and the samples themselves."""
    if not samples:
        return {"load_1min_mean": None, "load_samples": []}
    ones = [s[0] for s in samples]
    return {
        "load_1min_mean": round(sum(ones) / len(ones), 2),
        "load_1min_min": min(ones),
        "load_1min_max": max(ones),
        "load_samples": [list(s) for s in samples],
    }


def configured_workers() -> str:
    """The ``-n`` of the suite's own ``addopts`` (pyproject.toml), as written there."""
    import tomllib

    addopts = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["pytest"]["ini_options"]["addopts"]
    found = re.search(r"(?:-n|--numprocesses)[ =](\S+)", addopts)
    return found.group(1) if found else "0"


def run(workers: int | None, extra: list[str], log: Path | None = None) -> dict[str, Any]:
    """Run the suite (``-n workers`` when given, else the configured count) and time it; pytest's
    whole output goes to ``log`` when given."""
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"]
    if workers is not None:
        command += ["-n", str(workers)]
    command += extra
    samples: list[tuple[float, float, float]] = []
    done = threading.Event()

    def sample() -> None:
        while not done.is_set():
            samples.append(os.getloadavg())
            done.wait(SAMPLE_SECONDS)

    sampler = threading.Thread(target=sample, daemon=True)
    started = time.perf_counter()
    sampler.start()
    finished = subprocess.run(command, cwd=REPO, capture_output=True, text=True)
    wall = time.perf_counter() - started
    done.set()
    sampler.join()
    if log is not None:
        log.write_text(finished.stdout + finished.stderr, encoding="utf-8")
    sys.stdout.write(finished.stdout[-3000:])
    return {
        "command": " ".join(["python3", *command[1:]]),
        "workers": workers if workers is not None else configured_workers(),
        "wall_seconds": round(wall, 1),
        "exit_code": finished.returncode,
        **summary(finished.stdout),
        **load_figures(samples),
        "durations": durations(finished.stdout),
    }


def from_files(output: Path, load_samples: Path | None, workers: int | None, command: str) -> dict[str, Any]:
    """An entry for a run made by hand: its pytest output and its ``uptime`` lines (none: load unknown)."""
    text = output.read_text(encoding="utf-8", errors="replace")
    found = summary(text)
    lines = "" if load_samples is None else load_samples.read_text()
    samples = [tuple(float(x) for x in m.groups()) for m in UPTIME.finditer(lines)]
    return {
        "command": command,
        "workers": workers,
        "wall_seconds": found["pytest_seconds"],
        **found,
        **load_figures(samples),  # type: ignore[arg-type]
        "durations": durations(text),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--label", required=True, help="the entry's name in the JSON (e.g. before, after)")
    parser.add_argument("--workers", type=int, default=None,
                        help="pytest-xdist workers (-n); 0 = serial; default: the suite's addopts")
    parser.add_argument("--from-output", type=Path, help="record this pytest output instead of running")
    parser.add_argument("--load-samples", type=Path,
                        help="with --from-output: its `uptime` lines (else no load figures)")
    parser.add_argument("--command", default="python3 -m pytest", help="with --from-output: what was run")
    parser.add_argument("--log", type=Path, help="write pytest's whole output here")
    parser.add_argument("--note", default="", help="a sentence kept with the entry")
    parser.add_argument("--durations-to", type=Path,
                        help="write the run's tests of at least ORDER_SECONDS here (tests/durations.json)")
    parser.add_argument("pytest_args", nargs="*", help="passed on to pytest (after --)")
    args = parser.parse_args()
    if args.from_output is not None:
        entry = from_files(args.from_output, args.load_samples, args.workers, args.command)
    else:
        entry = run(args.workers, args.pytest_args, args.log)
    entry = {"when" if args.from_output is None else "recorded": now(), **entry, "note": args.note}
    doc: dict[str, Any] = {"benchmark": "suite_time", "runs": {}}
    if OUT.exists():
        doc = json.loads(OUT.read_text(encoding="utf-8"))
    doc["machine"] = machine()
    doc["runs"][args.label] = entry
    write_json(OUT, doc)
    if args.durations_to is not None:
        write_order(args.durations_to, args.label, entry)


def write_order(path: Path, label: str, entry: dict[str, Any]) -> None:
    """The order file ``tests/conftest.py`` reads: the tests of ``entry`` that took at least
    :data:`ORDER_SECONDS`, with the run each figure comes from.

    A run's figures replace the file's for the tests it measured, and the file's other tests keep
    theirs: a run of a few files (or one interrupted) updates those without dropping the rest.
    """
    measured = {nodeid: s for nodeid, s in entry["durations"].items() if s >= ORDER_SECONDS}
    if not measured:
        raise SystemExit(f"--durations-to {path}: the run has no --durations table (pytest --durations=0)")
    seconds: dict[str, float] = {}
    runs: dict[str, Any] = {}
    if path.exists():
        old = json.loads(path.read_text(encoding="utf-8"))
        seconds, runs = old["seconds"], old.get("runs", {})
    seconds.update(measured)
    runs[label] = {"workers": entry["workers"], "load_1min_mean": entry["load_1min_mean"],
                   "tests": sorted(measured)}
    write_json(path, {
        "what": "seconds per test (setup + call + teardown) on the suite's xdist workers; "
                "tests/conftest.py starts the longest first",
        "source": "benchmarks/results/suite_time.json: the runs below, each the latest figure of its tests",
        "runs": runs,
        "seconds": dict(sorted(seconds.items(), key=lambda pair: (-pair[1], pair[0]))),
    })


if __name__ == "__main__":
    main()
