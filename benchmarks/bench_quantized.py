"""Quantized tables for inference: QuantizedLookupLinear against PyTorch's own kernels.

Run from the repository root:

    .venv/bin/python benchmarks/bench_quantized.py

A 10,000,000 x 64 table (2.56 GB in float32), 2048 bags of 20 uniform indices, sum pooling, one
thread: the float ``LookupLinear`` and raw ``F.embedding_bag``; the layer quantized to int8 and
int4 against PyTorch's quantized embedding-bag ops called directly on the same packed table
(``torch.ops.quantized.embedding_bag_byte_rowwise_offsets`` and its 4-bit twin); and the
largest difference from the float layer. Then the paths that dequantize only the rows an
input names: the same indices as a (2048, 20) index tensor (one row per index, as
``nn.Embedding``) for each storage kind, and float16 bags. Medians of ``--repeats``
interleaved rounds of 20 calls each, in an order shuffled every round.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import numpy as np
import torch
import torch.nn.functional as F

from lookuplinear import Bags, LookupLinear
from lookuplinear.report.machine import format_machine, machine_info


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rows", type=int, default=10_000_000)
    p.add_argument("--dim", type=int, default=64)
    p.add_argument("--repeats", type=int, default=7)
    args = p.parse_args(argv)
    print(f"machine: {format_machine(machine_info())}")
    torch.set_num_threads(1)
    torch.manual_seed(0)
    layer = LookupLinear(args.rows, args.dim, bias=False).eval()
    q8, q4, q16 = layer.quantize("int8"), layer.quantize("int4"), layer.quantize("float16")
    idx = torch.randint(0, args.rows, (2048 * 20,))
    grid = idx.reshape(2048, 20)  # (B, L) index tensor
    offsets = torch.arange(0, idx.numel() + 1, 20)
    bags = Bags(idx, offsets)
    w = layer.weight.detach()
    ops = torch.ops.quantized
    ao_int8 = _ao_int8_embedding(w)
    cases: dict[str, Callable[[], torch.Tensor]] = {
        "F.embedding_bag, float32": lambda: F.embedding_bag(idx, w, offsets[:-1], mode="sum"),
        "LookupLinear, float32": lambda: layer(bags),
        "torch int8 op": lambda: ops.embedding_bag_byte_rowwise_offsets(
            q8.packed, idx, offsets, False, 0, False, None, None, True),
        "QuantizedLookupLinear int8": lambda: q8(bags),
        "torch int4 op": lambda: ops.embedding_bag_4bit_rowwise_offsets(
            q4.packed, idx, offsets, False, 0, False, None, None, True),
        "QuantizedLookupLinear int4": lambda: q4(bags),
        "QuantizedLookupLinear float16": lambda: q16(bags),
        "LookupLinear, float32, index tensor": lambda: layer(grid),
        "torch.ao quantized nn.Embedding int8, index tensor": lambda: ao_int8(grid),
        "QuantizedLookupLinear int8, index tensor": lambda: q8(grid),
        "QuantizedLookupLinear int4, index tensor": lambda: q4(grid),
        "QuantizedLookupLinear float16, index tensor": lambda: q16(grid),
    }
    times: dict[str, list[float]] = {k: [] for k in cases}
    order = np.random.default_rng(0)
    names = list(cases)
    with torch.no_grad():
        ref, ref_grid = layer(bags), layer(grid)
        for f in cases.values():
            f()
        for _ in range(args.repeats):
            for i in order.permutation(len(names)):
                t = time.perf_counter()
                for _ in range(20):
                    cases[names[i]]()
                times[names[i]].append((time.perf_counter() - t) / 20)
        err = {k: float((cases[k]() - (ref_grid if "index" in k else ref)).abs().max())
               for k in names}
    print(f"{args.rows:,} x {args.dim} table, 2048 bags x 20, torch {torch.__version__}, "
          "1 thread\n\n| method | median ms | max abs diff from float32 |\n|---|---|---|")
    for k in names:
        print(f"| {k} | {statistics.median(times[k]) * 1e3:.3f} | {err[k]:.4f} |")
    return 0


def _ao_int8_embedding(weight: torch.Tensor) -> torch.nn.Module:
    """torch.ao's int8 ``nn.Embedding`` (row-wise float qparams, as its docs build it) of
    ``weight``."""
    import warnings

    from torch.ao.nn.quantized import Embedding
    from torch.ao.quantization import float_qparams_weight_only_qconfig

    emb = torch.nn.Embedding(*weight.shape, _weight=weight)
    emb.qconfig = float_qparams_weight_only_qconfig  # type: ignore[assignment]
    with warnings.catch_warnings():  # torch's deprecation of quantized tensor creation
        warnings.simplefilter("ignore", UserWarning)
        return Embedding.from_float(emb)


if __name__ == "__main__":
    raise SystemExit(main())
