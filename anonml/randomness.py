"""Random generators from what a caller passes: one rule for the whole project.

Every place that turns a user-supplied ``seed``, ``random_state`` or ``rng``
into a :class:`numpy.random.Generator` goes through :func:`generator_from`
(STYLE "Randomness is injected"):

* ``None`` — a fresh generator seeded with 128 bits from the OS CSPRNG
  (:func:`secrets.randbits` reads ``os.urandom``): what real reports use;
* an int — ``np.random.default_rng(seed)``, so a seeded call reproduces;
* a :class:`numpy.random.Generator` — itself, its stream shared with the caller;
* a legacy :class:`numpy.random.RandomState` — a Generator seeded by four
  31-bit words drawn from it (scikit-learn callers may still pass one).

Functions whose parameter is typed ``rng: Generator | None`` call
:func:`resolve_rng`, which also refuses an int: a seed there is a caller's
mistake (the same seed reused for every report), not a convenience.
"""

from __future__ import annotations

import numbers
import secrets

import numpy as np

__all__ = ["SeedLike", "generator_from", "resolve_rng"]

#: What :func:`generator_from` accepts.
SeedLike = None | int | np.integer | np.random.Generator | np.random.RandomState


def generator_from(seed: SeedLike, *, name: str = "random_state") -> np.random.Generator:
    """A numpy Generator from ``seed`` (``None``: 128 bits from the OS CSPRNG).

    Parameters
    ----------
    seed : None, int, numpy Generator or RandomState
        See the module docstring for what each gives.
    name : str, default="random_state"
        The caller's parameter name, for the error message.

    Raises
    ------
    TypeError
        For anything else (a bool or float included), naming ``name``.
    """
    if seed is None:
        return np.random.default_rng(secrets.randbits(128))
    if isinstance(seed, np.random.Generator):
        return seed
    if isinstance(seed, np.random.RandomState):
        return np.random.default_rng(seed.randint(0, 2**31 - 1, size=4))
    if isinstance(seed, numbers.Integral) and not isinstance(seed, bool):
        return np.random.default_rng(int(seed))
    raise TypeError(
        f"{name} must be None, an int, a numpy Generator or a RandomState, got {type(seed).__name__}"
    )


def resolve_rng(rng: np.random.Generator | None, *, name: str = "rng") -> np.random.Generator:
    """``rng`` itself, or a generator seeded from the OS CSPRNG when ``None``.

    Real reports use ``None``; simulations and tests pass
    ``np.random.default_rng(seed)``.

    Raises
    ------
    TypeError
        When ``rng`` is neither ``None`` nor a Generator (an int seed included).
    """
    if rng is not None and not isinstance(rng, np.random.Generator):
        raise TypeError(f"{name} must be a numpy.random.Generator or None, got {type(rng).__name__}")
    return generator_from(rng, name=name)
