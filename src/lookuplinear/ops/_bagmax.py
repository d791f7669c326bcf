"""``mode="max"`` over CPU bags in C: the forward and its backward.

ATen's CPU ``embedding_bag`` computes ``max`` outside its fast kernel, many times slower than
``sum`` on the same bags. ``csrc/bagmax.c`` computes the same in one pass (benchmarks/bench_layer.py
times ``mode="max"`` inside the layer against ATen's; docs/performance.md)::

    out[b, j] = max(W[i, j] for i in bag b)     0 for an empty bag

and keeps the row that gave each maximum for the backward, which adds ``grad_out[b, j]`` to
``W.grad[row, j]``. As in ATen, a bag's first entry is taken as it is and a later one only
where it is strictly greater: ties keep the first, a later NaN never wins.

Where the C kernels do not apply (another device or dtype, the ``torch`` backend, no C
library), :func:`bag_max` returns None and the caller runs ATen's ``embedding_bag`` max.
"""

from __future__ import annotations

import torch

from ._backend import use_c
from ._clib import suffix
from .autograd import BagMax

__all__ = ["bag_max"]



def bag_max(
    weight: torch.Tensor, indices: torch.Tensor, offsets: torch.Tensor
) -> torch.Tensor | None:
    """``F.embedding_bag(indices, weight, offsets, mode="max", include_last_offset=True)`` by
    the C kernels, differentiable in ``weight``; None where they do not apply.

    Parameters
    ----------
    weight : torch.Tensor
        ``(rows, dim)`` table.
    indices : torch.Tensor
        ``(nnz,)`` int32/int64 entries.
    offsets : torch.Tensor
        ``(N + 1,)`` CSR offsets, already checked (``Bags``).

    Returns
    -------
    torch.Tensor or None
        ``(N, dim)``; None unless the C kernels apply: the backend runs C, all three on the CPU,
        ``weight`` contiguous float32/float64, the indices int32/int64. An index outside
        ``[0, rows)`` raises ``IndexError`` before anything is read outside the table.

    Examples
    --------
    >>> W = torch.tensor([[1.0, 5.0], [3.0, 2.0], [0.0, 0.0]])
    >>> out = bag_max(W, torch.tensor([0, 1, 2]), torch.tensor([0, 2, 2, 3]))
    >>> out is None or out.tolist() == [[3.0, 5.0], [0.0, 0.0], [0.0, 0.0]]  # None: no C library
    True
    """
    if (
        weight.dim() != 2
        or suffix(weight.dtype) not in ("f32", "f64")
        or not weight.is_contiguous()  # a copy of the whole table would cost more than ATen
        or suffix(indices.dtype) not in ("i32", "i64")
        or suffix(offsets.dtype) not in ("i32", "i64")
        or offsets.numel() == 0
        or not use_c(weight, indices, offsets)
    ):
        return None
    if offsets.dtype != indices.dtype:
        indices, offsets = indices.long(), offsets.long()
    out: torch.Tensor = BagMax.apply(
        weight, indices.reshape(-1).contiguous(), offsets.contiguous()
    )
    return out
