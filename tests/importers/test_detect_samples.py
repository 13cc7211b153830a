"""Every built-in importer on every real sample export: only the sample's own importer claims it.

Detection chooses the importer of each file of an archive (:mod:`anonml.detection`),
so an importer must say 0 for every other format's files, for a folder and for a
path that does not exist; the generic CSV mapping claims any CSV weakly (0.05)
so that a specific importer always wins. Each importer's own scores, and the near
misses of its own format, are tested beside it.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from anonml.detection import DEFAULT_MIN_CONFIDENCE
from anonml.plugins import available, create

# Folder of the real samples (tests/data/samples) -> the importer whose format its files are
# (files elsewhere, such as the licences, are no importer's).
OWNERS = {
    "apple_health": "apple_health",
    "browser": "browser",
    "fitbit": "fitbit",
    "google_location": "google_location",
    "google_takeout/Takeout/Location History": "google_location",
    "google_takeout/Takeout/My Activity": "google_activity",
    "ical": "ical",
    "uber": "uber",
}
BUILTIN = sorted(info.name for info in available("importer") if info.distribution == "anonml")


def _owner(samples_dir: Path, path: Path) -> str | None:
    relative = path.relative_to(samples_dir).as_posix()
    return next((name for folder, name in OWNERS.items() if relative.startswith(folder + "/")), None)


def test_builtin_importers_and_owned_samples_are_all_there(samples_dir: Path) -> None:
    assert set(OWNERS.values()) <= set(BUILTIN)
    for folder in OWNERS:
        assert any(p.is_file() for p in (samples_dir / folder).rglob("*")), folder


@pytest.mark.parametrize("name", BUILTIN)
def test_an_importer_claims_its_own_samples_only(name: str, samples_dir: Path, tmp_path: Path) -> None:
    importer = create("importer", name)
    files = [p for p in sorted(samples_dir.rglob("*")) if p.is_file()]
    assert len(files) > 20
    own = {p for p in files if _owner(samples_dir, p) == name}
    assert all(importer.detect(p) >= DEFAULT_MIN_CONFIDENCE for p in own), own
    weak = 0.05 if name == "csv" else 0.0
    others = {p.relative_to(samples_dir).as_posix(): importer.detect(p) for p in files if p not in own}
    assert others == {relative: weak if relative.endswith(".csv") else 0.0 for relative in others}
    folders = [samples_dir, *(p for p in samples_dir.rglob("*") if p.is_dir()), tmp_path]
    assert {str(f): importer.detect(f) for f in folders} == {str(f): 0.0 for f in folders}
    assert importer.detect(tmp_path / "missing.json") == 0.0
