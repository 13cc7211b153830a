"""store_params: an estimator's ``__init__`` keeps exactly its signature's arguments, as given."""

from __future__ import annotations

from typing import Any

import pytest
from sklearn.base import BaseEstimator, clone

from anonml.learn.params import store_params


class _Stored(BaseEstimator):
    def __init__(self, alpha: float = 1.0, *, names: list[str] | None = None) -> None:
        helper = "not a hyperparameter"  # a later local is not stored: only the signature's names are
        store_params(self, locals())
        del helper


class _Variadic(BaseEstimator):
    def __init__(self, alpha: float = 1.0, **extra: Any) -> None:
        store_params(self, locals())


def test_stores_every_signature_argument_unchanged_and_nothing_else() -> None:
    names = ["a", "b"]
    est = _Stored(alpha=0.25, names=names)
    assert est.alpha == 0.25
    assert est.names is names  # stored as given, not copied
    assert not hasattr(est, "helper") and not hasattr(est, "self")
    assert est.get_params() == {"alpha": 0.25, "names": names}
    assert clone(est).get_params() == {"alpha": 0.25, "names": names}


def test_refuses_a_variadic_signature() -> None:
    with pytest.raises(TypeError, match=r"_Variadic.__init__ takes \*extra"):
        _Variadic(alpha=2.0, beta=3.0)
