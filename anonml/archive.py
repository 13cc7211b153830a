"""The export-archive walker: which importer reads which file of a .zip or a folder.

A personal-data export arrives whole: a Google Takeout zip, an Apple Health
``export.zip``, a Fitbit account archive, a browser profile folder.
:func:`walk_archive` opens one (a ``.zip`` is extracted safely into a private
temporary folder; a folder is walked in place), asks every candidate importer's
``detect`` about every file, and returns an :class:`ArchivePlan`: each file
dispatched to the importer with the highest confidence, and every file it
skipped with the reason. :func:`import_plan` then imports the plan into an
:class:`~anonml.store.EventStore`. :mod:`anonml.importing` drives both for
``anonml import``; the walker is framework code, so third-party importers are
dispatched exactly like the built-in ones.

Dispatch rule
-------------
A file goes to the importer whose ``detect`` is highest, if that confidence is
at least ``min_confidence`` (default 0.5). Several importers sharing the top
confidence exactly is a *tie*: with ``on_tie="pick"`` (default) the importer
whose registered name sorts first wins — arbitrary but reproducible, and the
plan's ``note`` says so; with ``on_tie="skip"`` the file is skipped. A
``detect`` that raises counts as 0 and is named in the note or skip detail.

Zip safety
----------
Members are never extracted by name alone: an absolute path (``/etc/x``,
``C:\\x``), a ``..`` component, a symbolic link, an encrypted member, a
duplicate name and anything past ``max_members`` are skipped with their
reason. Sizes are capped before extraction from the declared sizes
(``max_member_bytes`` each, ``max_total_bytes`` together: a zip bomb is
refused, not inflated), and again while copying, byte by byte. A member that
fails to decompress (bad CRC, unsupported method) is skipped as unreadable.
Nested zips are not opened. In a folder, symbolic links are skipped (they may
point outside it) and the size caps do not apply, since nothing is copied.

A zip's members are extracted under a folder named after the zip (its name
without ``.zip``), so an importer's ``detect`` sees the archive's name in a
member's path as it would after the user unzipped it: Instagram's exports
before 2023 (``<user>_<YYYYMMDD>.zip``) hold ``messages/inbox/...`` at their top,
like Messenger's, and only the zip's name tells them apart.

Bad members and ``skip_bad``
----------------------------
:func:`import_plan` without ``skip_bad`` imports every member in one store
transaction and raises the first bad record (named
``archive.zip!/member:line: reason``), which rolls back every member, so an
archive with one bad member adds nothing;
with ``skip_bad`` each member is imported on its own, bad records are
skipped and reported, and a member that is not its importer's format at all
is reported in ``failed`` while the others are still imported.
"""

from __future__ import annotations

import dataclasses
import enum
import os
import re
import stat
import tempfile
import zipfile
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from anonml.detection import choose_importer
from anonml.errors import RecordError
from anonml.plugins import Importer
from anonml.store import EventStore, ImportReport

__all__ = [
    "ArchiveLimits",
    "SkipReason",
    "Candidate",
    "PlannedFile",
    "SkippedFile",
    "ArchivePlan",
    "ArchiveImportReport",
    "walk_archive",
    "import_plan",
]

_COPY_CHUNK = 1 << 20
_DRIVE = re.compile(r"^[A-Za-z]:")


class ArchiveLimits(BaseModel):
    """Caps applied while extracting a zip (declared sizes first, then actual bytes)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    max_total_bytes: int = Field(default=64 * 2**30, ge=1, le=2**50)
    max_member_bytes: int = Field(default=32 * 2**30, ge=1, le=2**50)
    max_members: int = Field(default=500_000, ge=1, le=10_000_000)


class SkipReason(enum.StrEnum):
    """Why a file of an archive was not dispatched."""

    NO_IMPORTER = "no_importer"
    TIE = "tie"
    TOO_LARGE = "too_large"
    UNSAFE_PATH = "unsafe_path"
    SYMLINK = "symlink"
    ENCRYPTED = "encrypted"
    DUPLICATE = "duplicate"
    TOO_MANY = "too_many_members"
    UNREADABLE = "unreadable"


@dataclass(frozen=True, slots=True)
class Candidate:
    """One importer's answer for one file."""

    importer: str
    confidence: float


@dataclass(frozen=True, slots=True)
class PlannedFile:
    """A file and the importer chosen for it; ``candidates`` lists every non-zero answer, best first."""

    member: str
    path: Path
    importer: Importer
    confidence: float
    candidates: tuple[Candidate, ...]
    note: str = ""


