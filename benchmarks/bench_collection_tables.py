"""A collection against one ``nn.EmbeddingBag`` per table, dense or row-sparse gradients.

Run from the repository root:

    .venv/bin/python benchmarks/bench_collection_tables.py [--mode mean] [--sparse]

Eight tables of 300 to 100,000 rows x 16 (``--mode``: ``sum`` or ``mean``), a batch of
``--batch`` examples: one ID per feature (``one ID``), or bags of 1 to 10 uniform IDs
(``bags``). Ours: ``LookupCollection(tables, sparse=...)`` over a ``KeyedBags``; stock: a
``ModuleList`` of ``nn.EmbeddingBag(rows, 16, mode=..., sparse=...)``, each called on its
feature's bags, the outputs concatenated. Gradients dense (the default of both) or, with
``--sparse``, row-sparse on both sides. Timed: forward and backward of the output's sum, the
gradients set to None first; medians over ``--rounds`` rounds in a shuffled order, one thread.
The outputs are checked first: equal to the bit for ``sum``; for ``mean`` equal up to
rounding (the collection folds the mean into per-entry weights, as ``LookupLinear`` does on the
CPU; ``nn.EmbeddingBag`` divides the sum).

``--hashing mod`` or ``map``: the collection's tables hash raw int64 IDs (``hashing="mod"``) or
map them with their ``IdMap`` (``hashing="map"``, one row more per table for the fallback row;
the maps hold every ID of the batches, as in a steady state of training), and stock is given
the rows those IDs read, computed once before the timing: the difference is what turning IDs
into rows costs.
"""

from __future__ import annotations

import argparse
import random
import statistics
import time
from collections.abc import Callable

import torch

from lookuplinear import KeyedBags, LookupCollection, TableConfig
from lookuplinear.report.machine import format_machine, machine_info

ROWS = [1000, 5000, 10000, 50000, 100000, 2000, 300, 20000]


def batch(n: int, one_id: bool, g: torch.Generator, raw: bool = False) -> KeyedBags:
    """``n`` examples of one ID or bags per table; with ``raw``, IDs spread over int64 (one
    per row of the table they were drawn for)."""
    f = len(ROWS)
    lengths = (torch.ones(f * n, dtype=torch.long) if one_id
               else torch.randint(1, 11, (f * n,), generator=g))
    values = torch.cat([torch.randint(0, r, (int(lengths[i * n:(i + 1) * n].sum()),),
                                      generator=g) for i, r in enumerate(ROWS)])
    if raw:
        values = values * 2_654_435_761 + 10**12
    return KeyedBags([f"t{i}" for i in range(f)], values, lengths=lengths)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    p.add_argument("--batch", type=int, default=128)
    p.add_argument("--rounds", type=int, default=11)
    p.add_argument("--calls", type=int, default=50, help="calls per timed sample")
    p.add_argument("--mode", choices=["sum", "mean"], default="sum")
    p.add_argument("--sparse", action="store_true", help="row-sparse gradients on both sides")
    p.add_argument("--hashing", choices=["mod", "map"], default=None,
                   help="raw int64 IDs hashed or mapped by the collection's tables")
    args = p.parse_args(argv)
    torch.set_num_threads(1)
    print(f"machine: {format_machine(machine_info())}")
    torch.manual_seed(0)
    rows = [r + (args.hashing == "map") for r in ROWS]  # a map's fallback row
    ours = LookupCollection([TableConfig(f"t{i}", r, 16, [f"t{i}"], mode=args.mode,
                                         hashing=args.hashing)
                             for i, r in enumerate(rows)], sparse=args.sparse)
    stock = torch.nn.ModuleList(torch.nn.EmbeddingBag(r, 16, mode=args.mode, sparse=args.sparse)
                                for r in rows)
    g = torch.Generator().manual_seed(0)
    cases: dict[str, Callable[[], None]] = {}
    for one_id in (True, False):
        kb = batch(args.batch, one_id, g, raw=args.hashing is not None)
        with torch.no_grad():
            ours(kb)  # the maps take the batch's IDs (training mode)
        per = [ours.rows(kb, f"t{i}") for i in range(len(ROWS))]  # the rows the IDs read
        for i, e in enumerate(stock):  # the same weights, the same output
            ours.table_groups[0].data[sum(rows[:i]):sum(rows[:i + 1])] = e.weight.data
        want = torch.cat([e(b.indices, b.offsets[:-1]) for e, b in zip(stock, per, strict=True)],
                         1)
        if args.mode == "sum":
            assert torch.equal(ours(kb).values(), want)
        else:
            torch.testing.assert_close(ours(kb).values(), want)

        def step_ours(kb: KeyedBags = kb) -> None:
            ours.zero_grad(set_to_none=True)
            ours(kb).values().sum().backward()

        def step_stock(per: list = per) -> None:  # type: ignore[type-arg]
            stock.zero_grad(set_to_none=True)
            torch.cat([e(b.indices, b.offsets[:-1]) for e, b in zip(stock, per, strict=True)],
                      1).sum().backward()

        tag = "one ID" if one_id else "bags"
        cases[f"{tag}: LookupCollection"] = step_ours
        cases[f"{tag}: 8 x nn.EmbeddingBag"] = step_stock
    times: dict[str, list[float]] = {k: [] for k in cases}
    rng = random.Random(0)
    for _ in range(args.rounds):
        order = list(cases.items())
        rng.shuffle(order)
        for name, f in order:
            for _ in range(5):
                f()
            start = time.perf_counter()
            for _ in range(args.calls):
                f()
            times[name].append((time.perf_counter() - start) / args.calls * 1e6)
    med = {k: statistics.median(v) for k, v in times.items()}
    print(f"mode={args.mode}, hashing={args.hashing}, "
          f"{'row-sparse' if args.sparse else 'dense'} gradients, batch "
          f"{args.batch}, forward + backward, medians of {args.rounds} rounds, one thread")
    for name, us in med.items():
        print(f"{name:42s} {us:8.1f} us")
    for tag in ("one ID", "bags"):
        ratio = med[f"{tag}: LookupCollection"] / med[f"{tag}: 8 x nn.EmbeddingBag"]
        print(f"{tag}: ours / stock {ratio:.2f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
