"""The layer's performance goals: ``LookupLinear`` against the raw PyTorch ops and ``nn.Linear``.

Run from the repository root (docs/performance.md's command; 21 rounds is the default):

    .venv/bin/python benchmarks/bench_layer.py --repeats 21 --no-memory --threads 1

With ``sparse=False`` every backward allocates a fresh dense weight gradient (25.6 MB here).
glibc hands blocks that large back to the kernel when they are freed, so each call pays the page
faults of a new mapping, more or fewer depending on what ran before it in the round: the
forward+backward medians then swing by 1.5x between runs. Keeping freed memory mapped,

    GLIBC_TUNABLES=glibc.malloc.mmap_threshold=4294967296:glibc.malloc.trim_threshold=4294967296

in front of the command, takes that noise out of both sides of every pair (docs/performance.md).

Timing (1024 bags x 20 uniform indices, ``in_features=100_000``, ``out_features=64``, seed 0),
forward (under ``torch.no_grad``) and forward+backward (the weight gradient, upstream gradient
of ones): every method runs once per round, in a rotating order, after warm-up rounds; a
method's time is the median over the rounds of one round's sample (``inner`` calls, calibrated
so that one sample takes a few milliseconds). Goals, as ratios measured side by side:

* ``nn.Linear`` on the dense multi-hot ``(1024, 100_000)`` input / the layer on bags >= 100:
  in the forward for the default layer, and in forward+backward for ``sparse=True`` (with
  ``sparse=False`` both backward passes write the same dense weight gradient; that ratio is
  shown without a goal);
* the layer / raw ``F.embedding_bag`` <= 1.2, on ``Bags``, on ``(indices, offsets)``, and on
  a weighted scipy CSR matrix with its conversion timed (raw: ``per_sample_weights``, tensors
  converted before timing);
* the layer on a ``(1024, 20)`` index tensor / raw ``F.embedding`` <= 1.2.

The raw ops run on the layer's weight, a parameter, as ``F.embedding_bag`` on an
``nn.EmbeddingBag``'s weight would. Under ``torch.no_grad`` ATen still runs its
backward-ready kernel for a weight that requires grad, while the layer passes a detached view
and gets the forward-only kernel (docs/layer.md); two info rows time the raw op on that
detached view too.

One more pair (no goal): the same bags with every fifth entry set to ``padding_idx=0``, through
the layer with ``padding_idx=0`` and through ``F.embedding_bag(..., padding_idx=0)`` (what
``nn.EmbeddingBag(padding_idx=0)`` calls): PyTorch's CPU kernel leaves its fast path whenever
``padding_idx`` is set, and the layer drops the padding entries instead. And two with
``mode="mean"``: the layer on ``Bags`` against ``F.embedding_bag(mode="mean")``, and on the
weighted CSR (each row divided by the sum of its values, which ``F.embedding_bag`` cannot do
with ``per_sample_weights``) against the raw weighted sum. And ``mode="max"`` on ``Bags``
against ``F.embedding_bag(mode="max")``.

The layers have ``bias=False`` so that they compute what the raw op computes (one extra row
shows the default ``bias=True`` against the raw op plus the bias).

Memory: a weighted scipy CSR matrix of shape ``(1024, 10_000_000)`` with 20,000 entries through
``LookupLinear(10_000_000, 64, sparse=True)``, forward and backward; the peak resident memory
above what was in use before the call (the table and the input are in use before it), measured
by :func:`lookuplinear.report.memory.measure_peak`. Goal: under 50 MB.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import scipy.sparse as sp
import torch
import torch.nn.functional as F
from torch import nn

from lookuplinear import Bags, LookupLinear
from lookuplinear.ops import offsets_ok
from lookuplinear.report.machine import format_machine, machine_info
from lookuplinear.report.memory import measure_peak

PHASES = ("forward", "forward+backward")
MB = 1e6


@dataclass
class Data:
    """The timing case: one table, the same bags in every input form."""

    layer: LookupLinear  # bias=False, sparse=False
    layer_bias: LookupLinear  # bias=True, the same weight
    layer_sparse: LookupLinear  # sparse=True, the same weight
    layer_padding: LookupLinear  # padding_idx=0, the same weight
    layer_mean: LookupLinear  # mode="mean", the same weight
    layer_max: LookupLinear  # mode="max", the same weight
    linear: nn.Linear  # weight = layer.weight.T, bias=False
    indices: torch.Tensor  # (nnz,) int64
    offsets: torch.Tensor  # (N + 1,) int64, CSR form
    bags: Bags
    padded: Bags  # the same bags with every fifth entry set to the padding index 0
    index_2d: torch.Tensor  # (N, L) int64: the same indices, one lookup per position
    dense: torch.Tensor  # (N, in_features) float32 multi-hot
    csr: sp.csr_matrix  # (N, in_features) float32, weighted, int32 indices (scipy's own)
    csr_indices: torch.Tensor  # the CSR converted before timing, for the raw op
    csr_offsets: torch.Tensor
    csr_weights: torch.Tensor


def make_data(
    n_bags: int = 1024, bag_size: int = 20, in_features: int = 100_000, out_features: int = 64,
    seed: int = 0,
) -> Data:
    """Build the layers and every input form of ``n_bags`` bags of ``bag_size`` uniform indices."""
    torch.manual_seed(seed)
    layer = LookupLinear(in_features, out_features, bias=False)

    def same_weight(**kwargs: Any) -> LookupLinear:
        """Another layer with ``layer``'s weight (the padding row too: the kernel skips it)."""
        twin = LookupLinear(in_features, out_features, **kwargs)
        with torch.no_grad():
            twin.weight.copy_(layer.weight)
        return twin

    layer_bias = same_weight()
    layer_sparse = same_weight(bias=False, sparse=True)
    layer_padding = same_weight(bias=False, padding_idx=0)
    layer_mean = same_weight(bias=False, mode="mean")
    layer_max = same_weight(bias=False, mode="max")
    linear = nn.Linear(in_features, out_features, bias=False)
    with torch.no_grad():
        layer_bias.bias.uniform_(-1, 1)  # type: ignore[union-attr]
        linear.weight.copy_(layer.weight.T)
    nnz = n_bags * bag_size
    indices = torch.randint(0, in_features, (nnz,))
    offsets = torch.arange(0, nnz + 1, bag_size)
    bags = Bags(indices, offsets)
    padded = indices.clone()
    padded[::5] = 0
    # weighted CSR: scipy's int32 indices, float32 values in [0.1, 1) (TF-IDF-like)
    rng = np.random.default_rng(seed)
    values = rng.uniform(0.1, 1.0, nnz).astype(np.float32)
    csr = sp.csr_matrix(
        (values, indices.numpy().astype(np.int32), offsets.numpy().astype(np.int32)),
        shape=(n_bags, in_features),
    )
    csr_indices, csr_offsets, csr_weights = _raw_csr_tensors(csr)
    return Data(
        layer=layer, layer_bias=layer_bias, layer_sparse=layer_sparse,
        layer_padding=layer_padding, layer_mean=layer_mean, layer_max=layer_max,
        linear=linear, indices=indices,
        offsets=offsets, bags=bags,
        padded=Bags(padded, offsets), index_2d=indices.view(n_bags, bag_size),
        dense=bags.to_dense(in_features), csr=csr, csr_indices=csr_indices,
        csr_offsets=csr_offsets, csr_weights=csr_weights,
    )


