"""Data-parallel training of a lookuplinear model, equal to one process on the whole batch.

    torchrun --standalone --nproc_per_node 2 examples/ddp.py [--steps 50] [--dtype float64]
                                                              [--collection]

A ``LookupLinear(sparse=True)`` table under a dense layer, trained by ``lookuplinear.optim.Adam``
in every process on its half of each global batch (bags with duplicates, empty bags, IDs shared
by both halves), wrapped in ``lookuplinear.parallel.DistributedDataParallel``. Rank 0 then
trains the same model alone on the whole batches and prints the largest difference between the
two: DDP averages the processes' gradients, one process averages the loss over the whole batch,
so the two are equal up to rounding; the script exits with status 1 if the difference is over
``TOLERANCE`` for the dtype, or NaN. ``--collection``: two tables in a ``LookupCollection``
instead of one ``LookupLinear``. ``--save PATH`` writes rank 0's start and final states
(safetensors).
"""

from __future__ import annotations

import argparse
from datetime import timedelta

import torch
import torch.distributed as dist
from torch import nn

from lookuplinear import Bags, KeyedBags, LookupCollection, LookupLinear, TableConfig, optim
from lookuplinear.parallel import DistributedDataParallel

VOCAB, DIM, BATCH = 1000, 8, 16  # BATCH bags per process and step
# the largest difference allowed: rounding (the order of the additions), with room to spare
TOLERANCE = {"float64": 1e-12, "float32": 1e-5}


class Model(nn.Module):
    def __init__(self, dtype: torch.dtype) -> None:
        super().__init__()
        self.table = LookupLinear(VOCAB, DIM, mode="mean", sparse=True, dtype=dtype)
        self.head = nn.Linear(DIM, 2, dtype=dtype)

    def forward(self, x: Bags) -> torch.Tensor:
        return self.head(torch.relu(self.table(x)))


class CollectionModel(nn.Module):
    """Two tables in a ``LookupCollection``: the bags' IDs, and the same IDs modulo 50."""

    def __init__(self, dtype: torch.dtype) -> None:
        super().__init__()
        self.tables = LookupCollection([
            TableConfig("ids", VOCAB, DIM, ["ids"], mode="mean", dtype=dtype),
            TableConfig("small", 50, DIM, ["small"], dtype=dtype)], sparse=True)
        self.head = nn.Linear(2 * DIM, 2, dtype=dtype)

    def forward(self, x: Bags) -> torch.Tensor:
        kb = KeyedBags.from_dict({"ids": x, "small": Bags(x.indices % 50, x.offsets)})
        return self.head(torch.relu(self.tables(kb).values()))


def global_batch(step: int, world: int, dtype: torch.dtype) -> tuple[list[list[int]], torch.Tensor]:
    """``world * BATCH`` bags: some empty, with repeated IDs, many IDs in every process's half."""
    g = torch.Generator().manual_seed(step)
    lengths = torch.randint(0, 6, (world * BATCH,), generator=g)
    ids = torch.randint(0, 60, (int(lengths.sum()),), generator=g) ** 2 % VOCAB
    bags = [t.tolist() for t in torch.split(ids, lengths.tolist())]
    return bags, torch.randn(world * BATCH, 2, generator=g, dtype=dtype)


def train(model: nn.Module, steps: int, world: int, rank: int, dtype: torch.dtype,
          shard: bool) -> None:
    opt = optim.Adam(model.parameters(), lr=0.05)
    for step in range(steps):
        bags, y = global_batch(step, world, dtype)
        if shard:  # this process's half
            bags, y = bags[rank * BATCH:(rank + 1) * BATCH], y[rank * BATCH:(rank + 1) * BATCH]
        opt.zero_grad()
        nn.functional.mse_loss(model(Bags.from_lists(bags)), y).backward()
        opt.step()


def state(model: nn.Module) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", type=int, default=50)
    p.add_argument("--dtype", choices=["float32", "float64"], default="float64")
    p.add_argument("--save", default=None)
    p.add_argument("--collection", action="store_true",
                   help="the tables in a LookupCollection instead of one LookupLinear")
    args = p.parse_args()
    # every collective may wait as long as the slowest process needs (rank 1 waits in the
    # last barrier while rank 0 trains alone): an hour, for a machine that is busy with more
    dist.init_process_group("gloo", timeout=timedelta(hours=1))
    try:
        run(args)
    finally:  # gloo's threads joined before the interpreter ends, even after an error: an
        # error then ends the process with its traceback, never in std::terminate (SIGABRT)
        dist.destroy_process_group()


def run(args: argparse.Namespace) -> None:
    make = CollectionModel if args.collection else Model
    dtype = getattr(torch, args.dtype)
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    model = make(dtype)
    start = state(model)
    ddp = DistributedDataParallel(model)
    train(ddp, args.steps, world, rank, dtype, shard=True)
    failed = None
    if rank == 0:
        alone = make(dtype)
        alone.load_state_dict(start)
        train(alone, args.steps, world, rank, dtype, shard=False)
        diff = float(torch.stack([(a - b).abs().max() for a, b in  # NaN if any is NaN
                                  zip(state(model).values(), state(alone).values(), strict=True)
                                  ]).max())
        print(f"{world} processes x {args.steps} steps, {args.dtype}: largest difference from "
              f"one process on the whole batches {diff:.3g}")
        if not diff <= TOLERANCE[args.dtype]:  # NaN fails too
            failed = (f"the difference {diff:.3g} is over the {args.dtype} tolerance "
                      f"{TOLERANCE[args.dtype]:g}: DDP did not train as one process does")
        if args.save:
            from safetensors.torch import save_file

            save_file({**{f"ddp.{k}": v for k, v in state(model).items()},
                       **{f"one.{k}": v for k, v in state(alone).items()},
                       **{f"start.{k}": v for k, v in start.items()}}, args.save)
    dist.barrier()
    if failed:
        raise SystemExit(failed)


if __name__ == "__main__":
    main()
