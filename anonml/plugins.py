"""Plugin base classes and the entry-point registry.

Three kinds of plugin turn raw exports into a feature matrix:

* :class:`Importer` (group ``anonml.importers``): a file → :class:`~anonml.model.Event` s;
* :class:`Instancer` (group ``anonml.instancers``): a user's dataset → labelled examples;
* :class:`Featurizer` (group ``anonml.featurizers``): an example → feature values.

Each plugin class has a ``name``, a ``version`` and a nested frozen pydantic
``Params`` model with every field defaulted and bounded. A problem names a
plugin by :class:`PluginRef` (name, version, params as data) and never by code:
the registry only instantiates classes that are *installed* under an entry
point, so nothing that arrives over the network is ever executed.

Built-in plugins register through the same entry points (``pyproject.toml``)
as any third-party package, so ``pip install anonml-importer-foo`` just works.
"""

from __future__ import annotations

import abc
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from functools import cache
from importlib.metadata import EntryPoint, entry_points
from pathlib import Path
from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from anonml.errors import PluginError, PluginNotFound, RecordError
from anonml.event_rows import ChunkRows, rows_of
from anonml.model import Dataset, Event, FeatureSpec
from anonml.readers import block_lines, iter_line_chunks

__all__ = [
    "Plugin",
    "PluginParams",
    "Importer",
    "ChunkedImporter",
    "ParsedChunk",
    "RowOwner",
    "Instancer",
    "Featurizer",
    "Instance",
    "PluginRef",
    "PluginInfo",
    "GROUPS",
    "available",
    "load_class",
    "create",
    "iter_classes",
]

_NAME = re.compile(r"^[a-z][a-z0-9_]{0,63}$")


class PluginParams(BaseModel):
    """Base of every plugin's ``Params`` and of the models nested in them.

    Frozen (a plugin's options cannot change after it is built) and refusing
    unknown keys (a problem cannot smuggle in a setting the plugin would
    ignore). Subclasses add fields, each defaulted and bounded where it can be.
    A plugin without options keeps this class as its ``Params``.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")


class Plugin(abc.ABC):
    """What every plugin has: a registered name, a version and typed params.

    ``Params`` subclasses :class:`PluginParams`; the registry refuses an
    installed plugin whose ``Params`` is not frozen or accepts extra keys.
    """

    name: ClassVar[str]
    version: ClassVar[str]
    description: ClassVar[str] = ""
    Params: ClassVar[type[BaseModel]] = PluginParams

    def __init__(self, params: BaseModel | Mapping[str, Any] | None = None) -> None:
        params_cls = type(self).Params
        if params is None:
            params = params_cls()
        elif not isinstance(params, params_cls):
            try:
                params = params_cls.model_validate(
                    params.model_dump() if isinstance(params, BaseModel) else dict(params)
                )
            except ValidationError as exc:
                raise PluginError(f"bad params for {self.name!r}: {_first_error(exc)}") from None
        self.params = params

    def ref(self) -> PluginRef:
        """How a problem names this plugin: name, version and params as data."""
        return PluginRef(name=self.name, version=self.version, params=self.params.model_dump())

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.params!r})"


def _first_error(exc: ValidationError) -> str:
    err = exc.errors()[0]
    where = ".".join(str(p) for p in err["loc"]) or "params"
    return f"{where}: {err['msg']}"


class Importer(Plugin):
    """Reads one kind of raw export into events.

    Subclasses implement :meth:`detect` (cheap: a file name, a header, a few
    bytes — never a whole file) and :meth:`parse`, which streams events and
    yields a :class:`~anonml.errors.RecordError` *as a value* for a record it
    cannot read, so the caller decides whether to abort (the default: the
    import rolls back) or skip it (``--skip-bad``). A file that is not of the
    importer's format at all raises ``RecordError`` instead. ``parse`` never
    touches the store.
    """

    #: File name patterns this importer is usually given, for documentation and listing.
    patterns: ClassVar[tuple[str, ...]] = ()

    @abc.abstractmethod
    def detect(self, path: Path) -> float:
        """Confidence in [0, 1] that ``path`` is this importer's format."""

    @abc.abstractmethod
    def parse(self, path: Path) -> Iterator[Event | RecordError]:
        """Events of ``path``, with unreadable records yielded as ``RecordError``."""


@dataclass(slots=True)
class ParsedChunk:
    """What :meth:`ChunkedImporter.parse_chunk` made of a run of lines.

    ``items`` are the events and bad records in line order; ``fatal`` is a
    :class:`~anonml.errors.RecordError` that ends the whole file after them
    (the file is not of this format); ``opened`` says whether this chunk or an
    earlier one established the format; ``state`` is the importer's own
    summary of the chunk (picklable), merged in file order by
    :meth:`ChunkedImporter.merge_chunk`.
    """

    items: list[Event | RecordError]
    fatal: RecordError | None = None
    opened: bool = True
    state: Any = None