def _raw_csr_tensors(csr: sp.csr_matrix) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The CSR arrays as tensors, shared with scipy (int32, as the layer uses them: the kernel is
    a little faster on int32 than on int64 here, so this is the stricter baseline)."""
    return torch.from_numpy(csr.indices), torch.from_numpy(csr.indptr), torch.from_numpy(csr.data)


def methods(d: Data) -> dict[str, tuple[Callable[[], torch.Tensor], list[torch.Tensor]]]:
    """Every timed method: a call returning the output, and the parameters it differentiates."""
    W, Wb, Ws = d.layer.weight, d.layer_bias.weight, d.layer_sparse.weight
    Wp, Wm, Wx = d.layer_padding.weight, d.layer_mean.weight, d.layer_max.weight
    b = d.layer_bias.bias
    assert b is not None

    def raw_bag(  # mode="sum" given: F.embedding_bag's default is "mean"
        weight: torch.Tensor, bags: Bags = d.bags, mode: str = "sum", **kwargs: Any
    ) -> torch.Tensor:
        return F.embedding_bag(bags.indices, weight, bags.offsets, mode=mode,
                               include_last_offset=True, **kwargs)

    def raw_csr(weight: torch.Tensor) -> torch.Tensor:  # the CSR's values as per-entry weights
        return F.embedding_bag(d.csr_indices, weight, d.csr_offsets, mode="sum",
                               include_last_offset=True, per_sample_weights=d.csr_weights)

    nnz = d.indices.numel()
    starts = d.offsets[:-1]  # nn.EmbeddingBag's N start offsets, the layer's default

    def after_numpy_check() -> torch.Tensor:  # the offsets check written with numpy ops
        o = d.offsets.numpy()
        if o[0] != 0 or o[-1] != nnz or bool((o[1:] < o[:-1]).any()):
            raise AssertionError("bad offsets")
        return raw_bag(W)

    def after_compiled_check() -> torch.Tensor:  # the C check the layer runs per call
        if not offsets_ok(d.offsets, nnz):
            raise AssertionError("bad offsets")
        return raw_bag(W)

    def forward_only(weight: torch.Tensor) -> torch.Tensor:
        """``weight`` detached under no_grad: ATen's forward-only kernel, as the layer uses."""
        return weight if torch.is_grad_enabled() else weight.detach()

    return {
        "LookupLinear(Bags)": (lambda: d.layer(d.bags), [W]),
        "LookupLinear(indices, offsets)": (lambda: d.layer(d.indices, starts), [W]),
        "F.embedding_bag": (lambda: raw_bag(W), [W]),
        "F.embedding_bag after a numpy offsets check": (after_numpy_check, [W]),
        "F.embedding_bag after the compiled offsets check": (after_compiled_check, [W]),
        "LookupLinear(Bags), bias=True": (lambda: d.layer_bias(d.bags), [Wb, b]),
        "F.embedding_bag + bias": (lambda: raw_bag(Wb) + b, [Wb, b]),
        "LookupLinear(Bags), sparse=True": (lambda: d.layer_sparse(d.bags), [Ws]),
        "F.embedding_bag, sparse=True": (lambda: raw_bag(Ws, sparse=True), [Ws]),
        "nn.Linear(dense multi-hot)": (lambda: d.linear(d.dense), [d.linear.weight]),
        "LookupLinear(scipy CSR), conversion timed": (lambda: d.layer(d.csr), [W]),
        "F.embedding_bag(per_sample_weights)": (lambda: raw_csr(W), [W]),
        "F.embedding_bag, weight detached under no_grad": (
            lambda: raw_bag(forward_only(W)), [W]
        ),
        "F.embedding_bag(per_sample_weights), weight detached under no_grad": (
            lambda: raw_csr(forward_only(W)), [W]
        ),
        "LookupLinear(index (N, L))": (lambda: d.layer(d.index_2d), [W]),
        "F.embedding": (lambda: F.embedding(d.index_2d, W), [W]),
        "LookupLinear(Bags with padding), padding_idx=0": (
            lambda: d.layer_padding(d.padded), [Wp]
        ),
        "F.embedding_bag(padding_idx=0)": (lambda: raw_bag(Wp, d.padded, padding_idx=0), [Wp]),
        'LookupLinear(Bags), mode="mean"': (lambda: d.layer_mean(d.bags), [Wm]),
        'F.embedding_bag(mode="mean")': (lambda: raw_bag(Wm, mode="mean"), [Wm]),
        'LookupLinear(scipy CSR), mode="mean"': (lambda: d.layer_mean(d.csr), [Wm]),
        "F.embedding_bag(per_sample_weights), sum, for mean": (lambda: raw_csr(Wm), [Wm]),
        'LookupLinear(Bags), mode="max"': (lambda: d.layer_max(d.bags), [Wx]),
        'F.embedding_bag(mode="max")': (lambda: raw_bag(Wx, mode="max"), [Wx]),
    }


