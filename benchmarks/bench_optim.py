"""One training step per optimizer on one big table: lookuplinear.optim vs torch and FBGEMM.

Run from the repository root, in the benchmark environment (docs/performance.md, Setup):

    .venv-bench/bin/python benchmarks/bench_optim.py

A step is forward (sum of each bag's rows), an MSE loss, backward and the optimizer update;
FBGEMM fuses the update into its backward. Every method trains its own copy of the same table
on the same batch; the methods run interleaved, round after round, and each round times
``--steps`` steps of each, in an order shuffled anew every round (seeded): the first step of a
method after dense ``torch.optim.Adam``, which sweeps the whole table and its state, starts with
cold caches and TLB, and in a fixed order the same method would always pay for it. Printed:
medians per step, ratios to the anchors, the bytes each step must move (touched rows of the
table and of the optimizer state) per second next to a plain memory copy of as many bytes, and
the optimizer state each adds. FBGEMM
(``fbgemm-gpu-cpu``, installed in the benchmark environment only) is measured when importable.

``--dense-model`` times instead ``opt.step()`` alone on a model of many small dense parameters
(an MLP of ``--layers`` square layers of ``--width``, weights and biases, after one
``LookupLinear(sparse=True)`` table), its gradients computed once and kept: ``lookuplinear.optim``
against ``torch.optim``'s default (on the CPU its single-tensor loop) and ``foreach=True``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from bench_collection import fbgemm_tables
from torch import nn

from lookuplinear import LookupLinear, optim
from lookuplinear.ops import use_backend
from lookuplinear.report.machine import format_machine, machine_info

Step = Callable[[], None]
LR = 0.01


@dataclass
class Case:
    """One method: its step and what it moves per step."""

    name: str
    step: Step
    anchor: str | None = None  # the method its goal compares it with
    goal: float | None = None  # at most this many times the anchor's step
    state_per_row: float = 0.0  # optimizer state values per table row
    times: list[float] = field(default_factory=list)


def draw(dist: str, rows: int, n: int, rng: np.random.Generator) -> torch.Tensor:
    """``n`` indices in ``[0, rows)``: uniform, or Zipf with exponent 1.05 (0 most frequent)."""
    if dist == "uniform":
        return torch.from_numpy(rng.integers(0, rows, n))
    return torch.from_numpy((rng.zipf(1.05, n) - 1) % rows)


def lookup_case(
    name: str, init: torch.Tensor, batch: tuple[Any, ...], *, backend: str = "auto",
    fused: bool = False,
) -> Step:
    """``backend="torch"``: the torch-op twins of the C kernels (what CUDA runs), for the record;
    ``fused=True``: the update applied inside backward."""
    idx, offsets, target = batch
    layer = LookupLinear(init.shape[0], init.shape[1], bias=False, sparse=True,
                         include_last_offset=True,
                         init=lambda w: w.copy_(init))
    opt = getattr(optim, name)(layer.parameters(), lr=LR, fused=fused)

    def step() -> None:
        with use_backend(backend):
            opt.zero_grad(set_to_none=True)
            F.mse_loss(layer(idx, offsets=offsets), target).backward()
            opt.step()

    def phases() -> tuple[float, float, float]:
        """Seconds of (forward + loss, backward, optimizer step) of one step."""
        with use_backend(backend):
            t0 = time.perf_counter()
            opt.zero_grad(set_to_none=True)
            loss = F.mse_loss(layer(idx, offsets=offsets), target)
            t1 = time.perf_counter()
            loss.backward()
            t2 = time.perf_counter()
            opt.step()
            return t1 - t0, t2 - t1, time.perf_counter() - t2

    step.phases = phases  # type: ignore[attr-defined]
    return step


def torch_case(cls: type, init: torch.Tensor, batch: tuple[Any, ...], sparse: bool) -> Step:
    idx, offsets, target = batch
    emb = nn.EmbeddingBag(init.shape[0], init.shape[1], mode="sum", sparse=sparse,
                          include_last_offset=True, _weight=init.clone())
    opt = cls(emb.parameters(), lr=LR)

    def step() -> None:
        opt.zero_grad(set_to_none=True)
        F.mse_loss(emb(idx, offsets), target).backward()
        opt.step()

    return step


def fbgemm_table(rows: int, dim: int, kind: str, init: torch.Tensor) -> Any:
    """FBGEMM's CPU table-batched embedding (one table, sum pooling, fused ``kind`` optimizer)
    holding ``init``; None when ``fbgemm_gpu`` is not importable."""
    emb = fbgemm_tables([(rows, dim)], kind, learning_rate=LR, eps=1e-8)
    if emb is None:
        return None
    with torch.no_grad():
        emb.split_embedding_weights()[0].copy_(init)
    return emb


def fbgemm_case(kind: str, init: torch.Tensor, batch: tuple[Any, ...]) -> Step | None:
    emb = fbgemm_table(init.shape[0], init.shape[1], kind, init)
    if emb is None:
        return None
    idx, offsets, target = batch

    def step() -> None:
        F.mse_loss(emb(idx, offsets), target).backward()  # the update is fused in backward

    return step


def copy_time(nbytes: int, repeats: int) -> float:
    """Median seconds of ``dst.copy_(src)`` moving ``nbytes`` (half read, half written)."""
    n = max(nbytes // 8, 1)  # float32 elements per side
    src, dst = torch.randn(n), torch.empty(n)
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        dst.copy_(src)
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def fbgemm_agreement(seed: int = 0) -> dict[str, float] | None:
    """Max |w_ours - w_fbgemm| after 5 identical steps on a 1000 x 16 table, per optimizer."""
    g = torch.Generator().manual_seed(seed)
    rows, dim, bag = 1000, 16, 8
    init = torch.randn(rows, dim, generator=g)
    idx = torch.randint(0, rows, (64 * bag,), generator=g)
    offsets = torch.arange(0, idx.numel() + 1, bag)
    target = torch.randn(64, dim, generator=g)
    result = {}
    for ours, kind in (("RowWiseAdagrad", "EXACT_ROWWISE_ADAGRAD"), ("SGD", "EXACT_SGD"),
                       ("Adagrad", "EXACT_ADAGRAD")):
        emb = fbgemm_table(rows, dim, kind, init)
        if emb is None:
            return None
        layer = LookupLinear(rows, dim, bias=False, sparse=True, include_last_offset=True,
                             init=lambda w: w.copy_(init))
        kw = {"eps": 1e-8} if ours != "SGD" else {}
        opt = getattr(optim, ours)(layer.parameters(), lr=LR, **kw)
        for _ in range(5):
            F.mse_loss(emb(idx, offsets), target).backward()
            opt.zero_grad()
            F.mse_loss(layer(idx, offsets=offsets), target).backward()
            opt.step()
        diff = (emb.split_embedding_weights()[0] - layer.weight.detach()).abs().max()
        result[f"{ours} vs FBGEMM {kind}"] = float(diff)
    return result


def build_cases(
    init: torch.Tensor, batch: tuple[Any, ...], dense_adam: bool, torch_ops: bool
) -> list[Case]:
    cases: list[Case] = []
    for kind in ("EXACT_SGD", "EXACT_ADAGRAD", "EXACT_ROWWISE_ADAGRAD"):
        step = fbgemm_case(kind, init, batch)
        if step is not None:
            cases.append(Case(f"FBGEMM fused {kind}", step))
    fb = {c.name for c in cases}
    rowwise = "FBGEMM fused EXACT_ROWWISE_ADAGRAD"

    def anchor(name: str) -> str | None:
        return name if name in fb else None

    sparse = "nn.EmbeddingBag(sparse=True)"
    cases += [
        Case(f"{sparse} + torch.optim.SGD", torch_case(torch.optim.SGD, init, batch, True)),
        Case(f"{sparse} + torch.optim.Adagrad",
             torch_case(torch.optim.Adagrad, init, batch, True)),
        Case(f"{sparse} + torch.optim.SparseAdam",
             torch_case(torch.optim.SparseAdam, init, batch, True)),
    ]
    if dense_adam:
        cases.append(Case("nn.EmbeddingBag (dense grad) + torch.optim.Adam",
                          torch_case(torch.optim.Adam, init, batch, False)))
    goals = {  # name -> (anchor, goal, state values per row)
        "SGD": (anchor("FBGEMM fused EXACT_SGD"), 1.0, 0),
        "Adagrad": (anchor("FBGEMM fused EXACT_ADAGRAD"), 1.0, init.shape[1]),
        "RowWiseAdagrad": (anchor(rowwise), 1.0, 1),
        "Adam": (anchor(rowwise), 2.0, 2 * init.shape[1]),
        "AdamW": (anchor(rowwise), 2.0, 2 * init.shape[1]),
    }
    for fused in (False, True):
        cases += [Case(f"lookuplinear.optim.{n}" + (" (fused)" if fused else ""),
                       lookup_case(n, init, batch, fused=fused), *goal)
                  for n, goal in goals.items()]
    if torch_ops:
        cases += [Case(f"lookuplinear.optim.{n} (torch ops, no C kernels)",
                       lookup_case(n, init, batch, backend="torch"))
                  for n in ("SGD", "RowWiseAdagrad", "Adam")]
    return cases


class DenseModel(nn.Module):
    """A ``LookupLinear(sparse=True)`` table (no bias), then ``layers`` square layers + ReLU."""

    def __init__(self, rows: int, width: int, layers: int) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.table = LookupLinear(rows, width, bias=False, sparse=True)
        self.mlp = nn.Sequential(*[m for _ in range(layers)
                                   for m in (nn.Linear(width, width), nn.ReLU())])

    def forward(self, idx: torch.Tensor, offsets: torch.Tensor) -> torch.Tensor:
        return self.mlp(self.table(idx, offsets=offsets))


def dense_model_cases(args: argparse.Namespace) -> list[Case]:
    """``opt.step()`` of each optimizer on its own copy of :class:`DenseModel`, gradients
    computed once (the table's sparse, the layers' dense) and kept for every step."""
    g = torch.Generator().manual_seed(0)
    idx = torch.randint(0, args.rows, (args.batch * args.bag,), generator=g)
    offsets = torch.arange(0, idx.numel() + 1, args.bag)
    kws: dict[str, dict[str, Any]] = {"SGD": {"lr": LR, "momentum": 0.9}, "Adagrad": {"lr": LR},
                                      "RowWiseAdagrad": {"lr": LR}, "Adam": {"lr": LR}}

    def case(name: str, make: Callable[[DenseModel], list[torch.optim.Optimizer]]) -> Case:
        model = DenseModel(args.rows, args.width, args.layers)
        model(idx, offsets).pow(2).mean().backward()
        opts = make(model)

        def step() -> None:
            for o in opts:
                o.step()

        return Case(name, step)

    def torch_default(name: str, **kw: Any) -> Callable[[DenseModel], list[Any]]:
        def make(m: DenseModel) -> list[Any]:
            if name == "Adam":  # torch.optim.Adam refuses the table's sparse gradient
                return [torch.optim.SparseAdam(m.table.parameters(), lr=LR),
                        torch.optim.Adam(m.mlp.parameters(), **kws[name], **kw)]
            return [getattr(torch.optim, name)(m.parameters(), **kws[name], **kw)]
        return make

    cases = []
    for name, kw in kws.items():
        cases.append(case(f"lookuplinear.optim.{name}",
                          lambda m, name=name, kw=kw: [getattr(optim, name)(m.parameters(), **kw)]))
        if hasattr(torch.optim, name):
            cases.append(case(f"torch.optim.{name} (default)", torch_default(name)))
            cases.append(case(f"torch.optim.{name}(foreach=True)",
                              torch_default(name, foreach=True)))
    return cases


def run_dense_model(args: argparse.Namespace) -> dict[str, Any]:
    """Medians of ``opt.step()`` on :class:`DenseModel` over interleaved, shuffled rounds."""
    cases = dense_model_cases(args)
    for c in cases:  # warm-up: allocate state
        for _ in range(2):
            c.step()
    load0 = os.getloadavg()[0]
    shuffle = np.random.default_rng(1)
    for _ in range(args.repeats):
        for k in shuffle.permutation(len(cases)):
            c = cases[k]
            t = time.perf_counter()
            for _ in range(args.steps):
                c.step()
            c.times.append((time.perf_counter() - t) / args.steps)
    n_params = 2 * args.layers + 1
    rows_out = [{"method": c.name, "median_ms": statistics.median(c.times) * 1e3,
                 "times_ms": [t * 1e3 for t in c.times]} for c in cases]
    return {"command": "python benchmarks/bench_optim.py " + " ".join(args.argv),
            "machine": machine_info(),
            "dense_model": {"layers": args.layers, "width": args.width, "table_rows": args.rows,
                            "parameters": n_params, "rows": rows_out,
                            "load_average": [load0, os.getloadavg()[0]]}}


def print_dense_model(report: dict[str, Any]) -> None:
    d = report["dense_model"]
    print(f"machine: {format_machine(report['machine'])}")
    print(f"opt.step() on {d['layers']} x nn.Linear({d['width']}, {d['width']}) after a "
          f"LookupLinear({d['table_rows']:,}, {d['width']}, sparse=True): {d['parameters']} "
          f"parameters; load average {d['load_average'][0]:.1f} -> {d['load_average'][1]:.1f}")
    print(f"{'method':45s} {'median ms':>10s}")
    for r in d["rows"]:
        print(f"{r['method']:45s} {r['median_ms']:10.3f}")


def run(args: argparse.Namespace) -> dict[str, Any]:
    torch.manual_seed(0)
    rng = np.random.default_rng(0)
    init = torch.randn(args.rows, args.dim)
    report: dict[str, Any] = {
        "command": "python benchmarks/bench_optim.py " + " ".join(args.argv),
        "machine": machine_info(),
        "shape": {"rows": args.rows, "dim": args.dim, "batch": args.batch, "bag": args.bag},
        "fbgemm_agreement": fbgemm_agreement(),
        "dists": {},
    }
    for dist in args.dists.split(","):
        idx = draw(dist, args.rows, args.batch * args.bag, rng)
        offsets = torch.arange(0, idx.numel() + 1, args.bag)
        target = torch.randn(args.batch, args.dim)
        batch = (idx, offsets, target)
        unique = int(torch.unique(idx).numel())
        cases = build_cases(init, batch, dense_adam=args.dense_adam, torch_ops=args.torch_ops)
        for c in cases:  # warm-up: compile kernels, allocate state
            for _ in range(2):
                c.step()
        load0 = os.getloadavg()[0]
        shuffle = np.random.default_rng(1)
        for _ in range(args.repeats):
            for k in shuffle.permutation(len(cases)):
                c = cases[k]
                steps = 1 if "dense grad" in c.name else args.steps
                t = time.perf_counter()
                for _ in range(steps):
                    c.step()
                c.times.append((time.perf_counter() - t) / steps)
        medians = {c.name: statistics.median(c.times) for c in cases}
        breakdown = {}
        for c in cases:  # where a lookuplinear step's time goes, after the timed rounds
            if hasattr(c.step, "phases"):
                parts = [c.step.phases() for _ in range(args.repeats * args.steps)]
                breakdown[c.name] = [statistics.median(p) * 1e3 for p in zip(*parts, strict=True)]
        torch_sgd = medians["nn.EmbeddingBag(sparse=True) + torch.optim.SGD"]
        rows_out = []
        for c in cases:
            m = medians[c.name]
            row: dict[str, Any] = {"method": c.name, "median_ms": m * 1e3,
                                   "vs_torch_sparse_sgd": m / torch_sgd,
                                   "times_ms": [t * 1e3 for t in c.times]}
            if c.name in breakdown:
                row["phases_ms"] = dict(zip(("forward", "backward", "step"), breakdown[c.name],
                                            strict=True))
            if c.name.startswith("lookuplinear") and "torch ops" not in c.name:
                # touched rows of the table (read + write) and of the state (read + write)
                nbytes = 2 * unique * (args.dim + c.state_per_row) * 4
                row["bytes_moved"] = nbytes
                row["step_GBps"] = nbytes / m / 1e9
                row["copy_GBps"] = nbytes / copy_time(nbytes, 31) / 1e9
                row["state_values_per_row"] = c.state_per_row
                for other in ("nn.EmbeddingBag(sparse=True) + torch.optim.SparseAdam",
                              "nn.EmbeddingBag (dense grad) + torch.optim.Adam"):
                    if other in medians:
                        row[f"speedup_vs {other}"] = medians[other] / m
                if c.anchor is not None:
                    ratio = m / medians[c.anchor]
                    row.update(anchor=c.anchor, vs_anchor=ratio, goal=c.goal,
                               met=bool(c.goal is not None and ratio <= c.goal))
            rows_out.append(row)
        report["dists"][dist] = {"unique_rows": unique, "nnz": idx.numel(), "rows": rows_out,
                                 "load_average": [load0, os.getloadavg()[0]]}
    return report


def print_report(report: dict[str, Any]) -> None:
    print(f"machine: {format_machine(report['machine'])}")
    s = report["shape"]
    print(f"table {s['rows']:,} x {s['dim']}, batch {s['batch']:,} bags x {s['bag']} indices")
    if report["fbgemm_agreement"]:
        for k, v in report["fbgemm_agreement"].items():
            print(f"  agreement after 5 steps, {k}: max |dw| = {v:.2e}")
    for dist, d in report["dists"].items():
        print(f"\n{dist} indices: {d['nnz']:,} entries, {d['unique_rows']:,} unique rows; "
              f"load average {d['load_average'][0]:.1f} -> {d['load_average'][1]:.1f}")
        print(f"{'method':55s} {'median ms':>10s} {'vs torch SGD':>12s}  goal")
        for r in d["rows"]:
            goal = ""
            if "vs_anchor" in r:
                goal = (f"{r['vs_anchor']:.2f}x {r['anchor'].replace('FBGEMM fused ', '')} "
                        f"(goal <= {r['goal']:.1f}x: {'met' if r['met'] else 'MISSED'})")
            print(f"{r['method']:55s} {r['median_ms']:10.3f} {r['vs_torch_sparse_sgd']:11.2f}x"
                  f"  {goal}")
        print(f"\n{'phases, median ms':55s} {'fwd+loss':>9s} {'backward':>9s} {'opt.step':>9s}")
        for r in d["rows"]:
            if "phases_ms" in r:
                ph = r["phases_ms"]
                print(f"{r['method']:55s} {ph['forward']:9.3f} {ph['backward']:9.3f} "
                      f"{ph['step']:9.3f}")
        print(f"\n{'lookuplinear.optim':40s} {'MB moved':>9s} {'step GB/s':>10s} "
              f"{'copy GB/s':>10s} {'state/row':>9s}  speedups")
        for r in d["rows"]:
            if "bytes_moved" not in r:
                continue
            ups = ", ".join(f"{v:.0f}x vs {k.split('+ ')[-1]}" for k, v in r.items()
                            if k.startswith("speedup_vs"))
            print(f"{r['method'].split('optim.')[-1]:40s} {r['bytes_moved'] / 1e6:9.1f} "
                  f"{r['step_GBps']:10.2f} {r['copy_GBps']:10.2f} "
                  f"{r['state_values_per_row']:9.0f}  {ups}")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rows", type=int, default=1_000_000)
    p.add_argument("--dim", type=int, default=64)
    p.add_argument("--batch", type=int, default=1024)
    p.add_argument("--bag", type=int, default=20)
    p.add_argument("--dists", default="uniform,zipf")
    p.add_argument("--repeats", type=int, default=9, help="interleaved rounds (>= 7)")
    p.add_argument("--steps", type=int, default=5, help="steps per method per round")
    p.add_argument("--no-dense-adam", dest="dense_adam", action="store_false",
                   help="skip dense torch.optim.Adam (one full-table pass per step)")
    p.add_argument("--torch-ops", action="store_true",
                   help="also time the kernels' torch-op twins (the CUDA path) on CPU")
    p.add_argument("--threads", type=int, default=None,
                   help="torch threads (default: torch's choice, one per core)")
    p.add_argument("--dense-model", action="store_true",
                   help="time opt.step() on many small dense parameters instead (the MLP below "
                   "a table; --rows, --batch and --bag then shape the table and its batch)")
    p.add_argument("--layers", type=int, default=20, help="--dense-model: square layers")
    p.add_argument("--width", type=int, default=256, help="--dense-model: their width")
    p.add_argument("--json", help="write the results here")
    args = p.parse_args(argv)
    args.argv = argv if argv is not None else __import__("sys").argv[1:]
    if args.threads:
        torch.set_num_threads(args.threads)
    if args.dense_model:
        report = run_dense_model(args)
        print_dense_model(report)
    else:
        report = run(args)
        print_report(report)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
