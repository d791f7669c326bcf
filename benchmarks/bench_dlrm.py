"""A DLRM-shaped model with ``LookupLinear`` tables against the same model with ``nn.EmbeddingBag``.

Run from the repository root:

    .venv/bin/python benchmarks/bench_dlrm.py --threads 1

The model is built here in the shape of Facebook's DLRM (``dlrm_s_pytorch.py``; none of its code
is copied): a bottom MLP on the dense features, one ``mode="sum"`` bag table per sparse feature
called as DLRM calls it, ``E(indices, offsets, per_sample_weights=None)`` with
``nn.EmbeddingBag``'s start offsets, the pairwise dot products of the bottom output and the
pooled rows, a top MLP ending in a sigmoid, binary cross-entropy, and SGD.

* stock: ``nn.EmbeddingBag(n, m, mode="sum", sparse=True)`` per table, ``torch.optim.SGD``;
* ours: ``LookupLinear(n, m, bias=False, mode="sum", sparse=True)`` per table (the same
  weights), with ``torch.optim.SGD``, and with ``lookuplinear.optim.SGD(fused=True)`` (the
  tables updated in the backward).

Timed (DLRM's small configuration by default: three tables of dimension 16, batch 128, 10
indices per bag): one table's forward (grad enabled, as in training), one table's forward and
backward, and the full training step (forward, loss, backward, optimizer step). Every method
runs once per round, the order shuffled every round, after warm-up rounds; a method's time is its
median over the rounds, and each ratio is also given as the median of its per-round ratios.
``--clock cpu`` times this thread's CPU time instead of wall time (on a machine shared with other
jobs, where wall time also counts the time they hold the core).
Goals: ours / stock <= 0.9 for one table's forward, <= 1.0 for its forward and backward and
for the step with ``torch.optim.SGD``, <= 0.9 for the step with the fused SGD. The floor: the
step of the same model whose tables' work is taken away (each table's output one fixed tensor),
the MLPs', interaction's, loss's and SGD's time alone; no tables can make a step faster. Where
FBGEMM imports, its table-batched module (one call for all the tables, the SGD update fused into
its backward) in the same model: the anchor's way.

Before timing, one training step of each model from the same weights on the same batch is
compared (FBGEMM's too): the losses and the updated weights must agree.
"""

from __future__ import annotations

import argparse
import copy
import itertools
import json
import os
import random
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

import torch
from bench_collection import fbgemm_tables
from torch import nn

from lookuplinear import LookupLinear, optim
from lookuplinear.report.machine import format_machine, machine_info

Batch = tuple[torch.Tensor, list[torch.Tensor], list[torch.Tensor], torch.Tensor]


def mlp(sizes: list[int], sigmoid_last: bool) -> nn.Sequential:
    """DLRM's MLP: linear layers with ReLU, the last one with a sigmoid if ``sigmoid_last``."""
    layers: list[nn.Module] = []
    for i, (a, b) in enumerate(itertools.pairwise(sizes)):
        layers.append(nn.Linear(a, b))
        last = i == len(sizes) - 2
        layers.append(nn.Sigmoid() if last and sigmoid_last else nn.ReLU())
    return nn.Sequential(*layers)


class DLRMShaped(nn.Module):
    """Bottom MLP, one bag table per sparse feature, dot-product interaction, top MLP."""

    def __init__(self, tables: list[nn.Module], bottom: list[int], top: list[int]) -> None:
        super().__init__()
        self.bot = mlp(bottom, sigmoid_last=False)
        self.emb = nn.ModuleList(tables)
        n = len(tables) + 1
        rows, cols = torch.tril_indices(n, n, offset=-1)  # pairs i > j, no self-interaction
        self.register_buffer("rows", rows, persistent=False)
        self.register_buffer("cols", cols, persistent=False)
        self.top = mlp(top, sigmoid_last=True)

    def forward(self, dense: torch.Tensor, indices: list[torch.Tensor],
                offsets: list[torch.Tensor]) -> torch.Tensor:
        x = self.bot(dense)  # (B, d)
        pooled = [table(i, o, per_sample_weights=None)
                  for table, i, o in zip(self.emb, indices, offsets, strict=True)]
        t = torch.cat([x, *pooled], dim=1).view(x.shape[0], -1, x.shape[1])  # (B, n, d)
        z = torch.bmm(t, t.transpose(1, 2))  # (B, n, n)
        r = torch.cat([x, z[:, self.rows, self.cols]], dim=1)  # (B, d + n(n-1)/2)
        return self.top(r)  # (B, 1)


