"""An unfused optimizer step on a lookup's gradient as the backward stores it.

Run from the repository root:

    .venv/bin/python benchmarks/bench_stored_step.py

``LookupLinear(sparse=True)``'s weight gradient has one row per entry, sorted by row, each row's
sum at its first entry and ``-0.0`` at its others. The case: a 1,000,000 x 16 float32 table and
such a gradient of 558,000 entries on 94,000 rows (a multi-hot batch), one torch thread. Each
optimizer's ``step`` (``fused=False``) runs two ways side by side:

- the gradient as stored: ``lookuplinear::rows_update_`` sums each row's entries as it updates
  the row (what ``step`` does);
- its runs summed first (``lookuplinear.ops.summed_runs``: ``unique_consecutive`` +
  ``index_add_``, a ``(rows, dim)`` tensor of sums), then the step on those unique rows.

Both give the same bits (tests/test_optim.py). Every case runs once per round, the rounds in a
shuffled (seeded) order; prints the median ms of each and their ratio.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import numpy as np
import torch

from lookuplinear import optim
from lookuplinear.ops import summed_runs
from lookuplinear.report.machine import format_machine, machine_info

OPTIMIZERS = {"SGD": optim.SGD, "RowWiseAdagrad": optim.RowWiseAdagrad, "Adam": optim.Adam}


def stored_gradient(args: argparse.Namespace) -> torch.Tensor:
    """A lookup's gradient as stored: ``args.unique`` rows, ``args.entries`` entries."""
    g = torch.Generator().manual_seed(0)
    rows = torch.randperm(args.rows, generator=g)[:args.unique].sort().values
    counts = torch.ones(args.unique, dtype=torch.long) + torch.bincount(
        torch.randint(0, args.unique, (args.entries - args.unique,), generator=g),
        minlength=args.unique)
    entries = torch.repeat_interleave(rows, counts)
    values = torch.full((args.entries, args.dim), -0.0)
    first = torch.ones(args.entries, dtype=torch.bool)
    first[1:] = entries[1:] != entries[:-1]
    values[first] = torch.randn(args.unique, args.dim, generator=g)
    return torch.sparse_coo_tensor(entries.unsqueeze(0), values, (args.rows, args.dim),
                                   check_invariants=False)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rows", type=int, default=1_000_000)
    p.add_argument("--dim", type=int, default=16)
    p.add_argument("--entries", type=int, default=558_000)
    p.add_argument("--unique", type=int, default=94_000)
    p.add_argument("--repeats", type=int, default=31)
    args = p.parse_args(argv)
    print(f"machine: {format_machine(machine_info())}")
    torch.set_num_threads(1)
    grad = stored_gradient(args)
    steps: dict[tuple[str, int], Callable[[], None]] = {}
    for name, cls in OPTIMIZERS.items():
        w = torch.nn.Parameter(torch.randn(args.rows, args.dim))
        opt = cls([w], lr=1e-3)

        def as_stored(w: torch.nn.Parameter = w, opt: optim.RowSparseOptimizer = opt) -> None:
            w.grad = grad
            opt.step()

        def summed_first(w: torch.nn.Parameter = w, opt: optim.RowSparseOptimizer = opt) -> None:
            rows, values = summed_runs(grad._indices()[0], grad._values())
            w.grad = torch.sparse_coo_tensor(rows.unsqueeze(0), values, grad.shape,
                                             check_invariants=False)
            opt.step()

        steps[name, 0], steps[name, 1] = as_stored, summed_first
    times: dict[tuple[str, int], list[float]] = {k: [] for k in steps}
    keys = list(steps)
    for k in keys:  # warm-up: the state allocated and touched
        steps[k]()
    order = np.random.default_rng(1)
    for _ in range(args.repeats):
        for j in order.permutation(len(keys)):
            t0 = time.perf_counter()
            steps[keys[j]]()
            times[keys[j]].append(time.perf_counter() - t0)
    med = {k: statistics.median(v) * 1e3 for k, v in times.items()}
    print(f"table {args.rows:,} x {args.dim} float32, a stored gradient of {args.entries:,} "
          f"entries on {args.unique:,} rows; medians of {args.repeats} rounds in shuffled "
          f"order, 1 thread; torch {torch.__version__}\n")
    print("| step (`fused=False`) | as stored, ms | runs summed first, ms | ratio |")
    print("|---|---|---|---|")
    for name in OPTIMIZERS:
        a, b = med[name, 0], med[name, 1]
        print(f"| `{name}` | {a:.2f} | {b:.2f} | {a / b:.2f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
