"""A collection's one-ID batch written two ways, side by side in one process.

Run from the repository root:

    .venv/bin/python benchmarks/bench_collection_write.py --scale 0.05 --threads 1

The 26 Criteo tables of ``bench_collection.py`` (``--scale`` of their rows), of three widths
(``--mixed-dims``' sizes: 8, 16 and 32, features of the three widths interleaved in the
output) or of one (16), ``sparse=True``; a batch of ``--batch`` examples, one ID per feature
(one-hot). The collection's batch is written:

* ``operators``: as a collection writes it (over several widths one call of
  ``lookuplinear::gather_groups``: every width's rows written into their columns; one width:
  ``lookuplinear::bag_lookup`` and ``lookuplinear::in_feature_order``);
* ``per width + copy``: ``lookuplinear::bag_lookup`` per width on its rows and one copy into the
  features' order (``lookuplinear::in_feature_order``): the same gradient, to the bit.

(Bags are ``bag_lookup`` per width and one copy on both sides: ATen's ``embedding_bag``, which
``bag_lookup`` calls for bags, sums faster than a kernel writing every width's sums into their
columns did.)

Timed, each as the median of ``--repeats`` rounds of 5 calls, the ways interleaved in an order
shuffled each round: the forward alone (recording the graph, as a training step's) and forward
and backward of an MSE loss (the gradients stored, then dropped). Printed: milliseconds and
each way's ratio to the per-width write.
"""

from __future__ import annotations

import argparse
import random
import statistics
import time
from collections.abc import Callable
from typing import Any
from unittest import mock

import numpy as np
import torch
import torch.nn.functional as F
from bench_collection import CRITEO, batch, mixed_dims

from lookuplinear import LookupCollection, TableConfig
from lookuplinear.modules import batched
from lookuplinear.report.machine import format_machine, machine_info

Written = Callable[..., torch.Tensor]
OPERATORS: Written = batched.BatchedLookup._written


def per_width(self: batched.BatchedLookup, whole: Any, n: int, table_groups: Any,
              tables: Any, starts: list[int] | None = None, exact: bool = False
              ) -> torch.Tensor:
    """``bag_lookup`` per width on its ``(N, F_g)`` rows, and one ``in_feature_order`` copy
    (one width, and bags: the collection's own calls)."""
    if len(self.groups) == 1 or not isinstance(whole, torch.Tensor):
        return OPERATORS(self, whole, n, table_groups, tables, starts, exact)
    outs = [batched._BAG_LOOKUP(table_groups[g], self._group_rows(whole, g, len(feats), n))
            .view(n, len(feats) * table_groups[g].shape[1]) for g, feats in self.groups]
    out: torch.Tensor = batched._IN_FEATURE_ORDER(outs, [0] * len(outs), self._written_segs[True])
    return out


WAYS: dict[str, Written] = {"operators": OPERATORS, "per width + copy": per_width}


def calls(col: LookupCollection, kb: Any, target: torch.Tensor) -> dict[str, Callable[[], None]]:
    """The timed calls: the forward alone, and forward and backward of an MSE loss."""
    def forward() -> None:
        col(kb)

    def step() -> None:
        F.mse_loss(col(kb).values(), target).backward()
        for param in col.parameters():
            param.grad = None

    return {"forward": forward, "forward + backward": step}


def measure(fn: Callable[[], None], repeats: int) -> dict[str, float]:
    """Each way's median ms per call of ``fn``: rounds of 5 calls after one warm-up, the ways
    interleaved in an order shuffled each round (seeded)."""
    times: dict[str, list[float]] = {w: [] for w in WAYS}
    for r in range(repeats):
        order = list(WAYS)
        random.Random(r).shuffle(order)
        for way in order:
            with mock.patch.object(batched.BatchedLookup, "_written", WAYS[way]):
                fn()
                start = time.perf_counter()
                for _ in range(5):
                    fn()
                times[way].append((time.perf_counter() - start) / 5 * 1e3)
    return {w: statistics.median(v) for w, v in times.items()}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--scale", type=float, default=0.05, help="fraction of the tables' rows")
    p.add_argument("--batch", type=int, default=2048)
    p.add_argument("--repeats", type=int, default=21)
    p.add_argument("--threads", type=int, default=None, help="torch.set_num_threads")
    args = p.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    print(f"machine: {format_machine(machine_info())} ({torch.get_num_threads()} threads)")
    rows = [max(1, int(r * args.scale)) for r in CRITEO]
    print(f"26 tables, {sum(rows):,} rows, batch {args.batch}\n")
    print("| widths | timed | " + " | ".join(f"{w} ms (x per width)" for w in WAYS)
          + " |\n|---|---|" + "---|" * len(WAYS))
    for label, dims in (("8/16/32", mixed_dims(rows)), ("16", [16] * len(rows))):
        kb, _ = batch(rows, args.batch, False, np.random.default_rng(0))  # one-hot
        col = LookupCollection([TableConfig(f"t{t}", r, d, [f"f{t}"]) for t, (r, d) in
                                enumerate(zip(rows, dims, strict=True))], sparse=True)
        for timed, fn in calls(col, kb, torch.randn(args.batch, sum(dims))).items():
            med = measure(fn, args.repeats)
            base = med["per width + copy"]
            print(f"| {label} | {timed} | " + " | ".join(
                f"{v:.3f} ({v / base:.2f}x)" for v in med.values()) + " |", flush=True)
    return 0

if __name__ == "__main__":
    raise SystemExit(main())
