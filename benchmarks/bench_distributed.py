"""Step time and bytes exchanged per step: data parallel against TorchRec's sharded tables.

Run from the repository root, once per process count:

    torchrun --standalone --nproc_per_node 1 benchmarks/bench_distributed.py
    torchrun --standalone --nproc_per_node 2 benchmarks/bench_distributed.py

Eight tables of ``--rows`` x ``--dim`` (float32), one feature each, ``--batch`` examples per
process and step, bags of 1 to ``2 * --bag - 1`` Zipf-distributed IDs (exponent 1.2) scattered
over each table; a step is forward, an MSE loss over the pooled outputs, backward and the
update. **DDP**: ``LookupCollection(sparse=True)`` under
``lookuplinear.parallel.DistributedDataParallel``, ``lookuplinear.optim.RowWiseAdagrad``; every
process holds every table; per step it sends its gradient's rows (int64 row + the row's values)
and receives every other process's. **TorchRec**: ``shard_collection(..., "table_wise",
"rowwise_adagrad")``; each table lives in one process; per step a process sends the IDs
(int64) and lengths (int32) of the features whose table is elsewhere, receives the pooled
outputs (``batch x dim`` float32 per feature) of its batch from their tables, and sends back
their gradients (the same size); the table's owner does the converse. Bytes are counted from
the batches and the gradients each step (what the collectives carry, not protocol overhead).
Prints the median step time over ``--rounds`` rounds of ``--steps`` steps after a warm-up round.
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np
import torch
import torch.distributed as dist
from torch import nn

from lookuplinear import KeyedBags, LookupCollection, TableConfig, optim
from lookuplinear.parallel import DistributedDataParallel, shard_collection
from lookuplinear.report.machine import format_machine, machine_info

N_TABLES = 8


def batches(args: argparse.Namespace, rank: int, n: int) -> list[KeyedBags]:
    rng = np.random.default_rng(1000 + rank)
    out = []
    for _ in range(n):
        feats = {}
        for t in range(N_TABLES):
            lengths = rng.integers(1, 2 * args.bag, args.batch)
            rank_ids = rng.zipf(1.2, int(lengths.sum())).astype(np.uint64)
            with np.errstate(over="ignore"):
                ids = (rank_ids * np.uint64(0x9E3779B97F4A7C15)) % np.uint64(args.rows)
            feats[f"f{t}"] = (torch.from_numpy(ids.astype(np.int64)),
                              torch.from_numpy(lengths))
        keys = list(feats)
        out.append(KeyedBags(keys, torch.cat([feats[k][0] for k in keys]),
                             lengths=torch.cat([feats[k][1] for k in keys])))
    return out


def timed(step: object, data: list[KeyedBags], args: argparse.Namespace) -> float:
    times = []
    for r in range(args.rounds + 1):
        dist.barrier()
        t0 = time.perf_counter()
        for kb in data[r * args.steps:(r + 1) * args.steps]:
            step(kb)  # type: ignore[operator]
        dist.barrier()
        if r:
            times.append((time.perf_counter() - t0) / args.steps)
    return statistics.median(times)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rows", type=int, default=1_000_000)
    p.add_argument("--dim", type=int, default=16)
    p.add_argument("--batch", type=int, default=2048)
    p.add_argument("--bag", type=int, default=5)
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--rounds", type=int, default=5)
    args = p.parse_args()
    print(f"machine: {format_machine(machine_info())}")
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.set_num_threads(1)
    tables = [TableConfig(f"t{t}", args.rows, args.dim, [f"f{t}"]) for t in range(N_TABLES)]
    torch.manual_seed(0)
    data = batches(args, rank, (args.rounds + 1) * args.steps)
    target = torch.randn(args.batch, N_TABLES * args.dim)

    # data parallel
    coll = LookupCollection(tables, sparse=True)
    ddp = DistributedDataParallel(coll)
    opt = optim.RowWiseAdagrad(ddp.parameters(), lr=0.05)
    sent = []

    def ddp_step(kb: KeyedBags) -> None:
        opt.zero_grad()
        nn.functional.mse_loss(ddp(kb).values(), target).backward()
        opt.step()

    ddp_ms = timed(ddp_step, data, args) * 1e3
    for kb in data[:args.steps]:  # the rows each gradient sends (one pass, not timed)
        opt.zero_grad()
        nn.functional.mse_loss(coll(kb).values(), target).backward()
        rows = sum(int(torch.unique(kb[f"f{t}"].indices).numel()) for t in range(N_TABLES))
        sent.append(rows * (8 + 4 * args.dim))
    ddp_send = statistics.mean(sent)
    ddp_recv = ddp_send * (world - 1)

    # TorchRec, table-wise
    coll = LookupCollection(tables)
    dmp = shard_collection(coll, sharding="table_wise", optimizer="rowwise_adagrad", lr=0.05)

    def trec_step(kb: KeyedBags) -> None:
        nn.functional.mse_loss(dmp(kb.to_kjt()), target).backward()

    trec_ms = timed(trec_step, data, args) * 1e3
    remote = [t for t in range(N_TABLES) if t % world != rank] if world > 1 else []
    ids = statistics.mean(sum(kb[f"f{t}"].indices.numel() for t in remote) for kb in data)
    # out: ids and lengths of remote features, gradients of remote features' outputs; the
    # converse for this process's own tables from the others (the same sizes on average)
    trec_send = (ids * 8 + len(remote) * args.batch * 4
                 + 2 * len(remote) * args.batch * args.dim * 4)
    stats = torch.tensor([ddp_ms, trec_ms, ddp_send, ddp_recv, trec_send], dtype=torch.float64)
    dist.all_reduce(stats)
    stats /= world
    if rank == 0:
        mb = 1 / 2**20
        print(f"{world} process(es), 8 tables of {args.rows:,} x {args.dim}, batch "
              f"{args.batch} per process, bags of 1-{2 * args.bag - 1}, one thread each")
        print(f"{'method':<22} {'ms/step':>8} {'MiB sent/step':>14} {'MiB recv/step':>14}")
        print(f"{'DDP (sparse all-red.)':<22} {stats[0]:8.1f} {stats[2] * mb * (world > 1):14.2f} "
              f"{stats[3] * mb:14.2f}")
        print(f"{'TorchRec table-wise':<22} {stats[1]:8.1f} {stats[4] * mb:14.2f} "
              f"{stats[4] * mb:14.2f}")
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
