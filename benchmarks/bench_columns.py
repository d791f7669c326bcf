"""Mini-batches from DataFrame columns against the training step they feed.

Run from the repository root:

    .venv/bin/python benchmarks/bench_columns.py

A DataFrame of ``--rows`` examples with four features: ``user`` and ``item`` (one int64 ID per
row, 100,000 and 50,000 rows), ``tags`` and ``history`` (lists of 0 to 10 and 0 to 30 IDs, an
object column of lists). A ``LookupCollection`` of four tables (dim 16, sum pooling, fused
``RowWiseAdagrad``) trains on shuffled ``--batch``-row mini-batches; a step is forward, an MSE
loss, backward and the fused update. Timed, each as the median of ``--repeat`` rounds of
``--steps`` batches, interleaved:

* ``step``: the training step on a prepared batch;
* ``DataLoader(KeyedBagsDataset)``: the next batch of a shuffling ``DataLoader`` over a
  ``KeyedBagsDataset`` of the whole frame (``batch_size=--batch``, ``shuffle=True``,
  ``collate_fn=KeyedBagsDataset.collate``), its target included: what a training loop reads;
* ``kb[rows]``: the batch taken from a ``KeyedBags`` of the whole frame, built once with
  ``KeyedBags.from_dataframe`` (what ``KeyedBagsDataset`` does per batch);
* ``from_dataframe(df.iloc[rows])``: the batch built from the frame's rows every time;
* ``python loop``: the batch built row by row into lists, then ``KeyedBags.from_dict``.

Printed: milliseconds per batch and each way's share of the step (the goal: at most 10%).
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import numpy as np
import pandas as pd
import torch

from lookuplinear import KeyedBags, KeyedBagsDataset, LookupCollection, TableConfig, optim
from lookuplinear.report.machine import format_machine, machine_info

SIZES = {"user": 100_000, "item": 50_000, "tags": 1_000, "history": 50_000}


def frame(rows: int, rng: np.random.Generator) -> pd.DataFrame:
    def lists(n: int, longest: int) -> np.ndarray:
        col = np.empty(rows, dtype=object)
        lengths = rng.integers(0, longest + 1, rows)
        flat = rng.integers(0, n, int(lengths.sum()))
        col[:] = np.split(flat, np.cumsum(lengths)[:-1])
        return col

    return pd.DataFrame({
        "user": rng.integers(0, SIZES["user"], rows),
        "item": rng.integers(0, SIZES["item"], rows),
        "tags": lists(SIZES["tags"], 10),
        "history": lists(SIZES["history"], 30),
    })


def python_loop(df: pd.DataFrame, rows: np.ndarray) -> KeyedBags:
    feats: dict[str, list[list[int]]] = {k: [] for k in SIZES}
    for i in rows:
        for k in ("user", "item"):
            feats[k].append([int(df[k].iat[i])])
        for k in ("tags", "history"):
            feats[k].append([int(x) for x in df[k].iat[i]])
    return KeyedBags.from_dict(feats)


def median_ms(fn: Callable[[int], object], steps: int, offset: int) -> float:
    start = time.perf_counter()
    for s in range(steps):
        fn(offset + s)
    return (time.perf_counter() - start) / steps * 1e3


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--batch", type=int, default=512)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--repeat", type=int, default=7)
    args = parser.parse_args()
    print(f"machine: {format_machine(machine_info())}")
    torch.set_num_threads(1)
    rng = np.random.default_rng(0)
    df = frame(args.rows, rng)
    n_batches = args.steps * (args.repeat + 1)
    batches = [rng.choice(args.rows, args.batch, replace=False) for _ in range(n_batches)]

    start = time.perf_counter()
    whole = KeyedBags.from_dataframe(df)
    build_all = time.perf_counter() - start
    picked = [torch.from_numpy(b) for b in batches]
    prepared = [whole[r] for r in picked]
    torch.manual_seed(0)
    model = LookupCollection([TableConfig(k, n, 16, [k]) for k, n in SIZES.items()])
    opt = optim.RowWiseAdagrad(model.parameters(), lr=0.05, fused=True)
    target = torch.randn(args.batch, 16 * len(SIZES))

    def step(i: int) -> None:
        opt.zero_grad()
        loss = (model(prepared[i]).values() - target).pow(2).mean()
        loss.backward()
        opt.step()

    loader = torch.utils.data.DataLoader(
        KeyedBagsDataset(whole, torch.randn(args.rows, 16 * len(SIZES))),
        batch_size=args.batch, shuffle=True, collate_fn=KeyedBagsDataset.collate)
    batches_read = iter(loader)

    def next_batch(i: int) -> object:
        nonlocal batches_read
        try:
            return next(batches_read)
        except StopIteration:  # an epoch is over: the next one, reshuffled
            batches_read = iter(loader)
            return next(batches_read)

    ways: dict[str, Callable[[int], object]] = {
        "step": step,
        "DataLoader(KeyedBagsDataset)": next_batch,
        "kb[rows]": lambda i: whole[picked[i]],
        "from_dataframe(df.iloc[rows])": lambda i: KeyedBags.from_dataframe(df.iloc[batches[i]]),
        "python loop": lambda i: python_loop(df, batches[i]),
    }
    times: dict[str, list[float]] = {k: [] for k in ways}
    for r in range(args.repeat + 1):  # round 0 warms up
        for name, fn in ways.items():
            ms = median_ms(fn, args.steps, r * args.steps)
            if r:
                times[name].append(ms)
    med = {k: statistics.median(v) for k, v in times.items()}
    print(f"{args.rows} rows, batch {args.batch}, one thread; KeyedBags.from_dataframe of the "
          f"whole frame once: {build_all * 1e3:.0f} ms")
    for name, ms in med.items():
        share = "" if name == "step" else f"  {ms / med['step']:6.1%} of the step"
        print(f"  {name:32s} {ms:8.3f} ms{share}")


if __name__ == "__main__":
    main()