# (name, numerator, denominator, goal, "max" if ratio <= goal else "min"); numerator / denominator
RATIOS: tuple[tuple[str, str, str, float, str], ...] = (
    ("nn.Linear / layer on Bags", "nn.Linear(dense multi-hot)", "LookupLinear(Bags)",
     100.0, "min"),
    ("nn.Linear / layer on Bags, sparse=True", "nn.Linear(dense multi-hot)",
     "LookupLinear(Bags), sparse=True", 100.0, "min"),
    ("layer on Bags / F.embedding_bag", "LookupLinear(Bags)", "F.embedding_bag", 1.2, "max"),
    ("layer on (indices, offsets) / F.embedding_bag", "LookupLinear(indices, offsets)",
     "F.embedding_bag", 1.2, "max"),
    ("layer on scipy CSR (conversion timed) / F.embedding_bag(per_sample_weights)",
     "LookupLinear(scipy CSR), conversion timed", "F.embedding_bag(per_sample_weights)",
     1.2, "max"),
    ("layer on index (N, L) / F.embedding", "LookupLinear(index (N, L))", "F.embedding",
     1.2, "max"),
    ("layer on Bags / F.embedding_bag, weight detached under no_grad", "LookupLinear(Bags)",
     "F.embedding_bag, weight detached under no_grad", math.nan, "info"),
    ("layer on scipy CSR / F.embedding_bag(per_sample_weights), weight detached under no_grad",
     "LookupLinear(scipy CSR), conversion timed",
     "F.embedding_bag(per_sample_weights), weight detached under no_grad", math.nan, "info"),
    ("numpy offsets check + F.embedding_bag / F.embedding_bag",
     "F.embedding_bag after a numpy offsets check", "F.embedding_bag", math.nan, "info"),
    ("compiled offsets check + F.embedding_bag / F.embedding_bag",
     "F.embedding_bag after the compiled offsets check", "F.embedding_bag", math.nan, "info"),
    ("layer bias=True / F.embedding_bag + bias", "LookupLinear(Bags), bias=True",
     "F.embedding_bag + bias", math.nan, "info"),
    ("layer sparse=True / F.embedding_bag sparse=True", "LookupLinear(Bags), sparse=True",
     "F.embedding_bag, sparse=True", math.nan, "info"),
    ("layer padding_idx=0 / F.embedding_bag padding_idx=0",
     "LookupLinear(Bags with padding), padding_idx=0", "F.embedding_bag(padding_idx=0)",
     math.nan, "info"),
    ('layer mode="mean" on Bags / F.embedding_bag(mode="mean")', 'LookupLinear(Bags), mode="mean"',
     'F.embedding_bag(mode="mean")', math.nan, "info"),
    ('layer mode="mean" on weighted CSR / F.embedding_bag(per_sample_weights), sum',
     'LookupLinear(scipy CSR), mode="mean"', "F.embedding_bag(per_sample_weights), sum, for mean",
     math.nan, "info"),
    ('layer mode="max" on Bags / F.embedding_bag(mode="max")', 'LookupLinear(Bags), mode="max"',
     'F.embedding_bag(mode="max")', math.nan, "info"),
)
#: (ratio, phase) pairs shown without a goal: with ``sparse=False`` the backward of the layer,
#: like that of ``nn.Linear`` and of ``F.embedding_bag``, writes the dense ``in_features x
#: out_features`` weight gradient, which bounds the speedup over ``nn.Linear`` (the >= 100x goal
#: is measured there on the ``sparse=True`` layer, whose gradient holds only the touched rows)
INFO_ONLY = {("nn.Linear / layer on Bags", "forward+backward")}


