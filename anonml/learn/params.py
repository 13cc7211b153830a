"""Hyperparameter checks for the learning estimators, on scikit-learn's public API only.

scikit-learn validates its own estimators' parameters through private helpers
(``sklearn.utils._param_validation``, ``sklearn.base._fit_context``) whose
signatures change between releases. The estimators here declare their
constraints in a class attribute ``param_checks`` (parameter name → tuple of
accepted :class:`Interval` / :class:`Options` / types / ``None``) and call
:func:`check_params` at the top of ``fit``; the error names the estimator, the
parameter, the value and what was accepted, like scikit-learn's own
``InvalidParameterError`` (a ``ValueError``, which is what its estimator checks
expect). Their ``__init__`` stores the hyperparameters with :func:`store_params`.
"""

from __future__ import annotations

import functools
import inspect
import numbers
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal, TypeVar

import numpy as np

__all__ = ["Interval", "Options", "RANDOM_STATE", "check_params", "checked_fit", "store_params"]

T = TypeVar("T")


@dataclass(frozen=True)
class Interval:
    """A number of type ``kind`` in ``[low, high]`` (ends open or closed as ``closed`` says).

    ``None`` for an end means unbounded; booleans are never numbers here.
    """

    kind: type
    low: float | None
    high: float | None
    closed: Literal["left", "right", "both", "neither"] = "both"

    def accepts(self, value: object) -> bool:
        if isinstance(value, bool) or not isinstance(value, self.kind):
            return False
        v = float(value)  # type: ignore[arg-type]
        if np.isnan(v):
            return False
        if self.low is not None and (v < self.low or (v == self.low and self.closed in ("right", "neither"))):
            return False
        return self.high is None or not (
            v > self.high or (v == self.high and self.closed in ("left", "neither"))
        )

    def __str__(self) -> str:
        left = "[" if self.closed in ("left", "both") else "("
        right = "]" if self.closed in ("right", "both") else ")"
        low = "-inf" if self.low is None else f"{self.low:g}"
        high = "inf" if self.high is None else f"{self.high:g}"
        noun = "an int" if self.kind is numbers.Integral else "a float"
        return f"{noun} in {left}{low}, {high}{right}"


@dataclass(frozen=True)
class Options:
    """One of a fixed set of strings."""

    values: frozenset[str]

    def accepts(self, value: object) -> bool:
        return isinstance(value, str) and value in self.values

    def __str__(self) -> str:
        return "a str among {" + ", ".join(repr(v) for v in sorted(self.values)) + "}"


#: What ``random_state`` accepts everywhere: None, an int, a legacy RandomState or a Generator.
RANDOM_STATE: tuple[Any, ...] = (
    None,
    Interval(numbers.Integral, 0, 2**32 - 1, closed="both"),
    np.random.RandomState,
    np.random.Generator,
)


def _accepts(constraint: Any, value: object) -> bool:
    if constraint is None:
        return value is None
    if isinstance(constraint, (Interval, Options)):
        return constraint.accepts(value)
    if isinstance(constraint, type):
        return isinstance(value, constraint)
    raise TypeError(f"unknown parameter constraint {constraint!r}")


def _describe(constraint: Any) -> str:
    if constraint is None:
        return "None"
    if isinstance(constraint, type):
        return f"an instance of {constraint.__name__}"
    return str(constraint)


def check_params(estimator: Any, checks: Mapping[str, tuple[Any, ...]] | None = None) -> None:
    """Check every constrained hyperparameter of ``estimator`` (``get_params(deep=False)``).

    Parameters
    ----------
    estimator : scikit-learn estimator
    checks : mapping, optional
        Parameter name → accepted constraints; default ``type(estimator).param_checks``.

    Raises
    ------
    ValueError
        Naming the estimator, the parameter, its value and every accepted form.
    """
    checks = checks if checks is not None else type(estimator).param_checks
    params = estimator.get_params(deep=False)
    for name, constraints in checks.items():
        value = params[name]
        if not any(_accepts(c, value) for c in constraints):
            accepted = " or ".join(_describe(c) for c in constraints)
            raise ValueError(
                f"The {name!r} parameter of {type(estimator).__name__} must be {accepted}. "
                f"Got {value!r} instead."
            )


def checked_fit(fit: Callable[..., T]) -> Callable[..., T]:
    """Decorate an estimator's ``fit`` so that :func:`check_params` runs before it."""

    @functools.wraps(fit)
    def wrapper(self: Any, *args: Any, **kwargs: Any) -> T:
        check_params(self)
        return fit(self, *args, **kwargs)

    return wrapper


@functools.cache
def _init_parameter_names(cls: type) -> tuple[str, ...]:
    """The names of ``cls.__init__``'s parameters after ``self``: what ``get_params`` reads back."""
    parameters = list(inspect.signature(cls.__init__).parameters.values())[1:]
    variadic = [p.name for p in parameters if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
    if variadic:
        # scikit-learn refuses them too: get_params and clone need every hyperparameter named.
        raise TypeError(f"{cls.__name__}.__init__ takes *{variadic[0]}; name each hyperparameter")
    return tuple(p.name for p in parameters)


def store_params(estimator: Any, given: Mapping[str, Any]) -> None:
    """Store each argument of ``estimator.__init__`` unchanged under its own name.

    scikit-learn's estimator contract: ``__init__`` keeps every hyperparameter as
    given and checks nothing (:func:`check_params` does, in ``fit``);
    ``get_params``, ``clone`` and the repr read them back by the names of the
    signature. Call it first in ``__init__``, as ``store_params(self, locals())``:
    the names stored are the signature's, so a new hyperparameter needs no line of
    its own and none can be left out.

    Parameters
    ----------
    estimator : scikit-learn estimator
    given : mapping
        The constructor's ``locals()``, holding at least every parameter of the signature.
    """
    for name in _init_parameter_names(type(estimator)):
        setattr(estimator, name, given[name])
