"""Which importer reads a file: every candidate's ``detect`` confidence, ranked.

``anonml import`` and the export-archive walker both ask this one question,
so they answer it the same way: the highest confidence wins if it reaches the
threshold; equal top scores are broken by importer name (deterministic) and
the tie is reported so the user can pass ``--importer``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from anonml.errors import AnonMLError

if TYPE_CHECKING:  # the CLI reads DEFAULT_MIN_CONFIDENCE at start-up: keep this module light
    from anonml.plugins import Importer

__all__ = [
    "Detection",
    "NotRecognised",
    "rank_importers",
    "choose_importer",
    "DEFAULT_MIN_CONFIDENCE",
]

DEFAULT_MIN_CONFIDENCE = 0.5


class NotRecognised(AnonMLError):
    """No installed importer is confident enough about a file; says what scored and what to do."""


@dataclass(frozen=True, slots=True)
class Detection:
    """The outcome of asking every importer about one file."""

    path: Path
    ranking: tuple[tuple[str, float], ...]
    chosen: Importer | None
    tied_with: tuple[str, ...] = ()
    failures: tuple[str, ...] = ()
    min_confidence: float = DEFAULT_MIN_CONFIDENCE

    @property
    def confidence(self) -> float:
        return self.ranking[0][1] if self.ranking else 0.0

    def explain(self) -> str:
        """One line: what was chosen and why, or why nothing was."""
        scores = ", ".join(f"{name} {conf:.2f}" for name, conf in self.ranking[:4] if conf > 0)
        if self.chosen is None:
            if not scores:
                return "no importer recognises it (every importer scored 0)"
            return (
                f"no importer recognises it (best: {scores}; "
                f"below --min-confidence {self.min_confidence:.2f})"
            )
        line = f"{self.chosen.name} (confidence {self.confidence:.2f})"
        if self.tied_with:
            line += f"; tied with {', '.join(self.tied_with)}, chosen by name — pass --importer to pick"
        return line

    def refusal(self) -> NotRecognised:
        """The error to raise when nothing was chosen: the path, the scores, the way out."""
        names = ", ".join(sorted(name for name, _ in self.ranking)) or "none installed"
        return NotRecognised(
            f"{self.path}: {self.explain()}; choose one with --importer NAME "
            f"(installed importers: {names})"
        )


def rank_importers(
    path: Path, importers: Sequence[Importer], failures: list[str] | None = None
) -> list[tuple[Importer, float]]:
    """Every importer with its confidence for ``path``, best first, then by name.

    A ``detect`` that raises counts as 0 (recognition must never abort an
    import); what it raised is appended to ``failures`` when given.
    """
    scored = []
    for imp in importers:
        try:
            conf = float(imp.detect(path))
        except Exception as exc:  # a third-party detect may fail in any way
            conf = 0.0
            if failures is not None:
                failures.append(f"{imp.name}.detect failed: {type(exc).__name__}: {exc}")
        scored.append((imp, min(max(conf, 0.0), 1.0)))
    scored.sort(key=lambda pair: (-pair[1], pair[0].name))
    return scored


def choose_importer(
    path: Path, importers: Sequence[Importer], min_confidence: float = DEFAULT_MIN_CONFIDENCE
) -> Detection:
    """The best importer for ``path``, or none if no confidence reaches ``min_confidence``."""
    failures: list[str] = []
    ranked = rank_importers(path, importers, failures)
    ranking = tuple((imp.name, conf) for imp, conf in ranked)
    if not ranked or ranked[0][1] < min_confidence:
        return Detection(path, ranking, None, failures=tuple(failures), min_confidence=min_confidence)
    best = ranked[0][1]
    tied = tuple(imp.name for imp, conf in ranked[1:] if conf == best)
    return Detection(path, ranking, ranked[0][0], tied, tuple(failures), min_confidence)
