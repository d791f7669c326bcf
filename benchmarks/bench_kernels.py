"""The C row kernels against their torch-op twins, one kernel at a time.

Run from the repository root:

    .venv/bin/python benchmarks/bench_kernels.py

The case: a 1,000,000 x 64 float32 table, and a batch of 1,024 bags of 20 indices drawn
uniformly (20,480 entries, about 20,000 sorted unique rows), one torch thread. Each pair runs
the C kernel (``lookuplinear.ops``, what a CPU install runs) against the torch ops that
run where the C kernels do not (``LOOKUPLINEAR_BACKEND=torch``, CUDA, other dtypes):

- ``gather_rows``, the forward of the same entries as an index lookup (``table[idx]``): C
  against ``torch.embedding``;
- ``group_rows``, the row-sparse gradient of the lookup: C against ``torch.unique`` +
  ``index_add_``;
- ``hash_ids`` of the entries as IDs (a ``hashing="mod"`` table's rows): the C MurmurHash3
  over the IDs' bytes against its torch ops;
- the stored-gradient row update ``update_rows`` of ``SGD``, ``RowWiseAdagrad`` and ``Adam``
  on the unique rows: C against its torch-op twin (``lookuplinear.ops._updates``, what the
  optimizer runs where the C kernel does not);
- the fused backward of ``RowWiseAdagrad`` and ``Adam`` (``fused=True``: ``fused_rows``
  groups, sums and updates in one pass) against torch ``group_rows`` + the twin.

Every case runs once per round, the rounds in an order drawn anew every round (seeded), so no
case always follows the same neighbour; times are medians over the rounds. The table and the
optimizer state are on transparent huge pages where Linux grants them
(:mod:`lookuplinear.hugepages`); ``--no-hugepages`` puts them on ordinary pages. Prints a
markdown table: median ms of each side and the ratio C / torch ops (below 1: C is faster).
docs/performance.md explains the numbers.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from functools import partial
from typing import Any

import numpy as np
import torch

from lookuplinear import hash_ids, hugepages, optim
from lookuplinear.ops import (
    FusedTable,
    fused_rows,
    gather_rows,
    group_rows,
    update_rows,
    use_backend,
)
from lookuplinear.ops._clib import scalars as c_scalars
from lookuplinear.ops._updates import ROW_UPDATES
from lookuplinear.report.machine import format_machine, machine_info

OPTIMIZERS = {"sgd": optim.SGD, "rowwise_adagrad": optim.RowWiseAdagrad, "adam": optim.Adam}
FUSED = ("rowwise_adagrad", "adam")


class Table:
    """One table with an optimizer's state, and the two ways of updating its rows."""

    def __init__(self, kernel: str, rows: int, dim: int) -> None:
        self.w = torch.nn.Parameter(hugepages.empty(rows, dim).normal_())
        self.opt = OPTIMIZERS[kernel]([self.w], lr=1e-3)
        self.group = self.opt.param_groups[0]
        self.state = self.opt._state(self.w, self.group)

    def c_args(self) -> tuple[torch.Tensor, tuple[float, ...]]:
        args = self.opt._c_args(self.w.data, self.state, self.group, 1)
        if args is None:
            raise RuntimeError("the C kernels are not built (or LOOKUPLINEAR_BACKEND=torch)")
        return args

    def update_c(self, rows: torch.Tensor, values: torch.Tensor) -> None:
        state, scalars = self.c_args()
        if not update_rows(self.opt._kernel, self.w.data, state, rows, values, scalars):
            raise RuntimeError("the C row update did not run")

    def update_torch(self, rows: torch.Tensor, values: torch.Tensor) -> None:
        kernel, w = self.opt._kernel, self.w.data
        named = self.opt._scalars(self.group, [(w.shape[1], 1)])[0]
        ROW_UPDATES[kernel](w, *self.opt._state_rows(w, self.state), rows, values,
                            c_scalars(kernel, named, False))

    def fused_c(self, idx: torch.Tensor, offsets: torch.Tensor, grad_out: torch.Tensor) -> None:
        state, scalars = self.c_args()
        if not fused_rows(self.opt._kernel,
                          [FusedTable(grad_out, self.w.data, state, scalars, idx, offsets)])[0]:
            raise RuntimeError("the fused C kernel did not run")

    def fused_torch(self, idx: torch.Tensor, offsets: torch.Tensor,
                    grad_out: torch.Tensor) -> None:
        with use_backend("torch"):
            rows, values = group_rows(grad_out, self.w.shape[0], idx, offsets)
        self.update_torch(rows, values)


