"""Training a table larger than the machine's memory: a table in a file against one in memory.

Run from the repository root:

    THP_MEM_ALLOC_ENABLE=1 .venv/bin/python benchmarks/bench_storage.py

Two models, one ``LookupLinear(rows, 64, mode="sum", sparse=True)`` each, trained by a fused
row-wise Adam on 2048 bags of 20 IDs a step: the **file** table (``storage=``, memory-mapped,
lazily drawn) has ``--ram-factor`` (1.5) times the machine's memory in rows, table alone; the
**memory** table has ``--memory-rows`` (10M, 2.56 GB plus 5.1 GB of Adam state) and fits. IDs
are Zipf-distributed (exponent ``--zipf``) ranks scattered over the table by a multiplicative
hash, as hashed IDs are. Both train side by side in one process: ``--rounds`` rounds of
``--steps`` steps each, the two in a shuffled order every round, after a warm-up round; the
median steps per second of each and their ratio, in two phases: **growing** (new batches every
round: Zipf's tail keeps bringing rows never touched, whose first touch costs page faults on
the files) and **steady** (one round's batches again and again: every row in use has been
touched); then the file's touched rows and disk use, and the process's peak resident memory
(VmHWM, which counts the file's pages in memory) against the machine's. ``--id-map`` puts the
file table behind an ``IdMap`` (``TableConfig(hashing="map", storage=...)``), which gives rows
in the order IDs are first seen: new rows land next to each other, 16 to a page.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch

from lookuplinear import Bags, KeyedBags, LookupCollection, LookupLinear, TableConfig, optim
from lookuplinear.report.machine import format_machine, machine_info
from lookuplinear.storage.tables import storage_of


def _meminfo(key: str, path: str = "/proc/meminfo") -> int:
    """A ``kB`` field of ``/proc/meminfo`` (or ``/proc/self/status``), in bytes."""
    with open(path) as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1]) * 1024
    return 0


def _batches(rows: int, n: int, bags: int, bag: int, zipf: float, seed: int) -> list[Bags]:
    rng = np.random.default_rng(seed)
    out = []
    offsets = torch.arange(0, bags * bag + 1, bag)
    for _ in range(n):
        rank = rng.zipf(zipf, bags * bag).astype(np.uint64)
        with np.errstate(over="ignore"):
            scattered = (rank * np.uint64(0x9E3779B97F4A7C15)) % np.uint64(rows)
        out.append(Bags(torch.from_numpy(scattered.astype(np.int64)), offsets))
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--ram-factor", type=float, default=1.5)
    p.add_argument("--file-rows", type=int, default=None, help="overrides --ram-factor")
    p.add_argument("--memory-rows", type=int, default=10_000_000)
    p.add_argument("--dim", type=int, default=64)
    p.add_argument("--bags", type=int, default=2048)
    p.add_argument("--bag", type=int, default=20)
    p.add_argument("--zipf", type=float, default=1.05)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--dir", default=tempfile.gettempdir())
    p.add_argument("--id-map", action="store_true",
                   help="the file table behind an IdMap (TableConfig(hashing='map', storage=)): "
                        "rows given in first-seen order, so new rows are contiguous")
    args = p.parse_args(argv)
    print(f"machine: {format_machine(machine_info())}")
    torch.set_num_threads(1)
    ram = _meminfo("MemTotal")
    row_bytes = args.dim * 4
    file_rows = args.file_rows or int(args.ram_factor * ram / row_bytes)
    root = Path(tempfile.mkdtemp(dir=args.dir, prefix="bench_storage_"))
    try:
        free = shutil.disk_usage(root).free
        print(f"machine memory {ram / 2**30:.1f} GiB, disk free {free / 2**30:.1f} GiB")
        print(f"file table {file_rows:,} x {args.dim} = {file_rows * row_bytes / 2**30:.1f} GiB "
              f"(+ {2 * file_rows * row_bytes / 2**30:.1f} GiB of Adam state, sparse files); "
              f"memory table {args.memory_rows:,} x {args.dim} = "
              f"{args.memory_rows * row_bytes / 2**30:.2f} GiB")
        torch.manual_seed(0)
        memory = LookupLinear(args.memory_rows, args.dim, sparse=True)
        if args.id_map:
            coll = LookupCollection([TableConfig("ids", file_rows, args.dim, ["ids"],
                                                 hashing="map", storage=root / "table")],
                                    sparse=True)
            file_params = list(coll.parameters())

            def file_model(x: Bags) -> torch.Tensor:
                return coll(KeyedBags(["ids"], x.indices, offsets=x.offsets)).values()
        else:
            layer = LookupLinear(file_rows, args.dim, sparse=True, storage=root / "table",
                                 seed=0)
            file_params, file_model = list(layer.parameters()), layer
        models: dict[str, Callable[[Bags], torch.Tensor]] = {"file": file_model,
                                                             "memory": memory}
        params = {"file": file_params, "memory": list(memory.parameters())}
        opts = {k: optim.Adam(params[k], lr=0.01, fused=True) for k in models}
        per_round = args.steps
        rows = {"file": file_rows, "memory": args.memory_rows}
        data = {k: _batches(rows[k], (args.rounds + 1) * per_round, args.bags, args.bag,
                            args.zipf, seed=1) for k in models}
        target = torch.randn(args.bags, args.dim)
        order = np.random.default_rng(0)

        def rounds(batches_of: Callable[[str, int], list[Bags]]) -> dict[str, float]:
            rates: dict[str, list[float]] = {k: [] for k in models}
            for r in range(args.rounds + 1):
                names = list(models)
                order.shuffle(names)
                for name in names:
                    model, opt = models[name], opts[name]
                    batches = batches_of(name, r)
                    t0 = time.perf_counter()
                    for x in batches:
                        opt.zero_grad()
                        torch.nn.functional.mse_loss(model(x), target).backward()
                        opt.step()
                    if r:  # round 0 warms up
                        rates[name].append(len(batches) / (time.perf_counter() - t0))
            return {k: statistics.median(v) for k, v in rates.items()}

        # growing: every round new batches, so IDs never seen keep coming (Zipf's tail);
        # steady: the batches of one round again and again, every row already in use
        growing = rounds(lambda k, r: data[k][r * per_round:(r + 1) * per_round])
        steady = rounds(lambda k, r: data[k][:per_round])
        print(f"{'phase':<8} {'file steps/s':>12} {'memory steps/s':>15} {'file/memory':>12}")
        for phase, med in (("growing", growing), ("steady", steady)):
            print(f"{phase:<8} {med['file']:12.2f} {med['memory']:15.2f} "
                  f"{med['file'] / med['memory']:11.2f}x")
        storage = storage_of(file_params[0])
        assert storage is not None
        drawn = int(storage.drawn.sum())
        disk = sum(f.stat().st_blocks * 512 for f in (root / "table").iterdir())
        hwm = _meminfo("VmHWM", "/proc/self/status")
        print(f"file rows drawn {drawn:,} ({drawn / file_rows:.2%} of the table); "
              f"disk used by the table directory {disk / 2**30:.2f} GiB")
        print(f"peak resident memory {hwm / 2**30:.2f} GiB of {ram / 2**30:.1f} GiB")
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
