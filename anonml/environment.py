"""Service settings from ``<PREFIX><FIELD>`` environment variables, validated by pydantic."""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from pydantic import BaseModel

__all__ = ["settings_from_env"]

M = TypeVar("M", bound=BaseModel)


def settings_from_env(
    model: type[M],
    prefix: str,
    overrides: Mapping[str, Any],
    parsers: Mapping[str, Callable[[str], Any]] | None = None,
) -> M:
    """Build ``model`` from ``<prefix><FIELD>`` variables, then non-``None`` ``overrides``.

    A variable's text goes to the model as is (pydantic coerces it) unless
    ``parsers`` names the field, e.g. a comma-separated list or JSON.
    """
    parsers = parsers or {}
    values: dict[str, Any] = {}
    for name in model.model_fields:
        raw = os.environ.get(prefix + name.upper())
        if raw is not None:
            values[name] = parsers[name](raw) if name in parsers else raw
    values.update({k: v for k, v in overrides.items() if v is not None})
    return model.model_validate(values)
