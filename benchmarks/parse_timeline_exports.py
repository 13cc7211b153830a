"""Parse throughput of the google_location, csv, google_activity, uber and ical importers.

Each importer parses a generated large input of its format; the same file is
also read by the plain library baseline a hand-rolled reader would start from
(``json.load``, ``csv.reader``, ``BeautifulSoup``, ``icalendar.Calendar.from_ical``)
in the same run, and the ratio importer-records/s ÷ baseline-records/s is
reported, so the figure survives a faster or slower machine. Every measurement
runs in a fresh subprocess, whose peak resident memory is
recorded too (``VmHWM``): it shows that the streaming JSON reader stays flat
while ``json.load`` grows with the file.

Run: ``python -m benchmarks.parse_timeline_exports [--scale 1.0]`` from the
repository root; writes ``benchmarks/results/parse_timeline_exports.json``.
"""

from __future__ import annotations

import argparse
import csv
import json
import random
import subprocess
import sys
import tempfile
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "benchmarks" / "results" / "parse_timeline_exports.json"
_T0 = datetime(2020, 1, 1, tzinfo=UTC)


def _records_json(path: Path, n: int, rng: random.Random) -> None:
    with open(path, "w", encoding="utf-8") as fh:
        fh.write('{\n  "locations": [')
        for i in range(n):
            when = _T0 + timedelta(seconds=60 * i)
            rec: dict[str, Any] = {
                "latitudeE7": 470000000 + rng.randrange(1_000_000),
                "longitudeE7": 85000000 + rng.randrange(1_000_000),
                "accuracy": rng.randrange(5, 60), "source": "WIFI", "deviceTag": 1433424142,
                "timestamp": when.isoformat().replace("+00:00", "Z"),
            }
            if i % 4 == 0:
                rec["activity"] = [{"activity": [{"type": "STILL", "confidence": 80},
                                                 {"type": "ON_FOOT", "confidence": 20}],
                                    "timestamp": rec["timestamp"]}]
            fh.write(("," if i else "") + "\n    " + json.dumps(rec))
        fh.write("\n  ]\n}\n")


def _activity_json(path: Path, n: int, rng: random.Random) -> None:
    recs = [{"header": "Search", "title": f"Searched for query {rng.randrange(10**6)}",
             "titleUrl": "https://www.google.com/search?q=x", "products": ["Search"],
             "time": (_T0 + timedelta(seconds=37 * i)).isoformat().replace("+00:00", "Z")}
            for i in range(n)]
    path.write_text(json.dumps(recs, indent=1), encoding="utf-8")


def _activity_html(path: Path, n: int) -> None:
    cell = ('<div class="outer-cell mdl-cell mdl-cell--12-col mdl-shadow--2dp"><div class="mdl-grid">'
            '<div class="header-cell mdl-cell mdl-cell--12-col"><p class="mdl-typography--title">'
            'Search<br></p></div><div class="content-cell mdl-cell mdl-cell--6-col '
            'mdl-typography--body-1">Searched for&nbsp;<a href="https://www.google.com/search?q={i}">'
            'q{i}</a><br>Jan {d}, 2020, 3:04:05 PM PST</div><div class="content-cell mdl-cell '
            'mdl-cell--12-col mdl-typography--caption"><b>Products:</b><br>&emsp;Search<br></div>'
            '</div></div>\n')
    body = "".join(cell.format(i=i, d=1 + i % 28) for i in range(n))
    path.write_text(f"<html><body><div class=\"mdl-grid\">{body}</div></body></html>", encoding="utf-8")


def _csv(path: Path, n: int, rng: random.Random) -> None:
    with open(path, "w", newline="", encoding="utf-8") as fh:
        w = csv.writer(fh)
        w.writerow(["time", "kind", "amount", "count", "flag", "note"])
        for i in range(n):
            w.writerow([(_T0 + timedelta(seconds=i)).isoformat(), rng.choice(["a", "b", "c"]),
                        f"{rng.random() * 100:.2f}", rng.randrange(100), rng.choice(["yes", "no"]),
                        f"note {i}"])


def _uber_csv(path: Path, n: int, rng: random.Random) -> None:
    with open(path, "w", newline="", encoding="utf-8") as fh:
        w = csv.writer(fh)
        w.writerow(["City", "Product Type", "Trip or Order Status", "Request Time", "Begin Trip Time",
                    "Begin Trip Lat", "Begin Trip Lng", "Begin Trip Address", "Dropoff Time",
                    "Dropoff Lat", "Dropoff Lng", "Dropoff Address", "Distance (miles)",
                    "Fare Amount", "Fare Currency"])
        fmt = "%Y-%m-%d %H:%M:%S +0000 UTC"
        for i in range(n):
            t = _T0 + timedelta(minutes=17 * i)
            w.writerow(["Boston", "UberX", "COMPLETED", t.strftime(fmt),
                        (t + timedelta(minutes=5)).strftime(fmt), f"{42 + rng.random():.4f}",
                        f"{-71 - rng.random():.4f}", f"{i} Main St",
                        (t + timedelta(minutes=25)).strftime(fmt),
                        "42.36", "-71.1", "Harvard Sq", f"{rng.random() * 10:.2f}",
                        f"{rng.random() * 40:.2f}", "USD"])


