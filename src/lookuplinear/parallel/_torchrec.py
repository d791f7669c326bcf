"""Sharded tables on TorchRec: a ``LookupCollection`` sharded by ``DistributedModelParallel``.

:func:`shard_collection` turns a collection into TorchRec's ``EmbeddingBagCollection``
(``LookupCollection.to_torchrec``), attaches a fused optimizer applied in backward, plans a
sharding (table-wise on the CPU; row-wise too on GPUs), wraps it in ``DistributedModelParallel``
and copies the collection's values into the shards (sharding draws the tables anew).
:func:`gather_collection` brings the trained shards back to one process as a
``LookupCollection`` (``LookupCollection.from_torchrec`` on the gathered tables).
"""

from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from ..errors import InputValueError

__all__ = ["TESTED_TORCHREC", "gather_collection", "require_torchrec", "shard_collection"]

#: the TorchRec release these functions are tested with (torch 2.13.0, fbgemm-gpu-cpu 1.8.0)
TESTED_TORCHREC = "1.8"
_OPTIMIZERS = ("sgd", "adagrad", "rowwise_adagrad")
_SHARDINGS = ("table_wise", "row_wise", "column_wise")


def require_torchrec() -> Any:
    """The ``torchrec`` module, if its release is the tested one.

    Raises
    ------
    ImportError
        TorchRec is missing, or of another release (its APIs change between releases).
    """
    try:
        import torchrec
    except ImportError as exc:
        raise ImportError(
            "this needs TorchRec: pip install 'lookuplinear[torchrec]' && pip install --no-deps "
            "torchrec==1.8.0 (see docs/distributed.md)."
        ) from exc
    version = getattr(torchrec, "__version__", "unknown")
    if not str(version).startswith(TESTED_TORCHREC + "."):
        raise ImportError(
            f"lookuplinear's TorchRec support is tested with torchrec {TESTED_TORCHREC}.x "
            f"(fbgemm-gpu-cpu 1.8.0, torch 2.13.0); found torchrec {version}. Install "
            "torchrec==1.8.0 (see docs/distributed.md)."
        )
    return torchrec


class _Tables(nn.Module):
    """The collection's tables as one TorchRec module: ``KeyedJaggedTensor`` -> pooled values,
    their columns in the order of ``embedding_names`` (the collection's; a sharded EBC's
    ``KeyedTensor`` holds them in its own order: tables grouped by the process that holds
    them, and by pooling and dtype)."""

    def __init__(self, ebc: nn.Module, embedding_names: list[str]) -> None:
        super().__init__()
        self.ebc = ebc
        self.embedding_names = list(embedding_names)

    def forward(self, kjt: Any) -> torch.Tensor:
        pooled = self.ebc(kjt)
        if list(pooled.keys()) == self.embedding_names:
            out: torch.Tensor = pooled.values()
            return out
        by_key = pooled.to_dict()
        return torch.cat([by_key[k] for k in self.embedding_names], dim=1)