class Pooled(nn.Module):
    """A table whose work is free: its output for any batch is one fixed ``(B, dim)`` tensor
    (no lookup, no gradient, no update), for the floor of a step that only the MLPs cost."""

    def __init__(self, batch: int, dim: int) -> None:
        super().__init__()
        self.register_buffer("out", torch.rand(batch, dim), persistent=False)

    def forward(self, indices: torch.Tensor, offsets: torch.Tensor,
                per_sample_weights: torch.Tensor | None = None) -> torch.Tensor:
        return self.out


class TableBatched(DLRMShaped):
    """The model with its tables as FBGEMM's table-batched module ``tbe`` (one call for every
    table, the SGD update fused into its backward, ``EXACT_SGD``: :func:`table_batched_model`):
    the anchor's way. Takes the batch as FBGEMM does, every table's indices in one tensor with
    their offsets (:func:`table_batched`)."""

    def __init__(self, stock: DLRMShaped, tbe: nn.Module) -> None:
        super().__init__([], [], [])
        self.bot, self.top = copy.deepcopy(stock.bot), copy.deepcopy(stock.top)
        self.rows, self.cols = stock.rows, stock.cols
        self.tbe = tbe
        with torch.no_grad():  # stock's weights
            for w, t in zip(tbe.split_embedding_weights(), stock.emb, strict=True):
                w.copy_(t.weight)

    def forward(self, dense: torch.Tensor, indices: list[torch.Tensor],
                offsets: list[torch.Tensor]) -> torch.Tensor:
        x = self.bot(dense)
        t = torch.cat([x, self.tbe(indices[0], offsets[0])], dim=1).view(
            x.shape[0], -1, x.shape[1])
        z = torch.bmm(t, t.transpose(1, 2))
        r = torch.cat([x, z[:, self.rows, self.cols]], dim=1)
        return self.top(r)


def table_batched_model(stock: DLRMShaped, lr: float) -> TableBatched | None:
    """Stock's model with its tables (and weights) in FBGEMM's table-batched module, SGD at
    ``lr`` fused into its backward; None where FBGEMM is not importable."""
    tbe = fbgemm_tables([(t.num_embeddings, t.embedding_dim) for t in stock.emb], "EXACT_SGD",
                        learning_rate=lr)
    return None if tbe is None else TableBatched(stock, tbe)


def table_batched(b: Batch) -> Batch:
    """A batch as :class:`TableBatched` takes it: every table's indices in one tensor, and
    their bags' offsets (with the end) in one."""
    dense, indices, offsets, labels = b
    starts = [0, *itertools.accumulate(i.numel() for i in indices)]
    ends = torch.tensor([starts[-1]])
    flat = torch.cat([o + a for o, a in zip(offsets, starts, strict=False)] + [ends])
    return dense, [torch.cat(indices)], [flat], labels


