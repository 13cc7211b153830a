"""The project's exceptions, named for what the caller does next.

Every expected failure raises a subclass of :class:`AnonMLError`; the CLI turns
one into a single stderr line and exit code 1, the services into a 4xx with
the reason. A traceback therefore always means a bug.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

__all__ = [
    "AnonMLError",
    "RecordError",
    "PluginNotFound",
    "PluginError",
    "StoreError",
    "SchemaError",
    "BudgetExceeded",
    "ProtocolError",
    "CryptoError",
    "InvalidToken",
    "DatasetNotFound",
]


class AnonMLError(Exception):
    """Root of every error AnonML raises on purpose."""


class RecordError(AnonMLError, ValueError):
    """One input record (a line, a row, an element) could not be read.

    Prints as ``file:line: reason`` so editors and terminals can jump to it.
    ``line`` is 1-based; ``None`` when the format has no lines (e.g. a JSON
    document addressed by ``record``, such as ``locations[12]``).
    """

    def __init__(
        self,
        path: str | Path,
        line: int | None,
        reason: str,
        *,
        record: str | None = None,
    ) -> None:
        self.path = str(path)
        self.line = line
        self.reason = reason
        self.record = record
        super().__init__(str(self))

    def __str__(self) -> str:
        where = self.path
        if self.line is not None:
            where += f":{self.line}"
        if self.record is not None:
            where += f" [{self.record}]"
        return f"{where}: {self.reason}"

    def __reduce__(self):  # keep the keyword-only field across copy/pickle of the error itself
        return (_rebuild_record_error, (self.path, self.line, self.reason, self.record))


def _rebuild_record_error(
    path: str, line: int | None, reason: str, record: str | None
) -> RecordError:
    return RecordError(path, line, reason, record=record)


class PluginNotFound(AnonMLError, LookupError):
    """No registered plugin matches; the message lists the candidates."""

    def __init__(self, kind: str, name: str, candidates: Iterable[str], detail: str = "") -> None:
        from difflib import get_close_matches

        self.kind = kind
        self.name = name
        self.candidates = sorted(candidates)
        listed = ", ".join(self.candidates) if self.candidates else "none installed"
        extra = f" ({detail})" if detail else ""
        close = get_close_matches(name, self.candidates, n=1, cutoff=0.6)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        super().__init__(f"no {kind} named {name!r}{extra}{hint}; installed {kind}s: {listed}")


class PluginError(AnonMLError):
    """A plugin is installed but cannot be loaded or was given bad params."""


class StoreError(AnonMLError):
    """The event store cannot be opened or is not in the expected shape."""


class SchemaError(StoreError):
    """A database's schema cannot be brought to this version's: newer, unknown or half made."""


class BudgetExceeded(AnonMLError):
    """A release would take a peer's privacy spend past its configured cap."""


class ProtocolError(AnonMLError, ValueError):
    """A protocol message is malformed, out of order or not allowed."""


class CryptoError(AnonMLError):
    """Root of cryptographic failures (bad point, bad proof, bad MAC, replay)."""


class InvalidToken(CryptoError, ValueError):
    """A verification token failed its check or was already spent."""


class DatasetNotFound(AnonMLError, FileNotFoundError):
    """A dataset's files are not where they were looked for; says where to put them."""