def _ics(path: Path, n: int) -> None:
    lines = ["BEGIN:VCALENDAR", "VERSION:2.0", "PRODID:-//bench//EN"]
    for i in range(n):
        start = _T0 + timedelta(hours=5 * i)
        lines += ["BEGIN:VEVENT", f"UID:ev{i}@bench", f"DTSTART;TZID=Europe/Berlin:{start:%Y%m%dT%H%M%S}",
                  f"DTEND;TZID=Europe/Berlin:{start + timedelta(hours=1):%Y%m%dT%H%M%S}",
                  f"SUMMARY:Meeting {i}", "LOCATION:Room 1", "STATUS:CONFIRMED",
                  "ORGANIZER:mailto:boss@example.com", "ATTENDEE:mailto:a@example.com"]
        if i % 10 == 0:
            lines.append("RRULE:FREQ=WEEKLY;COUNT=20")
        lines.append("END:VEVENT")
    lines.append("END:VCALENDAR")
    path.write_text("\r\n".join(lines) + "\r\n", encoding="utf-8")


# --- what runs inside each measuring subprocess ------------------------------------------------

_CHILD = r"""
import csv, json, time
from pathlib import Path
import icalendar
from bs4 import BeautifulSoup
from anonml.errors import RecordError
from anonml.plugins import load_class
kind, name, path, params = {kind!r}, {name!r}, Path({path!r}), {params!r}
if kind == "importer":
    imp = load_class("importer", name)(params)
    imp.detect(path)  # imports anything the importer loads lazily, outside the timing
t0 = time.perf_counter()
if kind == "importer":
    n = bad = 0
    for item in imp.parse(path):
        if isinstance(item, RecordError):
            bad += 1
        else:
            n += 1
    assert bad == 0, bad
elif name == "json":
    doc = json.load(open(path, encoding="utf-8"))
    n = len(doc["locations"]) if isinstance(doc, dict) else len(doc)
elif name == "csv":
    with open(path, newline="", encoding="utf-8") as fh:
        n = sum(1 for _ in csv.reader(fh)) - 1
elif name == "bs4":
    soup = BeautifulSoup(path.read_text(encoding="utf-8"), "html.parser")
    n = len(soup.find_all("div", class_="outer-cell"))
elif name == "icalendar":
    n = len(icalendar.Calendar.from_ical(path.read_bytes()).walk("VEVENT"))
elapsed = time.perf_counter() - t0
# VmHWM is this process's own peak (ru_maxrss would carry over the parent's across exec).
hwm_kb = next(int(line.split()[1]) for line in open("/proc/self/status") if line.startswith("VmHWM:"))
print(json.dumps({{"records": n, "seconds": elapsed, "max_rss_mb": hwm_kb / 1024}}))
"""


def _measure(kind: str, name: str, path: Path, params: dict | None = None) -> dict[str, float]:
    code = _CHILD.format(kind=kind, name=name, path=str(path), params=params)
    # ``python -c`` puts the working folder first on the path: this checkout.
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, check=True, capture_output=True, text=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scale", type=float, default=1.0, help="multiply every input size")
    args = parser.parse_args()
    rng = random.Random(20240601)
    s = args.scale
    cases = [  # (label, importer, params, generator, size, baseline)
        ("google_location Records.json", "google_location", None,
         lambda p, n: _records_json(p, n, rng), int(200_000 * s), "json", ".json"),
        ("google_activity JSON", "google_activity", None,
         lambda p, n: _activity_json(p, n, rng), int(100_000 * s), "json", ".json"),
        ("google_activity HTML", "google_activity", None, _activity_html, int(5_000 * s), "bs4", ".html"),
        ("csv mapping", "csv", {"timestamp_column": "time", "timezone": "UTC", "event_type_column": "kind",
                                "fields": {"amount": "float", "count": "int", "flag": "bool",
                                           "note": "text"}},
         lambda p, n: _csv(p, n, rng), int(200_000 * s), "csv", ".csv"),
        ("uber trips CSV", "uber", None, lambda p, n: _uber_csv(p, n, rng), int(100_000 * s), "csv", ".csv"),
        ("ical", "ical", None, _ics, int(3_000 * s), "icalendar", ".ics"),
    ]
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        for label, name, params, make, size, baseline, suffix in cases:
            path = Path(tmp) / f"{name}{suffix}"
            make(path, size)
            mine = _measure("importer", name, path, params)
            base = _measure("baseline", baseline, path)
            row = {
                "case": label, "importer": name, "input_records": size,
                "input_mb": round(path.stat().st_size / 2**20, 2),
                "events": mine["records"], "seconds": round(mine["seconds"], 3),
                "events_per_s": round(mine["records"] / mine["seconds"]),
                "records_per_s": round(size / mine["seconds"]),
                "peak_rss_mb": round(mine["max_rss_mb"], 1),
                "baseline": baseline, "baseline_records_per_s": round(base["records"] / base["seconds"]),
                "baseline_peak_rss_mb": round(base["max_rss_mb"], 1),
                "ratio_vs_baseline": round((size / mine["seconds"]) / (base["records"] / base["seconds"]), 3),
            }
            results.append(row)
            print(f"{label:30s} {row['events_per_s']:>9,} events/s  {row['records_per_s']:>9,} records/s"
                  f"  baseline {baseline} {row['baseline_records_per_s']:>10,}/s"
                  f"  ratio {row['ratio_vs_baseline']:.3f}  rss {row['peak_rss_mb']} MB"
                  f" (baseline {row['baseline_peak_rss_mb']} MB)", flush=True)
            path.unlink()
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps({
        "benchmark": "parse_timeline_exports", "python": sys.version.split()[0], "scale": s,
        "when": datetime.now(UTC).isoformat(timespec="seconds"),
        "note": "records/s of the importer on the generated file vs the plain library baseline on "
                "the same file, same run; ICS events include RRULE expansion (1 in 10 VEVENTs x 20)",
        "results": results,
    }, indent=2) + "\n", encoding="utf-8")
    print(f"wrote {RESULTS}")


if __name__ == "__main__":
    main()
