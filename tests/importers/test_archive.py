"""Export-archive walker: dispatch by confidence, ties, skips, safe zip extraction, import."""

from __future__ import annotations

import shutil
import stat
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import ClassVar

import pytest

from anonml.archive import (
    ArchiveLimits,
    Candidate,
    SkipReason,
    import_plan,
    walk_archive,
)
from anonml.errors import RecordError
from anonml.model import Event
from anonml.plugins import Importer, iter_classes
from anonml.store import EventStore
from importers.apple_health import AppleHealthImporter
from importers.browser import BrowserHistoryImporter
from importers.fitbit import FitbitImporter
from importers.mbox import MboxImporter
from importers.netflix import NetflixImporter
from importers.spotify import SpotifyImporter

FIXTURES = Path(__file__).parent / "fixtures"
TAKEOUT_FILES = [
    "Takeout/Location History/Location History.json",
    "Takeout/My Activity/Maps/My Activity.json",
    "Takeout/My Activity/Search/My Activity.json",
]


class _Stub(Importer):
    """A test importer whose confidence is a fixed function of the file name."""

    name: ClassVar[str] = "stub"
    version: ClassVar[str] = "0"
    scores: ClassVar[dict[str, float]] = {}

    def detect(self, path: Path) -> float:
        return self.scores.get(path.name, 0.0)

    def parse(self, path: Path) -> Iterator[Event | RecordError]:
        yield Event(source=self.name, type="file", fields={"name": path.name})


class _Activity(_Stub):
    name = "stub_activity"
    scores = {"My Activity.json": 0.9}


class _Location(_Stub):
    name = "stub_location"
    scores = {"Location History.json": 0.8}


class _Greedy(_Stub):
    name = "stub_greedy"
    scores = {"My Activity.json": 0.3, "Location History.json": 0.3}


class _Rival(_Stub):
    name = "stub_rival"
    scores = {"My Activity.json": 0.9}


class _Broken(_Stub):
    name = "stub_broken"

    def detect(self, path: Path) -> float:
        raise RuntimeError("boom")


def _mine() -> list[Importer]:
    return [
        AppleHealthImporter(),
        BrowserHistoryImporter(),
        FitbitImporter({"timezone": "UTC"}),
        MboxImporter(),
        NetflixImporter(),
        SpotifyImporter(),
    ]


def test_takeout_folder_is_dispatched_by_highest_confidence(samples_dir: Path) -> None:
    takeout = samples_dir / "google_takeout"
    stubs = [_Greedy(), _Location(), _Broken(), _Activity()]
    with walk_archive(takeout, stubs) as plan:
        assert not plan.is_zip and plan.root == takeout and plan.skipped == ()
        assert [(f.member, f.importer.name, f.confidence) for f in plan.files] == [
            (TAKEOUT_FILES[0], "stub_location", 0.8),
            (TAKEOUT_FILES[1], "stub_activity", 0.9),
            (TAKEOUT_FILES[2], "stub_activity", 0.9),
        ]
        assert plan.files[1].candidates == (
            Candidate("stub_activity", 0.9),
            Candidate("stub_greedy", 0.3),
        )
        assert plan.files[1].note == "stub_broken.detect failed: RuntimeError: boom"
        assert plan.files[1].path == takeout / TAKEOUT_FILES[1]


def test_takeout_folder_with_every_registered_importer(samples_dir: Path) -> None:
    importers = [cls() for cls in iter_classes("importer")]
    with walk_archive(samples_dir / "google_takeout", importers) as plan:
        seen = sorted([f.member for f in plan.files] + [s.member for s in plan.skipped])
        assert seen == TAKEOUT_FILES  # every file is either dispatched or explained
        for planned in plan.files:
            assert planned.confidence >= 0.5
            assert planned.candidates[0] == Candidate(planned.importer.name, planned.confidence)
            assert planned.importer.name not in {i.name for i in _mine()}


def test_ties_are_broken_by_name_and_explained_or_skipped(samples_dir: Path) -> None:
    takeout = samples_dir / "google_takeout"
    with walk_archive(takeout, [_Rival(), _Activity()]) as plan:
        maps = plan.files[0]
        assert maps.importer.name == "stub_activity"  # "stub_activity" < "stub_rival"
        assert maps.note == (
            "tie at 0.90 between stub_activity, stub_rival; chose stub_activity (first by importer name)"
        )
    with walk_archive(takeout, [_Rival(), _Activity()], on_tie="skip") as plan:
        assert plan.files == ()
        assert [(s.reason, s.detail) for s in plan.skipped] == [
            (SkipReason.NO_IMPORTER, "no importer recognised it (threshold 0.50)"),
            (SkipReason.TIE, "tie at 0.90 between stub_activity, stub_rival"),
            (SkipReason.TIE, "tie at 0.90 between stub_activity, stub_rival"),
        ]


