"""lookuplinear: an embedding layer is a linear layer, computed as a lookup.

``LookupLinear(x)`` equals ``nn.Linear`` on the one-hot / multi-hot / sparse matrix of ``x``,
without ever building that matrix.
"""

from . import optim
from ._bags import Bags
from ._check import EquivalenceError, EquivalenceReport, check_equivalence
from ._collection import LookupCollection, TableConfig
from ._hashing import hash_ids
from ._idmap import IdMap
from ._keyed import KeyedBags, KeyedTensor
from ._layer import LookupLinear
from ._vocab import Vocab
from .errors import (
    DeviceMismatchError,
    InputTypeError,
    InputValueError,
    LookupIndexError,
    LookupLinearError,
    ModelFileError,
    TrainingDivergedError,
    UnknownTokenError,
)
from .functional import lookup_linear
from .reference import dense_reference, densify

__version__ = "0.1.0"

__all__ = [
    "Bags",
    "DeviceMismatchError",
    "EquivalenceError",
    "EquivalenceReport",
    "IdMap",
    "InputTypeError",
    "InputValueError",
    "KeyedBags",
    "KeyedTensor",
    "LookupCollection",
    "LookupIndexError",
    "LookupLinear",
    "LookupLinearError",
    "ModelFileError",
    "TableConfig",
    "TrainingDivergedError",
    "UnknownTokenError",
    "Vocab",
    "__version__",
    "check_equivalence",
    "dense_reference",
    "densify",
    "hash_ids",
    "lookup_linear",
    "optim",
]
