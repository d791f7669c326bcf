"""Many tables in one step: LookupCollection against FBGEMM's table-batched module and torch.

Run from the repository root, in the benchmark environment (docs/performance.md, Setup):

    .venv-bench/bin/python benchmarks/bench_collection.py

Every method's tables and optimizer state are on huge pages: lookuplinear places its own, and
the script moves FBGEMM's table and row-wise state, the ``nn.EmbeddingBag`` tables and
``SparseAdam``'s moments there (``lookuplinear.hugepages.place``) before the first step. The
other way to give torch's tables huge pages, ``THP_MEM_ALLOC_ENABLE=1``, puts every large
tensor torch allocates on them, the ``(2048, 416)`` outputs and gradients of every step too,
each faulted in and zeroed 2 MiB at a time, for every method; the script runs under it as
well.

The 26 categorical features of Criteo's display-ads data with the Kaggle set's cardinalities
(as DLRM uses them: 1460 to 10,131,227 rows, 33.8M in all), dim 16, batch 2048, IDs drawn from
a Zipf law (exponent 1.05) per feature. Two batches: one ID per feature per example
(``one-hot``) and bags of 1 to 20 IDs (``multi-hot``). A step is forward (every feature's
pooled rows, ``(2048, 26 * 16)``), an MSE loss, backward and the optimizer's update:

* RowWiseAdagrad, fused into backward: ``LookupCollection`` of the 26 tables; one
  ``LookupLinear`` holding all 33.8M rows looked up at the same (shifted) IDs (the cost of one
  table); FBGEMM's ``SplitTableBatchedEmbeddingBagsCodegen`` of the 26 tables
  (``EXACT_ROWWISE_ADAGRAD``, HOST/CPU), when ``fbgemm-gpu-cpu`` is installed.
* Adam (``--adam``; another 13 GB): ``LookupCollection`` with fused ``lookuplinear.optim.Adam``
  against 26 ``nn.EmbeddingBag(sparse=True)`` with ``torch.optim.SparseAdam``, the alternative a
  user has (FBGEMM offers no Adam on the CPU).

``--mixed-dims``: tables of three widths (8 below 1,000 rows, 16 below 100,000, else 32; 440
columns), as DLRM-style models size them, whose features interleave in the output; the
collection then keeps a parameter per width (one lookup call and one fused update for all
widths) and FBGEMM one module over all, and the one-table baseline is left out.

``--unfused``: the collection's step with optimizers that take its gradient after the backward
instead (``torch.optim.SGD`` and ``lookuplinear.optim.RowWiseAdagrad(fused=False)``), and its
forward alone (recording the graph, as a training step's).

The script also times the step's loss alone (an MSE forward and backward on an output of the
step's shape), which every method pays, and prints the FBGEMM ratio without it; and the floor
of a fused step: the kernels any method must run, one after the other with nothing around
them (the batch's rows gathered by torch into a ready buffer, the loss, and
``lookuplinear::rows_fused_`` on a gradient of the lookup's shape), each meeting the caches
the one before it left, as in a step.

Each method trains its own tables. Methods of a group run interleaved, ``--steps`` steps each
per round, in an order shuffled anew each round (seeded); printed: median ms per step and the
ratios the goals name.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import statistics
import time
import warnings
from collections.abc import Callable
from typing import Any, NamedTuple

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from lookuplinear import KeyedBags, LookupCollection, LookupLinear, TableConfig, hugepages, optim
from lookuplinear.report.machine import format_machine, machine_info

#: the Criteo Kaggle features' cardinalities, as DLRM's data loader counts them
CRITEO = [1460, 583, 10131227, 2202608, 305, 24, 12517, 633, 3, 93145, 5683, 8351593, 3194,
          27, 14992, 5461306, 10, 5652, 2173, 4, 7046547, 18, 15, 286181, 105, 142572]
LR = 0.01
LOSS = "the loss alone (MSE forward and backward)"
KERNELS = "the kernels alone: gather, loss, fused update"
Step = Callable[[], None]


def mixed_dims(rows: list[int]) -> list[int]:
    """Widths that grow with a table's rows: 8 below 1,000 rows, 16 below 100,000, else 32."""
    return [8 if r < 1000 else 16 if r < 100_000 else 32 for r in rows]


