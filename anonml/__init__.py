"""AnonML: privacy-preserving machine learning on personal data (Cyphers 2017).

The public surface of the core library. Subpackages with their own surface:
:mod:`anonml.privacy`, :mod:`anonml.learn`, :mod:`anonml.crypto`.
"""

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
