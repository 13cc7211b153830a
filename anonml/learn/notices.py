"""Warnings the learning code raises when a fit runs but its result deserves doubt.

They are ``UserWarning`` subclasses, so ``warnings.simplefilter("error",
NotPrivateWarning)`` turns a non-private fit into an error in a pipeline that
must stay private.
"""

from __future__ import annotations

__all__ = ["NotPrivateWarning", "SmallGroupWarning", "DataWarning"]


class NotPrivateWarning(UserWarning):
    """The fit read something from the raw rows outside the LDP mechanisms.

    Data-derived feature ranges or categories (``ranges="from-data"``, a
    :class:`~anonml.model.FeatureSpec` with ``from_data=True``), or model
    selection by scikit-learn's routines (searches, cross-validation, curves),
    which score candidates on raw rows and fit each row many times.
    """


class SmallGroupWarning(UserWarning):
    """Report partitions so small that the LDP noise swamps their histograms."""


class DataWarning(UserWarning):
    """The rows do not fit their declared specs: values outside a public range, or a constant column.

    Values outside ``[low, high]`` are clipped into it (as a peer's client
    does before binning) and counted per feature; a column holding one value
    carries nothing a model can use.
    """