def batch(rows: list[int], n: int, multi: bool, rng: np.random.Generator
          ) -> tuple[KeyedBags, torch.Tensor]:
    """Feature-major IDs (Zipf per feature) and each bag's length."""
    lengths = rng.integers(1, 21, (len(rows), n)) if multi else np.ones((len(rows), n), int)
    values = np.concatenate([(rng.zipf(1.05, int(lengths[t].sum())) - 1) % r
                             for t, r in enumerate(rows)])
    kb = KeyedBags([f"f{t}" for t in range(len(rows))], torch.from_numpy(values),
                   lengths=torch.from_numpy(lengths.reshape(-1)))
    return kb, torch.from_numpy(lengths.reshape(-1))


def collection_step(rows: list[int], dims: list[int], kb: KeyedBags, target: torch.Tensor,
                    opt_name: str) -> Step:
    model = LookupCollection([TableConfig(f"t{t}", r, d, [f"f{t}"]) for t, (r, d) in
                              enumerate(zip(rows, dims, strict=True))], sparse=True)
    opt = getattr(optim, opt_name)(model.parameters(), lr=LR, fused=True)

    def step() -> None:
        opt.zero_grad(set_to_none=True)
        F.mse_loss(model(kb).values(), target).backward()
        opt.step()

    return step


def unfused_step(rows: list[int], dims: list[int], kb: KeyedBags, target: torch.Tensor,
                 opt_name: str | None) -> Step:
    """The collection's step with an optimizer that reads the stored gradient
    (``torch.optim.SGD``, or ``lookuplinear.optim.<opt_name>(fused=False)``), or, for
    ``opt_name=None``, its forward alone."""
    model = LookupCollection([TableConfig(f"t{t}", r, d, [f"f{t}"]) for t, (r, d) in
                              enumerate(zip(rows, dims, strict=True))], sparse=True)
    if opt_name is None:
        return lambda: model(kb)  # type: ignore[return-value]
    opt = (torch.optim.SGD(model.parameters(), lr=LR) if opt_name == "SGD" else
           getattr(optim, opt_name)(model.parameters(), lr=LR, fused=False))

    def step() -> None:
        opt.zero_grad(set_to_none=True)
        F.mse_loss(model(kb).values(), target).backward()
        opt.step()

    return step


def one_table_step(rows: list[int], dim: int, kb: KeyedBags, target: torch.Tensor) -> Step:
    """All rows in one LookupLinear, the features' IDs shifted to their table's rows."""
    shift = torch.tensor(np.concatenate([[0], np.cumsum(rows)[:-1]]))
    per_entry = torch.repeat_interleave(
        shift.repeat_interleave(kb.batch_size), kb.lengths())
    idx, offsets = kb.values + per_entry, kb.offsets
    layer = LookupLinear(sum(rows), dim, bias=False, sparse=True, include_last_offset=True)
    opt = optim.RowWiseAdagrad(layer.parameters(), lr=LR, fused=True)
    n, t = kb.batch_size, len(rows)

    def step() -> None:
        opt.zero_grad(set_to_none=True)
        out = layer(idx, offsets).view(t, n, dim).transpose(0, 1).reshape(n, t * dim)
        F.mse_loss(out, target).backward()
        opt.step()

    return step


