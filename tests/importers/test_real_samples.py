"""The real samples of tests/importers/samples: registration, detection by every importer, the check.

Every importer named in pyproject.toml's entry points is loaded from there
(so this holds before the package is reinstalled); each sample must be
claimed by its own importer alone (the generic CSV mapping says 0.05 for any
CSV), every new importer must say 0 for the shared samples of the other
formats, and ``anonml importer check`` must find the sample clean and
idempotent.
"""

from __future__ import annotations

import gzip
import hashlib
import re
import tomllib
import zipfile
from importlib.metadata import EntryPoint
from pathlib import Path

import pytest

from anonml.archive import walk_archive
from anonml.detection import DEFAULT_MIN_CONFIDENCE
from anonml.importer_kit import check_importer
from anonml.plugins import Importer, PluginParams

REPO = Path(__file__).resolve().parents[2]
SAMPLES = Path(__file__).parent / "samples"
# Sample (under tests/importers/samples/) -> the importer whose format it is.
OWNERS = {
    "gpx/around-visnjan-with-car.gpx": "gpx",
    "gpx/route_2019-06-11_3.00pm.gpx": "gpx",
    "tcx/sup_activity_1.tcx": "tcx",
    "fit/garmin-fenix-5-run.fit": "fit",
    "fit/compressed-speed-distance.fit": "fit",
    "twitter/tweet.js": "twitter",
    "twitter/account.js": "twitter",
    "twitter/direct-messages.js": "twitter",
    "whatsapp/WhatsApp Chat with ShortChat.txt": "whatsapp",
    "chrome_takeout/BrowserHistory.json": "chrome_takeout",
    "youtube/watch-history.json": "google_activity",
    "youtube/watch-history.html": "google_activity",
    "spotify/StreamingHistory0.json": "spotify",
    "mbox/small.gmail.mbox": "mbox",
}
# The params a sample needs (a zone for local times, a day/month order the file leaves open).
PARAMS: dict[str, dict[str, object]] = {
    "whatsapp/WhatsApp Chat with ShortChat.txt": {"timezone": "Europe/Zurich", "date_order": "dmy"},
}
# The importers added for issue 28 (some verified on hand-written fixtures only: no redistributable
# real export was found for them).
NEW = sorted(
    {"gpx", "tcx", "fit", "twitter", "whatsapp", "chrome_takeout", "reddit", "facebook", "instagram"}
)
# Upstream's own reading of a sample, kept as a test reference: no importer's format.
REFERENCES = {"fit/garmin-fenix-5-run-records.csv"}
# A real file whose every record an importer refuses (its check reports rejects, not events).
REFUSED = {"fit/compressed-speed-distance.fit"}


def _importers() -> dict[str, type[Importer]]:
    with open(REPO / "pyproject.toml", "rb") as fh:
        table = tomllib.load(fh)["project"]["entry-points"]["anonml.importers"]
    return {
        name: EntryPoint(name=name, value=value, group="anonml.importers").load()
        for name, value in table.items()
    }


IMPORTERS = _importers()


@pytest.mark.parametrize("name", NEW)
def test_new_importers_are_registered_as_proper_plugins(name: str) -> None:
    cls = IMPORTERS[name]
    assert issubclass(cls, Importer) and cls.name == name and cls.version
    assert issubclass(cls.Params, PluginParams)
    assert cls.Params.model_config.get("frozen") is True and cls.Params.model_config.get("extra") == "forbid"
    assert cls.description and cls.patterns


def test_every_sample_has_its_source_and_licence() -> None:
    sources = (SAMPLES / "SOURCES.md").read_text(encoding="utf-8")
    files = {p.relative_to(SAMPLES).as_posix() for p in SAMPLES.rglob("*") if p.is_file()}
    data = {f for f in files if not f.startswith("LICENSES/") and f != "SOURCES.md"}
    assert data == set(OWNERS) | REFERENCES
    assert all(f"`{f}`" in sources for f in data)
    assert any(p.is_file() for p in (SAMPLES / "LICENSES").iterdir())


def test_every_sample_is_the_file_its_sources_entry_describes() -> None:
    """Bytes and SHA-256 as SOURCES.md records them: an editor or a checkout that rewrites line ends or
    an encoding no longer passes for the upstream file."""
    sources = (SAMPLES / "SOURCES.md").read_text(encoding="utf-8")
    digests = dict(
        (name, digest) for digest, name in re.findall(r"^([0-9a-f]{64})  (.+)$", sources, re.MULTILINE)
    )
    sizes = {name: int(size) for name, size in re.findall(r"^\| `([^`]+)` \|.*?\| (\d+) \|", sources, re.M)}
    for name in sorted(OWNERS) + sorted(REFERENCES):
        data = (SAMPLES / name).read_bytes()
        assert hashlib.sha256(data).hexdigest() == digests[name], name
        assert len(data) == sizes[name] < 1_000_000, name


@pytest.mark.parametrize("sample", sorted(OWNERS))
def test_a_sample_is_claimed_by_its_own_importer_only(sample: str) -> None:
    path = SAMPLES / sample
    scores = {name: cls().detect(path) for name, cls in IMPORTERS.items()}
    owner = OWNERS[sample]
    assert scores.pop(owner) >= DEFAULT_MIN_CONFIDENCE
    weak = {"csv": 0.05} if path.suffix == ".csv" else {}
    assert scores == {name: weak.get(name, 0.0) for name in scores}