@dataclass(frozen=True, slots=True)
class SkippedFile:
    """A file not dispatched, with the reason and a human-readable detail."""

    member: str
    reason: SkipReason
    detail: str


@dataclass
class ArchivePlan:
    """What :func:`walk_archive` decided. Use as a context manager: it owns the extraction folder."""

    source: Path
    root: Path
    is_zip: bool
    files: tuple[PlannedFile, ...]
    skipped: tuple[SkippedFile, ...]
    _tempdir: tempfile.TemporaryDirectory[str] | None = field(default=None, repr=False)

    def display_name(self, member: str) -> str:
        """How errors name a member: ``takeout.zip!/Takeout/x.json`` or ``folder/Takeout/x.json``."""
        return f"{self.source}!/{member}" if self.is_zip else str(self.root / member)

    def close(self) -> None:
        """Delete the extracted files (a no-op for a folder)."""
        if self._tempdir is not None:
            self._tempdir.cleanup()
            self._tempdir = None

    def __enter__(self) -> ArchivePlan:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


@dataclass(frozen=True, slots=True)
class ArchiveImportReport:
    """What :func:`import_plan` did: per-member reports, members that failed whole, and skips."""

    imported: tuple[ImportReport, ...]
    failed: tuple[RecordError, ...]
    skipped: tuple[SkippedFile, ...]

    @property
    def inserted(self) -> int:
        return sum(r.inserted for r in self.imported)

    @property
    def rejected(self) -> int:
        return sum(r.rejected for r in self.imported)


def walk_archive(
    path: str | Path,
    importers: Sequence[Importer],
    *,
    min_confidence: float = 0.5,
    on_tie: Literal["pick", "skip"] = "pick",
    limits: ArchiveLimits | None = None,
) -> ArchivePlan:
    """Dispatch every file of a ``.zip``, a folder or a single file to the best importer.

    Parameters
    ----------
    path : str or Path
        A zip file, a folder, or any other single file.
    importers : sequence of Importer
        The candidates, e.g. one instance of each registered importer class.
    min_confidence : float, default=0.5
        Lowest ``detect`` confidence that dispatches a file.
    on_tie : {"pick", "skip"}, default="pick"
        What to do when several importers share the top confidence (see
        the module docstring).
    limits : ArchiveLimits, optional
        Extraction caps for zips.

    Returns
    -------
    ArchivePlan
        Files in member-name order; close it (or use ``with``) to delete an
        extraction folder.

    Raises
    ------
    RecordError
        ``path`` does not exist or is a corrupt zip.
    """
    source = Path(path)
    limits = limits or ArchiveLimits()
    if not 0.0 <= min_confidence <= 1.0:
        raise ValueError(f"min_confidence must be in [0, 1], got {min_confidence}")
    if on_tie not in ("pick", "skip"):
        raise ValueError(f"on_tie must be 'pick' or 'skip', got {on_tie!r}")
    if not source.exists():
        raise RecordError(source, None, "no such file or folder")
    planned: list[PlannedFile] = []
    skipped: list[SkippedFile] = []

    def consider(member: str, file_path: Path) -> bool:
        decision = _dispatch(member, file_path, importers, min_confidence, on_tie)
        (planned if isinstance(decision, PlannedFile) else skipped).append(decision)
        return isinstance(decision, PlannedFile)

    if source.is_dir():
        for member, file_path, problem in _walk_folder(source, limits):
            if problem is not None:
                skipped.append(problem)
            else:
                consider(member, file_path)
        return ArchivePlan(source, source, False, *_sorted(planned, skipped))
    if not zipfile.is_zipfile(source):
        consider(source.name, source)
        return ArchivePlan(source, source.parent, False, *_sorted(planned, skipped))
    tempdir = tempfile.TemporaryDirectory(prefix="anonml-archive-")
    root = Path(tempdir.name) / _folder_name(source)
    root.mkdir()
    try:
        for member, file_path, problem in _extract(source, root, limits):
            if problem is not None:
                skipped.append(problem)
            elif not consider(member, file_path):
                file_path.unlink()  # nobody reads it: do not keep a copy of personal data
    except BaseException:
        tempdir.cleanup()
        raise
    return ArchivePlan(source, root, True, *_sorted(planned, skipped), tempdir)


def _folder_name(archive: Path) -> str:
    """The folder a zip's members go to: the zip's name without ``.zip``, as unzipping names it."""
    stem = archive.name[: -len(".zip")] if archive.name.lower().endswith(".zip") else archive.name
    return stem if stem.strip(". ") else "archive"  # never "", "." or "..": one plain component