def phase_fn(
    run: Callable[[], torch.Tensor], params: list[torch.Tensor], phase: str
) -> Callable[[], None]:
    """One call of a method in a phase: under no_grad, or forward, backward and grad reset."""
    if phase == "forward":

        def fwd() -> None:
            with torch.no_grad():
                run()

        return fwd

    def fwd_bwd() -> None:
        out = run()
        out.backward(torch.ones_like(out))
        for p in params:
            p.grad = None

    return fwd_bwd


def time_interleaved(
    fns: dict[str, Callable[[], None]], *, repeats: int, warmup: int = 2,
    target_s: float = 0.02,
) -> dict[str, list[float]]:
    """Seconds per call of each function, one sample per round, ``repeats`` rounds interleaved.

    The warm-up rounds also calibrate ``inner``: a sample runs a function ``inner`` times in a
    row so that it lasts about ``target_s`` (the clock and Python noise stay small beside it).
    The order of the functions alternates from round to round (forward, then reversed), so that
    the methods compared with each other, listed next to each other, run next to each other.
    """
    inner = dict.fromkeys(fns, 1)
    times: dict[str, list[float]] = {k: [] for k in fns}
    names = list(fns)
    for r in range(warmup + repeats):
        order = names if r % 2 == 0 else names[::-1]
        for name in order:
            fn, k = fns[name], inner[name]
            t0 = time.perf_counter()
            for _ in range(k):
                fn()
            dt = (time.perf_counter() - t0) / k
            if r < warmup:
                inner[name] = max(1, min(1000, round(target_s / max(dt, 1e-7))))
            else:
                times[name].append(dt)
    return times


