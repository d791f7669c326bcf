"""lookuplinear: an embedding layer is a linear layer, computed as a lookup.

``LookupLinear(x)`` equals ``nn.Linear`` on the one-hot / multi-hot / sparse matrix of ``x``,
without ever building that matrix.
"""

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the names below, for type checkers; at run time each loads on first use
    from . import optim, parallel
    from ._bags import Bags
    from ._check import EquivalenceError, EquivalenceReport, check_equivalence
    from ._checkpoint import Checkpoint
    from ._collection import LookupCollection, TableConfig
    from ._dataset import KeyedBagsDataset
    from ._embedding_bag import EmbeddingBag
    from ._hashing import hash_ids
    from ._idmap import IdMap
    from ._keyed import KeyedBags, KeyedTensor
    from ._layer import LookupLinear
    from ._quantized import QuantizedEmbeddingBag, QuantizedLookupLinear
    from ._quantized_collection import QuantizedLookupCollection
    from ._storage import TableStorage
    from ._vocab import Vocab
    from .errors import (
        CheckpointNotFoundError,
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

#: public name -> the module that defines it. ``import lookuplinear`` loads none of them (nor
#: torch): the command line's ``--help`` and the names a program never uses cost nothing
_EXPORTS: dict[str, str] = {
    "Bags": "._bags",
    "Checkpoint": "._checkpoint",
    "CheckpointNotFoundError": ".errors",
    "DeviceMismatchError": ".errors",
    "EmbeddingBag": "._embedding_bag",
    "EquivalenceError": "._check",
    "EquivalenceReport": "._check",
    "IdMap": "._idmap",
    "InputTypeError": ".errors",
    "InputValueError": ".errors",
    "KeyedBags": "._keyed",
    "KeyedBagsDataset": "._dataset",
    "KeyedTensor": "._keyed",
    "LookupCollection": "._collection",
    "LookupIndexError": ".errors",
    "LookupLinear": "._layer",
    "LookupLinearError": ".errors",
    "ModelFileError": ".errors",
    "QuantizedEmbeddingBag": "._quantized",
    "QuantizedLookupCollection": "._quantized_collection",
    "QuantizedLookupLinear": "._quantized",
    "TableConfig": "._collection",
    "TableStorage": "._storage",
    "TrainingDivergedError": ".errors",
    "UnknownTokenError": ".errors",
    "Vocab": "._vocab",
    "check_equivalence": "._check",
    "dense_reference": ".reference",
    "densify": ".reference",
    "hash_ids": "._hashing",
    "lookup_linear": ".functional",
    "optim": ".optim",
    "parallel": ".parallel",
}


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'lookuplinear' has no attribute {name!r}")
    loaded = importlib.import_module(module, __name__)
    value = loaded if name in ("optim", "parallel") else getattr(loaded, name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)


__version__ = "0.1.0"

__all__ = [
    "Bags",
    "Checkpoint",
    "CheckpointNotFoundError",
    "DeviceMismatchError",
    "EmbeddingBag",
    "EquivalenceError",
    "EquivalenceReport",
    "IdMap",
    "InputTypeError",
    "InputValueError",
    "KeyedBags",
    "KeyedBagsDataset",
    "KeyedTensor",
    "LookupCollection",
    "LookupIndexError",
    "LookupLinear",
    "LookupLinearError",
    "ModelFileError",
    "QuantizedEmbeddingBag",
    "QuantizedLookupCollection",
    "QuantizedLookupLinear",
    "TableConfig",
    "TableStorage",
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
    "parallel",
]
