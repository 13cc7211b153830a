"""The data model: typed events, per-user datasets, feature vectors and matrices.

An :class:`Event` is one timestamped (or static) fact from one source about one
person, with typed fields. Its ``id`` is a hash of its canonical content, so the
same record imported twice is the same event. A :class:`Dataset` is one user's
events in an interval; an *instance dataset* holds one training example's
events. Featurizers turn instance datasets into :class:`FeatureVector` rows,
gathered into a :class:`FeatureMatrix` that hands scikit-learn ``(X, y)``.

Field kinds (DESIGN §3): float, int, bool, categorical (``str``), text
(:class:`Text`, free text that is never one-hot encoded) and datetime
(tz-aware, normalised to UTC).
"""

from __future__ import annotations

import enum
import hashlib
import json
import math
from collections.abc import Iterable, Iterator, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from functools import cached_property
from typing import TYPE_CHECKING, Annotated, Any

import orjson
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PlainSerializer,
    PlainValidator,
    SerializerFunctionWrapHandler,
    ValidationInfo,
    field_validator,
    model_serializer,
    model_validator,
)

if TYPE_CHECKING:
    import numpy as np

__all__ = [
    "FieldKind",
    "Text",
    "FieldValue",
    "Event",
    "Dataset",
    "FeatureKind",
    "FeatureSpec",
    "FeatureVector",
    "FeatureMatrix",
    "field_kind",
    "encode_fields",
    "decode_fields",
    "to_utc",
    "content_id",
    "timestamp_us",
    "canonical_parts",
]


class FieldKind(enum.StrEnum):
    """The type of one event field."""

    FLOAT = "float"
    INT = "int"
    BOOL = "bool"
    CATEGORICAL = "categorical"
    TEXT = "text"
    DATETIME = "datetime"


class Text(str):
    """Free text (a message body, a URL, a title): a ``str`` that is not a category."""

    __slots__ = ()

    def __repr__(self) -> str:
        return f"Text({str.__repr__(self)})"


def to_utc(value: datetime) -> datetime:
    """Return ``value`` converted to UTC; naive datetimes are refused, never guessed."""
    if value.tzinfo is UTC:  # already UTC (what importers hand over): nothing to convert
        return value
    if value.tzinfo is None or value.tzinfo.utcoffset(value) is None:
        raise ValueError(f"datetime {value.isoformat()} has no timezone; attach one explicitly")
    return value.astimezone(UTC)


#: Field value types and their kinds, in the order they are tried: a subclass before its base
#: (``bool`` before ``int``, :class:`Text` before ``str``).
_KIND_OF_TYPE: tuple[tuple[type, FieldKind], ...] = (
    (bool, FieldKind.BOOL),
    (int, FieldKind.INT),
    (float, FieldKind.FLOAT),
    (Text, FieldKind.TEXT),
    (str, FieldKind.CATEGORICAL),
    (datetime, FieldKind.DATETIME),
)


def field_kind(value: object) -> FieldKind:
    """The :class:`FieldKind` of a field value (``bool`` is checked before ``int``)."""
    for kind_type, kind in _KIND_OF_TYPE:
        if isinstance(value, kind_type):
            return kind
    raise TypeError(f"unsupported field value {value!r} of type {type(value).__name__}")


# Tags keep text and datetimes distinct from categories through JSON; any other
# value is stored as itself. A real str starting with the tag prefix is escaped.
_TEXT_TAG = "$t:"
_DATETIME_TAG = "$d:"
_ESCAPE_TAG = "$s:"


def _encode_value(value: object) -> object:
    kind = type(value)
    if kind is str:
        return _ESCAPE_TAG + value if value.startswith("$") else value  # type: ignore[union-attr]
    if kind is Text:
        return _TEXT_TAG + value  # type: ignore[operator]
    if kind is int or kind is bool:
        return value
    if isinstance(value, bool):
        return bool(value)
    if isinstance(value, int):
        return int(value)  # a subclass (an IntEnum) is stored as its number
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError(f"field value {value!r} is not finite")
        return value
    if isinstance(value, Text):
        return _TEXT_TAG + value
    if isinstance(value, str):
        return _ESCAPE_TAG + value if value.startswith("$") else value
    if isinstance(value, datetime):
        return _DATETIME_TAG + to_utc(value).isoformat()
    raise TypeError(f"unsupported field value {value!r} of type {type(value).__name__}")


