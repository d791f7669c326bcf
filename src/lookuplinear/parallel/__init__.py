"""Training past one process: ``DistributedDataParallel`` for models with lookuplinear tables.

``lookuplinear.parallel.DistributedDataParallel`` is PyTorch's class, with the row-sparse
gradients of ``LookupLinear(sparse=True)`` / ``LookupCollection(sparse=True)`` tables all-reduced
too (PyTorch's reducer expects sparse gradients only from ``nn.Embedding`` and
``nn.EmbeddingBag``). Sharded tables: ``shard_collection`` gives a ``LookupCollection``'s
tables to TorchRec's ``DistributedModelParallel`` and ``gather_collection`` brings them back;
see docs/distributed.md.
"""

from ._ddp import DistributedDataParallel, sparse_tables
from ._torchrec import TESTED_TORCHREC, gather_collection, require_torchrec, shard_collection

__all__ = [
    "TESTED_TORCHREC",
    "DistributedDataParallel",
    "gather_collection",
    "require_torchrec",
    "shard_collection",
    "sparse_tables",
]
