"""The one place that loads matplotlib (the optional ``plot`` extra) for the benchmark plots."""

from __future__ import annotations

from types import ModuleType

from anonml.errors import AnonMLError

__all__ = ["require_pyplot"]


def require_pyplot() -> ModuleType:
    """``matplotlib.pyplot`` on the non-interactive Agg backend.

    Commands call it before any computation when a plot is asked for, so a
    missing extra fails at once, not after the benchmark has run.

    Raises
    ------
    AnonMLError
        When matplotlib is not installed, naming the extra that brings it.
    """
    try:
        import matplotlib  # noqa: PLC0415 - optional dependency

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt  # noqa: PLC0415
    except ImportError:
        raise AnonMLError("plotting needs matplotlib: pip install 'anonml[plot]'") from None
    return plt
