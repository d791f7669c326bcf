"""String IDs through ``IdMap(key_type="str")`` against pandas' ``Index.get_indexer``.

Run from the repository root (pandas installed: the ``dataframe`` extra):

    .venv/bin/python benchmarks/bench_idmap_str.py

1M string IDs ``"item_<k>"``, ``k`` drawn from a Zipf law (exponent 1.05) over 200k distinct
IDs, mapped a batch at a time: the map holds every distinct ID (built by one training call
beforehand), then each round times, interleaved, in one thread:

- ``IdMap`` in eval mode (look up only) on the batch as a list, a numpy object array and a
  pandas Series;
- ``IdMap`` in training mode (look up and mark each row used: what a training step does);
- pandas' ``Index.get_indexer`` of the batch (object array) in an ``Index`` of the distinct IDs:
  a C hash table over the same Python strings, the anchor.

Medians over rounds, in million IDs per second, and the share of the CPUs that other
processes used while each case ran (a number measured while others ran is not the machine's).
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np
import pandas as pd
import torch

from lookuplinear import IdMap
from lookuplinear.report.machine import cpu_ticks, format_machine, machine_info, others_share


def draw(n: int, distinct: int, seed: int) -> list[str]:
    """``n`` IDs ``"item_<k>"``, ``k`` Zipf-distributed over ``distinct`` values."""
    rng = np.random.default_rng(seed)
    p = 1.0 / np.arange(1, distinct + 1) ** 1.05
    ranks = rng.choice(distinct, size=n, p=p / p.sum())
    names = rng.permutation(distinct)  # the popular ones are not the small numbers
    return [f"item_{k}" for k in names[ranks]]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--ids", type=int, default=1_000_000)
    ap.add_argument("--distinct", type=int, default=200_000)
    ap.add_argument("--rounds", type=int, default=7)
    args = ap.parse_args()
    torch.set_num_threads(1)
    print(f"machine: {format_machine(machine_info())}")

    batch = draw(args.ids, args.distinct, seed=0)
    as_object = np.array(batch, dtype=object)
    as_series = pd.Series(batch, dtype=object)
    distinct = list(dict.fromkeys(batch))
    m = IdMap(args.distinct + 1, key_type="str")
    m(distinct)  # every ID holds a row
    index = pd.Index(distinct)

    want = index.get_indexer(as_object) + 1  # rows in order of first appearance, after row 0
    m.eval()
    assert np.array_equal(m(batch).numpy(), want), "IdMap disagrees with pandas"

    def lookup(x: object) -> None:
        m.eval()
        m(x)

    def train_step() -> None:
        m.train()
        m(batch)

    cases = {
        "IdMap eval, list": lambda: lookup(batch),
        "IdMap eval, numpy object": lambda: lookup(as_object),
        "IdMap eval, pandas Series": lambda: lookup(as_series),
        "IdMap train, list": train_step,
        "pandas Index.get_indexer": lambda: index.get_indexer(as_object),
    }
    for f in cases.values():  # warm-up
        f()
    times: dict[str, list[float]] = {k: [] for k in cases}
    others: dict[str, list[float]] = {k: [] for k in cases}
    for _ in range(args.rounds):
        for name, f in cases.items():  # interleaved: the machine's load falls on every case
            before = cpu_ticks()
            t0 = time.perf_counter()
            f()
            times[name].append(time.perf_counter() - t0)
            share = others_share(before, cpu_ticks())
            if share is not None:
                others[name].append(share)

    anchor = statistics.median(times["pandas Index.get_indexer"])
    print(f"{args.ids:,} string IDs, {len(distinct):,} distinct, Zipf 1.05; medians of "
          f"{args.rounds} interleaved rounds, one thread")
    print(f"{'case':<28} {'M IDs/s':>8} {'vs pandas':>9} {'spread':>8} {'others':>7}")
    for name, ts in times.items():
        med = statistics.median(ts)
        spread = (max(ts) - min(ts)) / med
        busy = f"{statistics.median(others[name]):.0%}" if others[name] else "?"
        print(f"{name:<28} {args.ids / med / 1e6:>8.1f} {anchor / med:>8.2f}x "
              f"{spread:>7.0%} {busy:>7}")


if __name__ == "__main__":
    main()
