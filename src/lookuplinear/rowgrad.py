"""Row-sparse weight gradients: one row per unique index, duplicates merged in the backward.

The weight gradient of ``densify(x) @ W`` is ``densify(x).T @ grad_out``: non-zero only in the
rows ``x`` names. ``F.embedding_bag(..., sparse=True)`` returns it as an uncoalesced COO tensor
with one row per *entry* (``nnz`` rows, duplicates repeated), which every optimizer then has to
coalesce. :func:`bag_lookup` returns it already coalesced: rows sorted and unique, their
contributions summed, so an optimizer step reads each touched row once::

    indices = [3, 1, 3]        grad rows  = [1, 3]
    offsets = [0, 2, 3]   ->   grad values = [g[0], g[0] + g[1]]     (g = grad_out)
"""

from __future__ import annotations

import weakref
from typing import Any

import torch
import torch.nn.functional as F

__all__ = [
    "FUSED",
    "bag_lookup",
    "group_rows",
    "numpy_inputs",
    "register_fused",
    "row_sparse_grad",
]

#: set to False to force the torch-op path on CPU too (tests compare both); where True, CPU
#: float32/float64 runs the C kernels of :mod:`lookuplinear._native` where they are built,
#: else numba's
USE_NUMBA = True

#: id(parameter) -> (weak reference to it, weak reference to the ``fused=True`` optimizer that
#: updates it in its backward): a registry beside the parameter, so that parameters and models
#: pickle as before (tensors compare element-wise, so they cannot key a WeakKeyDictionary)
FUSED: dict[int, tuple[Any, Any]] = {}


def register_fused(param: torch.Tensor, optimizer: Any) -> None:
    """Let ``optimizer`` update ``param`` inside the backward of a row-sparse lookup."""
    key = id(param)
    FUSED[key] = (weakref.ref(param, lambda _: FUSED.pop(key, None)), weakref.ref(optimizer))