@dataclass(frozen=True, slots=True)
class RowOwner:
    """Whose an import's rows are: each event goes to ``user`` when given, else to the user the
    event names, else to ``fallback``; every row references the provenance row ``import_id``."""

    user: str | None
    fallback: str
    import_id: int


class ChunkedImporter(Importer):
    """An importer whose records are lines read independently (JSON lines, CSV rows).

    Subclasses implement :meth:`parse_chunk`, a function of the lines alone, so
    runs of lines can be parsed in worker processes while one writer stores
    them (:mod:`anonml.parallel_import`); whatever must cross chunks (a name
    learned on one line and used for another) goes in :attr:`ParsedChunk.state`,
    is merged in file order in the importing process by :meth:`merge_chunk`,
    and is used by :meth:`finish_chunks` once every line has been read.
    :meth:`parse` runs the same steps in one process, so both paths give the
    same events and errors in the same order.
    """

    #: Lines per chunk: large enough to amortise a hand-over between processes.
    chunk_lines: ClassVar[int] = 2000

    def parse(self, path: Path) -> Iterator[Event | RecordError]:
        """Every chunk through :meth:`parse_chunk` in order, then :meth:`finish_chunks`."""
        path = Path(path)
        self.start_chunks(path)
        opened = False
        for first_line, lines in iter_line_chunks(path, self.chunk_lines):
            chunk = self.parse_chunk(path, lines, first_line, opened=opened)
            yield from chunk.items
            if chunk.fatal is not None:
                raise chunk.fatal
            self.merge_chunk(path, chunk.state)
            opened = chunk.opened
        yield from self.finish_chunks(path)

    @abc.abstractmethod
    def parse_chunk(
        self, path: Path, lines: list[str | RecordError], first_line: int, *, opened: bool
    ) -> ParsedChunk:
        """Parse ``lines`` (line ``first_line`` onwards of ``path``) without side effects.

        A line that is not UTF-8 arrives as the :class:`RecordError` naming it
        (:func:`anonml.readers.block_lines`): a bad record to yield on.

        ``opened`` is true when an earlier chunk established the file's format,
        so this chunk needs no format check.
        """

    def parse_chunk_rows(
        self, path: Path, lines: list[str | RecordError], first_line: int, *, opened: bool, owner: RowOwner
    ) -> ChunkRows:
        """:meth:`parse_chunk` as the store's rows (what a worker of :mod:`anonml.parallel_import`
        hands over), attributed as ``owner`` says.

        By default :meth:`parse_chunk` then :func:`anonml.event_rows.rows_of`. An importer
        may make the rows without making the events first, if it gives the same rows, errors,
        ``fatal``, ``opened`` and ``state``.
        """
        chunk = self.parse_chunk(path, lines, first_line, opened=opened)
        out = rows_of(chunk.items, owner.user, owner.fallback, owner.import_id)
        out.fatal, out.opened, out.state = chunk.fatal, chunk.opened, chunk.state
        return out

    def parse_block_rows(
        self, path: Path, block: bytes, first_line: int, *, opened: bool, owner: RowOwner
    ) -> ChunkRows:
        """:meth:`parse_chunk_rows` of a block of whole lines, undecoded (what
        :func:`~anonml.readers.iter_line_blocks` reads; line ``first_line`` onwards).

        By default the block is decoded and split by :func:`~anonml.readers.block_lines`. An
        importer that reads undecoded lines itself may override it, if it gives what the
        default gives.
        """
        lines = block_lines(path, block, first_line)
        return self.parse_chunk_rows(path, lines, first_line, opened=opened, owner=owner)

    def start_chunks(self, path: Path) -> None:
        """Reset what :meth:`merge_chunk` accumulates, before a file's first chunk."""

    def merge_chunk(self, path: Path, state: Any) -> None:
        """Fold one chunk's :attr:`ParsedChunk.state` in, in file order."""

    def finish_chunks(self, path: Path) -> Iterator[Event | RecordError]:
        """Records that could only be resolved once the whole file was read (none by default)."""
        return iter(())


@dataclass(frozen=True, slots=True)
class Instance:
    """One training example: its events, its entity id and its label (None if unknown)."""

    entity: str
    dataset: Dataset
    label: float | int | bool | str | None = None


class Instancer(Plugin):
    """Cuts a user's events into training examples and labels them (a problem definition)."""

    @abc.abstractmethod
    def make_instances(self, dataset: Dataset) -> list[Instance]:
        """The labelled examples in one user's dataset (possibly none)."""


class Featurizer(Plugin):
    """Named feature functions with declared types and ranges."""

    @abc.abstractmethod
    def features(self) -> list[FeatureSpec]:
        """The features this featurizer computes, in column order."""

    @abc.abstractmethod
    def featurize(self, dataset: Dataset) -> list[float]:
        """One instance dataset's feature values, encoded per :meth:`FeatureSpec.encode`."""


