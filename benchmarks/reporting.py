"""What every benchmark records: where results go, the machine and time of a run, the JSON file.

A benchmark builds one dict (``{"benchmark": ..., "when": now(), "machine": machine(...), ...}``)
and hands it to :func:`write_json`; load figures stay with the benchmark that measures them, since
each samples the load at its own points.
"""

from __future__ import annotations

import json
import os
import platform
import re
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from pathlib import Path
from string import Formatter
from types import ModuleType
from typing import Any, TypeVar

__all__ = [
    "RESULTS",
    "now",
    "machine",
    "write_json",
    "write_json_and_plot",
    "print_table",
    "timed_map",
    "rate",
    "process_cpu_seconds",
    "pyplot",
    "save_figure",
]

#: The folder every benchmark writes its JSON into (``benchmarks/results``).
RESULTS = Path(__file__).resolve().parent / "results"

_T = TypeVar("_T")


def now() -> str:
    """The current UTC time to the second, ISO 8601 (the ``when`` of a result)."""
    return datetime.now(UTC).isoformat(timespec="seconds")


def machine(**extra: Any) -> dict[str, Any]:
    """The Python version, the platform and the CPU count of this run, then ``extra`` (versions, load)."""
    return {
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
        **extra,
    }


def process_cpu_seconds(pid: int) -> float:
    """User + system CPU seconds process ``pid`` has used so far, all its threads (Linux
    ``/proc/<pid>/stat``, fields 14 and 15; the name in field 2 may hold spaces or parentheses)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def write_json(path: Path, doc: Any) -> None:
    """Write ``doc`` to ``path`` as indented UTF-8 JSON (creating its folder) and say where."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc, indent=2) + "\n", encoding="utf-8")
    print(f"wrote {path}")


def write_json_and_plot(path: Path, doc: Any, plot: Callable[[Any, Path], bool]) -> None:
    """:func:`write_json`, then ``plot(doc, figure)`` for the PNG beside it, saying where it went (stderr).

    ``plot`` returns False when it drew nothing (no matplotlib); then nothing is said.
    """
    write_json(path, doc)
    figure = path.with_suffix(".png")
    if plot(doc, figure):
        print(f"plot: {figure}", file=sys.stderr)


def print_table(
    rows: Iterable[Mapping[str, Any]], template: str, headings: Sequence[str], *, tail: str = "statuses"
) -> None:
    """Print ``rows`` under ``headings``: a row is ``template.format_map(row)``, then two spaces and
    its ``tail`` field as it is (the HTTP statuses a run met).

    ``template`` names a row's fields with their format specs (``"{name:40} {requests:>8}"``);
    a heading stands where its field does, with the spec's alignment and width only.
    """
    fields = [(text, spec) for text, name, spec, _ in Formatter().parse(template) if name is not None]
    if len(fields) != len(headings):
        raise ValueError(f"{len(headings)} headings for the {len(fields)} fields of {template!r}")
    line = "".join(
        text + format(heading, re.match(r"[<>^]?\d*", spec or "").group())
        for (text, spec), heading in zip(fields, headings, strict=True)
    )
    print(line)
    for row in rows:
        print(template.format_map(row) + f"  {row[tail]}")


def timed_map(call: Callable[[_T], Any], items: Iterable[_T], threads: int) -> tuple[Counter[Any], float]:
    """Run ``call`` over ``items`` on ``threads`` threads: the count of each result and the wall seconds."""
    started = time.perf_counter()
    with ThreadPoolExecutor(threads) as pool:
        results = Counter(pool.map(call, items))
    return results, time.perf_counter() - started


def rate(unit: str, n: int, statuses: Counter[Any], seconds: float) -> dict[str, Any]:
    """``n`` ``unit`` (requests of one kind) in ``seconds``: count, time, rate per second, HTTP statuses."""
    return {
        unit: n,
        "seconds": round(seconds, 3),
        f"{unit}_per_s": round(n / seconds, 1),
        "status_codes": {str(k): v for k, v in statuses.items()},
    }


def pyplot() -> ModuleType | None:
    """``matplotlib.pyplot`` on the file-only Agg backend, or None without matplotlib (no plot then)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    return plt


def save_figure(plt: ModuleType, fig: Any, path: Path) -> bool:
    """Lay out ``fig``, save it to ``path`` (120 dpi) and close it; True (a plot was written)."""
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return True
