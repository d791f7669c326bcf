"""The kernel choices of lookuplinear._native and ._numba, measured: each against the variant it
replaced.

    flock /tmp/ll-cpu.lock .venv/bin/python benchmarks/bench_kernels.py

On a 1,000,000 x 64 float32 table and the ~20,000 sorted unique rows of 20,480 uniform draws
(the issue 3 batch), interleaved rounds (in an order drawn anew every round), medians, one
thread:

- the SGD row update with the 16-rows-ahead prefetch (the library's ``sgd_rows``) against the
  same loop without it (the rows are scattered over far more memory than the TLB covers);
- the whole row-sparse gradient (``group_rows``) against ``torch.unique`` + ``index_add_`` (the
  torch-op path that CUDA runs);
- the row-wise Adagrad update prefetching every cache line of a row (the library) against
  prefetching only its first line;
- the Adam update with a row's two moments adjacent in one ``(rows, 2, dim)`` block (the
  library) against two separate ``(rows, dim)`` arrays;
- the C kernels (``lookuplinear._native``, what the library runs where its install built them)
  against the numba kernels (the fallback): the row-sparse gradient, and the row-wise Adagrad
  and Adam updates fused into the backward (grouping, sums and update: ``fused=True``'s work).
The numba pairs above compare the fallback's choices.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import numpy as np
import torch
from numba import njit

from lookuplinear import _native, hugepages
from lookuplinear import _numba as K
from lookuplinear.rowgrad import _group_rows_torch


@njit(cache=True, nogil=True, fastmath=K._FAST, error_model="numpy")
def sgd_rows_no_prefetch(weight: np.ndarray, rows: np.ndarray, values: np.ndarray,
                         lr: float) -> None:
    """``sgd_rows`` without the prefetch (and without momentum or decay)."""
    for r in range(rows.size):
        i = rows[r]
        for d in range(weight.shape[1]):
            weight[i, d] -= lr * values[r, d]


@njit(cache=True, nogil=True, fastmath=K._FAST, error_model="numpy")
def rowwise_adagrad_first_line(weight: np.ndarray, rows: np.ndarray, values: np.ndarray,
                               state_sum: np.ndarray, lr: float, eps: float,
                               inv_dim: float) -> None:
    """``rowwise_adagrad_rows`` (no weight decay) prefetching only a row's first cache line."""
    n = rows.size
    for r in range(n):
        if r + K._PREFETCH < n:
            K._prefetch(weight, rows[r + K._PREFETCH], 0)
            K._prefetch(state_sum, rows[r + K._PREFETCH], 0)
        i = rows[r]
        sq = inv_dim - inv_dim
        for d in range(weight.shape[1]):
            sq += values[r, d] * values[r, d]
        s = state_sum[i] + sq * inv_dim
        state_sum[i] = s
        mult = lr / (np.sqrt(s) + eps)
        for d in range(weight.shape[1]):
            weight[i, d] -= mult * values[r, d]


