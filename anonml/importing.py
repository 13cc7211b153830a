"""Import orchestration: which importer reads each path, and the transactions that store them.

``anonml import`` (and any other front end) hands this module the paths a user
named and the options they chose; it answers with the reports of what was
committed. Three decisions live here, once:

* **Detection.** With an importer named, that importer reads every path. Else
  each installed importer (:func:`importer_candidates`) is asked about each
  file and the most confident at or above ``min_confidence`` wins
  (:func:`anonml.detection.choose_importer`: ties broken by name and
  reported). Params are given per importer (``{"fitbit": {...}}``) or flat
  (``{"timezone": "Europe/Amsterdam"}``: for whichever importer is chosen, which
  must take them).
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

import json
import types
import typing
import zipfile
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, Protocol

from anonml.archive import ArchivePlan, import_plan, walk_archive
from anonml.detection import DEFAULT_MIN_CONFIDENCE, choose_importer
from anonml.errors import AnonMLError, PluginError, PluginNotFound, RecordError
from anonml.plugins import Importer, PluginRef, create, iter_classes, load_class
from anonml.readers import TimeZoneName
from anonml.store import EventStore, ImportReport

__all__ = [
    "ImportOptions",
    "ImportListener",
    "QuietListener",
    "PathsImport",
    "Candidates",
    "ParamSpec",
    "importer_params",
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
        if self.importer is not None:
            _check_importer_name(self.importer)
        if self.on_tie not in ("pick", "skip"):
            raise AnonMLError(f"--on-tie must be 'pick' or 'skip', not {self.on_tie!r}")
        if not 0.0 <= self.min_confidence <= 1.0:
            raise AnonMLError(f"--min-confidence must be in [0, 1], not {self.min_confidence}")


def _check_importer_name(importer: str) -> None:
    """Refuse a blank ``--importer ""``: detecting instead would silently ignore what was asked."""
    if not importer.strip():
        raise AnonMLError("--importer is empty: name an importer (see 'anonml plugins'), "
                          "or leave the option out to detect one per file")


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


class Candidates(list[Importer]):
    """The importers a file may go to, and those that refused flat params (name → why).

    An importer in :attr:`refused` is built with its defaults so it can still be
    ranked; :func:`choose_for_file` (and the archive plan) refuse to let it read a
    file, since the params the user gave would not apply to it.
    """

    def __init__(self, importers: Sequence[Importer], refused: Mapping[str, str] | None = None) -> None:
        super().__init__(importers)
        self.refused: dict[str, str] = dict(refused or {})
        self.flat_keys: tuple[str, ...] = ()

    def check_chosen(self, path: Path | str, importer: Importer) -> None:
        """Refuse ``importer`` for ``path`` when it did not take the flat params given."""
        why = self.refused.get(importer.name)
        if why is not None:
            keys = ", ".join(self.flat_keys)
            raise AnonMLError(
                f"{path}: read by {importer.name!r}, which does not take the --params given ({keys}): "
                f"{why}; see 'anonml importer params {importer.name}', or give params per importer "
                '({"<importer>": {...}})'
            )


def importer_candidates(params: Mapping[str, Any]) -> Candidates:
    """One instance of every installed importer, with ``params`` per importer name or flat.

    ``params`` either maps installed importer names to their params
    (``{"fitbit": {"timezone": "Europe/Paris"}}``), or is one importer's params
    (``{"timezone": "Europe/Paris"}``): every importer that takes them gets them,
    and the one chosen for a file must be one of those (:class:`Candidates`).

    Raises
    ------
    PluginNotFound
        Flat params that no importer takes, one of whose keys holds an object: most
        likely a misspelt importer name (the message suggests the closest).
    AnonMLError
        Keys that mix importer names with params; an importer's params that are not
        a JSON object or that it refuses; other flat params that no importer takes.
    """
    classes = {cls.name: cls for cls in iter_classes("importer")}
    named = sorted(set(params) & set(classes))
    others = sorted(set(params) - set(classes))
    if named and others:
        raise AnonMLError(
            f"--params mixes importer names ({', '.join(named)}) with other keys ({', '.join(others)}): "
            'give {"<importer>": {params}, ...}, or one importer\'s params alone'
        )
    if not others:
        instances = []
        for name, cls in classes.items():
            options = params.get(name, {})
            if not isinstance(options, dict):
                raise AnonMLError(f"--params: the params of {name!r} must be a JSON object")
            instances.append(cls(options))
        return Candidates(instances)
    return _flat_candidates(classes, params)


def _flat_candidates(classes: Mapping[str, type[Importer]], params: Mapping[str, Any]) -> Candidates:
    """Every importer, with ``params`` where it takes them; why each other one refused."""
    instances: list[Importer] = []
    refused: dict[str, str] = {}
    for name, cls in classes.items():
        try:
            instances.append(cls(params))
        except PluginError as exc:
            refused[name] = str(exc)
            instances.append(cls())
    keys = sorted(params)
    if len(refused) == len(classes):
        # A key holding an object that no importer takes is most likely a misspelt importer name.
        if (misnamed := next((k for k in keys if isinstance(params[k], dict)), None)) is not None:
            raise PluginNotFound("importer", misnamed, classes, detail="named in --params")
        raise AnonMLError(
            f"--params: no importer takes {', '.join(map(repr, keys))} as params; "
            "'anonml importer params NAME' lists an importer's params"
        )
    candidates = Candidates(instances, refused)
    candidates.flat_keys = tuple(keys)
    return candidates


def resolve_candidates(importer: str | None, params: Mapping[str, Any]) -> Candidates:
    """The importers a path may go to: the one named (with ``params``), else every installed one.

    Without a name, ``params`` is per importer name or flat (:func:`importer_candidates`).

    Raises
    ------
    AnonMLError
        ``importer`` is given but blank (``--importer ""``).
    """
    if importer is not None:
        _check_importer_name(importer)
        return Candidates([create("importer", PluginRef(name=importer, params=dict(params)))])
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
    AnonMLError
        The importer chosen did not take the flat params given (:class:`Candidates`).
    """
    if named:
        return candidates[0], f"{candidates[0].name} (as asked)"
    detection = choose_importer(path, candidates, min_confidence)
    if detection.chosen is None:
        raise detection.refusal()
    if isinstance(candidates, Candidates):
        candidates.check_chosen(path, detection.chosen)
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
        if isinstance(candidates, Candidates):
            for planned in plan.files:
                candidates.check_chosen(f"{path}: {planned.member}", planned.importer)
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


