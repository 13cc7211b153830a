"""Streaming JSON: walk a large document's top level one element at a time.

Exports such as Google's ``Records.json`` are one JSON document of hundreds
of megabytes; ``json.load`` would hold all of it. :func:`iter_json_items`
yields each element of the top-level arrays with the line it starts on, so an
importer can report ``file:line`` and memory stays at one element plus the
read buffer.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

from anonml.errors import RecordError
from anonml.readers import open_checked

__all__ = ["iter_json_items", "iter_assigned_array"]

_CHUNK = 1 << 20
_WS = re.compile(r"[ \t\n\r]*")
_ASSIGNMENT = re.compile(r"window\.([A-Za-z_$][\w$.]*)[ \t]*=[ \t]*")


class _Scanner:
    """A JSON reader that walks the top level by hand and decodes one element at a time."""

    def __init__(self, fh: IO[str], path: Path) -> None:
        self.fh, self.path = fh, path
        self.buf, self.pos, self.line, self.eof = "", 0, 1, False
        self.decoder = json.JSONDecoder()

    def _advance(self, to: int) -> None:
        self.line += self.buf.count("\n", self.pos, to)
        self.pos = to

    def _fill(self) -> bool:
        if self.eof:
            return False
        # Read at least as much as is buffered so one huge element costs O(n log n), not O(n²).
        data = self.fh.read(max(_CHUNK, len(self.buf) - self.pos))
        if not data:
            self.eof = True
            return False
        self.buf = self.buf[self.pos :] + data
        self.pos = 0
        return True

    def peek(self) -> str:
        while True:
            self._advance(_WS.match(self.buf, self.pos).end())  # type: ignore[union-attr]
            if self.pos < len(self.buf):
                return self.buf[self.pos]
            if not self._fill():
                return ""

    def expect(self, char: str) -> None:
        found = self.peek()
        if found != char:
            raise RecordError(
                self.path, self.line, f"invalid JSON: expected {char!r}, found {found or 'end of file'!r}"
            )
        self._advance(self.pos + 1)

    def value(self) -> Any:
        self.peek()
        while True:
            try:
                obj, end = self.decoder.raw_decode(self.buf, self.pos)
            except json.JSONDecodeError as exc:
                if self._fill():
                    continue
                line = self.line + self.buf.count("\n", self.pos, exc.pos)
                raise RecordError(self.path, line, f"invalid JSON: {exc.msg}") from None
            # A number cut by the buffer edge decodes "successfully": read on and retry.
            if end == len(self.buf) and self._fill():
                continue
            self._advance(end)
            return obj

    def array(self) -> Iterator[tuple[int, int, Any]]:
        self.expect("[")
        index = 0
        if self.peek() == "]":
            self._advance(self.pos + 1)
            return
        while True:
            self.peek()
            yield index, self.line, self.value()
            index += 1
            sep = self.peek()
            if sep == "]":
                self._advance(self.pos + 1)
                return
            self.expect(",")


def iter_json_items(path: Path) -> Iterator[tuple[str | None, int | None, int, Any]]:
    """Stream a JSON document's top level as ``(key, index, line, value)``.

    A top-level object yields, for each member, one tuple per element when the
    member's value is an array (``index`` 0-based) or one tuple with
    ``index=None`` otherwise. A top-level array yields ``(None, index, line,
    element)``. ``line`` is where the element starts (1-based). Memory is one
    element plus the read buffer.

    Raises
    ------
    RecordError
        Invalid JSON (with its line), a scalar top level, undecodable text.
    """
    with open_checked(path) as fh:
        scanner = _Scanner(fh, path)
        try:
            first = scanner.peek()
            if first == "[":
                for index, line, value in scanner.array():
                    yield None, index, line, value
            elif first == "{":
                scanner.expect("{")
                while scanner.peek() != "}":
                    line = scanner.line
                    key = scanner.value()
                    if not isinstance(key, str):
                        raise RecordError(path, line, "invalid JSON: object key is not a string")
                    scanner.expect(":")
                    if scanner.peek() == "[":
                        for index, item_line, value in scanner.array():
                            yield key, index, item_line, value
                    else:
                        line = scanner.line
                        yield key, None, line, scanner.value()
                    if scanner.peek() != "}":
                        scanner.expect(",")
                scanner.expect("}")
            else:
                raise RecordError(path, scanner.line, "not a JSON object or array")
            if scanner.peek():
                raise RecordError(path, scanner.line, "invalid JSON: extra data after the document")
        except UnicodeDecodeError as exc:
            raise RecordError(path, scanner.line, f"not UTF-8 text: {exc.reason}") from None


def iter_assigned_array(path: Path) -> Iterator[tuple[str, int, int, Any]]:
    """Stream a script ``window.NAME = [ ... ];`` as ``(NAME, index, line, element)``.

    Twitter/X archives write each data file as one JavaScript assignment of a
    JSON array (``window.YTD.tweets.part0 = [ {...}, ... ]``); the array is
    read as :func:`iter_json_items` reads one, after the assignment, and a
    final ``;`` is allowed.

    Raises
    ------
    RecordError
        The file does not start with ``window.NAME =`` followed by an array,
        invalid JSON (with its line), anything after the array, undecodable text.
    """
    with open_checked(path) as fh:
        scanner = _Scanner(fh, path)
        try:
            scanner.peek()
            match = _ASSIGNMENT.match(scanner.buf, scanner.pos)
            if match is None:
                raise RecordError(path, scanner.line, "not a script of the form 'window.NAME = [...]'")
            scanner._advance(match.end())
            name = match.group(1)
            for index, line, value in scanner.array():
                yield name, index, line, value
            if scanner.peek() == ";":
                scanner._advance(scanner.pos + 1)
            if scanner.peek():
                raise RecordError(path, scanner.line, "invalid script: extra data after the array")
        except UnicodeDecodeError as exc:
            raise RecordError(path, scanner.line, f"not UTF-8 text: {exc.reason}") from None
