"""lookuplinear: an embedding layer is a linear layer, computed as a lookup.

``LookupLinear(x)`` equals ``nn.Linear`` on the one-hot / multi-hot / sparse matrix of ``x``,
without ever building that matrix.
"""

from typing import TYPE_CHECKING

from ._lazy import lazy_names

if TYPE_CHECKING:  # the names below, for type checkers; at run time each loads on first use
    from . import optim, parallel
    from .check import EquivalenceError, EquivalenceReport, check_equivalence
    from .errors import (
        CheckpointNotFoundError,
        DeviceMismatchError,
        DtypeMismatchError,
        FusedAccumulationWarning,
        InputTypeError,
        InputValueError,
        LayoutError,
        LookupIndexError,
        LookupLinearError,
        ModelFileError,
        ModeNotSupportedError,
        NotLinearError,
        OffsetsError,
        PaddingIdxError,
        SizeError,
        SizeTypeError,
        StateDictError,
        TableShapeError,
        TrainingDivergedError,
        UnknownTokenError,
    )
    from .functional import lookup_linear
    from .ids.hashing import hash_ids
    from .ids.idmap import IdMap
    from .ids.vocab import Vocab
    from .modules.collection import LookupCollection, TableConfig
    from .modules.embedding import Embedding
    from .modules.embedding_bag import EmbeddingBag
    from .modules.layer import LookupLinear
    from .quant.collection import QuantizedLookupCollection
    from .quant.layer import QuantizedEmbeddingBag, QuantizedLookupLinear
    from .reference import dense_reference, densify
    from .sparse.bags import Bags
    from .sparse.dataset import KeyedBagsDataset
    from .sparse.keyed import KeyedBags, KeyedTensor
    from .storage.checkpoint import Checkpoint
    from .storage.tables import TableStorage

#: public name -> the module that defines it. ``import lookuplinear`` loads none of them (nor
#: torch): the command line's ``--help`` and the names a program never uses cost nothing
_EXPORTS: dict[str, str] = {
    "Bags": ".sparse.bags",
    "Checkpoint": ".storage.checkpoint",
    "CheckpointNotFoundError": ".errors",
    "DeviceMismatchError": ".errors",
    "DtypeMismatchError": ".errors",
    "Embedding": ".modules.embedding",
    "EmbeddingBag": ".modules.embedding_bag",
    "EquivalenceError": ".check",
    "EquivalenceReport": ".check",
    "FusedAccumulationWarning": ".errors",
    "IdMap": ".ids.idmap",
    "InputTypeError": ".errors",
    "InputValueError": ".errors",
    "KeyedBags": ".sparse.keyed",
    "KeyedBagsDataset": ".sparse.dataset",
    "KeyedTensor": ".sparse.keyed",
    "LayoutError": ".errors",
    "LookupCollection": ".modules.collection",
    "LookupIndexError": ".errors",
    "LookupLinear": ".modules.layer",
    "LookupLinearError": ".errors",
    "ModeNotSupportedError": ".errors",
    "ModelFileError": ".errors",
    "NotLinearError": ".errors",
    "OffsetsError": ".errors",
    "PaddingIdxError": ".errors",
    "SizeError": ".errors",
    "SizeTypeError": ".errors",
    "StateDictError": ".errors",
    "TableShapeError": ".errors",
    "QuantizedEmbeddingBag": ".quant.layer",
    "QuantizedLookupCollection": ".quant.collection",
    "QuantizedLookupLinear": ".quant.layer",
    "TableConfig": ".modules.collection",
    "TableStorage": ".storage.tables",
    "TrainingDivergedError": ".errors",
    "UnknownTokenError": ".errors",
    "Vocab": ".ids.vocab",
    "check_equivalence": ".check",
    "dense_reference": ".reference",
    "densify": ".reference",
    "hash_ids": ".ids.hashing",
    "lookup_linear": ".functional",
    "optim": ".optim",
    "parallel": ".parallel",
}


__getattr__, __dir__ = lazy_names(__name__, _EXPORTS, frozenset({"optim", "parallel"}))


__version__ = "0.1.0"

__all__ = [
    "Bags",
    "Checkpoint",
    "CheckpointNotFoundError",
    "DeviceMismatchError",
    "DtypeMismatchError",
    "Embedding",
    "EmbeddingBag",
    "EquivalenceError",
    "EquivalenceReport",
    "FusedAccumulationWarning",
    "IdMap",
    "InputTypeError",
    "InputValueError",
    "KeyedBags",
    "KeyedBagsDataset",
    "KeyedTensor",
    "LayoutError",
    "LookupCollection",
    "LookupIndexError",
    "LookupLinear",
    "LookupLinearError",
    "ModeNotSupportedError",
    "ModelFileError",
    "NotLinearError",
    "OffsetsError",
    "PaddingIdxError",
    "QuantizedEmbeddingBag",
    "QuantizedLookupCollection",
    "QuantizedLookupLinear",
    "SizeError",
    "SizeTypeError",
    "StateDictError",
    "TableConfig",
    "TableShapeError",
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