def fbgemm_tables(tables: list[tuple[int, int]], optimizer: str, **kwargs: Any) -> Any:
    """FBGEMM's CPU table-batched module (``SplitTableBatchedEmbeddingBagsCodegen``) of
    ``tables`` (``(rows, dim)`` each, on the host), sum pooling, the optimizer
    ``EmbOptimType.<optimizer>`` fused into its backward with ``kwargs`` (``learning_rate``,
    ``eps``, ...); None where ``fbgemm_gpu`` is not importable. Also used by
    ``bench_optim.py`` and ``bench_dlrm.py``."""
    try:
        with warnings.catch_warnings():  # its import warns about modules the CPU build lacks
            warnings.simplefilter("ignore")
            from fbgemm_gpu.split_embedding_configs import EmbOptimType
            from fbgemm_gpu.split_table_batched_embeddings_ops_common import (
                EmbeddingLocation,
                PoolingMode,
            )
            from fbgemm_gpu.split_table_batched_embeddings_ops_training import (
                ComputeDevice,
                SplitTableBatchedEmbeddingBagsCodegen,
            )
    except ImportError:
        return None
    return SplitTableBatchedEmbeddingBagsCodegen(
        [(r, d, EmbeddingLocation.HOST, ComputeDevice.CPU) for r, d in tables],
        optimizer=getattr(EmbOptimType, optimizer), pooling_mode=PoolingMode.SUM, **kwargs)


def fbgemm_step(rows: list[int], dims: list[int], kb: KeyedBags, target: torch.Tensor
                ) -> Step | None:
    emb = fbgemm_tables(list(zip(rows, dims, strict=True)), "EXACT_ROWWISE_ADAGRAD",
                        learning_rate=LR, eps=1e-8)
    if emb is None:
        return None
    for name in ("weights_host", "momentum1_host"):  # the same pages as lookuplinear's tables
        getattr(emb, name).data = hugepages.place(getattr(emb, name).detach())
    idx, offsets = kb.values, kb.offsets

    def step() -> None:
        F.mse_loss(emb(idx, offsets), target).backward()  # the update is fused in backward

    return step


def torch_adam_step(rows: list[int], dims: list[int], kb: KeyedBags, target: torch.Tensor
                    ) -> Step:
    bags = nn.ModuleList(nn.EmbeddingBag(r, d, mode="sum", sparse=True, include_last_offset=True)
                         for r, d in zip(rows, dims, strict=True))
    opt = torch.optim.SparseAdam(bags.parameters(), lr=LR)
    for e in bags:  # tables and moments on huge pages, as lookuplinear's (the state as
        # SparseAdam's first step creates it)
        e.weight.data = hugepages.place(e.weight.detach())
        opt.state[e.weight] = {"step": 0, **{k: hugepages.place(torch.zeros_like(e.weight))
                                             for k in ("exp_avg", "exp_avg_sq")}}
    feats = [kb[k] for k in kb]

    def step() -> None:
        opt.zero_grad(set_to_none=True)
        out = torch.cat([e(b.indices, b.offsets) for e, b in zip(bags, feats, strict=True)], 1)
        F.mse_loss(out, target).backward()
        opt.step()

    return step


def loss_step(target: torch.Tensor) -> Step:
    """What every method's step spends outside its tables: the MSE's forward and backward on
    an output of the step's shape."""
    out = torch.randn(target.shape, requires_grad=True)

    def step() -> None:
        out.grad = None
        F.mse_loss(out, target).backward()

    return step


class _Width(NamedTuple):
    """One width's part of :func:`kernels_step`: its tables' rows in one table, the row-wise
    state, the batch's rows of it, their bags' offsets (None: one ID per feature), the output
    buffer of a one-ID batch, and a gradient of the output's shape."""

    table: torch.Tensor
    state: torch.Tensor
    indices: torch.Tensor
    offsets: torch.Tensor | None
    out: torch.Tensor
    grad: torch.Tensor