def check_outputs(d: Data) -> float:
    """The largest difference between any method and ``nn.Linear`` (raw ops: their reference)."""
    with torch.no_grad():
        outs = {name: run() for name, (run, _) in methods(d).items()}
        ref = outs["nn.Linear(dense multi-hot)"]
        ref_csr = torch.from_numpy(d.csr @ d.layer.weight.numpy())
        ref_bias = ref + d.layer_bias.bias  # type: ignore[operator]
        padded_dense = d.padded.to_dense(d.layer.in_features)
        padded_dense[:, 0] = 0  # padding_idx=0: the column contributes nothing
        ref_padded = d.linear(padded_dense)
        del padded_dense
        worst = 0.0
        for name, out in outs.items():
            if "(N, L)" in name or name == "F.embedding":
                want = F.embedding(d.index_2d, d.layer.weight)
                got = out
            elif "padding" in name:
                want, got = ref_padded, out
            elif name == 'LookupLinear(scipy CSR), mode="mean"':  # undo the mean: x row sums
                row_sums = torch.from_numpy(np.asarray(d.csr.sum(axis=1)).ravel())
                want, got = ref_csr, out * row_sums.unsqueeze(1)
            elif 'mode="max"' in name:  # no linear equivalent: PyTorch's max is the reference
                want = F.embedding_bag(d.indices, d.layer.weight, d.offsets, mode="max",
                                       include_last_offset=True)
                got = out
            elif 'mode="mean"' in name:  # undo the mean: x bag lengths
                want, got = ref, out * (d.offsets[1:] - d.offsets[:-1]).unsqueeze(1)
            else:
                want = ref_csr if "CSR" in name or "per_sample" in name else ref
                want = ref_bias if "bias" in name else want
                got = out
            if got.shape != want.shape or not bool(torch.isfinite(got).all()):
                raise AssertionError(f"{name}: shape {tuple(got.shape)}, or non-finite values")
            worst = max(worst, float((got - want).abs().max()))
    return worst


def run_timing(
    d: Data, repeats: int, warmup: int = 2, target_s: float = 0.02
) -> dict[str, dict[str, float]]:
    """Median seconds per call, per phase and method, measured side by side."""
    return {phase: {name: statistics.median(ts) for name, ts in times.items()}
            for phase, times in run_rounds(d, repeats, warmup, target_s).items()}


def run_rounds(
    d: Data, repeats: int, warmup: int = 2, target_s: float = 0.02
) -> dict[str, dict[str, list[float]]]:
    """Seconds per call in every timed round, per phase and method."""
    rounds: dict[str, dict[str, list[float]]] = {}
    for phase in PHASES:
        fns = {name: phase_fn(run, params, phase) for name, (run, params) in methods(d).items()}
        rounds[phase] = time_interleaved(fns, repeats=repeats, warmup=warmup, target_s=target_s)
    return rounds


