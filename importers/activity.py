"""What the GPX, TCX and FIT importers share: a streaming XML reader with line numbers, and track sums.

The three formats record one outdoor activity as a series of timed points
and describe them with the same events (``track_point``, ``lap``,
``activity``) and the same field names, so one featurizer reads all three:

``lat``, ``lon`` (float, WGS84 degrees), ``elevation_m``, ``distance_m``
(cumulative, as the device states it), ``heart_rate`` (int, bpm),
``cadence`` (int, rpm or steps per minute per foot, as the device states
it), ``speed_mps``, ``power_w``, ``temperature_c`` (float) and ``sport``
(category, lower-cased).

:func:`iter_xml` streams an XML file with :mod:`xml.parsers.expat` and hands
over each element of interest, with its children and its start line, when it
ends; a kept element is then dropped from its parent, so memory holds one
point at a time. It refuses any DTD that names an external subset and any
entity declaration (neither GPX nor TCX declares entities, so no expansion
attack can be hidden in one).
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Literal
from xml.parsers import expat

from anonml.errors import RecordError
from anonml.readers import READ_ERRORS, open_bytes, open_checked

__all__ = ["XmlNode", "iter_xml", "haversine_m", "TrackSums", "EARTH_RADIUS_M", "number", "whole"]

#: Mean Earth radius (IUGG), the usual constant of the haversine distance.
EARTH_RADIUS_M = 6_371_008.8
_CHUNK = 1 << 16


@dataclass(slots=True, eq=False)
class XmlNode:
    """One element: local name (namespace dropped), attributes, text, children and start line."""

    tag: str
    attrs: dict[str, str]
    line: int
    children: list[XmlNode] = field(default_factory=list)
    text: str = ""

    def child(self, *path: str) -> XmlNode | None:
        """The first descendant reached by following ``path`` one local name at a time."""
        node: XmlNode | None = self
        for name in path:
            node = next((c for c in node.children if c.tag == name), None) if node else None
        return node

    def text_of(self, *path: str) -> str | None:
        """The stripped text of :meth:`child` ``(*path)``, or ``None`` if absent or empty."""
        node = self.child(*path)
        text = node.text.strip() if node is not None else ""
        return text or None

    def find(self, name: str) -> XmlNode | None:
        """The first descendant named ``name`` at any depth (extensions nest under vendor tags)."""
        for c in self.children:
            if c.tag == name:
                return c
            found = c.find(name)
            if found is not None:
                return found
        return None


class _Refused(Exception):
    """Raised from an expat handler to stop the parse with a reason."""


def _local(name: str) -> str:
    return name.rsplit(" ", 1)[-1]  # expat joins namespace and local name with the separator


class _TreeBuilder:
    """The expat handlers of :func:`iter_xml`: each element becomes an :class:`XmlNode` on a stack,
    and the ``("start", node)`` / ``("end", node)`` events to hand over queue in ``ready``.

    ``rooted`` turns true at the first element (a syntax error before it means the file is not
    XML at all); a DTD naming an external subset, any entity declaration and a root outside
    ``roots`` stop the parse with :class:`_Refused`.
    """

    def __init__(
        self,
        parser: expat.XMLParserType,
        roots: frozenset[str],
        starts: frozenset[str],
        keep: frozenset[str],
        what: str,
    ) -> None:
        self.parser = parser
        self.roots, self.starts, self.keep, self.what = roots, starts, keep, what
        self.stack: list[XmlNode] = []
        self.rooted = False
        self.ready: list[tuple[Literal["start", "end"], XmlNode]] = []
        parser.StartDoctypeDeclHandler = self.doctype
        parser.EntityDeclHandler = self.entity
        parser.StartElementHandler = self.start
        parser.EndElementHandler = self.end
        parser.CharacterDataHandler = self.text

    def doctype(self, _name: str, system_id: str | None, public_id: str | None, _internal: int) -> None:
        if system_id or public_id:
            raise _Refused(f"external DTD {system_id or public_id!r} refused")

    def entity(self, name: str, *_rest: object) -> None:
        raise _Refused(f"entity declaration {name!r} refused (a {self.what} file declares none)")

    def start(self, name: str, attrs: dict[str, str]) -> None:
        self.rooted = True
        node = XmlNode(_local(name), {_local(k): v for k, v in attrs.items()}, self.parser.CurrentLineNumber)
        stack = self.stack
        if not stack and node.tag not in self.roots:
            raise _Refused(f"not a {self.what} file: root element is <{node.tag}>")
        if stack:
            stack[-1].children.append(node)
        stack.append(node)
        if node.tag in self.starts:
            self.ready.append(("start", node))

    def end(self, _name: str) -> None:
        stack = self.stack
        node = stack.pop()
        if node.tag in self.keep:
            self.ready.append(("end", node))
            if stack:
                stack[-1].children.pop()  # handed over: the parent keeps no reference

    def text(self, data: str) -> None:
        if self.stack:
            self.stack[-1].text += data


def iter_xml(
    path: Path,
    roots: frozenset[str],
    starts: frozenset[str],
    keep: frozenset[str],
    what: str,
) -> Iterator[tuple[Literal["start", "end"], XmlNode] | RecordError]:
    """Stream ``path``: ``("start", node)`` for tags in ``starts``, ``("end", node)`` for tags in ``keep``.

    A started node has its attributes but not yet its children; an ended one
    has its whole subtree minus the kept descendants already handed over.

    Raises
    ------
    RecordError
        The file cannot be opened, is not XML, its root is not one of
        ``roots`` (the message says ``not a <what> file``), or it declares an
        external DTD or any entity.

    A syntax error after the root (a truncated file) is yielded as a
    ``RecordError`` with its line, and the stream ends there.
    """
    parser = expat.ParserCreate(namespace_separator=" ")
    parser.buffer_text = True
    tree = _TreeBuilder(parser, roots, starts, keep, what)
    ready = tree.ready
    with open_checked(path, open_bytes) as fh:
        while True:
            try:
                chunk = fh.read(_CHUNK)
                parser.Parse(chunk, not chunk)
            except _Refused as exc:
                raise RecordError(path, parser.CurrentLineNumber, str(exc)) from None
            except expat.ExpatError as exc:
                reason = expat.ErrorString(exc.code)
                if not tree.rooted:
                    raise RecordError(path, exc.lineno, f"not a {what} file: {reason}") from None
                yield from ready
                where = f"XML syntax error at column {exc.offset + 1}"
                yield RecordError(path, exc.lineno, f"{where}: {reason}; parsing stopped")
                return
            except READ_ERRORS as exc:
                raise RecordError(path, None, f"cannot read: {exc}") from None
            yield from ready
            ready.clear()
            if not chunk:
                return


def number(text: str | None, name: str, low: float = -math.inf, high: float = math.inf) -> float | None:
    """``text`` as a finite float in [low, high], ``None`` for no text; else ValueError naming ``name``."""
    if text is None:
        return None
    try:
        value = float(text)
    except ValueError:
        raise ValueError(f"{name}: {text!r} is not a number") from None
    if not (math.isfinite(value) and low <= value <= high):
        raise ValueError(f"{name}: {text!r} is outside [{low:g}, {high:g}]")
    return value


def whole(text: str | None, name: str, high: float) -> int | None:
    """``text`` as a whole number in [0, high] (``"142"`` or ``"142.0"``), ``None`` for no text."""
    value = number(text, name, 0, high)
    if value is None:
        return None
    if not value.is_integer():
        raise ValueError(f"{name}: {text!r} is not a whole number")
    return int(value)


def haversine_m(lat1: float, lon1: float, lat2: float, lon2: float) -> float:
    """Great-circle distance in metres on a sphere of radius :data:`EARTH_RADIUS_M`.

    d = 2 R asin(sqrt(sin²(Δφ/2) + cos φ1 cos φ2 sin²(Δλ/2))) (Sinnott 1984,
    "Virtues of the haversine"); within 0.5 % of the WGS84 ellipsoid distance.
    """
    phi1, phi2 = math.radians(lat1), math.radians(lat2)
    dphi, dlam = phi2 - phi1, math.radians(lon2 - lon1)
    a = math.sin(dphi / 2) ** 2 + math.cos(phi1) * math.cos(phi2) * math.sin(dlam / 2) ** 2
    return 2 * EARTH_RADIUS_M * math.asin(min(1.0, math.sqrt(a)))


@dataclass(slots=True)
class TrackSums:
    """Running totals of one track's good points, segment by segment.

    Distance is the sum of haversine steps between consecutive points of a
    segment (a gap between segments is not travelled); ascent and descent sum
    the positive and negative elevation steps between consecutive points that
    both state an elevation, unsmoothed (a device's own totals smooth them).
    """

    points: int = 0
    segments: int = 0
    distance_m: float = 0.0
    ascent_m: float = 0.0
    descent_m: float = 0.0
    first: datetime | None = None
    last: datetime | None = None
    _previous: tuple[float, float, float | None] | None = None

    def new_segment(self) -> None:
        self.segments += 1
        self._previous = None

    def add(self, lat: float, lon: float, elevation: float | None, when: datetime | None) -> None:
        self.points += 1
        if self._previous is not None:
            plat, plon, pele = self._previous
            self.distance_m += haversine_m(plat, plon, lat, lon)
            if pele is not None and elevation is not None:
                step = elevation - pele
                if step > 0:
                    self.ascent_m += step
                else:
                    self.descent_m -= step
        self._previous = (lat, lon, elevation)
        if when is not None:
            self.first = when if self.first is None else min(self.first, when)
            self.last = when if self.last is None else max(self.last, when)
