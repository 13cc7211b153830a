"""Throughput of the mbox, apple_health, fitbit, spotify, netflix and browser importers,
and the peak resident memory of apple_health on a large generated export.xml.

Each importer parses a generated large input of its format, in a fresh
subprocess; the same file is also read, in the same run, by the plain
standard-library baseline a hand-written reader would start from
(``mailbox.mbox``, ``ElementTree.iterparse``, ``json.load``, ``csv.reader``,
a ``sqlite3`` join). Reported: events/s, the baseline's records/s, and the
ratio importer seconds ÷ baseline seconds (the cost of typed, validated
events over a bare read), which survives a faster or slower machine.

Memory: apple_health parses a generated ``export.xml`` of ``--xml-mb``
megabytes (default 1024: a 1 GB export) in a subprocess whose peak
resident set (``VmHWM``, i.e. ``ru_maxrss``) is recorded, next to a bare
``iterparse`` of the same file that clears each element. The target
is under 200 MB resident. The file lives in a temporary folder and is
deleted afterwards.

Run: ``python -m benchmarks.parse_app_exports [--scale 1.0] [--xml-mb 1024]``
from the repository root; writes ``benchmarks/results/parse_app_exports.json``.
"""

from __future__ import annotations

import argparse
import csv
import json
import platform
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "benchmarks" / "results" / "parse_app_exports.json"
_T0 = datetime(2020, 1, 1, tzinfo=UTC)
_WEBKIT_OFFSET_US = 11_644_473_600_000_000  # 1601-01-01 → 1970-01-01 in microseconds

# One measurement per subprocess, so each peak RSS belongs to one reader only.
_CHILD = r"""
import csv, importlib, json, mailbox, sqlite3, sys, time
import xml.etree.ElementTree as ET
mode, target, path, params = sys.argv[1], sys.argv[2], sys.argv[3], json.loads(sys.argv[4])

def rss_kib(field):
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    return 0

def baseline(kind, path):
    if kind == "mailbox":
        return sum(1 for _ in mailbox.mbox(path, create=False))
    if kind == "iterparse":
        n, depth, root = 0, 0, None
        for ev, el in ET.iterparse(path, events=("start", "end")):
            if ev == "start":
                depth += 1
                root = el if root is None else root
                continue
            depth -= 1
            if depth == 1:
                n += 1
                root.clear()
        return n
    if kind == "json":
        with open(path, encoding="utf-8") as fh:
            return len(json.load(fh))
    if kind == "csv":
        with open(path, encoding="utf-8-sig", newline="") as fh:
            return sum(1 for _ in csv.reader(fh)) - 1
    if kind in ("chrome_sql", "firefox_sql"):
        sql = ("SELECT v.id, v.visit_time, v.transition, u.url, u.title FROM visits v "
               "JOIN urls u ON u.id = v.url") if kind == "chrome_sql" else (
               "SELECT v.id, v.visit_date, v.visit_type, p.url, p.title FROM moz_historyvisits v "
               "JOIN moz_places p ON p.id = v.place_id")
        conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
        n = sum(1 for _ in conn.execute(sql))
        conn.close()
        return n
    raise SystemExit(f"unknown baseline {kind}")

from pathlib import Path
if mode == "importer":
    module, cls = target.split(":")
    importer = getattr(importlib.import_module(module), cls)(params or None)
before = rss_kib("VmRSS")
t = time.perf_counter()
events = errors = 0
if mode == "importer":
    for item in importer.parse(Path(path)):
        if isinstance(item, Exception):
            errors += 1
        else:
            events += 1
else:
    events = baseline(target, path)
seconds = time.perf_counter() - t
print(json.dumps({"events": events, "errors": errors, "seconds": seconds,
                  "rss_before_kib": before, "peak_rss_kib": rss_kib("VmHWM")}))
"""


def _run(mode: str, target: str, path: Path, params: dict[str, Any] | None = None) -> dict[str, Any]:
    out = subprocess.run(
        [sys.executable, "-c", _CHILD, mode, target, str(path), json.dumps(params or {})],
        cwd=REPO,  # ``python -c`` puts the working folder first on the path: this checkout
        check=True,
        capture_output=True,
        text=True,
    )
    return json.loads(out.stdout)


# --- generators (seeded: the same inputs every run) ----------------------------------