@pytest.mark.parametrize("name", NEW)
def test_new_importers_claim_no_shared_sample(name: str, samples_dir: Path) -> None:
    importer = IMPORTERS[name]()
    paths = [samples_dir, *samples_dir.rglob("*"), samples_dir / "missing.json"]  # files, folders, nothing
    assert sum(p.is_file() for p in paths) > 20
    assert {str(p): importer.detect(p) for p in paths} == {str(p): 0.0 for p in paths}


@pytest.mark.parametrize("sample", sorted(set(OWNERS) - REFUSED))
def test_importer_check_finds_the_sample_clean_and_idempotent(sample: str) -> None:
    report = check_importer(SAMPLES / sample, IMPORTERS[OWNERS[sample]](PARAMS.get(sample)))
    assert report.fatal is None and report.rejects == []
    assert report.first_import_added == report.events > 0
    assert report.second_import_added == 0 and report.idempotent is True


@pytest.mark.parametrize(
    ("archive", "owner"),
    [
        ("callumflack_20220731.zip", "instagram"),
        ("facebook-beangrensberg9.zip", "facebook"),
        ("x.zip", "facebook"),  # no platform in any name: Messenger's, as the importers document
    ],
)
def test_a_zip_with_messages_at_its_top_goes_by_the_zip_name(
    tmp_path: Path, archive: str, owner: str
) -> None:
    """Instagram's exports before 2023 hold ``messages/`` at the zip's top, like Messenger's: the zip's
    name (``<user>_<YYYYMMDD>.zip``) is all that tells them apart, and extraction keeps it."""
    fixtures = Path(__file__).parent / "fixtures" / "meta"
    message = fixtures / "instagram-annlee/your_instagram_activity/messages/inbox/bo_5678/message_1.json"
    path = tmp_path / archive
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr("messages/inbox/kevin_fdcfwkqk4w/message_1.json", message.read_bytes())
    with walk_archive(path, [cls() for cls in IMPORTERS.values()]) as plan:
        assert {f.member: f.importer.name for f in plan.files} == {
            "messages/inbox/kevin_fdcfwkqk4w/message_1.json": owner
        }
        assert plan.files[0].path.parent.parent.parent.parent.name == archive[: -len(".zip")]


def test_an_export_zip_of_the_new_formats_is_dispatched_to_their_importers(tmp_path: Path) -> None:
    fixtures = Path(__file__).parent / "fixtures"
    members = {  # member of the zip -> (its content, the importer it must go to)
        "strava/activities/4711.gpx": (SAMPLES / "gpx/around-visnjan-with-car.gpx", "gpx"),
        "strava/activities/4712.tcx": (SAMPLES / "tcx/sup_activity_1.tcx", "tcx"),
        "strava/activities/4713.fit.gz": (SAMPLES / "fit/garmin-fenix-5-run.fit", "fit"),
        "apple_health_export/workout-routes/route.gpx": (SAMPLES / "gpx/route_2019-06-11_3.00pm.gpx", "gpx"),
        "twitter/data/tweets.js": (SAMPLES / "twitter/tweet.js", "twitter"),
        "twitter/data/account.js": (SAMPLES / "twitter/account.js", "twitter"),
        "twitter/data/like.js": (fixtures / "twitter/like.js", None),
        "WhatsApp Chat with Ann.txt": (SAMPLES / "whatsapp/WhatsApp Chat with ShortChat.txt", "whatsapp"),
        "reddit/comments.csv": (fixtures / "reddit/comments.csv", "reddit"),
        "reddit/post_votes.csv": (fixtures / "reddit/post_votes.csv", None),
        "Takeout/Chrome/BrowserHistory.json": (
            SAMPLES / "chrome_takeout/BrowserHistory.json", "chrome_takeout"
        ),
        "facebook-me/your_facebook_activity/messages/inbox/bo_1234/message_1.json": (
            fixtures / "meta/facebook-annlee/your_facebook_activity/messages/inbox/bo_1234/message_1.json",
            "facebook",
        ),
        "instagram-me/your_instagram_activity/likes/liked_posts.json": (
            fixtures / "meta/instagram-annlee/your_instagram_activity/likes/liked_posts.json",
            "instagram",
        ),
    }
    archive = tmp_path / "exports.zip"
    with zipfile.ZipFile(archive, "w") as zf:
        for member, (source, _owner) in members.items():
            data = source.read_bytes()
            zf.writestr(member, gzip.compress(data) if member.endswith(".gz") else data)
    importers = [cls() for cls in IMPORTERS.values()]
    with walk_archive(archive, importers, on_tie="skip") as plan:
        dispatched = {f.member: f.importer.name for f in plan.files}
        skipped = {s.member for s in plan.skipped}
    assert dispatched == {m: owner for m, (_s, owner) in members.items() if owner is not None}
    assert skipped == {m for m, (_s, owner) in members.items() if owner is None}  # no tie among them