@njit(cache=True, nogil=True, fastmath=K._FAST, error_model="numpy")
def adam_separate(weight: np.ndarray, rows: np.ndarray, values: np.ndarray, m: np.ndarray,
                  v: np.ndarray, beta1: float, one_minus_beta1: float, beta2: float,
                  one_minus_beta2: float, eps: float, step_size: float) -> None:
    """``adam_rows`` (no weight decay) with the moments in two separate arrays."""
    n = rows.size
    for r in range(n):
        if r + K._PREFETCH < n:
            K._prefetch_row(weight, rows[r + K._PREFETCH])
            K._prefetch_row(m, rows[r + K._PREFETCH])
            K._prefetch_row(v, rows[r + K._PREFETCH])
        i = rows[r]
        w_row, m_row, v_row, g_row = weight[i], m[i], v[i], values[r]
        for d in range(weight.shape[1]):
            g = g_row[d]
            mm = beta1 * m_row[d] + one_minus_beta1 * g
            vv = beta2 * v_row[d] + one_minus_beta2 * g * g
            m_row[d] = mm
            v_row[d] = vv
            w_row[d] = w_row[d] - step_size * mm / (np.sqrt(vv) + eps)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rows", type=int, default=1_000_000)
    p.add_argument("--dim", type=int, default=64)
    p.add_argument("--entries", type=int, default=20_480)
    p.add_argument("--repeats", type=int, default=31)
    p.add_argument("--no-hugepages", dest="huge", action="store_false",
                   help="the table on ordinary 4 KiB pages (as a system without THP has it)")
    args = p.parse_args(argv)
    torch.set_num_threads(1)
    rng = np.random.default_rng(0)
    alloc = hugepages.empty if args.huge else torch.empty
    table = alloc(args.rows, args.dim).normal_()
    w = table.numpy()
    idx = rng.integers(0, args.rows, args.entries)
    offsets = np.arange(0, args.entries + 1, 20)
    grad_out = rng.standard_normal((offsets.size - 1, args.dim)).astype(np.float32)
    empty = np.empty(0, np.float32)
    rows = K._sort_entries(idx, offsets, -1, args.rows)[0]
    values = (rng.standard_normal((rows.size, args.dim)) * 1e-3).astype(np.float32)
    lr = np.float32(1e-3)
    zero, one = np.float32(0), np.float32(1)
    it, ot, gt = torch.from_numpy(idx), torch.from_numpy(offsets), torch.from_numpy(grad_out)
    state_sum = alloc(args.rows).zero_().numpy()
    moments = alloc(args.rows, 2, args.dim).zero_().numpy()
    m_sep, v_sep = (alloc(args.rows, args.dim).zero_().numpy() for _ in range(2))
    eps, inv_dim, step = np.float32(1e-8), np.float32(1 / args.dim), np.float32(1e-3)
    b = (np.float32(0.9), np.float32(0.1), np.float32(0.999), np.float32(0.001))
    cases: dict[str, Callable[[], object]] = {
        "SGD row update, prefetch (library)": lambda: K.sgd_rows(
            w, rows, values, w, lr, zero, zero, one, False),
        "SGD row update, no prefetch": lambda: sgd_rows_no_prefetch(w, rows, values, lr),
        "group_rows, numba (fallback)": lambda: K.group_rows(
            idx, offsets, empty, grad_out, -1, args.rows),
        "group_rows, torch.unique + index_add_": lambda: _group_rows_torch(
            it, ot, None, gt, None),
        "row-wise Adagrad, whole-row prefetch (library)": lambda: K.rowwise_adagrad_rows(
            w, rows, values, state_sum, lr, eps, zero, inv_dim),
        "row-wise Adagrad, first-line prefetch": lambda: rowwise_adagrad_first_line(
            w, rows, values, state_sum, lr, eps, inv_dim),
        "Adam, paired moments (library)": lambda: K.adam_rows(
            w, rows, values, moments, *b, eps, step, zero, one),
        "Adam, separate moments": lambda: adam_separate(
            w, rows, values, m_sep, v_sep, *b, eps, step),
    }
    if _native.available():
        fused_rowwise = (idx, offsets, empty, grad_out, -1, args.rows, K.rowwise_adagrad_rows,
                         w, state_sum, lr, eps, zero, inv_dim)
        fused_adam = (idx, offsets, empty, grad_out, -1, args.rows, K.adam_rows, w, moments,
                      *b, eps, step, zero, one)
        cases.update({
            "group_rows, C (library)": lambda: _native.group_rows(
                idx, offsets, empty, grad_out, -1, args.rows),
            "group_rows, numba": lambda: K.group_rows(
                idx, offsets, empty, grad_out, -1, args.rows),
            "fused row-wise Adagrad backward, C (library)": lambda: _native.fused_update(
                *fused_rowwise),
            "fused row-wise Adagrad backward, numba": lambda: K.fused_rows(*fused_rowwise),
            "fused Adam backward, C (library)": lambda: _native.fused_update(*fused_adam),
            "fused Adam backward, numba": lambda: K.fused_rows(*fused_adam),
        })
    else:
        print("the C kernels are not built: only the numba pairs are measured")
    times: dict[str, list[float]] = {k: [] for k in cases}
    for f in cases.values():
        f()
    items = list(cases.items())
    order = np.random.default_rng(1)
    for _ in range(args.repeats):  # a new order every round: no case always runs after the
        for j in order.permutation(len(items)):  # same one (Adam sweeps the most memory)
            k, f = items[j]
            t = time.perf_counter()
            f()
            times[k].append(time.perf_counter() - t)
    med = {k: statistics.median(v) * 1e3 for k, v in times.items()}
    print(f"table {args.rows:,} x {args.dim}, {args.entries:,} entries, {rows.size:,} unique "
          f"rows; medians of {args.repeats} rounds in shuffled order, 1 thread; table on "
          f"{'huge pages (where granted)' if args.huge else '4 KiB pages'}")
    for k, m in med.items():
        print(f"  {k:50s} {m:8.3f} ms")
    names = list(med)
    for fast, slow in zip(names[::2], names[1::2], strict=True):
        print(f"  {fast} is {med[slow] / med[fast]:.1f}x faster than: {slow}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