def make_models(rows: list[int], dim: int, bottom: list[int], top_hidden: list[int],
                seed: int) -> tuple[DLRMShaped, DLRMShaped]:
    """The stock model and ours, with the same weights."""
    torch.manual_seed(seed)
    n = len(rows) + 1
    top = [dim + n * (n - 1) // 2, *top_hidden, 1]
    stock = DLRMShaped([nn.EmbeddingBag(r, dim, mode="sum", sparse=True) for r in rows],
                       [*bottom, dim], top)
    ours = DLRMShaped([LookupLinear(r, dim, bias=False, mode="sum", sparse=True) for r in rows],
                      [*bottom, dim], top)
    ours.load_state_dict(stock.state_dict())
    return stock, ours


def make_batches(rows: list[int], dense_features: int, batch: int, bag: int, count: int,
                 seed: int) -> list[Batch]:
    """``count`` random batches as DLRM's random data generator makes them (uniform indices,
    ``bag`` per bag, start offsets), with binary labels."""
    g = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(count):
        dense = torch.rand(batch, dense_features, generator=g)
        indices = [torch.randint(0, r, (batch * bag,), generator=g) for r in rows]
        offsets = [torch.arange(0, batch * bag, bag) for _ in rows]
        labels = torch.randint(0, 2, (batch, 1), generator=g).float()
        out.append((dense, indices, offsets, labels))
    return out


def train_step(model: DLRMShaped, opt: torch.optim.Optimizer, loss_fn: nn.Module,
               b: Batch) -> torch.Tensor:
    dense, indices, offsets, labels = b
    opt.zero_grad()
    loss: torch.Tensor = loss_fn(model(dense, indices, offsets), labels)
    loss.backward()
    opt.step()
    return loss


def check_step(stock: DLRMShaped, ours: DLRMShaped, b: Batch, lr: float) -> float:
    """One step of each setup from the same weights: the largest difference of loss or weight."""
    loss_fn = nn.BCELoss()
    worst = 0.0
    ref = copy.deepcopy(stock)
    ref_loss = train_step(ref, torch.optim.SGD(ref.parameters(), lr=lr), loss_fn, b)
    for fused in (False, True):
        m = copy.deepcopy(ours)
        opt = (optim.SGD(m.parameters(), lr=lr, fused=True) if fused
               else torch.optim.SGD(m.parameters(), lr=lr))
        loss = train_step(m, opt, loss_fn, b)
        worst = max(worst, abs(float(loss.detach() - ref_loss.detach())))
        for (name, p), q in zip(m.named_parameters(), ref.parameters(), strict=True):
            diff = float((p.detach() - q.detach()).abs().max())
            if diff > 1e-5:
                raise AssertionError(f"{name} differs by {diff} after one step (fused={fused})")
            worst = max(worst, diff)
    tbe = table_batched_model(stock, lr)
    if tbe is None:
        return worst
    dense = [p for name, p in tbe.named_parameters() if not name.startswith("tbe.")]
    loss = train_step(tbe, torch.optim.SGD(dense, lr=lr), loss_fn, table_batched(b))
    worst = max(worst, abs(float(loss.detach() - ref_loss.detach())))
    for w, e in zip(tbe.tbe.split_embedding_weights(), ref.emb, strict=True):
        diff = float((w - e.weight.detach()).abs().max())
        if diff > 1e-5:
            raise AssertionError(f"FBGEMM's table differs by {diff} after one step")
        worst = max(worst, diff)
    return worst


def methods(stock: DLRMShaped, ours: DLRMShaped, batches: list[Batch], lr: float
            ) -> dict[str, Callable[[], None]]:
    """Every timed method; each call runs on the next of the pre-built batches."""
    loss_fn = nn.BCELoss()
    eb, ll = stock.emb[0], ours.emb[0]
    ours_fused = copy.deepcopy(ours)
    setups = {
        "step: nn.EmbeddingBag + torch.optim.SGD (stock)":
            (stock, torch.optim.SGD(stock.parameters(), lr=lr)),
        "step: LookupLinear + torch.optim.SGD": (ours, torch.optim.SGD(ours.parameters(), lr=lr)),
        "step: LookupLinear + lookuplinear.optim.SGD(fused=True)":
            (ours_fused, optim.SGD(ours_fused.parameters(), lr=lr, fused=True)),
    }
    k = [0]

    def next_batch() -> Batch:
        k[0] = (k[0] + 1) % len(batches)
        return batches[k[0]]

    def forward(table: nn.Module) -> Callable[[], None]:
        def run() -> None:
            _, indices, offsets, _ = next_batch()
            table(indices[0], offsets[0], per_sample_weights=None)
        return run

    def forward_backward(table: nn.Module) -> Callable[[], None]:
        def run() -> None:
            _, indices, offsets, _ = next_batch()
            table(indices[0], offsets[0], per_sample_weights=None).sum().backward()
            table.weight.grad = None
        return run

    def step(model: DLRMShaped, opt: torch.optim.Optimizer) -> Callable[[], None]:
        return lambda: train_step(model, opt, loss_fn, next_batch()) and None

    fns: dict[str, Callable[[], None]] = {
        "forward, one table: nn.EmbeddingBag": forward(eb),
        "forward, one table: LookupLinear": forward(ll),
        "forward+backward, one table: nn.EmbeddingBag": forward_backward(eb),
        "forward+backward, one table: LookupLinear": forward_backward(ll),
    }
    fns.update({name: step(m, opt) for name, (m, opt) in setups.items()})
    floor = copy.deepcopy(stock)  # the same MLPs, the tables' work taken away
    floor.emb = nn.ModuleList(Pooled(batches[0][0].shape[0], eb.embedding_dim)
                              for _ in floor.emb)
    fns[FLOOR] = step(floor, torch.optim.SGD(floor.parameters(), lr=lr))
    tbe = table_batched_model(stock, lr)
    if tbe is None:  # no FBGEMM: its row is left out
        return fns
    dense = [p for name, p in tbe.named_parameters() if not name.startswith("tbe.")]
    tbe_opt = torch.optim.SGD(dense, lr=lr)  # the tables' update is in the backward
    tbe_batches = [table_batched(b) for b in batches]
    j = [0]

    def tbe_step() -> None:
        j[0] = (j[0] + 1) % len(tbe_batches)
        train_step(tbe, tbe_opt, loss_fn, tbe_batches[j[0]])

    fns[FBGEMM] = tbe_step
    return fns


#: FBGEMM's table-batched tables, where it imports
FBGEMM = "step: FBGEMM table-batched, EXACT_SGD fused in its backward"


#: the step of the model whose tables cost nothing: no table can make a step faster
FLOOR = "step: the tables' work taken away (each table's output fixed): the floor"


# (label, numerator, denominator, goal or None)
RATIOS: tuple[tuple[str, str, str, float | None], ...] = (
    ("forward, one table: LookupLinear / nn.EmbeddingBag",
     "forward, one table: LookupLinear", "forward, one table: nn.EmbeddingBag", 0.9),
    ("forward+backward, one table: LookupLinear / nn.EmbeddingBag",
     "forward+backward, one table: LookupLinear", "forward+backward, one table: nn.EmbeddingBag",
     1.0),
    ("step: LookupLinear + torch.optim.SGD / stock",
     "step: LookupLinear + torch.optim.SGD", "step: nn.EmbeddingBag + torch.optim.SGD (stock)",
     1.0),
    ("step: LookupLinear + fused lookuplinear SGD / stock",
     "step: LookupLinear + lookuplinear.optim.SGD(fused=True)",
     "step: nn.EmbeddingBag + torch.optim.SGD (stock)", 0.9),
    ("step: the floor / stock (the best any tables can give)", FLOOR,
     "step: nn.EmbeddingBag + torch.optim.SGD (stock)", None),
    ("step: FBGEMM / stock", FBGEMM, "step: nn.EmbeddingBag + torch.optim.SGD (stock)", None),
)


def time_shuffled(fns: dict[str, Callable[[], None]], *, repeats: int, warmup: int,
                  target_s: float, seed: int, clock: Callable[[], float] = time.perf_counter
                  ) -> dict[str, list[float]]:
    """Seconds per call of each function, one sample per round, the order shuffled each round.

    The warm-up rounds calibrate ``inner``: a sample runs a function ``inner`` times in a row
    so that it lasts about ``target_s``. ``clock``: wall time, or ``time.thread_time`` (the
    CPU time of this thread, which leaves out the time other processes hold the core).
    """
    rng = random.Random(seed)
    inner = dict.fromkeys(fns, 1)
    times: dict[str, list[float]] = {k: [] for k in fns}
    names = list(fns)
    for r in range(warmup + repeats):
        rng.shuffle(names)
        for name in names:
            fn, k = fns[name], inner[name]
            t0 = clock()
            for _ in range(k):
                fn()
            dt = (clock() - t0) / k
            if r < warmup:
                inner[name] = max(1, min(10_000, round(target_s / max(dt, 1e-7))))
            else:
                times[name].append(dt)
    return times


def ratios(rounds: dict[str, list[float]]) -> list[dict[str, Any]]:
    """Each ratio of medians, the median of its per-round ratios, and its goal."""
    rows = []
    for label, num, den, goal in RATIOS:
        if num not in rounds:  # FBGEMM's, where it does not import
            continue
        value = statistics.median(rounds[num]) / statistics.median(rounds[den])
        paired = statistics.median(a / b for a, b in zip(rounds[num], rounds[den], strict=True))
        rows.append({"ratio": label, "value": value, "paired": paired, "goal": goal,
                     "ok": None if goal is None else value <= goal})
    return rows


def report(rounds: dict[str, list[float]], rows: list[dict[str, Any]]) -> str:
    lines = ["| method | median (us) |", "|---|---|"]
    lines += [f"| {name} | {statistics.median(ts) * 1e6:.1f} |" for name, ts in rounds.items()]
    lines += ["", "| ratio | ratio of medians | median of per-round ratios | goal | |",
              "|---|---|---|---|---|"]
    for r in rows:
        goal = "" if r["goal"] is None else f"<= {r['goal']:g}"
        mark = "" if r["ok"] is None else ("PASS" if r["ok"] else "FAIL")
        lines.append(f"| {r['ratio']} | {r['value']:.2f}x | {r['paired']:.2f}x | {goal} | "
                     f"{mark} |")
    return "\n".join(lines)


def _sizes(text: str) -> list[int]:
    return [int(x) for x in text.split("-")]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    p.add_argument("--rows", default="100000-100000-100000",
                   help="rows of each table, DLRM's --arch-embedding-size form")
    p.add_argument("--dim", type=int, default=16,
                   help="table dimension (DLRM's --arch-sparse-feature-size)")
    p.add_argument("--bottom", default="13-512-256-64",
                   help="bottom MLP before its last layer, which outputs --dim")
    p.add_argument("--top", default="512-256", help="top MLP's hidden layers")
    p.add_argument("--batch", type=int, default=128)
    p.add_argument("--bag", type=int, default=10, help="indices per bag")
    p.add_argument("--lr", type=float, default=0.01)
    p.add_argument("--repeats", type=int, default=31, help="timed rounds (default 31)")
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--sample-ms", type=float, default=20.0,
                   help="calibrated length of one timed sample (default 20 ms)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=None,
                   help="torch threads (default: torch's own); 1 on a machine shared with others")
    p.add_argument("--clock", choices=("wall", "cpu"), default="wall",
                   help="wall time (default), or this thread's CPU time: on a machine whose "
                   "cores other processes hold, the time they hold it is left out")
    p.add_argument("--json", metavar="OUT", help="also write every number to this JSON file")
    args = p.parse_args(argv)

    if args.threads is not None:
        torch.set_num_threads(args.threads)
    info = machine_info()
    print(f"machine: {format_machine(info)}")
    rows = _sizes(args.rows)
    bottom = _sizes(args.bottom)
    stock, ours = make_models(rows, args.dim, bottom, _sizes(args.top), args.seed)
    batches = make_batches(rows, bottom[0], args.batch, args.bag, 8, args.seed)
    print(f"case: tables {rows} x {args.dim}, batch {args.batch}, {args.bag} indices per bag, "
          f"bottom MLP {[*bottom, args.dim]}, top MLP {args.top}; {args.repeats} shuffled rounds "
          f"after {args.warmup} warm-up rounds, {args.clock} clock")
    worst = check_step(stock, ours, batches[0], args.lr)
    print(f"outputs: one step of each setup gives stock's loss and weights (max |diff| "
          f"{worst:.2e})")
    t0 = time.perf_counter()
    rounds = time_shuffled(methods(stock, ours, batches, args.lr), repeats=args.repeats,
                           warmup=args.warmup, target_s=args.sample_ms / 1e3, seed=args.seed,
                           clock=time.thread_time if args.clock == "cpu" else time.perf_counter)
    rows_out = ratios(rounds)
    print(report(rounds, rows_out))
    load = [round(x, 2) for x in os.getloadavg()]
    print(f"load average at the end: {load}; took {time.perf_counter() - t0:.0f} s")
    if args.json:
        os.makedirs(os.path.dirname(os.path.abspath(args.json)), exist_ok=True)
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump({"machine": info, "load_average_end": load, "args": vars(args),
                       "max_abs_diff": worst, "rounds_s": rounds, "ratios": rows_out}, f,
                      indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
