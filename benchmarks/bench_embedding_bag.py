"""``lookuplinear.EmbeddingBag`` against ``nn.EmbeddingBag`` in DLRM's shape.

Run from the repository root:

    .venv/bin/python benchmarks/bench_embedding_bag.py --repeats 31 --threads 1

(``--threads 1`` on a machine whose cores other programs use too: a parallel region there
waits for a descheduled thread, milliseconds, on either side of the pair.)

Three tables of 1,000 / 10,000 / 100,000 rows x 16 (``mode="sum"``, ``sparse=True``, as DLRM
builds them), a batch of 128 bags of 10 uniform indices per table, called as DLRM calls them
(``emb(indices, offsets)``). Timed: the forward of the three tables (under ``torch.no_grad``),
and forward + backward (the sum of the three outputs; row-sparse weight gradients). Three
models: ``nn.EmbeddingBag``, ``lookuplinear.EmbeddingBag`` (the drop-in subclass) and
``LookupLinear(bias=False)`` (what a factory function returning lookuplinear's own layer would
give: the same lookup without the subclass's input handling). Every model runs once per round,
in a rotating order, after warm-up rounds; its time is the median over the rounds of one
round's sample (``inner`` calls, calibrated to a few milliseconds). Printed: the times and the
ratios against ``nn.EmbeddingBag`` (no goal: the numbers are the documentation's).
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Callable

import torch
from torch import nn

from lookuplinear import EmbeddingBag, LookupLinear
from lookuplinear.report.machine import format_machine, machine_info

MODELS = ("nn.EmbeddingBag", "lookuplinear.EmbeddingBag", "LookupLinear")


def build(name: str, rows: list[int], dim: int) -> list[nn.Module]:
    """The tables of one model, all drawn from the same seed (the same weights)."""
    torch.manual_seed(0)
    tables: list[nn.Module] = []
    for n in rows:
        if name == "nn.EmbeddingBag":
            tables.append(nn.EmbeddingBag(n, dim, mode="sum", sparse=True))
        elif name == "lookuplinear.EmbeddingBag":
            tables.append(EmbeddingBag(n, dim, mode="sum", sparse=True))
        else:
            tables.append(LookupLinear(n, dim, bias=False, sparse=True))
    return tables


def batch(rows: list[int], bags: int, bag_size: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """One ``(indices, offsets)`` pair per table, as DLRM's data loader gives them."""
    g = torch.Generator().manual_seed(0)
    offsets = torch.arange(bags) * bag_size
    return [(torch.randint(0, n, (bags * bag_size,), generator=g), offsets) for n in rows]


def calls(tables: list[nn.Module], data: list[tuple[torch.Tensor, torch.Tensor]]
          ) -> dict[str, Callable[[], object]]:
    def forward() -> object:
        with torch.no_grad():
            return [t(i, o) for t, (i, o) in zip(tables, data, strict=True)]

    def forward_backward() -> object:
        for t in tables:
            t.weight.grad = None
        loss = sum(t(i, o).sum() for t, (i, o) in zip(tables, data, strict=True))
        assert isinstance(loss, torch.Tensor)
        loss.backward()
        return loss

    return {"forward": forward, "forward+backward": forward_backward}


def timed(fn: Callable[[], object], inner: int) -> float:
    start = time.perf_counter()
    for _ in range(inner):
        fn()
    return (time.perf_counter() - start) / inner


def run(rows: list[int], dim: int, bags: int, bag_size: int, repeats: int, warmup: int,
        sample_ms: float) -> dict[str, dict[str, float]]:
    """Median seconds per call, ``{phase: {model: seconds}}``."""
    data = batch(rows, bags, bag_size)
    fns = {m: calls(build(m, rows, dim), data) for m in MODELS}
    want = [t(i, o) for t, (i, o) in zip(build(MODELS[0], rows, dim), data, strict=True)]
    for m in MODELS[1:]:  # the same numbers before any timing
        got = [t(i, o) for t, (i, o) in zip(build(m, rows, dim), data, strict=True)]
        assert all(torch.allclose(a, b, atol=1e-5) for a, b in zip(got, want, strict=True)), m
    out: dict[str, dict[str, float]] = {}
    for phase in ("forward", "forward+backward"):
        inner = {}
        for m in MODELS:
            one = max(timed(fns[m][phase], 3), 1e-7)
            inner[m] = max(1, int(sample_ms / 1e3 / one))
        samples: dict[str, list[float]] = {m: [] for m in MODELS}
        for r in range(warmup + repeats):
            order = MODELS[r % 3:] + MODELS[:r % 3]
            for m in order:
                t = timed(fns[m][phase], inner[m])
                if r >= warmup:
                    samples[m].append(t)
        out[phase] = {m: statistics.median(s) for m, s in samples.items()}
    return out


def main(argv: list[str] | None = None) -> dict[str, dict[str, float]]:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rows", type=int, nargs="+", default=[1_000, 10_000, 100_000])
    p.add_argument("--dim", type=int, default=16)
    p.add_argument("--bags", type=int, default=128)
    p.add_argument("--bag-size", type=int, default=10)
    p.add_argument("--repeats", type=int, default=31)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--sample-ms", type=float, default=5.0)
    p.add_argument("--threads", type=int, default=None,
                   help="torch.set_num_threads (default: PyTorch's); 1 on a shared machine")
    p.add_argument("--json", action="store_true", help="print the times as JSON")
    a = p.parse_args(argv)
    print(f"machine: {format_machine(machine_info())}")
    if a.threads:
        torch.set_num_threads(a.threads)
    out = run(a.rows, a.dim, a.bags, a.bag_size, a.repeats, a.warmup, a.sample_ms)
    if a.json:
        print(json.dumps(out))
        return out
    print(f"tables {a.rows} x {a.dim}, {a.bags} bags x {a.bag_size}, sparse=True, mode='sum'; "
          f"torch {torch.__version__}, {torch.get_num_threads()} threads")
    for phase, times in out.items():
        base = times["nn.EmbeddingBag"]
        for m, t in times.items():
            print(f"{phase:17s} {m:26s} {t * 1e6:8.1f} us  {t / base:5.2f}x nn.EmbeddingBag")
    return out


if __name__ == "__main__":
    main()