def cases(args: argparse.Namespace) -> tuple[dict[str, tuple[Callable[[], Any], ...]], int]:
    """``{name: (C, torch ops)}`` and the number of unique rows."""
    g = torch.Generator().manual_seed(0)
    idx = torch.randint(0, args.rows, (args.entries,), generator=g)
    offsets = torch.cat([torch.arange(0, args.entries, args.bag), torch.tensor([args.entries])])
    grad_out = torch.randn(offsets.numel() - 1, args.dim, generator=g)
    rows = group_rows(grad_out, args.rows, idx, offsets)[0]
    values = torch.randn(rows.numel(), args.dim, generator=g) * 1e-3

    def group_torch() -> object:
        with use_backend("torch"):
            return group_rows(grad_out, args.rows, idx, offsets)

    def hash_torch() -> object:
        with use_backend("torch"):
            return hash_ids(idx, args.rows)

    tables = {k: Table(k, args.rows, args.dim) for k in OPTIMIZERS}
    table = tables["sgd"].w.detach()
    out: dict[str, tuple[Callable[[], Any], ...]] = {
        "`gather_rows` (an index lookup's forward)": (
            partial(gather_rows, table, idx), partial(torch.embedding, table, idx)),
        "`group_rows` (the row-sparse gradient)": (
            lambda: group_rows(grad_out, args.rows, idx, offsets), group_torch),
        "`hash_ids` of the entries (`hashing=\"mod\"`)": (
            partial(hash_ids, idx, args.rows), hash_torch),
    }
    for k, t in tables.items():
        out[f"`update_rows` {k} (stored gradient)"] = (
            partial(t.update_c, rows, values), partial(t.update_torch, rows, values))
    for k in FUSED:
        t = tables[k]
        out[f"fused {k} backward (`fused_rows`)"] = (
            partial(t.fused_c, idx, offsets, grad_out),
            partial(t.fused_torch, idx, offsets, grad_out))
    return out, rows.numel()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rows", type=int, default=1_000_000)
    p.add_argument("--dim", type=int, default=64)
    p.add_argument("--entries", type=int, default=20_480)
    p.add_argument("--bag", type=int, default=20, help="entries per bag")
    p.add_argument("--repeats", type=int, default=31)
    p.add_argument("--no-hugepages", dest="huge", action="store_false",
                   help="table and state on ordinary 4 KiB pages")
    args = p.parse_args(argv)
    print(f"machine: {format_machine(machine_info())}")
    torch.set_num_threads(1)
    huge = hugepages.enabled()
    hugepages.set_enabled(huge and args.huge)  # read when the tables are allocated
    try:
        pairs, unique = cases(args)
    finally:
        hugepages.set_enabled(huge)
    timed = [(name, side, f) for name, fs in pairs.items() for side, f in enumerate(fs)]
    times: dict[tuple[str, int], list[float]] = {(n, s): [] for n, s, _ in timed}
    with torch.no_grad():
        for _, _, f in timed:  # warm-up: first touch of the state, the loader, the caches
            f()
        order = np.random.default_rng(1)
        for _ in range(args.repeats):
            for j in order.permutation(len(timed)):
                n, s, f = timed[j]
                t0 = time.perf_counter()
                f()
                times[n, s].append(time.perf_counter() - t0)
    med = {k: statistics.median(v) * 1e3 for k, v in times.items()}
    pages = "huge pages where granted" if huge and args.huge else "4 KiB pages"
    print(f"table {args.rows:,} x {args.dim} float32, {args.entries:,} entries in bags of "
          f"{args.bag}, {unique:,} unique rows; medians of {args.repeats} rounds in shuffled "
          f"order, 1 thread, {pages}; "
          f"torch {torch.__version__}\n")
    print("| kernel | C, ms | torch ops, ms | C / torch ops |")
    print("|---|---|---|---|")
    for n in pairs:
        c, t = med[n, 0], med[n, 1]
        print(f"| {n} | {c:.3f} | {t:.3f} | {c / t:.2f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