def kernels_step(rows: list[int], dims: list[int], kb: KeyedBags, target: torch.Tensor
                 ) -> Step:
    """The floor of a fused step: only the kernels any method must run, one after the other,
    with nothing around them (no autograd, no Python between them, no checks). Per width: the
    batch's rows gathered into a ready buffer (``torch.index_select``; bags summed by torch's
    ``embedding_bag``), the loss's forward and backward, and the fused row-wise Adagrad update
    of the batch's rows from a gradient of the lookup's shape (``lookuplinear::rows_fused_``,
    all widths in one call). Each kernel meets the caches the kernels before it left, as in a
    step; timed alone and repeated, each would find its rows in the cache."""
    lengths = kb.lengths().view(len(rows), -1)
    values = torch.split(kb.values, lengths.sum(1).tolist())
    one_hot = bool((lengths == 1).all())
    parts: list[_Width] = []
    for d in sorted(set(dims)):
        of_width = [t for t, w in enumerate(dims) if w == d]
        n_rows = sum(rows[t] for t in of_width)
        starts = np.concatenate([[0], np.cumsum([rows[t] for t in of_width])[:-1]]).tolist()
        idx = torch.cat([values[t] + s for t, s in zip(of_width, starts, strict=True)])
        offsets = None
        if one_hot:  # batch-major, as an output row holds every feature
            idx = idx.view(len(of_width), -1).t().contiguous().view(-1)
        else:
            offsets = torch.zeros(lengths[of_width].numel() + 1, dtype=torch.long)
            torch.cumsum(lengths[of_width].reshape(-1), 0, out=offsets[1:])
        n_out = idx.numel() if offsets is None else offsets.numel() - 1
        parts.append(_Width(hugepages.place(torch.randn(n_rows, d) * 0.01),
                            hugepages.place(torch.zeros(n_rows)), idx, offsets,
                            torch.empty(n_out, d), torch.randn(n_out, d) * 1e-3))
    loss = loss_step(target)
    update = torch.ops.lookuplinear.rows_fused_
    operands = ([p.table for p in parts], [p.state for p in parts], [p.grad for p in parts],
                [p.indices for p in parts], [p.offsets for p in parts], [None] * len(parts),
                [-1] * len(parts), "rowwise_adagrad",
                [v for p in parts for v in (LR, 1e-8, 0.0, 1 / p.table.shape[1])])

    def step() -> None:
        with torch.no_grad():
            for p in parts:
                if p.offsets is None:
                    torch.index_select(p.table, 0, p.indices, out=p.out)
                else:
                    F.embedding_bag(p.indices, p.table, p.offsets, mode="sum",
                                    include_last_offset=True)
        loss()
        update(*operands)

    return step