def shard_collection(collection: Any, *, sharding: str = "table_wise",
                     optimizer: str = "rowwise_adagrad", lr: float = 0.01, eps: float = 1e-8,
                     device: torch.device | str | None = None,
                     is_weighted: bool | None = None) -> nn.Module:
    """``collection``'s tables sharded over the default process group by TorchRec.

    Call it in every process with the same collection (same values); returns TorchRec's
    ``DistributedModelParallel`` around a module that maps a ``KeyedJaggedTensor`` (this
    process's batch, ``KeyedBags.to_kjt()``) to the pooled outputs ``(N, sum of dims)``, feature
    after feature as ``LookupCollection`` orders them. ``optimizer`` (TorchRec's ``SGD``,
    ``Adagrad`` or ``RowWiseAdagrad``, FBGEMM's fused kernels) updates the tables in backward.
    A sharded table averages the processes' gradients, as DDP does. ``is_weighted``: as
    ``LookupCollection.to_torchrec`` takes it (needed for a collection built with
    ``is_weighted=None``: whether the batches' weights scale their rows).

    Raises
    ------
    InputValueError
        No default process group; an unknown ``sharding`` or ``optimizer``; ``row_wise`` or
        ``column_wise`` on the CPU, which TorchRec runs only on GPUs; what ``to_torchrec``
        refuses (``is_weighted`` unchosen, a ``mean`` table in a weighted collection); a
        table whose ``embedding_dim`` is not a multiple of 4 (FBGEMM's kernels need one).
    ImportError
        TorchRec missing or not the tested release.
    """
    require_torchrec()
    if not dist.is_available() or not dist.is_initialized():
        raise InputValueError(
            "shard_collection needs the default process group: call "
            "torch.distributed.init_process_group('gloo') (or 'nccl') in every process first."
        )
    if sharding == "data_parallel":
        raise InputValueError(
            "sharding='data_parallel' replicates the tables and leaves their gradients to DDP's "
            "all-reduce, which comes after the update shard_collection applies in the backward: "
            "each process would train its own copy on its own batches. Use "
            "sharding='table_wise' (or lookuplinear.parallel.DistributedDataParallel to "
            "replicate the tables)."
        )
    if sharding not in _SHARDINGS:
        raise InputValueError(f"sharding must be one of {_SHARDINGS}, got {sharding!r}.")
    if optimizer not in _OPTIMIZERS:
        raise InputValueError(f"optimizer must be one of {_OPTIMIZERS}, got {optimizer!r}.")
    device = torch.device(device or collection.table_groups[0].device)
    if device.type == "cpu" and sharding in ("row_wise", "column_wise"):
        raise InputValueError(
            f"sharding={sharding!r} runs on GPUs only in TorchRec; on the CPU use "
            "sharding='table_wise'."
        )
    narrow = {t.name: t.embedding_dim for t in collection.tables if t.embedding_dim % 4}
    if narrow:  # TorchRec asserts it while building one process's shards, the others then wait
        raise InputValueError(
            f"shard_collection: tables {narrow} (name: embedding_dim) have an embedding_dim "
            "that is not a multiple of 4, which FBGEMM's fused kernels (every sharded table's) "
            "need. Build these tables with an embedding_dim divisible by 4, or train the "
            "collection with lookuplinear.parallel.DistributedDataParallel instead."
        )
    from torchrec.distributed.embeddingbag import EmbeddingBagCollectionSharder
    from torchrec.distributed.model_parallel import DistributedModelParallel
    from torchrec.distributed.planner import (
        EmbeddingShardingPlanner,
        ParameterConstraints,
        Topology,
    )
    from torchrec.optim.apply_optimizer_in_backward import apply_optimizer_in_backward
    from torchrec.optim.optimizers import SGD
    from torchrec.optim.rowwise_adagrad import RowWiseAdagrad

    ebc = collection.to_torchrec(is_weighted=is_weighted)
    start = {f"ebc.{k}": v.detach().clone() for k, v in ebc.state_dict().items()}
    opt_class: Any = {"sgd": SGD, "adagrad": torch.optim.Adagrad,
                      "rowwise_adagrad": RowWiseAdagrad}[optimizer]
    args: dict[str, Any] = {"lr": lr} if optimizer == "sgd" else {"lr": lr, "eps": eps}
    apply_optimizer_in_backward(opt_class, ebc.parameters(), args)
    model = _Tables(ebc, collection.embedding_names)
    constraint = ParameterConstraints(sharding_types=[sharding])
    planner = EmbeddingShardingPlanner(
        topology=Topology(world_size=dist.get_world_size(), compute_device=device.type),
        constraints={t.name: constraint for t in collection.tables})
    sharders: list[Any] = [EmbeddingBagCollectionSharder()]
    plan = planner.collective_plan(model, sharders, dist.GroupMember.WORLD)
    dmp = DistributedModelParallel(model, device=device, plan=plan, sharders=sharders)
    with torch.no_grad():  # sharding draws the tables anew: this process's shards of ours
        for key, value in dmp.state_dict().items():
            for local in getattr(value, "local_shards", lambda: [])():
                rows, cols = local.metadata.shard_offsets
                n, d = local.metadata.shard_sizes
                local.tensor.copy_(start[key][rows:rows + n, cols:cols + d])
    return dmp


def gather_collection(dmp: nn.Module, like: Any, *, dst: int = 0,
                      sparse: bool = True) -> Any:
    """The trained tables of :func:`shard_collection`'s module as a ``LookupCollection`` on rank
    ``dst`` (None elsewhere). Call it in every process. ``like``: a collection with the same
    tables (its values are not used); the result has its ``is_weighted``."""
    from ..modules.collection import LookupCollection

    tables = {}
    for key, value in dmp.state_dict().items():
        name = key.split("ebc.", 1)[1]
        full = torch.zeros(value.size(), dtype=value.dtype) if dist.get_rank() == dst else None
        value.gather(dst=dst, out=full)
        if full is not None:
            tables[name] = full
    if dist.get_rank() != dst:
        return None
    back = LookupCollection.from_torchrec(like.to_torchrec(is_weighted=bool(like.is_weighted)),
                                          state_dict=tables, sparse=sparse)
    back.is_weighted = like.is_weighted
    return back
