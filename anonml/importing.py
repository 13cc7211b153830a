"""Import orchestration: which importer reads each path, and the transactions that store them.

``anonml import`` (and any other front end) hands this module the paths a user
named and the options they chose; it answers with the reports of what was
committed. Three decisions live here, once:

* **Detection.** With an importer named, that importer reads every path. Else
  each installed importer (:func:`importer_candidates`) is asked about each
  file and the most confident at or above ``min_confidence`` wins
  (:func:`anonml.detection.choose_importer`: ties broken by name and
  reported).
* **Archives.** A folder or a ``.zip`` (without a named importer) is walked by
  :func:`anonml.archive.walk_archive`, every inner file dispatched the same
  way, and imported by :func:`anonml.archive.import_plan`: one transaction for
  the whole archive, or one per member with ``skip_bad``.
* **Several paths.** Paths are imported in the order given, one transaction
  per file or archive. Missing paths are refused before anything is committed;
  if one path fails, :func:`import_paths` stops and returns what was
  committed before it, the failure and the paths not tried
  (:class:`PathsImport`), so the caller can say exactly what the store holds.

What the import has to say while it runs (the importer chosen for a file, an
archive's plan, skipped records, progress) goes to an :class:`ImportListener`;
this module prints nothing.
"""

from __future__ import annotations

import zipfile
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, Protocol

from anonml.archive import ArchivePlan, import_plan, walk_archive
from anonml.detection import DEFAULT_MIN_CONFIDENCE, choose_importer
from anonml.errors import AnonMLError, PluginNotFound, RecordError
from anonml.plugins import Importer, PluginRef, create, iter_classes
from anonml.store import EventStore, ImportReport

__all__ = [
    "ImportOptions",
    "ImportListener",
    "QuietListener",
    "PathsImport",
    "importer_candidates",
    "resolve_candidates",
    "choose_for_file",
    "check_paths",
    "import_path",
    "import_paths",
]


@dataclass(frozen=True, slots=True)
class ImportOptions:
    """How paths are imported (the options of ``anonml import``).

    Parameters
    ----------
    importer : str, optional
        Read every path with this importer instead of detecting one per file.
    user : str, optional
        Import as this user (overrides the user a format names).
    skip_bad : bool, default=False
        Import good records and report bad ones, instead of rolling back.
    min_confidence : float, default=0.5
        Lowest ``detect`` confidence that chooses an importer.
    on_tie : {"pick", "skip"}, default="pick"
        In archives: take the first tied importer by name, or skip the file.
    dry_run : bool, default=False
        Decide and report which importer reads each file; store nothing.
    replace : bool, default=False
        Replace earlier imports of the same content instead of adding to them.
    """

    importer: str | None = None
    user: str | None = None
    skip_bad: bool = False
    min_confidence: float = DEFAULT_MIN_CONFIDENCE
    on_tie: Literal["pick", "skip"] = "pick"
    dry_run: bool = False
    replace: bool = False

    def __post_init__(self) -> None:
        if self.on_tie not in ("pick", "skip"):
            raise AnonMLError(f"--on-tie must be 'pick' or 'skip', not {self.on_tie!r}")
        if not 0.0 <= self.min_confidence <= 1.0:
            raise AnonMLError(f"--min-confidence must be in [0, 1], not {self.min_confidence}")


class ImportListener(Protocol):
    """What an import says while it runs (the CLI prints it on stderr)."""

    def message(self, text: str) -> None:
        """One line for the user: the importer chosen for a file, a skipped record, a replacement."""

    def planned(self, plan: ArchivePlan) -> None:
        """An archive was walked: which importer reads each member, and what was skipped."""

    def progress(self, path: Path) -> AbstractContextManager[Callable[[int], None]]:
        """Around one file's import: gives a callback taking the running count of events."""


class QuietListener:
    """An :class:`ImportListener` that says nothing (the default for library callers)."""

    def message(self, text: str) -> None:
        return None

    def planned(self, plan: ArchivePlan) -> None:
        return None

    @contextmanager
    def progress(self, path: Path) -> Iterator[Callable[[int], None]]:
        yield _ignore_count


def _ignore_count(count: int) -> None:
    return None


@dataclass(frozen=True, slots=True)
class PathsImport:
    """What :func:`import_paths` committed and, if a path failed, which and why.

    ``reports`` are committed (one per file; an archive gives one per member).
    When ``error`` is set, ``failed`` stored nothing and ``not_tried`` were not
    attempted.
    """

    reports: tuple[ImportReport, ...]
    failed: Path | None = None
    error: AnonMLError | None = None
    not_tried: tuple[Path, ...] = ()


