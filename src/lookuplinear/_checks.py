"""Per-call input checks and input preparation compiled by numba, for CPU input.

A check that runs on every forward call is measured against the lookup itself (about 100 us
for 1024 bags of 20 entries). Written with numpy, the CSR offsets check costs a few microseconds
of its own and, by running numpy's dispatch machinery between two lookups, slows the lookup that
follows by 10-25% (its data and code are evicted from the core's caches; docs/benchmarks.md). One
compiled loop does the same check in one pass without temporaries, at a small fraction of that.

Compiled on first use and cached on disk (``cache=True``), like :mod:`lookuplinear._numba`.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from numba import carray, njit, types
from numba.core import cgutils
from numba.extending import intrinsic

__all__ = ["csr_offsets_ok", "drop_entries", "mode_weights", "tensor_offsets_ok"]


@njit(cache=True, nogil=True)
def _offsets_ok(offsets: np.ndarray, nnz: int) -> bool:
    n = offsets.shape[0]
    if n == 0 or offsets[0] != 0 or offsets[n - 1] != nnz:
        return False
    bad = False
    for k in range(1, n):  # no early exit: the loop vectorizes (0.1 us for 1025 offsets, not 1)
        bad |= offsets[k] < offsets[k - 1]
    return not bad


def csr_offsets_ok(offsets: np.ndarray, nnz: int) -> bool:
    """Whether ``offsets`` are the CSR offsets of ``nnz`` entries.

    True when ``offsets[0] == 0``, ``offsets[-1] == nnz`` and the offsets never decrease: the
    rows of a CSR matrix (``indptr``) with ``nnz`` stored entries.

    Examples
    --------
    >>> csr_offsets_ok(np.array([0, 2, 2, 5]), 5), csr_offsets_ok(np.array([0, 3, 2, 5]), 5)
    (True, False)
    """
    return bool(_offsets_ok(offsets, nnz))


def _void_pointer_intrinsic(typingctx: Any, address: Any) -> Any:
    """The integer ``address`` (a tensor's ``data_ptr()``) as a ``void*``."""
    if not isinstance(address, types.Integer):
        return None

    def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
        return builder.inttoptr(args[0], cgutils.voidptr_t)

    return types.voidptr(address), codegen


_void_pointer: Any = intrinsic(_void_pointer_intrinsic)


@njit(cache=True, nogil=True)
def _offsets_ok_at64(address: int, n: int, nnz: int) -> bool:
    return _offsets_ok(carray(_void_pointer(address), (n,), np.int64), nnz)


@njit(cache=True, nogil=True)
def _offsets_ok_at32(address: int, n: int, nnz: int) -> bool:
    return _offsets_ok(carray(_void_pointer(address), (n,), np.int32), nnz)


def tensor_offsets_ok(offsets: torch.Tensor, nnz: int) -> bool:
    """:func:`csr_offsets_ok` of a CPU int32/int64 tensor (any strides), read in place.

    A contiguous tensor is read through its address: ``Tensor.numpy()`` alone costs more than
    the check (1.5 against 0.3 us for 1025 offsets).

    Examples
    --------
    >>> ok, bad = torch.tensor([0, 2, 2, 5]), torch.tensor([0, 3, 2, 5])
    >>> tensor_offsets_ok(ok, 5), tensor_offsets_ok(bad, 5)
    (True, False)
    """
    if not offsets.is_contiguous() or offsets.numel() == 0:
        return csr_offsets_ok(offsets.numpy(), nnz)
    at = _offsets_ok_at64 if offsets.dtype is torch.int64 else _offsets_ok_at32
    return bool(at(offsets.data_ptr(), offsets.shape[0], nnz))


@njit(cache=True, nogil=True)
def _drop_entries(
    indices: np.ndarray,
    offsets: np.ndarray,
    value: int,
    kept: np.ndarray,
    new_indices: np.ndarray,
    new_offsets: np.ndarray,
) -> int:
    j = 0
    new_offsets[0] = 0
    for b in range(offsets.shape[0] - 1):
        for k in range(offsets[b], offsets[b + 1]):
            if indices[k] != value:
                kept[j] = k
                new_indices[j] = indices[k]
                j += 1
        new_offsets[b + 1] = j
    return j


def drop_entries(
    indices: np.ndarray, offsets: np.ndarray, value: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """The entries not equal to ``value``: their positions, the indices and the bags' offsets.

    ``offsets`` must be valid CSR offsets of ``indices`` (:func:`csr_offsets_ok`). Returns
    ``None`` when no entry equals ``value``.

    Examples
    --------
    >>> kept, indices, offsets = drop_entries(np.array([3, 0, 1, 0, 2]), np.array([0, 3, 4, 5]), 0)
    >>> kept.tolist(), indices.tolist(), offsets.tolist()
    ([0, 2, 4], [3, 1, 2], [0, 2, 2, 3])
    """
    n = indices.shape[0]
    kept = np.empty(n, dtype=np.int64)
    new_indices = np.empty(n, dtype=indices.dtype)
    new_offsets = np.empty(offsets.shape[0], dtype=offsets.dtype)
    j = _drop_entries(indices, offsets, value, kept, new_indices, new_offsets)
    return None if j == n else (kept[:j], new_indices[:j], new_offsets)


@njit(cache=True, nogil=True, fastmath={"reassoc", "contract"})  # sums in any order
def _mode_weights(offsets: np.ndarray, weights: np.ndarray, sqrt: bool, out: np.ndarray) -> None:
    unweighted = weights.shape[0] == 0
    for b in range(offsets.shape[0] - 1):
        lo, hi = offsets[b], offsets[b + 1]
        total = 0.0  # float64, whatever the weights' dtype; one loop per case, none branching
        if unweighted:
            total = float(hi - lo)  # every weight is 1, and so is its square
        elif sqrt:
            for k in range(lo, hi):
                total += float(weights[k]) * float(weights[k])
        else:
            for k in range(lo, hi):
                total += weights[k]
        if sqrt:
            total = np.sqrt(total)
        inv = 0.0 if total == 0.0 else 1.0 / total
        if unweighted:
            out[lo:hi] = inv
        else:
            for k in range(lo, hi):
                out[k] = weights[k] * inv


def mode_weights(
    offsets: np.ndarray, weights: np.ndarray | None, sqrt: bool, dtype: np.dtype
) -> np.ndarray:
    """Per-entry weights that turn a bag's weighted sum into its mean (or sqrtn) reduction.

    Entry ``k`` of bag ``b`` gets ``w[k] / sum(w)`` (``sqrt``: ``w[k] / sqrt(sum(w**2))``) over
    the bag's entries, ``w = 1`` when ``weights`` is None, and 0 when the denominator is 0 (an
    empty row gives the bias, never NaN). Sums in float64.

    Examples
    --------
    >>> mode_weights(np.array([0, 2, 2, 3]), np.array([1.0, 3.0, 2.0]), False, np.float32)
    array([0.25, 0.75, 1.  ], dtype=float32)
    """
    nnz = int(offsets[-1])
    out = np.empty(nnz, dtype=dtype)
    _mode_weights(offsets, np.empty(0, dtype) if weights is None else weights, sqrt, out)
    return out
