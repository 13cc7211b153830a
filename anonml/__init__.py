"""AnonML: privacy-preserving machine learning on personal data (Cyphers 2017).

The public surface of the core library. Subpackages with their own surface:
:mod:`anonml.privacy`, :mod:`anonml.learn`, :mod:`anonml.crypto`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from anonml.lazy import lazy_exports

# Names are imported on first use (anonml.lazy), so that ``import anonml`` — and the
# CLI's start-up — does not pay for NumPy, pydantic and SQLAlchemy up front.
_EXPORTS: dict[str, str] = {
    "AnonMLError": "anonml.errors",
    "BudgetExceeded": "anonml.errors",
    "CryptoError": "anonml.errors",
    "DatasetNotFound": "anonml.errors",
    "InvalidToken": "anonml.errors",
    "PluginError": "anonml.errors",
    "PluginNotFound": "anonml.errors",
    "ProtocolError": "anonml.errors",
    "RecordError": "anonml.errors",
    "StoreError": "anonml.errors",
    "build_matrix": "anonml.featurize",
    "featurize_dataset": "anonml.featurize",
    "write_matrix": "anonml.featurize",
    "Dataset": "anonml.model",
    "Event": "anonml.model",
    "FeatureKind": "anonml.model",
    "FeatureMatrix": "anonml.model",
    "FeatureSpec": "anonml.model",
    "FeatureVector": "anonml.model",
    "FieldKind": "anonml.model",
    "Text": "anonml.model",
    "Featurizer": "anonml.plugins",
    "Importer": "anonml.plugins",
    "Instance": "anonml.plugins",
    "Instancer": "anonml.plugins",
    "PluginRef": "anonml.plugins",
    "available": "anonml.plugins",
    "create": "anonml.plugins",
    "load_class": "anonml.plugins",
    "EventStore": "anonml.store",
    "ImportReport": "anonml.store",
}

if TYPE_CHECKING:
    from anonml.errors import (
        AnonMLError,
        BudgetExceeded,
        CryptoError,
        DatasetNotFound,
        InvalidToken,
        PluginError,
        PluginNotFound,
        ProtocolError,
        RecordError,
        StoreError,
    )
    from anonml.featurize import build_matrix, featurize_dataset, write_matrix
    from anonml.model import (
        Dataset,
        Event,
        FeatureKind,
        FeatureMatrix,
        FeatureSpec,
        FeatureVector,
        FieldKind,
        Text,
    )
    from anonml.plugins import (
        Featurizer,
        Importer,
        Instance,
        Instancer,
        PluginRef,
        available,
        create,
        load_class,
    )
    from anonml.store import EventStore, ImportReport

__version__ = "0.1.0"

__all__ = [
    "AnonMLError",
    "BudgetExceeded",
    "CryptoError",
    "DatasetNotFound",
    "InvalidToken",
    "PluginError",
    "PluginNotFound",
    "ProtocolError",
    "RecordError",
    "StoreError",
    "Dataset",
    "Event",
    "FeatureKind",
    "FeatureMatrix",
    "FeatureSpec",
    "FeatureVector",
    "FieldKind",
    "Text",
    "Featurizer",
    "Importer",
    "Instance",
    "Instancer",
    "PluginRef",
    "available",
    "create",
    "load_class",
    "EventStore",
    "ImportReport",
    "build_matrix",
    "featurize_dataset",
    "write_matrix",
]


__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, globals())
