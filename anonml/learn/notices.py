"""Warnings the learning code raises when a fit runs but its result deserves doubt.

They are ``UserWarning`` subclasses, so ``warnings.simplefilter("error",
NotPrivateWarning)`` turns a non-private fit into an error in a pipeline that
must stay private.
"""

from __future__ import annotations

__all__ = ["NotPrivateWarning", "SmallGroupWarning"]


class NotPrivateWarning(UserWarning):
    """The fit read something from the raw rows outside the LDP mechanisms.

    Data-derived feature ranges (``ranges="from-data"``), or model selection by
    scikit-learn's search objects, which score every candidate on raw rows and
    fit each row many times.
    """


class SmallGroupWarning(UserWarning):
    """Report partitions so small that the LDP noise swamps their histograms."""
