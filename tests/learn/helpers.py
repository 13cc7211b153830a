"""What the learner tests share: scikit-learn's estimator checks as a test of the calling module."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import pytest
from sklearn.base import BaseEstimator
from sklearn.utils.estimator_checks import parametrize_with_checks


def sklearn_contract(estimators: Sequence[BaseEstimator]) -> Callable[[Any, Any], None]:
    """``test_sklearn_contract``: every check of ``parametrize_with_checks`` on every estimator.

    Bind it in a test module as ``test_sklearn_contract = sklearn_contract([...])``.
    The checks fit toy data of a few dozen rows with no public ranges, so the
    notices that such a fit is not private or its groups are small are expected
    and ignored.
    """

    @parametrize_with_checks(list(estimators))
    @pytest.mark.filterwarnings("ignore::anonml.learn.notices.NotPrivateWarning")
    @pytest.mark.filterwarnings("ignore::anonml.learn.notices.SmallGroupWarning")
    def test_sklearn_contract(estimator: Any, check: Any) -> None:
        check(estimator)

    return test_sklearn_contract
