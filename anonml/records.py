"""JSON forms of frozen records: one ``to_dict``/``from_dict`` for every validated dataclass.

A record that goes into a JSON document (a model's privacy accounting, its
shuffle bound) is a :func:`pydantic.dataclasses.dataclass`, so its fields are
validated, and numpy scalars made plain numbers, when it is built; it inherits
:class:`JsonRecord` for the two conversions instead of writing them out field
by field.
"""

from __future__ import annotations

from functools import cache
from typing import Any, Self

from pydantic import TypeAdapter

__all__ = ["JsonRecord"]


@cache
def _adapter(cls: type) -> TypeAdapter[Any]:
    return TypeAdapter(cls)


class JsonRecord:
    """Mixin of a pydantic dataclass: its JSON form and back.

    Fields that are None are left out of :meth:`to_dict`, so a field added later
    with a None default leaves the documents written before it loadable and
    unchanged.
    """

    def to_dict(self) -> dict[str, Any]:
        """The fields as JSON values (tuples as lists), None fields left out."""
        return _adapter(type(self)).dump_python(self, mode="json", exclude_none=True)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Self:
        """The inverse of :meth:`to_dict`; a missing or ill-typed field raises
        pydantic's ``ValidationError`` (a ValueError) naming it."""
        return _adapter(cls).validate_python(data)