def ratios(
    medians: dict[str, dict[str, float]],
    rounds: dict[str, dict[str, list[float]]] | None = None,
) -> list[dict[str, Any]]:
    """The goals' ratios in each phase (ratio of the medians), with pass/fail; with the rounds,
    also the median of the per-round ratios (each round's two samples ran close in time)."""
    rows = []
    for phase, m in medians.items():
        for label, num, den, goal, kind in RATIOS:
            r = m[num] / m[den]
            paired = None
            if rounds is not None:
                a, b = rounds[phase][num], rounds[phase][den]
                paired = statistics.median(x / y for x, y in zip(a, b, strict=True))
            if (label, phase) in INFO_ONLY:
                kind = "info"
            ok = None if kind == "info" else (r >= goal if kind == "min" else r <= goal)
            rows.append({"phase": phase, "ratio": label, "value": r, "paired": paired,
                         "goal": None if kind == "info" else f"{'>=' if kind == 'min' else '<='}"
                         f" {goal:g}", "ok": ok})
    return rows


def memory_case(
    in_features: int = 10_000_000, out_features: int = 64, n_rows: int = 1024,
    nnz: int = 20_000, seed: int = 0, measurements: int = 3,
) -> dict[str, Any]:
    """Peak extra memory of the sparse=True layer on a huge-vocabulary CSR, forward and backward."""
    torch.manual_seed(seed)
    t0 = time.perf_counter()
    layer = LookupLinear(in_features, out_features, bias=False, sparse=True)  # resident table
    build_s = time.perf_counter() - t0
    rng = np.random.default_rng(seed)
    rows = np.sort(rng.integers(0, n_rows, nnz))
    indptr = np.zeros(n_rows + 1, dtype=np.int32)
    np.cumsum(np.bincount(rows, minlength=n_rows), out=indptr[1:])
    cols = rng.integers(0, in_features, nnz).astype(np.int32)
    X = sp.csr_matrix((rng.uniform(0.1, 1.0, nnz).astype(np.float32), cols, indptr),
                      shape=(n_rows, in_features))

    def forward() -> None:
        with torch.no_grad():
            layer(X)

    def forward_backward() -> None:
        out = layer(X)  # (n_rows, out_features)
        out.backward(torch.ones_like(out))
        assert layer.weight.grad is not None and layer.weight.grad.is_sparse
        layer.weight.grad = None

    result: dict[str, Any] = {
        "in_features": in_features, "out_features": out_features, "rows": n_rows, "nnz": nnz,
        "weight_bytes": layer.weight.numel() * layer.weight.element_size(),
        "input_bytes": int(X.data.nbytes + X.indices.nbytes + X.indptr.nbytes),
        "dense_input_bytes": n_rows * in_features * 4,
        "dense_grad_bytes": in_features * out_features * 4,
        "table_build_s": build_s, "goal_bytes": 50 * MB,
    }
    for name, fn in (("forward", forward), ("forward+backward", forward_backward)):
        fn()  # warm-up: code paths, thread pools
        peaks = [measure_peak(fn) for _ in range(measurements)]
        t = time_interleaved({name: fn}, repeats=5, warmup=1)[name]
        result[name] = {
            "peak_bytes": None if None in peaks else max(p for p in peaks if p is not None),
            "peaks_bytes": peaks, "median_s": statistics.median(t),
        }
    peak = result["forward+backward"]["peak_bytes"]
    result["ok"] = None if peak is None else peak < 50 * MB
    return result


def _ms(s: float) -> str:
    return f"{s * 1e3:.3f}"


def report(medians: dict[str, dict[str, float]], rows: list[dict[str, Any]]) -> str:
    """The medians table and the ratios with pass/fail, as markdown."""
    lines = ["| method | forward (ms) | forward+backward (ms) |", "|---|---|---|"]
    for name in medians["forward"]:
        lines.append(f"| {name} | {_ms(medians['forward'][name])} | "
                     f"{_ms(medians['forward+backward'][name])} |")
    lines += ["", "| ratio | phase | ratio of medians | median of per-round ratios | goal | |",
              "|---|---|---|---|---|---|"]
    for r in rows:
        mark = "" if r["ok"] is None else ("PASS" if r["ok"] else "FAIL")
        paired = "" if r.get("paired") is None else f"{r['paired']:.2f}x"
        lines.append(f"| {r['ratio']} | {r['phase']} | {r['value']:.2f}x | {paired} | "
                     f"{r['goal'] or ''} | {mark} |")
    return "\n".join(lines)


