"""``mode="max"`` over CPU bags, compiled by numba: forward and its backward.

ATen's CPU ``embedding_bag`` computes ``max`` outside its fast kernel, about 80x slower than
``sum`` on the same bags. This is the same computation in one compiled pass, 10x faster than
ATen's (docs/benchmarks.md, issue 2): ``out[b, j] = max(W[i, j] for i in bag b)``, 0 for an
empty bag, and the row that gave each maximum kept for the backward, which adds
``grad_out[b, j]`` to ``W.grad[row, j]``. As in ATen, a bag's first entry is taken as it is
and a later one only where it is strictly greater: ties keep the first, a later NaN never wins.

Imported on first use by :mod:`lookuplinear.functional` (numba loads with it).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from numba import njit

from ._numba import _prefetch_row

__all__ = ["bag_max"]


#: entries ahead whose rows are requested before they are read (as in :mod:`._numba`)
_AHEAD = 16


@njit(cache=True, nogil=True)
def _max_forward(
    weight: np.ndarray, indices: np.ndarray, offsets: np.ndarray, out: np.ndarray,
    arg: np.ndarray,
) -> int:
    rows, dim = weight.shape
    nnz = indices.shape[0]
    cur = np.empty(dim, weight.dtype)  # the bag's running max and its rows, kept local
    cur_arg = np.empty(dim, np.int64)
    for k in range(min(_AHEAD, nnz)):
        if 0 <= indices[k] < rows:
            _prefetch_row(weight, indices[k])
    for b in range(offsets.shape[0] - 1):
        lo, hi = offsets[b], offsets[b + 1]
        if lo == hi:
            out[b, :] = 0
            arg[b, :] = -1
            continue
        for k in range(lo, hi):
            if k + _AHEAD < nnz and 0 <= indices[k + _AHEAD] < rows:
                # scattered rows: without it each costs a memory round trip in turn (4x slower)
                _prefetch_row(weight, indices[k + _AHEAD])
            r = indices[k]
            if r < 0 or r >= rows:
                return k  # the caller names it: no read outside the table
            if k == lo:
                for j in range(dim):
                    cur[j] = weight[r, j]
                    cur_arg[j] = r
            else:
                for j in range(dim):
                    v = weight[r, j]
                    take = v > cur[j]  # strict: ties keep the first entry, a later NaN never wins
                    cur[j] = v if take else cur[j]
                    cur_arg[j] = r if take else cur_arg[j]
        out[b, :] = cur
        arg[b, :] = cur_arg
    return -1


@njit(cache=True, nogil=True)
def _max_backward(grad_weight: np.ndarray, arg: np.ndarray, grad_out: np.ndarray) -> None:
    n, dim = arg.shape
    for b in range(n):
        for j in range(dim):
            r = arg[b, j]
            if r >= 0:
                grad_weight[r, j] += grad_out[b, j]


class _BagMax(torch.autograd.Function):
    @staticmethod
    def forward(
        ctx: Any, weight: torch.Tensor, indices: torch.Tensor, offsets: torch.Tensor
    ) -> torch.Tensor:
        n = offsets.numel() - 1
        out = torch.empty(n, weight.shape[1], dtype=weight.dtype)
        arg = torch.empty(n, weight.shape[1], dtype=torch.int64)
        bad = _max_forward(  # int64 positions: the prefetch takes one integer type
            weight.detach().numpy(),
            indices.numpy().astype(np.int64, copy=False),
            offsets.numpy().astype(np.int64, copy=False),
            out.numpy(),
            arg.numpy(),
        )
        if bad >= 0:  # as ATen's kernel: lookup_linear's range check then names the index
            raise IndexError(f"index out of range at entry {bad}")
        ctx.save_for_backward(arg)
        ctx.weight_shape = tuple(weight.shape)
        return out

    @staticmethod
    def backward(ctx: Any, grad_out: torch.Tensor) -> tuple[Any, ...]:
        (arg,) = ctx.saved_tensors
        grad_weight = torch.zeros(ctx.weight_shape, dtype=grad_out.dtype)
        _max_backward(grad_weight.numpy(), arg.numpy(), grad_out.contiguous().numpy())
        return grad_weight, None, None


def bag_max(weight: torch.Tensor, indices: torch.Tensor, offsets: torch.Tensor) -> torch.Tensor:
    """``F.embedding_bag(indices, weight, offsets, mode="max", include_last_offset=True)``.

    For CPU tensors: ``weight`` float32/float64 of shape ``(rows, dim)``, CSR ``offsets`` already
    checked (``Bags``). An index outside ``[0, rows)`` raises ``IndexError`` before anything is
    read outside the table.

    Examples
    --------
    >>> W = torch.tensor([[1.0, 5.0], [3.0, 2.0], [0.0, 0.0]])
    >>> bag_max(W, torch.tensor([0, 1, 2]), torch.tensor([0, 2, 2, 3]))
    tensor([[3., 5.],
            [0., 0.],
            [0., 0.]])
    """
    out: torch.Tensor = _BagMax.apply(weight, indices, offsets)
    return out