def test_files_below_the_threshold_are_skipped_with_the_best_guess(samples_dir: Path) -> None:
    with walk_archive(samples_dir / "google_takeout", [_Greedy(), _Activity()], min_confidence=0.95) as plan:
        assert plan.files == ()
        assert [s.detail for s in plan.skipped] == [
            "best: stub_greedy at 0.30 (threshold 0.95)",
            "best: stub_activity at 0.90 (threshold 0.95)",
            "best: stub_activity at 0.90 (threshold 0.95)",
        ]


def _samples_zip(samples_dir: Path, target: Path) -> Path:
    members = {
        "Takeout/My Activity/Search/My Activity.json": samples_dir
        / "google_takeout/Takeout/My Activity/Search/My Activity.json",
        "apple_health_export/export.xml": samples_dir / "apple_health/export.xml",
        "apple_health_export/export_cda.xml": FIXTURES / "apple_health/export_cda.xml",
        "fitbit/Physical Activity/distance-2017-12-31.json": samples_dir / "fitbit/distance.json",
        "fitbit/Sleep/sleep_score.csv": samples_dir / "fitbit/sleep_score.csv",
        "chrome/Default/History": samples_dir / "browser/chrome.sqlite",
        "spotify/StreamingHistory0.json": FIXTURES / "spotify/StreamingHistory0.json",
        "netflix/CONTENT_INTERACTION/ViewingActivity.csv": FIXTURES / "netflix/ViewingActivity.csv",
        "mail/All mail.mbox": FIXTURES / "mbox/basic.mbox",
        "README.txt": samples_dir / "SOURCES.md",
    }
    with zipfile.ZipFile(target, "w", zipfile.ZIP_DEFLATED) as zf:
        for member, source in members.items():
            zf.write(source, member)
    return target


def test_zip_of_samples_is_extracted_dispatched_and_imported(samples_dir: Path, tmp_path: Path) -> None:
    archive = _samples_zip(samples_dir, tmp_path / "export.zip")
    plan = walk_archive(archive, _mine())
    root = plan.root
    assert plan.is_zip and root.is_dir() and not root.is_relative_to(tmp_path)
    assert {f.member: f.importer.name for f in plan.files} == {
        "apple_health_export/export.xml": "apple_health",
        "chrome/Default/History": "browser",
        "fitbit/Physical Activity/distance-2017-12-31.json": "fitbit",
        "fitbit/Sleep/sleep_score.csv": "fitbit",
        "mail/All mail.mbox": "mbox",
        "netflix/CONTENT_INTERACTION/ViewingActivity.csv": "netflix",
        "spotify/StreamingHistory0.json": "spotify",
    }
    assert [(s.member, s.reason) for s in plan.skipped] == [
        ("README.txt", SkipReason.NO_IMPORTER),
        ("Takeout/My Activity/Search/My Activity.json", SkipReason.NO_IMPORTER),
        ("apple_health_export/export_cda.xml", SkipReason.NO_IMPORTER),
    ]
    assert not (root / "README.txt").exists()  # files nobody reads are not kept
    store = EventStore(f"sqlite:///{tmp_path}/e.db")
    report = import_plan(plan, store)
    inserted: dict[str, int] = {}
    for member_report in report.imported:
        inserted[member_report.importer] = inserted.get(member_report.importer, 0) + member_report.inserted
    assert inserted == {
        "apple_health": 6,
        "browser": 6,
        "fitbit": 7,
        "mbox": 3,
        "netflix": 4,
        "spotify": 3,
    }
    assert report.imported[0].path == f"{archive}!/apple_health_export/export.xml"
    assert store.count() == 29 and report.inserted == 29
    assert import_plan(plan, store).inserted == 0  # re-import adds nothing
    plan.close()
    assert not root.exists()