def _gen_mbox(path: Path, n: int, rng: np.random.Generator) -> int:
    domains = [f"example{i}.org" for i in range(40)]
    with open(path, "w", encoding="utf-8", newline="\n") as fh:
        for i in range(n):
            when = _T0 + timedelta(seconds=int(rng.integers(0, 3 * 365 * 86400)))
            sender = f"user{int(rng.integers(500))}@{domains[int(rng.integers(40))]}"
            fh.write(f"From {sender} {when:%a %b %d %H:%M:%S %Y}\n")
            fh.write(f"Date: {when:%a, %d %b %Y %H:%M:%S} +0000\nFrom: Someone <{sender}>\n")
            fh.write(f"To: a@example.org, b@example.net\nSubject: message number {i}\n")
            fh.write(f"Message-ID: <m{i}@bench.example>\n")
            if i % 3:
                root = int(rng.integers(0, i + 1))
                fh.write(f"In-Reply-To: <m{root}@bench.example>\nReferences: <m{root}@bench.example>\n")
            if i % 5 == 0:
                fh.write('MIME-Version: 1.0\nContent-Type: multipart/mixed; boundary="B"\n\n')
                fh.write("--B\nContent-Type: text/plain\n\nHello.\n--B\n")
                fh.write('Content-Type: application/pdf\nContent-Disposition: attachment; filename="a.pdf"\n')
                fh.write("Content-Transfer-Encoding: base64\n\n" + "QUJD" * 200 + "\n--B--\n\n")
            else:
                fh.write("\n" + "Some body text that nobody will ever store.\n" * 12 + "\n")
    return n


_HR = (
    ' <Record type="HKQuantityTypeIdentifierHeartRate" sourceName="Watch" sourceVersion="9.3" '
    'device="&lt;&lt;HKDevice: 0x281f2c3c0&gt;, name:Apple Watch, manufacturer:Apple Inc., '
    'model:Watch, hardware:Watch6,2, software:9.3&gt;" unit="count/min" '
    'creationDate="{c}" startDate="{s}" endDate="{s}" value="{v}">\n'
    '  <MetadataEntry key="HKMetadataKeyHeartRateMotionContext" value="0"/>\n </Record>\n'
)
_STEPS = (
    ' <Record type="HKQuantityTypeIdentifierStepCount" sourceName="Phone" sourceVersion="16.3" '
    'unit="count" creationDate="{c}" startDate="{s}" endDate="{e}" value="{v}"/>\n'
)
_SLEEP = (
    ' <Record type="HKCategoryTypeIdentifierSleepAnalysis" sourceName="Watch" sourceVersion="9.3" '
    'creationDate="{c}" startDate="{s}" endDate="{e}" value="HKCategoryValueSleepAnalysisAsleepCore"/>\n'
)
_WORKOUT = (
    ' <Workout workoutActivityType="HKWorkoutActivityTypeRunning" duration="31.5" durationUnit="min" '
    'sourceName="Watch" creationDate="{c}" startDate="{s}" endDate="{e}">\n'
    '  <MetadataEntry key="HKIndoorWorkout" value="0"/>\n'
    '  <WorkoutStatistics type="HKQuantityTypeIdentifierDistanceWalkingRunning" startDate="{s}" '
    'endDate="{e}" sum="5.2" unit="km"/>\n'
    '  <WorkoutStatistics type="HKQuantityTypeIdentifierActiveEnergyBurned" startDate="{s}" '
    'endDate="{e}" sum="1500" unit="kJ"/>\n </Workout>\n'
)
_PROLOG = (
    '<?xml version="1.0" encoding="UTF-8"?>\n<!DOCTYPE HealthData [\n'
    "<!ELEMENT HealthData (ExportDate,Me,(Record|Correlation|Workout|ActivitySummary)*)>\n"
    "<!ATTLIST HealthData locale CDATA #REQUIRED>\n]>\n"
    '<HealthData locale="en_US">\n <ExportDate value="2024-01-01 00:00:00 +0100"/>\n'
    ' <Me HKCharacteristicTypeIdentifierDateOfBirth="1985-07-14" '
    'HKCharacteristicTypeIdentifierBiologicalSex="HKBiologicalSexFemale" '
    'HKCharacteristicTypeIdentifierBloodType="HKBloodTypeNotSet" '
    'HKCharacteristicTypeIdentifierFitzpatrickSkinType="HKFitzpatrickSkinTypeNotSet"/>\n'
)