def report_memory(m: dict[str, Any]) -> str:
    """The memory case as text."""
    def mb(b: float | None) -> str:
        return "unavailable" if b is None else f"{b / MB:.1f} MB"

    fb = m["forward+backward"]["peak_bytes"]
    verdict = "" if m["ok"] is None else (" PASS" if m["ok"] else " FAIL")
    return "\n".join([
        f"scipy CSR ({m['rows']}, {m['in_features']:,}), {m['nnz']:,} entries, "
        f"LookupLinear({m['in_features']:,}, {m['out_features']}, sparse=True): table "
        f"{mb(m['weight_bytes'])}, input {mb(m['input_bytes'])} (both in use before the call)",
        f"  peak extra memory, forward:            {mb(m['forward']['peak_bytes'])} "
        f"(median {_ms(m['forward']['median_s'])} ms)",
        f"  peak extra memory, forward+backward:   {mb(fb)} (median "
        f"{_ms(m['forward+backward']['median_s'])} ms); goal < 50 MB{verdict}",
        f"  sparse=False would add the dense weight gradient: {mb(m['dense_grad_bytes'])}",
        f"  nn.Linear would need the dense input: {mb(m['dense_input_bytes'])}",
    ])


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    p.add_argument("--repeats", type=int, default=21, help="timed rounds (default 21)")
    p.add_argument("--warmup", type=int, default=2, help="warm-up rounds (default 2)")
    p.add_argument("--sample-ms", type=float, default=20.0,
                   help="calibrated length of one timed sample (default 20 ms)")
    p.add_argument("--bags", type=int, default=1024)
    p.add_argument("--bag-size", type=int, default=20)
    p.add_argument("--in-features", type=int, default=100_000)
    p.add_argument("--out-features", type=int, default=64)
    p.add_argument("--memory-in-features", type=int, default=10_000_000)
    p.add_argument("--memory-nnz", type=int, default=20_000)
    p.add_argument("--memory-rows", type=int, default=1024)
    p.add_argument("--no-memory", action="store_true", help="skip the memory case")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=None,
                   help="torch threads (default: torch's own); 1 on a machine shared with "
                   "other jobs, where idle-waiting threads turn into scheduler time slices")
    p.add_argument("--json", metavar="OUT", help="also write every number to this JSON file")
    args = p.parse_args(argv)

    if args.threads is not None:
        torch.set_num_threads(args.threads)
    info = machine_info()
    print(f"machine: {format_machine(info)}")
    t0 = time.perf_counter()
    d = make_data(args.bags, args.bag_size, args.in_features, args.out_features, args.seed)
    print(f"case: {args.bags} bags x {args.bag_size} uniform indices, in_features="
          f"{args.in_features:,}, out_features={args.out_features}, seed {args.seed}; "
          f"{args.repeats} interleaved rounds after {args.warmup} warm-up rounds")
    worst = check_outputs(d)
    print(f"outputs: every method agrees with nn.Linear on the dense input (max |diff| "
          f"{worst:.2e})")
    rounds = run_rounds(d, args.repeats, args.warmup, args.sample_ms / 1e3)
    medians = {phase: {name: statistics.median(ts) for name, ts in times.items()}
               for phase, times in rounds.items()}
    rows = ratios(medians, rounds)
    print(report(medians, rows))
    del d
    mem = None
    if not args.no_memory:
        mem = memory_case(args.memory_in_features, args.out_features, args.memory_rows,
                          args.memory_nnz, args.seed)
        print(report_memory(mem))
    load = [round(x, 2) for x in os.getloadavg()]
    print(f"load average at the end: {load}; took {time.perf_counter() - t0:.0f} s")
    if args.json:
        os.makedirs(os.path.dirname(os.path.abspath(args.json)), exist_ok=True)
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump({"machine": info, "load_average_end": load, "args": vars(args),
                       "max_abs_diff": worst, "medians_s": medians, "rounds_s": rounds,
                       "ratios": rows,
                       "memory": mem}, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