def group_rows(
    indices: torch.Tensor,
    offsets: torch.Tensor | None,
    weights: torch.Tensor | None,
    grad_out: torch.Tensor,
    padding_idx: int | None,
    in_features: int,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(rows, values)``: the non-zero rows of ``densify(x).T @ grad_out``, rows sorted.

    ``offsets`` (CSR, ``N + 1`` entries) is ``None`` for index input (one entry per output
    row); ``weights`` ``None`` means 1; ``padding_idx`` entries are left out.

    Examples
    --------
    >>> g = torch.tensor([[1.0, 2.0], [10.0, 20.0]])
    >>> group_rows(torch.tensor([3, 1, 3]), torch.tensor([0, 2, 3]), None, g, None, 4)
    (tensor([1, 3]), tensor([[ 1.,  2.],
            [11., 22.]]))
    """
    grad_out = grad_out.contiguous()
    if _use_numba(grad_out):
        from . import _native

        args = numpy_inputs(indices, offsets, weights, grad_out, padding_idx)
        parts = _native.group_rows(*args, in_features)
        if parts is None:
            from . import _numba

            parts = _numba.group_rows(*args, in_features)
        return torch.from_numpy(parts[0]), torch.from_numpy(parts[1])
    return _group_rows_torch(indices, offsets, weights, grad_out, padding_idx)


def numpy_inputs(
    indices: torch.Tensor,
    offsets: torch.Tensor | None,
    weights: torch.Tensor | None,
    grad_out: torch.Tensor,
    padding_idx: int | None,
) -> tuple[Any, Any, Any, Any, int]:
    """The numba kernels' view of a lookup's backward: int64 indices and offsets (empty: one
    entry per output row), weights in ``grad_out``'s dtype (empty: all 1), ``-1`` for no
    padding index."""
    empty = torch.empty(0, dtype=torch.long)
    return (
        indices.detach().long().contiguous().numpy(),
        (empty if offsets is None else offsets.long().contiguous()).numpy(),
        (
            torch.empty(0, dtype=grad_out.dtype)
            if weights is None
            else weights.detach().to(grad_out.dtype).contiguous()
        ).numpy(),
        grad_out.detach().contiguous().numpy(),
        -1 if padding_idx is None else padding_idx,
    )


def _use_numba(t: torch.Tensor) -> bool:
    return (
        USE_NUMBA
        and t.device.type == "cpu"
        and t.dtype in (torch.float32, torch.float64)
    )


def _group_rows_torch(
    indices: torch.Tensor,
    offsets: torch.Tensor | None,
    weights: torch.Tensor | None,
    grad_out: torch.Tensor,
    padding_idx: int | None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The same as :func:`group_rows` with torch ops, on any device and dtype."""
    idx = indices.long()
    if offsets is None:
        bag = torch.arange(idx.numel(), device=idx.device)
    else:
        lengths = offsets[1:] - offsets[:-1]
        bag = torch.repeat_interleave(torch.arange(lengths.numel(), device=idx.device), lengths)
    contrib = grad_out.index_select(0, bag)  # (nnz, out)
    if weights is not None:
        contrib = contrib * weights.to(grad_out.dtype).unsqueeze(1)
    if padding_idx is not None:
        keep = idx != padding_idx
        idx, contrib = idx[keep], contrib[keep]
    rows, inverse = torch.unique(idx, sorted=True, return_inverse=True)
    acc = torch.float32 if grad_out.dtype in (torch.float16, torch.bfloat16) else grad_out.dtype
    values = torch.zeros(rows.numel(), grad_out.shape[1], dtype=acc, device=grad_out.device)
    values.index_add_(0, inverse, contrib.to(acc))
    return rows, values.to(grad_out.dtype)


def row_sparse_grad(
    rows: torch.Tensor, values: torch.Tensor, shape: tuple[int, int]
) -> torch.Tensor:
    """A coalesced COO tensor of ``shape`` holding ``values`` in ``rows`` (sorted, unique)."""
    return torch.sparse_coo_tensor(
        rows.unsqueeze(0), values, shape, is_coalesced=True, check_invariants=False
    )


class _BagLookup(torch.autograd.Function):
    """``embedding_bag`` sum forward; backward returns the coalesced row-sparse gradient."""

    @staticmethod
    def forward(
        ctx: Any,
        weight: torch.Tensor,
        indices: torch.Tensor,
        offsets: torch.Tensor | None,
        weights: torch.Tensor | None,
        padding_idx: int | None,
    ) -> torch.Tensor:
        if offsets is None:
            out = F.embedding(indices, weight, padding_idx=padding_idx)
        else:  # detached: ATen's forward-only kernel (the backward below is this class's own)
            out = F.embedding_bag(
                indices, weight.detach(), offsets, mode="sum", per_sample_weights=weights,
                include_last_offset=True, padding_idx=padding_idx,
            )
        ctx.save_for_backward(weight, indices, offsets, weights)
        ctx.padding_idx = padding_idx
        ctx.param = weight  # the Parameter itself: a fused optimizer registers on it
        return out

    @staticmethod
    def backward(ctx: Any, grad_out: torch.Tensor) -> tuple[Any, ...]:
        weight, indices, offsets, weights = ctx.saved_tensors
        g = grad_out.reshape(-1, weight.shape[1])
        grad_weight = grad_weights = None
        if weights is not None and ctx.needs_input_grad[3]:  # before a fused update moves weight
            lengths = offsets[1:] - offsets[:-1]
            bag = torch.repeat_interleave(torch.arange(lengths.numel(), device=g.device), lengths)
            grad_weights = (g.index_select(0, bag) * weight.index_select(0, indices)).sum(1)
            if ctx.padding_idx is not None:
                grad_weights = grad_weights.masked_fill(indices == ctx.padding_idx, 0)
            grad_weights = grad_weights.to(weights.dtype)
        if ctx.needs_input_grad[0] and not _fused_update(
            ctx.param, indices.reshape(-1), offsets, weights, g, ctx.padding_idx
        ):
            rows, values = group_rows(
                indices.reshape(-1), offsets, weights, g, ctx.padding_idx, weight.shape[0]
            )
            grad_weight = row_sparse_grad(rows, values.to(weight.dtype), tuple(weight.shape))
        return grad_weight, None, None, grad_weights, None


def _fused_update(
    param: torch.Tensor,
    indices: torch.Tensor,
    offsets: torch.Tensor | None,
    weights: torch.Tensor | None,
    grad_out: torch.Tensor,
    padding_idx: int | None,
) -> bool:
    """Let a ``fused=True`` optimizer of ``param`` update it now; False if there is none."""
    entry = FUSED.get(id(param))
    if entry is None or entry[0]() is not param:
        return False
    opt = entry[1]()
    if opt is None or torch.is_grad_enabled():  # create_graph=True: keep the gradient
        return False
    return bool(opt.fused_backward(param, indices, offsets, weights, grad_out, padding_idx))


def bag_lookup(
    weight: torch.Tensor,
    indices: torch.Tensor,
    offsets: torch.Tensor | None = None,
    weights: torch.Tensor | None = None,
    padding_idx: int | None = None,
) -> torch.Tensor:
    """``densify(x) @ weight`` (mode sum) whose weight gradient is coalesced and row-sparse.

    ``offsets is None``: index input of any shape ``S``, returns ``S + (out,)`` (equal to
    ``F.embedding``); otherwise CSR bags, returns ``(N, out)`` (``F.embedding_bag`` sum with
    ``per_sample_weights``). ``weight.grad`` is a sparse COO tensor whose indices are the unique
    touched rows, sorted, and whose values hold one summed gradient row each. (Autograd's
    accumulation drops the tensor's ``is_coalesced`` flag; :mod:`lookuplinear.optim` sees from
    the strictly increasing rows that no coalesce is needed.)

    Examples
    --------
    >>> W = torch.ones(5, 2, requires_grad=True)
    >>> bag_lookup(W, torch.tensor([3, 1, 3]), torch.tensor([0, 2, 3])).sum().backward()
    >>> W.grad._indices(), W.grad._values()      # rows 1 and 3; row 3 named twice
    (tensor([[1, 3]]), tensor([[1., 1.],
            [2., 2.]]))
    """
    out: torch.Tensor = _BagLookup.apply(weight, indices, offsets, weights, padding_idx)
    return out