def _sorted(
    planned: list[PlannedFile], skipped: list[SkippedFile]
) -> tuple[tuple[PlannedFile, ...], tuple[SkippedFile, ...]]:
    """Both lists in member-name order, whatever order the walk met them in."""
    return (
        tuple(sorted(planned, key=lambda p: p.member)),
        tuple(sorted(skipped, key=lambda s: s.member)),
    )


def _dispatch(
    member: str,
    file_path: Path,
    importers: Sequence[Importer],
    min_confidence: float,
    on_tie: str,
) -> PlannedFile | SkippedFile:
    detection = choose_importer(file_path, importers, min_confidence)
    candidates = tuple(Candidate(name, score) for name, score in detection.ranking if score > 0.0)
    failed = "; ".join(detection.failures)
    if detection.chosen is None:
        best = (f"best: {candidates[0].importer} at {candidates[0].confidence:.2f}" if candidates
                else "no importer recognised it")
        detail = f"{best} (threshold {min_confidence:.2f})" + (f"; {failed}" if failed else "")
        return SkippedFile(member, SkipReason.NO_IMPORTER, detail)
    top = detection.confidence
    note = failed
    if detection.tied_with:
        tied = ", ".join((detection.chosen.name, *detection.tied_with))
        if on_tie == "skip":
            return SkippedFile(member, SkipReason.TIE, f"tie at {top:.2f} between {tied}")
        note = f"tie at {top:.2f} between {tied}; chose {detection.chosen.name} (first by importer name)"
        note += f"; {failed}" if failed else ""
    return PlannedFile(member, file_path, detection.chosen, top, candidates, note)


def _walk_folder(root: Path, limits: ArchiveLimits) -> Iterator[tuple[str, Path, SkippedFile | None]]:
    count = 0
    for folder, dirnames, filenames in os.walk(root, followlinks=False):
        here = Path(folder)
        dirnames.sort()
        for name in list(dirnames):
            if (here / name).is_symlink():
                member = (here / name).relative_to(root).as_posix()
                yield (
                    member,
                    here / name,
                    SkippedFile(member, SkipReason.SYMLINK, "symbolic link to a folder: not followed"),
                )
        for name in sorted(filenames):
            file_path = here / name
            member = file_path.relative_to(root).as_posix()
            if file_path.is_symlink():
                yield (
                    member,
                    file_path,
                    SkippedFile(member, SkipReason.SYMLINK, "symbolic link: not followed"),
                )
                continue
            if not file_path.is_file():
                continue  # sockets, fifos, devices
            count += 1
            if count > limits.max_members:
                yield (
                    member,
                    file_path,
                    SkippedFile(
                        member, SkipReason.TOO_MANY, f"more than max_members={limits.max_members} files"
                    ),
                )
                continue
            yield member, file_path, None


def _unsafe(name: str) -> str | None:
    """Why a zip member name may not be extracted, or None if it is safe."""
    if "\x00" in name:
        return "NUL byte in name"
    if name.startswith(("/", "\\")) or _DRIVE.match(name):
        return "absolute path"
    if ".." in re.split(r"[/\\]", name):
        return "'..' path component"
    return None


def _extract(
    archive: Path, root: Path, limits: ArchiveLimits
) -> Iterator[tuple[str, Path, SkippedFile | None]]:
    try:
        zf = zipfile.ZipFile(archive)
    except (zipfile.BadZipFile, OSError) as exc:
        raise RecordError(archive, None, f"not a readable zip: {exc}") from None
    resolved_root = root.resolve()
    with zf:
        seen: set[str] = set()
        total = 0
        count = 0
        for info in sorted(zf.infolist(), key=lambda i: i.filename):
            name = info.filename
            if info.is_dir():
                continue
            member = "/".join(p for p in name.replace("\\", "/").split("/") if p not in ("", "."))
            skip = _skipper(name, root)
            problem = _unsafe(name)
            mode = info.external_attr >> 16
            if problem is not None:
                yield skip(SkipReason.UNSAFE_PATH, problem)
                continue
            if stat.S_ISLNK(mode):
                yield skip(SkipReason.SYMLINK, "symbolic link member: not extracted")
                continue
            if info.flag_bits & 0x1:
                yield skip(SkipReason.ENCRYPTED, "encrypted member")
                continue
            if member in seen:
                yield skip(SkipReason.DUPLICATE, "a member of the same name came first")
                continue
            seen.add(member)
            count += 1
            if count > limits.max_members:
                yield skip(SkipReason.TOO_MANY, f"more than max_members={limits.max_members} files")
                continue
            if info.file_size > limits.max_member_bytes:
                yield skip(
                    SkipReason.TOO_LARGE,
                    f"{info.file_size} bytes uncompressed > max_member_bytes={limits.max_member_bytes}",
                )
                continue
            if total + info.file_size > limits.max_total_bytes:
                yield skip(
                    SkipReason.TOO_LARGE,
                    f"extracting it would pass max_total_bytes={limits.max_total_bytes}",
                )
                continue
            target = root / member
            if not target.resolve().is_relative_to(resolved_root):  # belt and braces
                yield skip(SkipReason.UNSAFE_PATH, "resolves outside the extraction folder")
                continue
            try:
                written = _copy_member(zf, info, target, limits.max_total_bytes - total)
            except _TooLarge as exc:
                target.unlink(missing_ok=True)
                yield skip(SkipReason.TOO_LARGE, str(exc))
                continue
            except (zipfile.BadZipFile, NotImplementedError, RuntimeError, OSError, EOFError) as exc:
                target.unlink(missing_ok=True)
                yield skip(SkipReason.UNREADABLE, f"cannot extract: {exc}")
                continue
            total += written
            yield member, target, None