@dataclass(frozen=True, slots=True)
class ParamSpec:
    """One param of an importer: its name, type, default (JSON) or ``required``, bounds, description."""

    name: str
    type: str
    default: str
    bounds: str
    description: str

    def as_dict(self) -> dict[str, str]:
        return {"name": self.name, "type": self.type, "default": self.default, "bounds": self.bounds,
                "description": self.description}


def importer_params(name: str) -> list[ParamSpec]:
    """The params importer ``name`` takes (``anonml importer params NAME``), in declaration order.

    Types are read from the params model's annotations (a time-zone param says
    ``IANA time zone``), bounds from its JSON schema (``minimum``, ``maximum``,
    length and item limits), descriptions from the fields' own or else nothing.

    Raises
    ------
    PluginNotFound
        No importer of that name is installed (with the closest name).
    """
    _check_importer_name(name)
    model = load_class("importer", name).Params
    schema = model.model_json_schema().get("properties", {})
    specs = []
    for field_name, field in model.model_fields.items():
        default = ("required" if field.is_required()
                   else json.dumps(field.get_default(call_default_factory=True), default=str))
        kind = _type_name(field.annotation)
        bounds = "" if "IANA time zone" in kind else _bounds(schema.get(field_name, {}))
        specs.append(ParamSpec(field_name, kind, default, bounds, field.description or ""))
    return specs


_BOUNDS = (("minimum", "≥ {}"), ("exclusiveMinimum", "> {}"), ("maximum", "≤ {}"),
           ("exclusiveMaximum", "< {}"), ("minLength", "length ≥ {}"), ("maxLength", "length ≤ {}"),
           ("maxItems", "≤ {} items"), ("maxProperties", "≤ {} entries"), ("pattern", "matches {}"))


def _bounds(schema: Mapping[str, Any]) -> str:
    """The constraints a JSON schema states for a value (the non-null branch of an optional one)."""
    branch = next((b for b in schema.get("anyOf", [schema]) if b.get("type") != "null"), schema)
    return ", ".join(form.format(branch[key]) for key, form in _BOUNDS if key in branch)


def _type_name(annotation: Any) -> str:
    """A param's annotation as a reader writes it: ``int``, ``IANA time zone | None``, ``dict[str, str]``."""
    if annotation == TimeZoneName:
        return "IANA time zone"
    origin = typing.get_origin(annotation)
    if origin is typing.Annotated:
        return _type_name(typing.get_args(annotation)[0])
    if origin in (typing.Union, types.UnionType):
        return " | ".join(_type_name(a) for a in typing.get_args(annotation))
    if origin is typing.Literal:
        return "one of " + ", ".join(json.dumps(a) for a in typing.get_args(annotation))
    if origin is tuple and typing.get_args(annotation)[-1:] == (Ellipsis,):  # given as a JSON list
        return f"list[{_type_name(typing.get_args(annotation)[0])}]"
    if origin is not None:
        args = ", ".join(_type_name(a) for a in typing.get_args(annotation))
        return f"{getattr(origin, '__name__', str(origin))}[{args}]"
    if annotation is type(None):
        return "None"
    return getattr(annotation, "__name__", str(annotation))