def _bad_member_zip(tmp_path: Path) -> Path:
    archive = tmp_path / "mixed.zip"
    with zipfile.ZipFile(archive, "w") as zf:
        zf.write(FIXTURES / "netflix/ViewingActivity.csv", "ViewingActivity.csv")
        zf.write(FIXTURES / "fitbit/steps-2018-01-02.json", "steps-2018-01-02.json")
        zf.write(FIXTURES / "apple_health/external_entity.xml", "export.xml")
    return archive


def test_a_bad_member_stops_the_whole_archive_without_skip_bad(tmp_path: Path) -> None:
    store = EventStore(f"sqlite:///{tmp_path}/e.db")
    with walk_archive(_bad_member_zip(tmp_path), _mine()) as plan:
        with pytest.raises(RecordError) as info:
            import_plan(plan, store)
    archive = tmp_path / "mixed.zip"
    # members are validated in name order: ViewingActivity.csv passes, export.xml fails
    assert str(info.value) == (
        f"{archive}!/export.xml:4: external entity 'secret' (file:///etc/hostname) refused"
    )
    assert store.count() == 0  # nothing of the archive was imported


def test_skip_bad_imports_the_other_members_and_reports_each_problem(tmp_path: Path) -> None:
    store = EventStore(f"sqlite:///{tmp_path}/e.db")
    archive = _bad_member_zip(tmp_path)
    with walk_archive(archive, _mine()) as plan:
        report = import_plan(plan, store, skip_bad=True)
    assert [str(e) for e in report.failed] == [
        f"{archive}!/export.xml:4: external entity 'secret' (file:///etc/hostname) refused"
    ]
    assert {r.path: (r.inserted, r.rejected) for r in report.imported} == {
        f"{archive}!/ViewingActivity.csv": (4, 0),
        f"{archive}!/steps-2018-01-02.json": (2, 4),
    }
    assert str(report.imported[1].errors[0]).startswith(f"{archive}!/steps-2018-01-02.json [$[1]]")
    assert store.count() == 6


def _symlink_info(name: str) -> zipfile.ZipInfo:
    info = zipfile.ZipInfo(name)
    info.external_attr = (stat.S_IFLNK | 0o777) << 16
    return info


def _set_encrypted_flag(archive: Path, member: str) -> None:
    """Mark a member encrypted in the central directory (zipfile cannot write encryption)."""
    data = bytearray(archive.read_bytes())
    at = data.index(b"PK\x01\x02")
    while True:
        name_length = int.from_bytes(data[at + 28 : at + 30], "little")
        if data[at + 46 : at + 46 + name_length] == member.encode():
            data[at + 8] |= 0x1  # general purpose bit 0: encrypted (APPNOTE 4.4.4)
            break
        at = data.index(b"PK\x01\x02", at + 46)
    archive.write_bytes(bytes(data))


