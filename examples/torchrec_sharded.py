"""Sharded training on TorchRec, and back: a LookupCollection as an EmbeddingBagCollection.

    torchrun --standalone --nproc_per_node 2 examples/torchrec_sharded.py [--steps 20]

Two tables (``user``; ``item``, read by two features) become TorchRec's
``EmbeddingBagCollection`` (``LookupCollection.to_torchrec()``), sharded table-wise over the
processes by ``DistributedModelParallel`` on the CPU (gloo), and trained with TorchRec's
``RowWiseAdagrad`` applied in backward (FBGEMM's fused ``EXACT_ROWWISE_ADAGRAD``). Each process
reads its own batch (``lookuplinear.parallel.shard_collection`` does the TorchRec part).
Afterwards rank 0 gathers the sharded tables as a ``LookupCollection``
(``lookuplinear.parallel.gather_collection``), checks them against one
process training lookuplinear's ``RowWiseAdagrad`` on the same batches (the script exits with
status 1 if the largest difference is over ``TOLERANCE`` or NaN), and trains the collection
on. ``--save PATH`` writes both sets of tables (safetensors).
"""

from __future__ import annotations

import argparse

import torch
import torch.distributed as dist
from torch import nn

from lookuplinear import KeyedBags, LookupCollection, TableConfig, optim
from lookuplinear.parallel import gather_collection, shard_collection

TABLES = [TableConfig("user", 1000, 8, ["user"], mode="mean"),
          TableConfig("item", 500, 8, ["item", "last_item"])]
BATCH, LR, EPS = 16, 0.1, 1e-8
TOLERANCE = 1e-5  # float32 tables: rounding (the order of the additions), with room to spare


def local_batch(step: int, rank: int) -> tuple[KeyedBags, torch.Tensor]:
    """Process ``rank``'s batch at ``step``: bags with duplicates, empty bags, shared IDs."""
    g = torch.Generator().manual_seed(1000 * step + rank)
    feats = {}
    for name, rows in (("user", 1000), ("item", 500), ("last_item", 500)):
        lengths = torch.randint(0, 4, (BATCH,), generator=g)
        ids = torch.randint(0, 40, (int(lengths.sum()),), generator=g) ** 2 % rows
        feats[name] = [t.tolist() for t in torch.split(ids, lengths.tolist())]
    return KeyedBags.from_dict(feats), torch.randn(BATCH, 24, generator=g)


def one_process(start: dict[str, torch.Tensor], steps: int, world: int,
                optimizer: str) -> LookupCollection:
    """lookuplinear alone: every process's batch, the mean of the processes' mean losses
    (TorchRec's sharded tables average the processes' gradients, as DDP does)."""
    coll = LookupCollection(TABLES, sparse=True)
    coll.load_state_dict(start)
    opt = (optim.SGD(coll.parameters(), lr=LR, fused=True) if optimizer == "sgd" else
           optim.RowWiseAdagrad(coll.parameters(), lr=LR, eps=EPS, fused=True))
    for step in range(steps):
        loss = sum(nn.functional.mse_loss(coll(kb).values(), y)
                   for kb, y in (local_batch(step, r) for r in range(world))) / world
        assert isinstance(loss, torch.Tensor)
        loss.backward()
        opt.step()
    return coll


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--save", default=None)
    p.add_argument("--optimizer", choices=("rowwise_adagrad", "sgd"), default="rowwise_adagrad")
    args = p.parse_args()
    dist.init_process_group("gloo")
    try:
        run(args)
    finally:
        dist.destroy_process_group()


def run(args: argparse.Namespace) -> None:
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    coll = LookupCollection(TABLES)  # the same tables in every process
    start = {k: v.clone() for k, v in coll.state_dict().items()}
    dmp = shard_collection(coll, sharding="table_wise", optimizer=args.optimizer, lr=LR,
                           eps=EPS, is_weighted=False)  # the batches have no weights
    for step in range(args.steps):
        kb, y = local_batch(step, rank)
        nn.functional.mse_loss(dmp(kb.to_kjt()), y).backward()  # the update runs in backward
    back = gather_collection(dmp, coll)  # rank 0: a LookupCollection of the trained tables
    failed = None
    if rank == 0:
        trained = {k: v.detach().clone() for k, v in back.state_dict().items()}
        alone = one_process(start, args.steps, world, args.optimizer)
        diff = float(torch.stack([(back.state_dict()[k] - alone.state_dict()[k]).abs().max()
                                  for k in start]).max())  # NaN if any is NaN
        print(f"TorchRec, {world} processes table-wise x {args.steps} steps of "
              f"{args.optimizer}: largest difference from lookuplinear in one process "
              f"{diff:.3g}")
        if not diff <= TOLERANCE:  # NaN fails too
            failed = (f"the difference {diff:.3g} is over the tolerance {TOLERANCE:g}: the "
                      f"sharded tables did not train as lookuplinear in one process does")
        opt = optim.RowWiseAdagrad(back.parameters(), lr=LR, eps=EPS)
        kb, y = local_batch(args.steps, 0)
        nn.functional.mse_loss(back(kb).values(), y).backward()
        opt.step()  # training goes on in lookuplinear
        if args.save:
            from safetensors.torch import save_file

            save_file({**{f"torchrec.{k}": v.contiguous() for k, v in trained.items()},
                       **{f"one.{k}": v.contiguous() for k, v in alone.state_dict().items()}},
                      args.save)
    dist.barrier()
    if failed:
        raise SystemExit(failed)


if __name__ == "__main__":
    main()