def measure(cases: dict[str, Step], repeats: int, steps: int) -> dict[str, float]:
    for step in cases.values():  # warm-up: allocate state, touch pages
        for _ in range(2):
            step()
    times: dict[str, list[float]] = {k: [] for k in cases}
    order = np.random.default_rng(1)
    names = list(cases)
    for _ in range(repeats):
        for i in order.permutation(len(names)):
            t = time.perf_counter()
            for _ in range(steps):
                cases[names[i]]()
            times[names[i]].append((time.perf_counter() - t) / steps)
    return {k: statistics.median(v) * 1e3 for k, v in times.items()}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--dim", type=int, default=16)
    p.add_argument("--mixed-dims", action="store_true",
                   help="widths 8, 16 and 32 by table size instead of --dim (no one-table "
                        "baseline then)")
    p.add_argument("--batch", type=int, default=2048)
    p.add_argument("--repeats", type=int, default=7)
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--scale", type=float, default=1.0,
                   help="multiply every cardinality (a smaller run for a smaller machine)")
    p.add_argument("--adam", action="store_true",
                   help="also fused Adam against nn.EmbeddingBag + SparseAdam (13 GB more)")
    p.add_argument("--unfused", action="store_true",
                   help="also the collection with unfused optimizers, and its forward alone")
    p.add_argument("--threads", type=int, default=None,
                   help="torch threads for every method (default: torch's choice, one per core)")
    p.add_argument("--json", help="write the results here")
    args = p.parse_args(argv)
    print(f"machine: {format_machine(machine_info())}")
    if args.threads:
        torch.set_num_threads(args.threads)
    rows = [max(1, int(r * args.scale)) for r in CRITEO]
    dims = mixed_dims(rows) if args.mixed_dims else [args.dim] * len(rows)
    rng = np.random.default_rng(0)
    with open("/proc/cpuinfo") as info:
        cpu = next((ln.split(":", 1)[1].strip() for ln in info if "model name" in ln),
                   platform.processor())
    print(f"{cpu}, {os.cpu_count()} cores, torch {torch.__version__} ({torch.get_num_threads()} "
          f"threads), THP_MEM_ALLOC_ENABLE={os.environ.get('THP_MEM_ALLOC_ENABLE', 'unset')}; "
          f"26 tables, {sum(rows):,} rows, widths {sorted(set(dims))} ({sum(dims)} columns), "
          f"batch {args.batch}")
    report: dict[str, Any] = {"rows": rows, "dims": dims, "batch": args.batch, "results": {}}
    for kind in ("one-hot", "multi-hot"):
        torch.manual_seed(0)
        kb, _ = batch(rows, args.batch, kind == "multi-hot", rng)
        target = torch.randn(args.batch, sum(dims))
        cases: dict[str, Step] = {
            "LookupCollection + RowWiseAdagrad (fused)":
                collection_step(rows, dims, kb, target, "RowWiseAdagrad"),
        }
        if not args.mixed_dims:
            cases["one LookupLinear of all rows + RowWiseAdagrad (fused)"] = one_table_step(
                rows, args.dim, kb, target)
        fb = fbgemm_step(rows, dims, kb, target)
        if fb is not None:
            cases["FBGEMM table-batched, EXACT_ROWWISE_ADAGRAD"] = fb
        if args.unfused:
            cases["LookupCollection + torch.optim.SGD"] = unfused_step(
                rows, dims, kb, target, "SGD")
            cases["LookupCollection + RowWiseAdagrad (fused=False)"] = unfused_step(
                rows, dims, kb, target, "RowWiseAdagrad")
            cases["LookupCollection forward"] = unfused_step(rows, dims, kb, target, None)
        cases[LOSS] = loss_step(target)
        cases[KERNELS] = kernels_step(rows, dims, kb, target)
        res = measure(cases, args.repeats, args.steps)
        has_fbgemm = fb is not None
        del cases, fb
        gc.collect()
        if args.adam:
            adam = {"LookupCollection + Adam (fused)":
                    collection_step(rows, dims, kb, target, "Adam"),
                    "26 nn.EmbeddingBag(sparse=True) + torch.optim.SparseAdam":
                    torch_adam_step(rows, dims, kb, target)}
            res.update(measure(adam, args.repeats, max(1, args.steps // 2)))
            del adam
            gc.collect()
        report["results"][kind] = res
        print(f"\n{kind}: {kb.values.numel():,} IDs per step\n\n| method | ms per step |\n"
              "|---|---|")
        for k, v in res.items():
            print(f"| {k} | {v:.2f} |")
        ours = res["LookupCollection + RowWiseAdagrad (fused)"]
        if not args.mixed_dims:
            print(f"\ncollection / one table: "
                  f"{ours / res[next(k for k in res if 'one ' in k)]:.2f}x (goal <= 1.1x)")
        if has_fbgemm:
            fb_ms = res[next(k for k in res if "FBGEMM" in k)]
            print(f"collection / FBGEMM: {ours / fb_ms:.2f}x (goal <= 0.55x); without the "
                  f"loss: {(ours - res[LOSS]) / (fb_ms - res[LOSS]):.2f}x; the kernels alone / "
                  f"FBGEMM: {res[KERNELS] / fb_ms:.2f}x")
        print(f"collection / the kernels alone: {ours / res[KERNELS]:.2f}x")
        if args.adam:
            print(f"SparseAdam / collection Adam: "
                  f"{res[next(k for k in res if 'SparseAdam' in k)] / res['LookupCollection + Adam (fused)']:.1f}x"  # noqa: E501
                  " (goal >= 4x)")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