def test_malicious_zip_members_are_refused(tmp_path: Path) -> None:
    archive = tmp_path / "evil.zip"
    steps = (FIXTURES / "fitbit/steps-2018-01-01.json").read_bytes()
    with zipfile.ZipFile(archive, "w", zipfile.ZIP_DEFLATED) as zf:
        zf.writestr("../escaped.json", steps)
        zf.writestr("/etc/absolute.json", steps)
        zf.writestr("C:\\windows\\drive.json", steps)
        zf.writestr("ok/../../deep.json", steps)
        zf.writestr(_symlink_info("link.json"), "/etc/passwd")
        zf.writestr("secret.json", steps)
        zf.writestr("bomb/steps-2020-01-01.json", b"[" + b" " * (8 * 2**20) + b"]")
        zf.writestr("fitbit/steps-2018-01-01.json", steps)
        with pytest.warns(UserWarning, match="Duplicate name"):
            zf.writestr("fitbit/steps-2018-01-01.json", b"[]")
    _set_encrypted_flag(archive, "secret.json")
    limits = ArchiveLimits(max_member_bytes=2**20)
    with walk_archive(archive, _mine(), limits=limits) as plan:
        assert [(f.member, f.importer.name) for f in plan.files] == [
            ("fitbit/steps-2018-01-01.json", "fitbit")
        ]
        assert [(s.member, s.reason.value, s.detail) for s in plan.skipped] == [
            ("../escaped.json", "unsafe_path", "'..' path component"),
            ("/etc/absolute.json", "unsafe_path", "absolute path"),
            ("C:\\windows\\drive.json", "unsafe_path", "absolute path"),
            (
                "bomb/steps-2020-01-01.json",
                "too_large",
                f"{8 * 2**20 + 2} bytes uncompressed > max_member_bytes={2**20}",
            ),
            ("fitbit/steps-2018-01-01.json", "duplicate", "a member of the same name came first"),
            ("link.json", "symlink", "symbolic link member: not extracted"),
            ("ok/../../deep.json", "unsafe_path", "'..' path component"),
            ("secret.json", "encrypted", "encrypted member"),
        ]
        extracted = sorted(p.relative_to(plan.root).as_posix() for p in plan.root.rglob("*"))
        assert extracted == ["fitbit", "fitbit/steps-2018-01-01.json"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["evil.zip"]  # nothing escaped


def test_total_size_cap_and_lying_sizes(tmp_path: Path) -> None:
    archive = tmp_path / "big.zip"
    payload = b'[{"dateTime": "01/01/20 08:00:00", "value": "1"}' + b" " * 600_000 + b"]"
    with zipfile.ZipFile(archive, "w", zipfile.ZIP_DEFLATED) as zf:
        zf.writestr("a/steps-2020-01-01.json", payload)
        zf.writestr("b/steps-2020-01-02.json", payload)
    with walk_archive(archive, _mine(), limits=ArchiveLimits(max_total_bytes=10**6)) as plan:
        assert [f.member for f in plan.files] == ["a/steps-2020-01-01.json"]
        assert [(s.member, s.detail) for s in plan.skipped] == [
            ("b/steps-2020-01-02.json", "extracting it would pass max_total_bytes=1000000")
        ]
    liar = tmp_path / "liar.zip"
    with zipfile.ZipFile(liar, "w", zipfile.ZIP_STORED) as zf:
        zf.writestr("steps-2020-01-03.json", payload)
    data = bytearray(liar.read_bytes())
    central = data.index(b"PK\x01\x02")
    data[central + 24 : central + 28] = (10).to_bytes(4, "little")  # uncompressed size (APPNOTE 4.3.12)
    liar.write_bytes(bytes(data))
    with walk_archive(liar, _mine()) as plan:
        assert plan.files == ()
        (skip,) = plan.skipped
        assert skip.reason is SkipReason.UNREADABLE and "Bad CRC-32" in skip.detail


def test_folder_symlinks_are_not_followed(tmp_path: Path, samples_dir: Path) -> None:
    folder = tmp_path / "export"
    folder.mkdir()
    shutil.copyfile(samples_dir / "fitbit/distance.json", folder / "distance.json")
    (folder / "stolen.json").symlink_to(samples_dir / "fitbit/sleep.json")
    (folder / "elsewhere").symlink_to(samples_dir / "fitbit", target_is_directory=True)
    with walk_archive(folder, _mine()) as plan:
        assert [f.member for f in plan.files] == ["distance.json"]
        assert [(s.member, s.reason) for s in plan.skipped] == [
            ("elsewhere", SkipReason.SYMLINK),
            ("stolen.json", SkipReason.SYMLINK),
        ]


def test_a_single_file_and_a_non_zip_archive_name(tmp_path: Path, samples_dir: Path) -> None:
    with walk_archive(samples_dir / "fitbit" / "sleep.json", _mine()) as plan:
        assert [(f.member, f.importer.name) for f in plan.files] == [("sleep.json", "fitbit")]
        assert plan.display_name("sleep.json") == str(samples_dir / "fitbit" / "sleep.json")
    fake = tmp_path / "takeout.zip"
    fake.write_text("not a zip at all")
    with walk_archive(fake, _mine()) as plan:
        assert [(s.member, s.reason) for s in plan.skipped] == [("takeout.zip", SkipReason.NO_IMPORTER)]
    with pytest.raises(RecordError, match="no such file or folder"):
        walk_archive(tmp_path / "missing.zip", _mine())


def test_max_members_caps_a_zip(tmp_path: Path) -> None:
    archive = tmp_path / "many.zip"
    with zipfile.ZipFile(archive, "w") as zf:
        for i in range(5):
            zf.writestr(f"f{i}.txt", b"x")
    with walk_archive(archive, _mine(), limits=ArchiveLimits(max_members=3)) as plan:
        assert [(s.member, s.reason) for s in plan.skipped][-2:] == [
            ("f3.txt", SkipReason.TOO_MANY),
            ("f4.txt", SkipReason.TOO_MANY),
        ]
