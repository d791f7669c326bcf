"""``padding_idx`` on index tensors: ``LookupLinear`` and ``lookuplinear.Embedding`` against
``nn.Embedding``.

Run from the repository root:

    .venv/bin/python benchmarks/bench_padding.py

A ``(256, 20)`` index tensor (token IDs, the last five positions of each row the padding
index 0) into a 50,000 x 32 table, one thread: the forward, and the forward and backward of
``out.sum()`` with a dense (``sparse=False``) and a row-sparse (``sparse=True``) gradient, for
``nn.Embedding(padding_idx=0)``, ``lookuplinear.Embedding(padding_idx=0)`` and
``LookupLinear(bias=False, padding_idx=0)`` with the same table; and the same without
``padding_idx``. Medians of ``--repeats`` rounds of ``--calls`` calls each, interleaved in an
order shuffled every round. Printed: microseconds per call and the ratio to ``nn.Embedding``
with the same ``padding_idx`` and ``sparse`` (the goal: at most 1.2).
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import numpy as np
import torch
from torch import nn

import lookuplinear
from lookuplinear.report.machine import format_machine, machine_info


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rows", type=int, default=50_000)
    p.add_argument("--dim", type=int, default=32)
    p.add_argument("--repeats", type=int, default=9)
    p.add_argument("--calls", type=int, default=50)
    args = p.parse_args(argv)
    print(f"machine: {format_machine(machine_info())}")
    torch.set_num_threads(1)
    torch.manual_seed(0)
    x = torch.randint(1, args.rows, (256, 20))
    x[:, 15:] = 0
    cases: dict[str, Callable[[], object]] = {}
    for pad in (0, None):
        for sparse in (False, True):
            stock = nn.Embedding(args.rows, args.dim, padding_idx=pad, sparse=sparse)
            ours = lookuplinear.Embedding(args.rows, args.dim, padding_idx=pad, sparse=sparse)
            layer = lookuplinear.LookupLinear(args.rows, args.dim, bias=False, padding_idx=pad,
                                              sparse=sparse)
            with torch.no_grad():
                ours.weight.copy_(stock.weight)
                layer.weight.copy_(stock.weight)
            for name, m in (("nn.Embedding", stock), ("lookuplinear.Embedding", ours),
                            ("LookupLinear", layer)):
                key = f"padding_idx={pad}, sparse={sparse}"
                cases[f"{name} forward, {key}"] = _forward(m, x)
                cases[f"{name} forward+backward, {key}"] = _step(m, x)
    times: dict[str, list[float]] = {k: [] for k in cases}
    names = list(cases)
    order = np.random.default_rng(0)
    for f in cases.values():
        f()
    for _ in range(args.repeats):
        for i in order.permutation(len(names)):
            t = time.perf_counter()
            for _ in range(args.calls):
                cases[names[i]]()
            times[names[i]].append((time.perf_counter() - t) / args.calls)
    med = {k: statistics.median(v) * 1e6 for k, v in times.items()}
    print(f"(256, 20) indices into {args.rows:,} x {args.dim}, torch {torch.__version__}, "
          "1 thread\n\n| case | us | / nn.Embedding |\n|---|---|---|")
    for k in names:
        stock = med[k.replace("lookuplinear.Embedding", "nn.Embedding")
                    .replace("LookupLinear", "nn.Embedding")]
        print(f"| {k} | {med[k]:.1f} | {med[k] / stock:.2f} |")
    return 0


def _forward(m: nn.Module, x: torch.Tensor) -> Callable[[], object]:
    def run() -> object:
        with torch.no_grad():
            return m(x)
    return run


def _step(m: nn.Module, x: torch.Tensor) -> Callable[[], object]:
    weight = m.weight

    def run() -> object:
        weight.grad = None
        m(x).sum().backward()
        return weight.grad
    return run


if __name__ == "__main__":
    raise SystemExit(main())