GROUPS: dict[str, type[Plugin]] = {
    "importer": Importer,
    "instancer": Instancer,
    "featurizer": Featurizer,
}
_ENTRY_GROUP = {kind: f"anonml.{kind}s" for kind in GROUPS}

class PluginRef(BaseModel):
    """A plugin named as data: what a problem proposal carries instead of code."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str = Field(pattern=_NAME.pattern)
    version: str | None = Field(default=None, max_length=32)
    params: dict[str, Any] = Field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class PluginInfo:
    """One installed plugin, as the registry lists it."""

    kind: str
    name: str
    version: str
    description: str
    distribution: str | None
    target: str


def _entry_points(kind: str) -> dict[str, EntryPoint]:
    if kind not in GROUPS:
        raise PluginNotFound("plugin kind", kind, GROUPS)
    found: dict[str, EntryPoint] = {}
    for ep in entry_points(group=_ENTRY_GROUP[kind]):
        # Two distributions claiming one name is a broken install; first wins and
        # the duplicate is reported when the name is loaded.
        found.setdefault(ep.name, ep)
    return found


@cache
def _load(kind: str, name: str, value: str) -> type[Plugin]:
    ep = EntryPoint(name=name, value=value, group=_ENTRY_GROUP[kind])
    try:
        cls = ep.load()
    except Exception as exc:  # a third-party plugin may fail in any way on import
        raise PluginError(f"{kind} {name!r} ({value}) failed to load: {exc}") from exc
    base = GROUPS[kind]
    if not (isinstance(cls, type) and issubclass(cls, base)):
        raise PluginError(f"{kind} {name!r} ({value}) is not a subclass of {base.__name__}")
    if getattr(cls, "name", None) != name:
        raise PluginError(
            f"{kind} entry point {name!r} points at a class named {getattr(cls, 'name', None)!r}"
        )
    if not _NAME.match(name):
        raise PluginError(f"{kind} name {name!r} must be snake_case ([a-z][a-z0-9_]*)")
    _check_params_model(kind, name, value, cls)
    return cls


def _check_params_model(kind: str, name: str, value: str, cls: type[Plugin]) -> None:
    """Refuse a plugin whose ``Params`` is not a frozen, extra-forbidding pydantic model.

    Params arrive as data from a problem proposal: a mutable model could be
    changed after validation and one that ignores unknown keys would silently
    drop a setting the proposer meant.
    """
    params = getattr(cls, "Params", None)
    if not (isinstance(params, type) and issubclass(params, BaseModel)):
        raise PluginError(
            f"{kind} {name!r} ({value}): Params must be a pydantic model subclassing "
            f"anonml.plugins.PluginParams, not {params!r}"
        )
    config = params.model_config
    if config.get("frozen") is not True or config.get("extra") != "forbid":
        raise PluginError(
            f"{kind} {name!r} ({value}): Params {params.__qualname__} must be frozen and forbid "
            f"extra keys (subclass anonml.plugins.PluginParams)"
        )


def load_class(kind: str, name: str, version: str | None = None) -> type[Plugin]:
    """The installed plugin class registered as ``name`` in ``kind``'s group.

    Raises
    ------
    PluginNotFound
        No such name (the message lists what is installed), or its version differs.
    PluginError
        It is installed but fails to import or is not a proper plugin.
    """
    eps = _entry_points(kind)
    if name not in eps:
        raise PluginNotFound(kind, name, eps)
    cls = _load(kind, name, eps[name].value)
    if version is not None and cls.version != version:
        raise PluginNotFound(
            kind, name, [f"{n}" for n in eps], detail=f"installed version {cls.version}, asked {version}"
        )
    return cls


def create(kind: str, ref: PluginRef | str, params: Mapping[str, Any] | None = None) -> Any:
    """Instantiate an installed plugin from a :class:`PluginRef` (or a bare name and params)."""
    if isinstance(ref, str):
        ref = PluginRef(name=ref, params=dict(params or {}))
    cls = load_class(kind, ref.name, ref.version)
    return cls(ref.params)


def available(kind: str) -> list[PluginInfo]:
    """Every installed plugin of ``kind``, sorted by name; broken ones are listed with the error."""
    infos = []
    for name, ep in sorted(_entry_points(kind).items()):
        dist = ep.dist.name if ep.dist is not None else None
        try:
            cls = _load(kind, name, ep.value)
        except PluginError as exc:
            infos.append(PluginInfo(kind, name, "?", f"BROKEN: {exc}", dist, ep.value))
            continue
        infos.append(PluginInfo(kind, name, cls.version, cls.description, dist, ep.value))
    return infos


def iter_classes(kind: str) -> Iterator[type[Plugin]]:
    """Every loadable plugin class of ``kind`` (broken ones skipped)."""
    for name, ep in sorted(_entry_points(kind).items()):
        try:
            yield _load(kind, name, ep.value)
        except PluginError:
            continue