def _skipper(name: str, root: Path) -> Callable[[SkipReason, str], tuple[str, Path, SkippedFile]]:
    def skip(reason: SkipReason, detail: str) -> tuple[str, Path, SkippedFile]:
        return name, root, SkippedFile(name, reason, detail)

    return skip


class _TooLarge(Exception):
    """More bytes came out of a member than its declared size or the remaining budget."""


def _copy_member(zf: zipfile.ZipFile, info: zipfile.ZipInfo, target: Path, budget: int) -> int:
    target.parent.mkdir(parents=True, exist_ok=True)
    written = 0
    cap = min(info.file_size, budget)
    with zf.open(info) as src, open(target, "xb") as dst:
        while chunk := src.read(_COPY_CHUNK):
            written += len(chunk)
            if written > cap:
                raise _TooLarge(f"more than {cap} bytes came out (declared {info.file_size})")
            dst.write(chunk)
    return written


def _relocate(error: RecordError, planned: PlannedFile, plan: ArchivePlan) -> RecordError:
    """The same error, naming the archive member instead of the extraction path."""
    if error.path != str(planned.path):
        return error
    return RecordError(plan.display_name(planned.member), error.line, error.reason, record=error.record)


def import_plan(
    plan: ArchivePlan,
    store: EventStore,
    *,
    user: str | None = None,
    skip_bad: bool = False,
    on_file: Callable[[PlannedFile], None] | None = None,
    replace: bool = False,
) -> ArchiveImportReport:
    """Import every planned file into ``store``; see the module docstring for ``skip_bad``.

    ``replace``: each member replaces earlier imports of the same content
    (:meth:`~anonml.store.EventStore.import_file`).

    Without ``skip_bad`` the whole archive is ONE store transaction
    (:meth:`~anonml.store.EventStore.import_files`): the first bad record of
    any member rolls every member back. With ``skip_bad`` each member is its
    own transaction, bad records are skipped and reported, and a member that
    fails as a whole is listed in ``failed`` while the others are imported.
    Provenance names each file as ``archive.zip!/member``.

    Raises
    ------
    RecordError
        Without ``skip_bad``: the first bad record of any member, naming the
        member (``archive.zip!/path:line: reason``); nothing was imported.
    """
    imported: list[ImportReport] = []
    failed: list[RecordError] = []
    if not skip_bad:
        for planned in plan.files:
            if on_file is not None:
                on_file(planned)
        items = [(p.path, p.importer, plan.display_name(p.member)) for p in plan.files]
        by_path = {p.path: p for p in plan.files}
        try:
            reports = store.import_files(items, user=user, replace=replace)
        except RecordError as exc:
            planned = by_path.get(Path(exc.path))
            raise (_relocate(exc, planned, plan) if planned is not None else exc) from None
        return ArchiveImportReport(tuple(reports), (), plan.skipped)
    for planned in plan.files:
        if on_file is not None:
            on_file(planned)
        try:
            report = store.import_file(
                planned.path, planned.importer, user=user, skip_bad=True,
                origin=plan.display_name(planned.member), replace=replace,
            )
        except RecordError as exc:
            failed.append(_relocate(exc, planned, plan))
            continue
        relocated = tuple(_relocate(e, planned, plan) for e in report.errors)
        imported.append(dataclasses.replace(report, errors=relocated))
    return ArchiveImportReport(tuple(imported), tuple(failed), plan.skipped)
