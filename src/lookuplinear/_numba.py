"""CPU kernels compiled by numba: row grouping for the backward and row-wise optimizer updates.

Every kernel works on numpy views of CPU tensors (no copies) and touches only the rows a batch
names: cost O(nnz + unique_rows x out_features), never O(in_features). Their torch-op twins in
:mod:`lookuplinear.rowgrad` and :mod:`lookuplinear.optim` compute the same thing on any device
and are what the tests compare them with.

Kernels are compiled on first use and cached on disk (``cache=True``); nothing is compiled at
import, and this module itself is imported on the first row-sparse backward or optimizer step.
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np
import torch

__all__ = [
    "FUSED_CHUNK_BYTES",
    "KERNEL_THREADS",
    "adagrad_rows",
    "adam_rows",
    "fused_rows",
    "group_rows",
    "over_rows",
    "rowwise_adagrad_rows",
    "sgd_rows",
]

from llvmlite import binding as _llvm
from llvmlite import ir as _ir
from numba import njit, types
from numba.core import cgutils
from numba.extending import intrinsic

#: threads a row kernel may use. 1 by default: split over a thread pool, the kernels measured
#: slower on this 2-core machine (docs/benchmarks.md), because PyTorch's OpenMP workers keep
#: spinning on the cores for a while after each parallel region. Raise it where cores are free.
KERNEL_THREADS = 1
#: below this many rows per thread a kernel is not split
MIN_ROWS_PER_THREAD = 2048
_pool: ThreadPoolExecutor | None = None
_pool_lock = threading.Lock()


def _in_parts(n: int, call: Callable[[int, int], None]) -> None:
    """``call(a, b)`` over contiguous parts of ``range(n)`` on up to ``KERNEL_THREADS`` threads
    (and ``torch.get_num_threads()``), at least ``MIN_ROWS_PER_THREAD`` rows each. The kernels
    release the GIL (``nogil``); a plain thread pool avoids a second OpenMP runtime.
    """
    global _pool
    parts = min(KERNEL_THREADS, torch.get_num_threads(), n // MIN_ROWS_PER_THREAD)
    if parts <= 1:
        call(0, n)
        return
    with _pool_lock:
        if _pool is None or _pool._max_workers < parts:
            _pool = ThreadPoolExecutor(max_workers=parts, thread_name_prefix="lookuplinear")
        pool = _pool
    bounds = [n * k // parts for k in range(parts + 1)]
    futures = [pool.submit(call, a, b) for a, b in itertools.pairwise(bounds[1:])]
    call(0, bounds[1])
    for f in futures:
        f.result()


def over_rows(kernel: Callable[..., None], weight: Any, rows: Any, values: Any, *rest: Any) -> None:
    """Run a row kernel ``kernel(weight, rows, values, *rest)`` in threads, each on a
    contiguous slice of the (unique) rows: rows are independent, so the result is the same bit
    for bit whatever the split."""
    _in_parts(rows.shape[0], lambda a, b: kernel(weight, rows[a:b], values[a:b], *rest))


def group_rows(
    indices: np.ndarray,
    offsets: np.ndarray,
    weights: np.ndarray,
    grad_out: np.ndarray,
    padding_idx: int,
    in_features: int,
) -> tuple[np.ndarray, np.ndarray]:
    """The weight gradient of a bag lookup, one row per unique index: ``(rows, values)``.

    ``values[j] = sum(weights[k] * grad_out[bag(k)] for k if indices[k] == rows[j])``, i.e.
    the non-zero rows of ``densify(x).T @ grad_out``, with ``rows`` sorted ascending.
    ``offsets`` empty means one bag per entry (index input); ``weights`` empty means 1;
    entries equal to ``padding_idx`` (-1 for none) are left out. :func:`_sort_entries` groups
    the entries, then each thread sums a slice of the rows (:func:`_sum_rows`).
    """
    rows, starts, ent, bag = _sort_entries(indices, offsets, padding_idx, in_features)
    values = np.empty((rows.size, grad_out.shape[1]), grad_out.dtype)
    _in_parts(
        rows.size, lambda a, b: _sum_rows(values, starts, ent, bag, weights, grad_out, a, b, 0)
    )
    return rows, values


#: rows whose gradient a fused step holds at a time (about 1 MiB at out_features=64)
FUSED_CHUNK_BYTES = 1 << 20


def fused_rows(
    indices: np.ndarray,
    offsets: np.ndarray,
    weights: np.ndarray,
    grad_out: np.ndarray,
    padding_idx: int,
    in_features: int,
    kernel: Callable[..., None],
    weight: np.ndarray,
    *rest: Any,
) -> int:
    """The row-wise update ``kernel(weight, rows, values, *rest)`` applied straight from a bag
    lookup's ``grad_out``, without the full gradient: the rows are grouped as in
    :func:`group_rows`, then each thread sums a chunk of rows into a small buffer and updates
    them. Same sums, same kernel, so the same result as ``group_rows`` then ``over_rows``.
    Returns the number of rows updated.
    """
    rows, starts, ent, bag = _sort_entries(indices, offsets, padding_idx, in_features)
    dim = grad_out.shape[1]
    chunk = max(64, FUSED_CHUNK_BYTES // max(1, dim * grad_out.itemsize))

    def part(a: int, b: int) -> None:
        buf = np.empty((min(chunk, b - a), dim), grad_out.dtype)
        for c0 in range(a, b, chunk):
            c1 = min(c0 + chunk, b)
            _sum_rows(buf, starts, ent, bag, weights, grad_out, c0, c1, c0)
            kernel(weight, rows[c0:c1], buf[: c1 - c0], *rest)

    _in_parts(rows.size, part)
    return int(rows.size)


_RADIX_BITS = 11
_RADIX = 1 << _RADIX_BITS
#: rows ahead whose cache lines are requested before they are read
_PREFETCH = 16
#: fastmath flags of the kernels (see the note above ``sgd_rows``)
_FAST = {"nsz", "arcp", "contract", "afn", "reassoc"}


#: bytes per cache line: a row of 64 float32 spans four
_LINE = 64


def _prefetch_intrinsic(typingctx: Any, arr: Any, row: Any, offset: Any) -> Any:
    """Ask the CPU to bring the cache line ``offset`` bytes into ``arr[row]`` in
    (``llvm.prefetch``, for write).

    The rows an update touches are scattered over a table much larger than the TLB reaches;
    without prefetching, each row costs a page walk and a memory round trip in sequence (the
    SGD row update 1.3-2.0x slower here: benchmarks/bench_kernels.py, docs/benchmarks.md).
    FBGEMM's and PyTorch's embedding kernels prefetch the same way.
    """
    sig = types.void(arr, row, offset)

    def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
        aryty = signature.args[0]
        ary = context.make_array(aryty)(context, builder, args[0])
        index = [args[1]] + [context.get_constant(types.intp, 0)] * (aryty.ndim - 1)
        ptr = cgutils.get_item_pointer2(
            context, builder, ary.data, cgutils.unpack_tuple(builder, ary.shape),
            cgutils.unpack_tuple(builder, ary.strides), aryty.layout, index,
            wraparound=False, boundscheck=False,
        )
        i8p = _ir.IntType(8).as_pointer()
        i32 = _ir.IntType(32)
        line = builder.gep(builder.bitcast(ptr, i8p), [args[2]])
        name = "llvm.prefetch.p0" if _llvm.llvm_version_info[0] >= 15 else "llvm.prefetch.p0i8"
        fn = cgutils.get_or_insert_function(
            builder.module, _ir.FunctionType(_ir.VoidType(), [i8p, i32, i32, i32]), name
        )
        builder.call(fn, [line, i32(1), i32(3), i32(1)])
        return context.get_dummy_value()

    return sig, codegen


_prefetch: Any = intrinsic(_prefetch_intrinsic)


@njit(inline="always")
def _prefetch_row(arr: np.ndarray, row: int) -> None:
    """Prefetch every cache line of ``arr[row]`` (a C-contiguous array of 2 or more
    dimensions), not only its first: a row of 64 float32 is four lines, and the first alone
    left the row-wise Adagrad update 1.1-1.3x slower (docs/benchmarks.md)."""
    nbytes = arr.size // max(arr.shape[0], 1) * arr.itemsize
    for offset in range(0, nbytes, _LINE):
        _prefetch(arr, row, offset)
    if nbytes % _LINE:  # a row that is not whole lines may end in one more
        _prefetch(arr, row, nbytes - 1)


@njit(cache=True, nogil=True)
def _sort_entries(
    indices: np.ndarray, offsets: np.ndarray, padding_idx: int, in_features: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """``(rows, starts, ent, bag)``: the unique indices sorted, and for row ``j`` the entries
    ``ent[starts[j]:starts[j + 1]]`` naming it; ``bag[k]`` is entry ``k``'s output row.

    A stable LSD radix sort on 11-bit digits: O(nnz) per pass, ``ceil(log2(in_features) / 11)``
    passes (two for a million rows), no O(in_features) scratch.
    """
    n = indices.size
    bag = np.empty(n, np.int64)
    if offsets.size == 0:
        for k in range(n):
            bag[k] = k
    else:
        for b in range(offsets.size - 1):
            for k in range(offsets[b], offsets[b + 1]):
                bag[k] = b
    keys = np.empty(n, np.int64)
    ent = np.empty(n, np.int64)
    m = 0
    for k in range(n):
        if indices[k] != padding_idx:
            keys[m] = indices[k]
            ent[m] = k
            m += 1
    keys = keys[:m].copy()
    ent = ent[:m].copy()
    keys2 = np.empty(m, np.int64)
    ent2 = np.empty(m, np.int64)
    count = np.empty(_RADIX + 1, np.int64)
    shift = 0
    while (in_features - 1) >> shift > 0:
        count[:] = 0
        for i in range(m):
            count[((keys[i] >> shift) & (_RADIX - 1)) + 1] += 1
        for d in range(_RADIX):
            count[d + 1] += count[d]
        for i in range(m):
            d = (keys[i] >> shift) & (_RADIX - 1)
            p = count[d]
            keys2[p] = keys[i]
            ent2[p] = ent[i]
            count[d] = p + 1
        keys, keys2 = keys2, keys
        ent, ent2 = ent2, ent
        shift += _RADIX_BITS
    n_unique = 0
    for i in range(m):
        if i == 0 or keys[i] != keys[i - 1]:
            n_unique += 1
    rows = np.empty(n_unique, np.int64)
    starts = np.empty(n_unique + 1, np.int64)
    j = -1
    for i in range(m):
        if i == 0 or keys[i] != keys[i - 1]:
            j += 1
            rows[j] = keys[i]
            starts[j] = i
    starts[n_unique] = m
    return rows, starts, ent, bag


@njit(cache=True, nogil=True, fastmath=_FAST, error_model="numpy")
def _sum_rows(
    values: np.ndarray,
    starts: np.ndarray,
    ent: np.ndarray,
    bag: np.ndarray,
    weights: np.ndarray,
    grad_out: np.ndarray,
    first: int,
    stop: int,
    base: int,
) -> None:
    """``values[j - base] = sum(w[k] * grad_out[bag[k]] for k in the entries of row j)``, j in
    ``[first, stop)``; entries in index order, so the sum is the same for any split. (One loop
    nest per case, each row's first entry stored rather than added to zero: ``group_rows``
    1.2-1.4x faster than with one loop and the case inside it.)"""
    dim = grad_out.shape[1]
    if weights.size > 0:
        for r in range(first, stop):
            acc = values[r - base]
            k = ent[starts[r]]
            src = grad_out[bag[k]]
            w = weights[k]
            for d in range(dim):
                acc[d] = w * src[d]
            for i in range(starts[r] + 1, starts[r + 1]):
                k = ent[i]
                src = grad_out[bag[k]]
                w = weights[k]
                for d in range(dim):
                    acc[d] += w * src[d]
    else:
        for r in range(first, stop):
            acc = values[r - base]
            src = grad_out[bag[ent[starts[r]]]]
            for d in range(dim):
                acc[d] = src[d]
            for i in range(starts[r] + 1, starts[r + 1]):
                src = grad_out[bag[ent[i]]]
                for d in range(dim):
                    acc[d] += src[d]


# The update kernels take their scalars already cast to the table's dtype (``scalars`` in
# lookuplinear.optim), so float32 tables are updated in float32 arithmetic that vectorises: a
# Python float would promote every element to float64. fastmath lets the row reductions
# vectorise; NaN and infinity keep their meaning. error_model="numpy": a float division by zero
# gives inf as in torch instead of a per-element Python check that stops vectorisation.


@njit(cache=True, nogil=True, fastmath=_FAST, error_model="numpy")
def sgd_rows(
    weight: np.ndarray,
    rows: np.ndarray,
    values: np.ndarray,
    buf: np.ndarray,
    lr: float,
    weight_decay: float,
    momentum: float,
    one_minus_dampening: float,
    nesterov: bool,
) -> None:
    """``SGD`` on the touched rows: ``g += wd * w``; ``b = mu * b + (1 - dampening) * g``;
    ``w -= lr * (g + mu * b if nesterov else b)`` (``w -= lr * g`` without momentum)."""
    dim = weight.shape[1]
    n = rows.size
    for r in range(n):
        if r + _PREFETCH < n:
            _prefetch_row(weight, rows[r + _PREFETCH])
            if momentum != 0:
                _prefetch_row(buf, rows[r + _PREFETCH])
        i = rows[r]
        if momentum == 0 and weight_decay == 0:
            for d in range(dim):
                weight[i, d] -= lr * values[r, d]
            continue
        for d in range(dim):
            g = values[r, d] + weight_decay * weight[i, d]
            if momentum != 0:
                b = momentum * buf[i, d] + one_minus_dampening * g
                buf[i, d] = b
                g = g + momentum * b if nesterov else b
            weight[i, d] -= lr * g


@njit(cache=True, nogil=True, fastmath=_FAST, error_model="numpy")
def adagrad_rows(
    weight: np.ndarray,
    rows: np.ndarray,
    values: np.ndarray,
    state_sum: np.ndarray,
    clr: float,
    eps: float,
    weight_decay: float,
) -> None:
    """``Adagrad`` on the touched rows: ``g += wd * w``; ``s += g**2``;
    ``w -= clr * g / (sqrt(s) + eps)``."""
    dim = weight.shape[1]
    n = rows.size
    for r in range(n):
        if r + _PREFETCH < n:
            _prefetch_row(weight, rows[r + _PREFETCH])
            _prefetch_row(state_sum, rows[r + _PREFETCH])
        i = rows[r]
        for d in range(dim):
            g = values[r, d] + weight_decay * weight[i, d]
            s = state_sum[i, d] + g * g
            state_sum[i, d] = s
            weight[i, d] -= clr * g / (np.sqrt(s) + eps)


@njit(cache=True, nogil=True, fastmath=_FAST, error_model="numpy")
def rowwise_adagrad_rows(
    weight: np.ndarray,
    rows: np.ndarray,
    values: np.ndarray,
    state_sum: np.ndarray,
    lr: float,
    eps: float,
    weight_decay: float,
    inv_dim: float,
) -> None:
    """FBGEMM's EXACT_ROWWISE_ADAGRAD on the touched rows: ``g += wd * w``;
    ``s[i] += mean(g**2)``; ``w -= lr / (sqrt(s[i]) + eps) * g``."""
    dim = weight.shape[1]
    n = rows.size
    for r in range(n):
        if r + _PREFETCH < n:
            _prefetch_row(weight, rows[r + _PREFETCH])
            _prefetch(state_sum, rows[r + _PREFETCH], 0)
        i = rows[r]
        sq = inv_dim - inv_dim  # a zero of the table's dtype (a literal 0 would be int64)
        if weight_decay == 0:
            for d in range(dim):
                sq += values[r, d] * values[r, d]
        else:
            for d in range(dim):
                g = values[r, d] + weight_decay * weight[i, d]
                sq += g * g
        s = state_sum[i] + sq * inv_dim
        state_sum[i] = s
        mult = lr / (np.sqrt(s) + eps)
        if weight_decay == 0:
            for d in range(dim):
                weight[i, d] -= mult * values[r, d]
        else:
            for d in range(dim):
                weight[i, d] -= mult * (values[r, d] + weight_decay * weight[i, d])


@njit(cache=True, nogil=True, fastmath=_FAST, error_model="numpy")
def adam_rows(
    weight: np.ndarray,
    rows: np.ndarray,
    values: np.ndarray,
    moments: np.ndarray,
    beta1: float,
    one_minus_beta1: float,
    beta2: float,
    one_minus_beta2: float,
    eps: float,
    step_size: float,
    weight_decay: float,
    decay: float,
) -> None:
    """Lazy Adam(W) on the touched rows, ``torch.optim.SparseAdam``'s formula, with
    ``m = moments[:, 0]`` and ``v = moments[:, 1]`` (a row's two moments adjacent):
    ``w *= decay`` (AdamW's ``1 - lr * wd``); ``g += wd * w`` (Adam's L2);
    ``m = b1 m + (1 - b1) g``; ``v = b2 v + (1 - b2) g**2``;
    ``w -= step_size * m / (sqrt(v) + eps)`` with ``step_size = lr sqrt(1 - b2^t) / (1 - b1^t)``.
    """
    dim = weight.shape[1]
    n = rows.size
    for r in range(n):
        if r + _PREFETCH < n:
            _prefetch_row(weight, rows[r + _PREFETCH])
            _prefetch_row(moments, rows[r + _PREFETCH])
        i = rows[r]
        w_row, m_row, v_row, g_row = weight[i], moments[i, 0], moments[i, 1], values[r]
        for d in range(dim):
            w = w_row[d] * decay
            g = g_row[d] + weight_decay * w
            m = beta1 * m_row[d] + one_minus_beta1 * g
            v = beta2 * v_row[d] + one_minus_beta2 * g * g
            m_row[d] = m
            v_row[d] = v
            w_row[d] = w - step_size * m / (np.sqrt(v) + eps)