def _decode_value(value: object) -> object:
    if isinstance(value, str) and value.startswith("$"):
        tag, rest = value[:3], value[3:]
        if tag == _TEXT_TAG:
            return Text(rest)
        if tag == _DATETIME_TAG:
            return datetime.fromisoformat(rest)
        if tag == _ESCAPE_TAG:
            return rest
    return value


#: Value types :func:`encode_fields` hands orjson as they are (Text and datetimes come back to
#: :func:`_encode_value` for their tags); str and float are checked value by value.
_WRITTEN_AS_THEY_ARE = frozenset((int, bool, Text, datetime))
_isfinite = math.isfinite
_ORJSON_OPTIONS = orjson.OPT_SORT_KEYS | orjson.OPT_PASSTHROUGH_SUBCLASS | orjson.OPT_PASSTHROUGH_DATETIME


def encode_fields(fields: Mapping[str, object]) -> str:
    """Canonical JSON of a field mapping: sorted keys, compact, UTF-8, tagged text and datetimes.

    orjson writes plain values itself and hands :class:`Text` and datetimes to
    :func:`_encode_value` for their tags; a mapping holding anything else (a
    category starting with ``$``, a non-finite float, a subclass, an
    unsupported type) is encoded value by value first, which escapes, converts
    or refuses it. An integer past 64 bits, which orjson refuses, falls back to
    the stdlib encoder.
    """
    encoded = fields
    for value in fields.values():  # runs for every stored event: one type test for most values
        kind = type(value)
        if kind is str:
            if not value or value[0] != "$":  # type: ignore[index]  # (startswith: twice the time)
                continue
        elif kind is float:
            if _isfinite(value):  # type: ignore[arg-type]
                continue
        elif kind in _WRITTEN_AS_THEY_ARE:
            continue
        encoded = {k: _encode_value(v) for k, v in fields.items()}  # escape, refuse or convert
        break
    try:
        return orjson.dumps(encoded, default=_encode_value, option=_ORJSON_OPTIONS).decode()
    except orjson.JSONEncodeError:
        plain_values = {k: _encode_value(v) for k, v in fields.items()}
        return json.dumps(plain_values, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def decode_fields(payload: str) -> dict[str, object]:
    """Inverse of :func:`encode_fields`."""
    try:
        raw = orjson.loads(payload)
    except orjson.JSONDecodeError:  # what only the stdlib accepts (ints past 64 bits)
        raw = json.loads(payload)
    return {k: _decode_value(v) for k, v in raw.items()}


def _is_storable_text(text: str) -> bool:
    """Whether ``text`` can be stored: no lone surrogate (JSON's ``"\\ud800"``), which UTF-8 cannot encode."""
    if text.isascii():
        return True
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _unicode_text(text: str, what: str) -> str:
    if not _is_storable_text(text):
        raise ValueError(f"{what} holds a lone surrogate: not valid Unicode text, cannot be stored")
    return text


def _validate_field_value(value: object, info: ValidationInfo) -> object:
    if isinstance(value, str) and info.mode == "json":
        return _decode_value(value)
    if isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError(f"field value {value!r} is not finite")
        return value
    if isinstance(value, datetime):
        return to_utc(value)
    raise ValueError(f"unsupported field value {value!r} of type {type(value).__name__}")


def _validate_fields(value: object, info: ValidationInfo) -> dict[str, object]:
    """Validate a whole field mapping in one pass (one call per event, not per value)."""
    if not isinstance(value, Mapping):
        raise ValueError(f"fields must be a mapping of names to values, got {type(value).__name__}")
    from_json = info.mode == "json"
    fields: dict[str, object] = {}
    for name, item in value.items():
        if type(name) is not str:
            raise ValueError(f"field name {name!r} is not a string")
        _unicode_text(name, "a field name")
        kind = type(item)
        if kind is str:
            _unicode_text(item, f"field {name!r}")
            fields[name] = _decode_value(item) if from_json and item.startswith("$") else item
        elif kind is Text:
            fields[name] = _unicode_text(item, f"field {name!r}")
        elif kind is int or kind is bool:
            fields[name] = item
        else:
            try:
                fields[name] = _validate_field_value(item, info)
            except ValueError as exc:
                raise ValueError(f"field {name!r}: {exc}") from None
    return fields


_EVENT_FIELDS = frozenset(("source", "type", "timestamp", "fields", "user"))
# Event.make fills in what BaseModel.__init__ leaves on an instance, as pydantic's own
# model_construct does: __dict__ and the three slots of BaseModel (set through their descriptors).
_set_fields_set = BaseModel.__dict__["__pydantic_fields_set__"].__set__
_set_extra = BaseModel.__dict__["__pydantic_extra__"].__set__
_set_private = BaseModel.__dict__["__pydantic_private__"].__set__


def canonical_parts(source: object, type_: object, timestamp: object, fields: object, user: object) -> bool:
    """Whether :class:`Event` validation would return these values unchanged (see :meth:`Event.make`):
    then they are the event, and its stored row can be made from them directly."""
    if not (
        type(source) is str and 0 < len(source) <= 64 and source.isascii()  # type: ignore[arg-type]
        and type(type_) is str and 0 < len(type_) <= 256 and type_.isascii()  # type: ignore[arg-type]
        and (user is None or (type(user) is str and 0 < len(user) <= 256 and user.isascii()))  # type: ignore[arg-type]
        and (timestamp is None or (type(timestamp) is datetime and timestamp.tzinfo is UTC))  # type: ignore[attr-defined]
        and type(fields) is dict
    ):
        return False
    # One type test per value, and the storable-text check only for what is not ASCII (rare):
    # this loop runs for every imported event.
    for name, value in fields.items():  # type: ignore[attr-defined]
        if type(name) is not str or not (name.isascii() or _is_storable_text(name)):
            return False
        kind = type(value)
        if kind is str or kind is Text:
            if not (value.isascii() or _is_storable_text(value)):  # type: ignore[union-attr]
                return False
        elif kind is float:
            if not math.isfinite(value):  # type: ignore[arg-type]
                return False
        elif kind is not int and kind is not bool:
            return False
    return True


EventFields = Annotated[
    dict[str, object],
    PlainValidator(_validate_fields),
    PlainSerializer(
        lambda fields: {k: _encode_value(v) for k, v in fields.items()},
        return_type=dict[str, object],
        when_used="json",
    ),
]


FieldValue = Annotated[
    bool | int | float | str | datetime,
    PlainValidator(_validate_field_value),
    PlainSerializer(_encode_value, return_type=object, when_used="json"),
]
"""One typed field value; see :class:`FieldKind`."""


def _validate_timestamp(value: object) -> datetime | None:
    """Parse and normalise a timestamp to UTC; naive values are refused."""
    if value is None:
        return None
    if isinstance(value, str):
        value = datetime.fromisoformat(value)
    if not isinstance(value, datetime):
        raise ValueError(f"timestamp must be a datetime, got {type(value).__name__}")
    return to_utc(value)


UtcTimestamp = Annotated[
    datetime | None,
    PlainValidator(_validate_timestamp),
    PlainSerializer(lambda v: None if v is None else v.isoformat(), return_type=str | None),
]


class Event(BaseModel):
    """One typed fact from one source.

    Attributes
    ----------
    source : str
        The importer's name (``"edx"``).
    type : str
        The event type within the source (``"problem_check"``).
    timestamp : datetime or None
        When it happened, tz-aware UTC; ``None`` for a static property.
    fields : dict of str to FieldValue
        Typed values; see :class:`FieldKind`.
    user : str or None
        Whose event it is when the source says so (an edX log names its
        user); ``None`` lets the importing caller assign the store's user.
    id : str
        BLAKE2b-128 hex digest of the canonical content (user, source, type,
        timestamp, fields). Computed, never supplied: equal content gives an
        equal id, which is what makes re-imports add nothing.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    source: str = Field(min_length=1, max_length=64)
    type: str = Field(min_length=1, max_length=256)
    timestamp: UtcTimestamp = None
    fields: EventFields = Field(default_factory=dict)
    user: str | None = Field(default=None, min_length=1, max_length=256)

    @classmethod
    def make(
        cls,
        source: str,
        type: str,
        timestamp: datetime | None,
        fields: dict[str, object],
        user: str | None,
    ) -> Event:
        """``Event(source=..., type=..., timestamp=..., fields=..., user=...)`` at a fraction of its cost.

        For values validation would hand back unchanged, validating is pure
        overhead (a third of an edX line's parse). This checks exactly that in
        plain Python — ``source``, ``type`` and ``user`` (or ``None``) plain
        ASCII ``str`` within their length bounds (non-ASCII text goes to the
        full check, which refuses lone surrogates), ``timestamp`` ``None`` or a
        datetime whose ``tzinfo`` is ``UTC``, field names plain ``str`` and
        values of the exact types ``str``, ``int``, ``bool``, :class:`Text` or a
        finite ``float`` — and builds the event from them directly (the
        mapping copied, as validation copies it). Anything else goes through
        the constructor's full validation, so the result, and any
        ``ValidationError``, are what ``Event(...)`` gives.
        """
        if canonical_parts(source, type, timestamp, fields, user):
            event = cls.__new__(cls)
            object.__setattr__(event, "__dict__", {
                "source": source, "type": type, "timestamp": timestamp, "fields": dict(fields), "user": user,
            })
            _set_fields_set(event, set(_EVENT_FIELDS))
            _set_extra(event, None)
            _set_private(event, None)
            return event
        return cls(source=source, type=type, timestamp=timestamp, fields=fields, user=user)

    @cached_property
    def id(self) -> str:
        ts_us = None if self.timestamp is None else timestamp_us(self.timestamp)
        return content_id(self.user, self.source, self.type, ts_us, encode_fields(self.fields))

    def with_user(self, user: str) -> Event:
        """The same event attributed to ``user`` (its id changes with it)."""
        copy = self.model_copy(update={"user": user})
        copy.__dict__.pop("id", None)  # the cached id belonged to the old user
        return copy


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MICROSECOND = timedelta(microseconds=1)


def timestamp_us(timestamp: datetime) -> int:
    """Whole microseconds since the Unix epoch (UTC) of an aware datetime."""
    return (timestamp - _EPOCH) // _MICROSECOND


#: BLAKE2b with a 16-byte digest, nothing hashed yet: :func:`content_id` starts each hash from a copy.
_BLAKE2B_128 = hashlib.blake2b(digest_size=16)


def content_id(
    user: str | None,
    source: str,
    type_: str,
    ts_us: int | None,
    fields_json: str,
) -> str:
    """BLAKE2b-128 of an event's canonical content.

    The content is ``user ␟ source ␟ type ␟ microseconds since the epoch ␟
    fields``, with ``fields_json`` from :func:`encode_fields`; static events
    have an empty time.
    """
    ts = "" if ts_us is None else str(ts_us)
    canonical = "\x1f".join((user or "", source, type_, ts, fields_json))
    digest = _BLAKE2B_128.copy()  # half the cost of hashlib.blake2b(..., digest_size=16), same state
    digest.update(canonical.encode("utf-8"))
    return digest.hexdigest()

class Dataset(BaseModel):
    """One user's events in the half-open interval ``[start, end)``, oldest first.

    Static events (no timestamp) are always included and come first. An
    *instance dataset* is a Dataset holding one training example's events.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    user: str
    start: UtcTimestamp = None
    end: UtcTimestamp = None
    events: tuple[Event, ...] = ()

    @model_validator(mode="after")
    def _check_interval(self) -> Dataset:
        if self.start is not None and self.end is not None and self.start > self.end:
            raise ValueError(f"dataset interval is reversed: {self.start} > {self.end}")
        return self

    def __len__(self) -> int:
        return len(self.events)

    def __iter__(self) -> Iterator[Event]:  # type: ignore[override]
        return iter(self.events)

    def window(self, start: datetime | None = None, end: datetime | None = None) -> Dataset:
        """The events with ``start <= timestamp < end`` (static events kept)."""
        start = self.start if start is None else to_utc(start)
        end = self.end if end is None else to_utc(end)
        kept = tuple(
            e
            for e in self.events
            if e.timestamp is None
            or ((start is None or e.timestamp >= start) and (end is None or e.timestamp < end))
        )
        return Dataset(user=self.user, start=start, end=end, events=kept)

    def select(self, source: str | None = None, type: str | None = None) -> list[Event]:
        """The events of one source and/or type."""
        return [
            e
            for e in self.events
            if (source is None or e.source == source) and (type is None or e.type == type)
        ]

    @property
    def first_time(self) -> datetime | None:
        times = [e.timestamp for e in self.events if e.timestamp is not None]
        return min(times) if times else None

    @property
    def last_time(self) -> datetime | None:
        times = [e.timestamp for e in self.events if e.timestamp is not None]
        return max(times) if times else None

    @classmethod
    def of(cls, user: str, events: Iterable[Event], **interval: datetime | None) -> Dataset:
        """Build a dataset, sorting events (static first, then by time)."""
        ordered = sorted(
            events,
            key=lambda e: (e.timestamp is not None, e.timestamp or datetime.min.replace(tzinfo=UTC)),
        )
        return cls(user=user, events=tuple(ordered), **interval)


class FeatureKind(enum.StrEnum):
    """How a feature is encoded in the matrix."""

    NUMERIC = "numeric"
    BOOL = "bool"
    CATEGORICAL = "categorical"


class FeatureSpec(BaseModel):
    """A named feature with its declared type and range.

    The range ``[low, high]`` of a numeric feature is public: it bounds the
    private median search (thesis algorithm 1) and the binning. A categorical
    feature lists its categories; its value in a matrix is the category index.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str = Field(min_length=1, max_length=128)
    kind: FeatureKind = FeatureKind.NUMERIC
    low: float | None = None
    high: float | None = None
    categories: tuple[str, ...] = ()
    description: str = ""
    #: True when the range or the categories were read from the rows themselves
    #: (``infer_feature_specs(..., ranges="from-data")``): they are then not public,
    #: and a model trained with this spec is not private. Left out of the dumped
    #: form when False, so the documents of public specs are what they always were.
    from_data: bool = False

    @model_serializer(mode="wrap")
    def _omit_public_flag(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        data = handler(self)
        if isinstance(data, dict) and not self.from_data:
            data.pop("from_data", None)
        return data

    @model_validator(mode="after")
    def _check_range(self) -> FeatureSpec:
        if self.kind is FeatureKind.NUMERIC:
            if self.low is None or self.high is None:
                raise ValueError(f"numeric feature {self.name!r} needs a range [low, high]")
            if not (math.isfinite(self.low) and math.isfinite(self.high)) or self.low >= self.high:
                raise ValueError(
                    f"feature {self.name!r} has an empty or infinite range [{self.low}, {self.high}]"
                )
        if self.kind is FeatureKind.BOOL:
            object.__setattr__(self, "low", 0.0)
            object.__setattr__(self, "high", 1.0)
        if self.kind is FeatureKind.CATEGORICAL:
            if len(self.categories) < 2 or len(set(self.categories)) != len(self.categories):
                raise ValueError(
                    f"categorical feature {self.name!r} needs two or more distinct categories"
                )
        return self

    def encode(self, value: object) -> float:
        """The matrix value of one raw feature value (category index, 0/1, or the number)."""
        if self.kind is FeatureKind.CATEGORICAL:
            try:
                return float(self.categories.index(str(value)))
            except ValueError:
                raise ValueError(
                    f"feature {self.name!r}: {value!r} is not one of {list(self.categories)}"
                ) from None
        if self.kind is FeatureKind.BOOL:
            return 1.0 if value else 0.0
        number = float(value)  # type: ignore[arg-type]
        if not math.isfinite(number):
            raise ValueError(f"feature {self.name!r}: value {value!r} is not finite")
        return number


class FeatureVector(BaseModel):
    """One example: feature values in spec order, and its label when known."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    entity: str
    values: tuple[float, ...]
    label: float | int | bool | str | None = None

    @field_validator("values")
    @classmethod
    def _finite(cls, values: tuple[float, ...]) -> tuple[float, ...]:
        for v in values:
            if not math.isfinite(v):
                raise ValueError(f"feature value {v!r} is not finite")
        return values


class FeatureMatrix(BaseModel):
    """Rows of :class:`FeatureVector` sharing one list of :class:`FeatureSpec`."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    features: tuple[FeatureSpec, ...]
    rows: tuple[FeatureVector, ...] = ()

    @model_validator(mode="after")
    def _check_widths(self) -> FeatureMatrix:
        width = len(self.features)
        for row in self.rows:
            if len(row.values) != width:
                raise ValueError(
                    f"row {row.entity!r} has {len(row.values)} values for {width} features"
                )
        return self

    @property
    def feature_names(self) -> list[str]:
        return [f.name for f in self.features]

    def __len__(self) -> int:
        return len(self.rows)

    def to_numpy(self) -> tuple[np.ndarray, np.ndarray | None]:
        """``(X, y)``: X of shape (n_rows, n_features), y of labels or ``None`` if unlabelled."""
        import numpy as np  # the learner's side: the services' start-up loads no NumPy

        X = np.asarray([r.values for r in self.rows], dtype=float).reshape(
            len(self.rows), len(self.features)
        )
        labels = [r.label for r in self.rows]
        if all(label is None for label in labels):
            return X, None
        if any(label is None for label in labels):
            raise ValueError("some rows are labelled and some are not")
        return X, np.asarray(labels)

    @classmethod
    def from_rows(cls, features: Sequence[FeatureSpec], rows: Iterable[FeatureVector]) -> FeatureMatrix:
        return cls(features=tuple(features), rows=tuple(rows))

    def iter_dicts(self) -> Iterator[dict[str, Any]]:
        """Each row as ``{"entity", <feature>..., "label"}``, for CSV writers."""
        names = self.feature_names
        for row in self.rows:
            yield {"entity": row.entity, **dict(zip(names, row.values, strict=True)), "label": row.label}