def importer_candidates(per_importer: Mapping[str, Any]) -> list[Importer]:
    """One instance of every installed importer, with params given per importer name.

    Raises
    ------
    PluginNotFound
        ``per_importer`` names an importer that is not installed.
    AnonMLError
        An importer's params are not a JSON object.
    """
    classes = {cls.name: cls for cls in iter_classes("importer")}
    unknown = sorted(set(per_importer) - set(classes))
    if unknown:
        raise PluginNotFound("importer", unknown[0], classes, detail="named in --params")
    instances = []
    for name, cls in classes.items():
        options = per_importer.get(name, {})
        if not isinstance(options, dict):
            raise AnonMLError(f"--params: the params of {name!r} must be a JSON object")
        instances.append(cls(options))
    return instances


def resolve_candidates(importer: str | None, params: Mapping[str, Any]) -> list[Importer]:
    """The importers a path may go to: the one named (with ``params``), else every installed one.

    Without a name, ``params`` maps importer names to their params.
    """
    if importer:
        return [create("importer", PluginRef(name=importer, params=dict(params)))]
    return importer_candidates(params)


def choose_for_file(
    path: Path,
    candidates: Sequence[Importer],
    *,
    named: bool = False,
    min_confidence: float = DEFAULT_MIN_CONFIDENCE,
) -> tuple[Importer, str]:
    """The importer that reads ``path`` and one line saying why.

    ``named``: ``candidates`` is the single importer the user asked for.

    Raises
    ------
    NotRecognised
        No candidate's confidence reaches ``min_confidence``; the message lists
        the scores and the way out (``--importer``).
    """
    if named:
        return candidates[0], f"{candidates[0].name} (as asked)"
    detection = choose_importer(path, candidates, min_confidence)
    if detection.chosen is None:
        raise detection.refusal()
    return detection.chosen, detection.explain()


def check_paths(paths: Sequence[Path]) -> None:
    """Refuse a missing path before anything is committed."""
    missing = [p for p in paths if not p.exists()]
    if missing:
        raise RecordError(missing[0], None, "no such file or folder")


def _is_archive(path: Path) -> bool:
    return path.is_dir() or zipfile.is_zipfile(path)


def import_path(
    path: Path,
    store: EventStore,
    candidates: Sequence[Importer],
    options: ImportOptions,
    listener: ImportListener | None = None,
) -> list[ImportReport]:
    """Import one path (file, folder or archive); the reports of what it committed.

    A folder or zip without a named importer is walked and imported as one
    archive (:func:`anonml.archive.import_plan`); anything else is one file
    read by :func:`choose_for_file`'s importer, in one transaction.

    Raises
    ------
    AnonMLError
        Nothing recognised the file, or a bad record without ``skip_bad``
        (the store is then as it was before this path).
    """
    listener = listener or QuietListener()
    if not options.importer and _is_archive(path):
        return _import_archive(path, store, candidates, options, listener)
    chosen, why = choose_for_file(
        path, candidates, named=bool(options.importer), min_confidence=options.min_confidence
    )
    listener.message(f"{path}: {why}")
    if options.dry_run:
        return []
    with listener.progress(path) as on_event:
        report = store.import_file(
            path, chosen, user=options.user, skip_bad=options.skip_bad,
            replace=options.replace, on_event=on_event,
        )
    for bad in report.errors:
        listener.message(f"skipped {bad}")
    if report.replaced:
        listener.message(f"{path}: replaced {report.replaced:,} events of its earlier import")
    return [report]


def _import_archive(
    path: Path,
    store: EventStore,
    candidates: Sequence[Importer],
    options: ImportOptions,
    listener: ImportListener,
) -> list[ImportReport]:
    with walk_archive(
        path, candidates, min_confidence=options.min_confidence, on_tie=options.on_tie
    ) as plan:
        listener.planned(plan)
        if options.dry_run:
            return []
        result = import_plan(
            plan, store, user=options.user, skip_bad=options.skip_bad, replace=options.replace
        )
    for failed in result.failed:
        listener.message(f"failed {failed}")
    for report in result.imported:
        for bad in report.errors:
            listener.message(f"skipped {bad}")
    return list(result.imported)


def import_paths(
    paths: Sequence[Path],
    store: EventStore,
    candidates: Sequence[Importer],
    options: ImportOptions,
    listener: ImportListener | None = None,
) -> PathsImport:
    """Import ``paths`` in order, one transaction each, stopping at the first that fails.

    Returns
    -------
    PathsImport
        The committed reports; on a failure also the failed path, its error
        (an :class:`~anonml.errors.AnonMLError`) and the paths not tried.

    Raises
    ------
    RecordError
        A path does not exist (checked before anything is committed).
    """
    check_paths(paths)
    reports: list[ImportReport] = []
    for index, path in enumerate(paths):
        try:
            reports.extend(import_path(path, store, candidates, options, listener))
        except AnonMLError as exc:
            return PathsImport(tuple(reports), path, exc, tuple(paths[index + 1:]))
    return PathsImport(tuple(reports))
