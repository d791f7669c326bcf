"""``mode="max"`` over CPU bags in C: the forward and its backward.

ATen's CPU ``embedding_bag`` computes ``max`` outside its fast kernel, many times slower than
``sum`` on the same bags. ``csrc/bagmax.c`` computes the same in one pass (benchmarks/bench_layer.py
times ``mode="max"`` inside the layer against ATen's; docs/performance.md)::

    out[b, j] = max(W[i, j] for i in bag b)     0 for an empty bag

and keeps the row that gave each maximum for the backward, which adds ``grad_out[b, j]`` to
``W.grad[row, j]``. As in ATen, a bag's first entry is taken as it is and a later one only
where it is strictly greater: ties keep the first, a later NaN never wins.

Where the C kernels do not apply (another device or dtype, the ``torch`` backend, no C
library), :func:`lookuplinear.ops.bag_max` returns None and the caller runs ATen's
``embedding_bag`` max.
"""

from __future__ import annotations

import torch

from ._backend import use_c
from ._clib import function, ptr, suffix

__all__ = ["bag_max_c", "bag_max_grad_c", "c_operands"]


def c_operands(weight: torch.Tensor, indices: torch.Tensor, offsets: torch.Tensor
               ) -> tuple[torch.Tensor, torch.Tensor] | None:
    """``(indices, offsets)`` as the C kernel reads them (contiguous, one int dtype), or None
    where it does not apply: the backend runs C, all three on the CPU, ``weight`` contiguous
    float32/float64, the indices and offsets int32/int64."""
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
    return indices.reshape(-1).contiguous(), offsets.contiguous()


def bag_max_c(weight: torch.Tensor, indices: torch.Tensor, offsets: torch.Tensor
              ) -> tuple[torch.Tensor, torch.Tensor]:
    """``(out, arg)``: the ``mode="max"`` pool of CPU bags by the C kernel (``weight``
    contiguous float32/float64, ``indices`` and ``offsets`` contiguous, of one int dtype), and
    the row that gave each maximum (``-1`` in an empty bag). ``IndexError`` where an index is
    outside the table, as ATen's kernel."""
    w = weight.detach()
    n, dim = offsets.numel() - 1, w.shape[1]
    out = torch.empty(n, dim, dtype=w.dtype)
    arg = torch.empty(n, dim, dtype=torch.int64)
    fn = function("ll_bag_max", f"{suffix(w.dtype)}_{suffix(indices.dtype)}")
    bad = fn(ptr(w), w.shape[0], dim, ptr(indices), ptr(offsets), n, ptr(out), ptr(arg))
    if bad >= 0:  # as ATen's kernel: lookup_linear's range check then names the index
        raise IndexError(f"index out of range at entry {bad}")
    return out, arg


def bag_max_grad_c(arg: torch.Tensor, grad_out: torch.Tensor, shape: tuple[int, ...]
                   ) -> torch.Tensor:
    """The weight gradient of :func:`bag_max_c`: ``grad_out[b, j]`` added to row
    ``arg[b, j]`` of a zero ``shape`` table, bag after bag, by the C kernel."""
    grad_out = grad_out.contiguous()
    grad_weight = torch.zeros(shape, dtype=grad_out.dtype)
    fn = function("ll_bag_max_backward", str(suffix(grad_out.dtype)))
    fn(ptr(grad_weight), ptr(arg), ptr(grad_out), arg.shape[0], arg.shape[1])
    return grad_weight