def _gen_health(path: Path, target_bytes: int, rng: np.random.Generator) -> int:
    """Records until the file reaches ``target_bytes``; returns the number of top-level elements."""
    written = 0
    count = 0
    with open(path, "w", encoding="utf-8") as fh:
        written += fh.write(_PROLOG)
        while written < target_bytes:
            kinds = rng.random(1000)
            values = rng.integers(50, 180, 1000)
            chunk = []
            for j in range(1000):
                when = _T0 + timedelta(seconds=30 * (count + j))
                s = when.strftime("%Y-%m-%d %H:%M:%S +0000")
                e = (when + timedelta(seconds=20)).strftime("%Y-%m-%d %H:%M:%S +0000")
                k = kinds[j]
                if k < 0.80:
                    chunk.append(_HR.format(c=e, s=s, v=int(values[j])))
                elif k < 0.95:
                    chunk.append(_STEPS.format(c=e, s=s, e=e, v=int(values[j]) * 7))
                elif k < 0.995:
                    chunk.append(_SLEEP.format(c=e, s=s, e=e))
                else:
                    chunk.append(_WORKOUT.format(c=e, s=s, e=e))
            count += 1000
            written += fh.write("".join(chunk))
        fh.write("</HealthData>\n")
    return count + 1  # the Me element


def _gen_fitbit(path: Path, n: int, rng: np.random.Generator) -> int:
    bpm = rng.integers(50, 170, n)
    conf = rng.integers(0, 4, n)
    items = [
        {
            "dateTime": (_T0 + timedelta(seconds=5 * i)).strftime("%m/%d/%y %H:%M:%S"),
            "value": {"bpm": int(bpm[i]), "confidence": int(conf[i])},
        }
        for i in range(n)
    ]
    path.write_text(json.dumps(items, indent=2), encoding="utf-8")
    return n


def _gen_spotify(path: Path, n: int, rng: np.random.Generator) -> int:
    artists = [f"Artist {i}" for i in range(300)]
    platforms = ["Android OS 9 API 28 (samsung, SM-G960F)", "iOS 12.1.4 (iPhone10,6)", "osx", "windows"]
    picks = rng.integers(0, 300, n)
    items = []
    for i in range(n):
        podcast = i % 10 == 0
        items.append(
            {
                "ts": (_T0 + timedelta(seconds=200 * i)).isoformat().replace("+00:00", "Z"),
                "username": "bench",
                "platform": platforms[i % 4],
                "ms_played": int(rng.integers(0, 400_000)),
                "conn_country": "DE",
                "ip_addr_decrypted": "192.0.2.1",
                "user_agent_decrypted": "unknown",
                "master_metadata_track_name": None if podcast else f"Track {i % 5000}",
                "master_metadata_album_artist_name": None if podcast else artists[int(picks[i])],
                "master_metadata_album_album_name": None if podcast else f"Album {int(picks[i])}",
                "spotify_track_uri": None if podcast else f"spotify:track:{i % 5000:022d}",
                "episode_name": f"Episode {i}" if podcast else None,
                "episode_show_name": "Show" if podcast else None,
                "spotify_episode_uri": f"spotify:episode:{i:022d}" if podcast else None,
                "reason_start": "trackdone",
                "reason_end": "fwdbtn" if i % 3 == 0 else "trackdone",
                "shuffle": bool(i % 2),
                "skipped": None if i % 7 else True,
                "offline": False,
                "offline_timestamp": 0,
                "incognito_mode": False,
            }
        )
    path.write_text(json.dumps(items), encoding="utf-8")
    return n


def _gen_netflix(path: Path, n: int, rng: np.random.Generator) -> int:
    header = [
        "Profile Name",
        "Start Time",
        "Duration",
        "Attributes",
        "Title",
        "Supplemental Video Type",
        "Device Type",
        "Bookmark",
        "Latest Bookmark",
        "Country",
    ]
    seconds = rng.integers(5, 7200, n)
    with open(path, "w", encoding="utf-8-sig", newline="") as fh:
        out = csv.writer(fh)
        out.writerow(header)
        for i in range(n):
            s = int(seconds[i])
            elapsed = f"{s // 3600}:{s // 60 % 60:02d}:{s % 60:02d}"
            trailer = i % 8 == 0
            out.writerow(
                [
                    ["Alex", "Kim"][i % 2],
                    (_T0 + timedelta(seconds=3000 * i)).strftime("%Y-%m-%d %H:%M:%S"),
                    elapsed,
                    "Autoplayed: user action: None; " if trailer else "",
                    f"Show {i % 300}: Season 1: Episode {i % 12} (Episode {i % 12})",
                    "TRAILER" if trailer else "",
                    "Samsung 2019 UHD TV",
                    elapsed,
                    "Not latest view" if i % 3 else elapsed,
                    "DE (Germany)",
                ]
            )
    return n


def _write_history(path: Path, schema: str, *inserts: tuple[str, Iterable[tuple]]) -> None:
    """A browser-history SQLite file: ``schema``, then each ``(sql, rows)`` batch, one commit."""
    conn = sqlite3.connect(path)
    try:
        conn.executescript(schema)
        for sql, rows in inserts:
            conn.executemany(sql, rows)
        conn.commit()
    finally:
        conn.close()


def _gen_chrome(path: Path, n: int, rng: np.random.Generator) -> int:
    n_urls = max(n // 10, 1)
    url_ids = rng.integers(1, n_urls + 1, n)
    transitions = np.array([805306368, 838860801, 805306376, 0x40000000])[rng.integers(0, 4, n)]
    base = int((_T0 - datetime(1970, 1, 1, tzinfo=UTC)).total_seconds() * 1e6) + _WEBKIT_OFFSET_US
    _write_history(
        path,
        "CREATE TABLE urls(id INTEGER PRIMARY KEY, url LONGVARCHAR, title LONGVARCHAR, "
        "visit_count INTEGER, typed_count INTEGER, last_visit_time INTEGER, hidden INTEGER);"
        "CREATE TABLE visits(id INTEGER PRIMARY KEY, url INTEGER, visit_time INTEGER, from_visit INTEGER, "
        "transition INTEGER, segment_id INTEGER, visit_duration INTEGER);",
        (
            "INSERT INTO urls VALUES (?, ?, ?, 1, 0, 0, 0)",
            ((i, f"https://site{i % 500}.example/page/{i}?q={i}", f"Page {i}") for i in range(1, n_urls + 1)),
        ),
        (
            "INSERT INTO visits VALUES (?, ?, ?, 0, ?, 0, ?)",
            (
                (i + 1, int(url_ids[i]), base + 7_000_000 * i, int(transitions[i]), 1_000_000 * (i % 30))
                for i in range(n)
            ),
        ),
    )
    return n


def _gen_firefox(path: Path, n: int, rng: np.random.Generator) -> int:
    n_places = max(n // 10, 1)
    place_ids = rng.integers(1, n_places + 1, n)
    types = rng.integers(1, 10, n)
    base = int((_T0 - datetime(1970, 1, 1, tzinfo=UTC)).total_seconds() * 1e6)
    _write_history(
        path,
        "CREATE TABLE moz_places(id INTEGER PRIMARY KEY, url LONGVARCHAR, title LONGVARCHAR, "
        "rev_host LONGVARCHAR, visit_count INTEGER, hidden INTEGER, typed INTEGER, frecency INTEGER, "
        "last_visit_date INTEGER);"
        "CREATE TABLE moz_historyvisits(id INTEGER PRIMARY KEY, from_visit INTEGER, place_id INTEGER, "
        "visit_date INTEGER, visit_type INTEGER, session INTEGER);"
        "PRAGMA journal_mode=WAL;",
        (
            "INSERT INTO moz_places VALUES (?, ?, ?, '', 1, 0, 0, 100, 0)",
            ((i, f"https://site{i % 500}.example/p/{i}", f"Page {i}") for i in range(1, n_places + 1)),
        ),
        (
            "INSERT INTO moz_historyvisits VALUES (?, 0, ?, ?, ?, 0)",
            ((i + 1, int(place_ids[i]), base + 7_000_000 * i, int(types[i])) for i in range(n)),
        ),
    )
    return n


# --- runs ----------------------------------------------------------------------------

_CASES = [
    # (importer, module:class, file name, generator, records at scale 1, baseline, params)
    ("mbox", "importers.mbox:MboxImporter", "All mail.mbox", _gen_mbox, 20_000, "mailbox", None),
    ("fitbit", "importers.fitbit:FitbitImporter", "heart_rate-2020-01-01.json", _gen_fitbit, 200_000, "json",
     {"timezone": "Europe/Berlin"}),
    ("spotify", "importers.spotify:SpotifyImporter", "endsong_0.json", _gen_spotify, 100_000, "json", None),
    ("netflix", "importers.netflix:NetflixImporter", "ViewingActivity.csv", _gen_netflix, 100_000, "csv",
     None),
    ("browser (chrome)", "importers.browser:BrowserHistoryImporter", "History", _gen_chrome, 200_000,
     "chrome_sql", None),
    ("browser (firefox, WAL)", "importers.browser:BrowserHistoryImporter", "places.sqlite", _gen_firefox,
     200_000, "firefox_sql", None),
]  # fmt: skip


def _throughput(folder: Path, scale: float, rng: np.random.Generator) -> list[dict[str, Any]]:
    rows = []
    for label, target, filename, generate, n, baseline, params in _CASES:
        path = folder / filename
        records = generate(path, max(int(n * scale), 10), rng)
        rows.append(_row(label, target, path, records, baseline, params))
        print(_line(rows[-1]), file=sys.stderr)
        path.unlink()
    path = folder / "export.xml"
    elements = _gen_health(path, int(80e6 * scale), rng)
    target = "importers.apple_health:AppleHealthImporter"
    rows.append(_row("apple_health", target, path, elements, "iterparse"))
    print(_line(rows[-1]), file=sys.stderr)
    path.unlink()
    return rows


def _row(
    label: str, target: str, path: Path, records: int, baseline: str, params: dict[str, Any] | None = None
) -> dict[str, Any]:
    size = path.stat().st_size
    mine = _run("importer", target, path, params)
    base = _run("baseline", baseline, path)
    return {
        "importer": label,
        "input_bytes": size,
        "records": records,
        "events": mine["events"],
        "errors": mine["errors"],
        "seconds": round(mine["seconds"], 3),
        "events_per_s": round(mine["events"] / mine["seconds"]),
        "mb_per_s": round(size / 1e6 / mine["seconds"], 2),
        "peak_rss_mb": round(mine["peak_rss_kib"] / 1024, 1),
        "baseline": baseline,
        "baseline_seconds": round(base["seconds"], 3),
        "baseline_records_per_s": round(base["events"] / base["seconds"]),
        "baseline_peak_rss_mb": round(base["peak_rss_kib"] / 1024, 1),
        "time_ratio_importer_over_baseline": round(mine["seconds"] / base["seconds"], 2),
    }


def _line(row: dict[str, Any]) -> str:
    return (
        f"{row['importer']:<24} {row['events']:>9} events {row['events_per_s']:>8} ev/s "
        f"(baseline {row['baseline']}: {row['baseline_records_per_s']} rec/s, "
        f"ratio {row['time_ratio_importer_over_baseline']}x), peak {row['peak_rss_mb']} MB"
    )


def _memory(folder: Path, xml_mb: int, rng: np.random.Generator) -> dict[str, Any]:
    path = folder / "export.xml"
    t = time.perf_counter()
    elements = _gen_health(path, xml_mb * 10**6, rng)
    generated = time.perf_counter() - t
    size = path.stat().st_size
    try:
        mine = _run("importer", "importers.apple_health:AppleHealthImporter", path)
        base = _run("baseline", "iterparse", path)
    finally:
        path.unlink()
    peak = mine["peak_rss_kib"] / 1024
    return {
        "xml_bytes": size,
        "top_level_elements": elements,
        "events": mine["events"],
        "generate_seconds": round(generated, 1),
        "parse_seconds": round(mine["seconds"], 1),
        "events_per_s": round(mine["events"] / mine["seconds"]),
        "rss_before_parse_mb": round(mine["rss_before_kib"] / 1024, 1),
        "peak_rss_mb": round(peak, 1),
        "baseline_iterparse_peak_rss_mb": round(base["peak_rss_kib"] / 1024, 1),
        "baseline_iterparse_seconds": round(base["seconds"], 1),
        "target_peak_rss_mb": 200,
        "meets_target": peak < 200,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--scale", type=float, default=1.0, help="multiplies every input size")
    parser.add_argument("--xml-mb", type=int, default=1024, help="size of the memory-test export.xml")
    parser.add_argument("--seed", type=int, default=20240601)
    args = parser.parse_args()
    rng = np.random.default_rng(args.seed)
    with tempfile.TemporaryDirectory(prefix="anonml-bench-") as tmp:
        folder = Path(tmp)
        throughput = _throughput(folder, args.scale, rng)
        memory = _memory(folder, args.xml_mb, rng)
    print(
        f"apple_health on {memory['xml_bytes'] / 1e6:.0f} MB: peak RSS {memory['peak_rss_mb']} MB "
        f"(bare iterparse {memory['baseline_iterparse_peak_rss_mb']} MB), "
        f"{memory['events_per_s']} events/s",
        file=sys.stderr,
    )
    result = {
        "benchmark": "parse_app_exports",
        "when": datetime.now(UTC).isoformat(timespec="seconds"),
        "python": platform.python_version(),
        "machine": platform.machine(),
        "scale": args.scale,
        "seed": args.seed,
        "throughput": throughput,
        "apple_health_memory": memory,
    }
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {RESULTS}", file=sys.stderr)


if __name__ == "__main__":
    main()
