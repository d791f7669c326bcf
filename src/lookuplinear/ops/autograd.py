"""Row-sparse weight gradients of the ``autograd.Function`` lookups: one row per unique index.

(The layers' and the collections' sum and max lookups call the operators
``lookuplinear::bag_lookup`` and ``lookuplinear::bag_max``, whose backward is C++:
:mod:`.library`. The functions here serve a table bound to a ``fused=True`` optimizer, whose
backward hands its gradient to the optimizer, and a ``torch.jit.trace``.)

The weight gradient of ``densify(x) @ W`` is ``densify(x).T @ grad_out``: non-zero only in the
rows ``x`` names. ``F.embedding_bag(..., sparse=True)`` returns it as an uncoalesced COO tensor
with one row per *entry* (``nnz`` rows, duplicates repeated), which every optimizer then has to
coalesce. :func:`bag_lookup` returns it already coalesced: rows sorted and unique, their
contributions summed (:func:`lookuplinear.ops.group_rows`), so an optimizer step reads each
touched row once::

    indices = [3, 1, 3]        grad rows  = [1, 3]
    offsets = [0, 2, 3]   ->   grad values = [g[0], g[0] + g[1]]     (g = grad_out)

A table bound to a ``fused=True`` optimizer (:mod:`lookuplinear._fusion`) stores no gradient:
in a backward that accumulates into it, the optimizer takes ``grad_out`` and updates the rows
at the end of the backward; ``torch.autograd.grad`` gets the coalesced gradient.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch
import torch.nn.functional as F

from .._fusion import binding
from ._bagmax import c_operands
from ._columns import deinterleave, interleave, split_blocks
from ._hooks import WATCHERS, notify
from ._rows import gather_rows, group_rows
from .library import entry_grads, per_sample_weights_grad, project_error, routed

__all__ = ["GroupLookups", "bag_lookup", "bag_max", "row_sparse_grad", "weight_grad"]


_BAG_MAX = torch.ops.lookuplinear.bag_max.default


def row_sparse_grad(
    rows: torch.Tensor, values: torch.Tensor, shape: tuple[int, ...]
) -> torch.Tensor:
    """A coalesced COO tensor of ``shape`` holding ``values`` in ``rows`` (sorted, unique)."""
    return torch.sparse_coo_tensor(
        rows.unsqueeze(0), values, shape, is_coalesced=True, check_invariants=False
    )


def weight_grad(
    param: torch.Tensor, weight: torch.Tensor, g: torch.Tensor, indices: torch.Tensor,
    offsets: torch.Tensor | None = None, per_sample_weights: torch.Tensor | None = None,
    padding_idx: int | None = None, *, node: Any,
) -> torch.Tensor | None:
    """The row-sparse gradient of ``weight`` (the saved ``param``) for a lookup of ``indices``
    (``offsets``, ``per_sample_weights``, ``padding_idx``: as :func:`~lookuplinear.ops.group_rows`
    takes them) whose output rows have the gradient ``g`` (``(rows, dim)``), in a backward:
    coalesced (an index tensor's: ``nn.Embedding(sparse=True)``'s, one row per entry in entry
    order, padding left out), or taken by the ``fused=True`` optimizer bound to ``param``
    (None returned) where this backward accumulates into ``param`` (``node``: the node the
    lookup's gradient edge to ``param`` leads to, its ``AccumulateGrad``), or one row per
    entry with its graph under ``create_graph=True``."""
    shape = tuple(weight.shape)
    fused = binding(param)
    if torch.is_grad_enabled():  # create_graph=True: a gradient that can be differentiated
        return entry_grads(indices, offsets, per_sample_weights, padding_idx, g, shape)
    if fused is not None and fused.defer(
            node, (indices, offsets, per_sample_weights, padding_idx), g):
        # no gradient is stored, so no accumulation hook fires: tell the row watchers (a
        # checkpoint) here which rows the fused update changes
        if WATCHERS:
            notify(param, indices)
        return None
    if offsets is None and per_sample_weights is None:  # nn.Embedding(sparse=True)'s, as the
        # operator's backward gives it: the fused update sums a table's uses in that order
        return entry_grads(indices, None, None, padding_idx, g.to(weight.dtype), shape)
    rows, values = group_rows(g, shape[0], indices, offsets, per_sample_weights, padding_idx)
    return row_sparse_grad(rows, values.to(weight.dtype), shape)


class _BagLookup(torch.autograd.Function):
    """``embedding_bag`` sum forward; backward returns the coalesced row-sparse gradient
    (an index tensor's: ``nn.Embedding(sparse=True)``'s)."""

    @staticmethod
    def forward(
        ctx: Any,
        weight: torch.Tensor,
        indices: torch.Tensor,
        offsets: torch.Tensor | None,
        weights: torch.Tensor | None,
        padding_idx: int | None,
        include_last_offset: bool,
    ) -> torch.Tensor:
        if offsets is None:  # C's gather on the CPU, else torch's (the same rows)
            out = gather_rows(weight, indices)
            if out is None:
                out = F.embedding(indices, weight, padding_idx=padding_idx)
        else:  # detached: ATen's forward-only kernel (the backward below is this class's own),
            # called as functional._embedding_bag calls it (the caller has checked the input);
            # not in a trace, whose exporter has no ONNX op for detach
            table = weight if torch.jit.is_tracing() else weight.detach()
            out = torch.embedding_bag(
                table, indices, offsets, False, 0, False, weights, include_last_offset,
                padding_idx,
            )[0]
        ctx.save_for_backward(weight, indices, offsets, weights)
        ctx.padding_idx = padding_idx
        ctx.include_last_offset = include_last_offset
        ctx.param = weight  # the Parameter itself: a fused optimizer is bound to it
        return out

    @staticmethod
    def backward(ctx: Any, grad_out: torch.Tensor) -> tuple[Any, ...]:
        weight, indices, offsets, weights = ctx.saved_tensors
        g = grad_out.reshape(-1, weight.shape[1])
        if offsets is not None and not ctx.include_last_offset:  # start offsets: append the end
            offsets = torch.cat([offsets, offsets.new_tensor([indices.numel()])])
        indices = indices.reshape(-1)
        grad_weight = grad_weights = None
        if weights is not None and ctx.needs_input_grad[3]:
            grad_weights = per_sample_weights_grad(g, weight, indices, offsets, weights.dtype,
                                                   ctx.padding_idx)
        if ctx.needs_input_grad[0]:
            grad_weight = weight_grad(ctx.param, weight, g, indices, offsets, weights,
                                      ctx.padding_idx, node=ctx.next_functions[0][0])  # weight's
        return grad_weight, None, None, grad_weights, None, None


@routed("bag_lookup")
def bag_lookup(
    weight: torch.Tensor,
    indices: torch.Tensor,
    offsets: torch.Tensor | None = None,
    weights: torch.Tensor | None = None,
    padding_idx: int | None = None,
    *,
    include_last_offset: bool = True,
) -> torch.Tensor:
    """``densify(x) @ weight`` (mode sum) whose weight gradient is coalesced and row-sparse.

    The layers call the operator ``lookuplinear::bag_lookup`` instead (its gradient one row per
    entry, sorted by row: :mod:`lookuplinear.ops.library`); this function serves a table bound
    to a ``fused=True`` optimizer, whose backward hands the gradient to the optimizer, and a
    ``torch.jit.trace``.

    ``offsets is None``: index input of any shape ``S``, returns ``S + (out,)`` (equal to
    ``F.embedding``); otherwise bags, returns ``(N, out)`` (``F.embedding_bag`` sum with
    ``per_sample_weights``): CSR offsets (``N + 1``), or with ``include_last_offset=False``
    ``nn.EmbeddingBag``'s ``N`` start offsets, the last bag running to the end of ``indices``
    (in a traced graph too: no entry count is fixed). ``weight.grad`` of an index tensor is
    ``nn.Embedding(sparse=True)``'s (one row per entry, in entry order, padding left out); of
    bags a sparse COO tensor whose indices are the unique touched rows, sorted, and whose
    values hold one summed gradient row each. (Autograd's accumulation drops the tensor's
    ``is_coalesced`` flag; :mod:`lookuplinear.optim` sees from the strictly increasing rows
    that no coalesce is needed.) With ``create_graph=True`` the
    gradient is one row per entry and can be differentiated again. In a graph that
    ``torch.compile`` or ``torch.export`` records (the operator ``lookuplinear::bag_lookup``,
    :mod:`lookuplinear.ops.library`) it is one row per entry too: for bags each row's sum
    (computed as here) at its first entry, for an index tensor ``nn.Embedding(sparse=True)``'s
    gradient; densified or coalesced, this gradient to the bit.

    Examples
    --------
    >>> W = torch.ones(5, 2, requires_grad=True)
    >>> bag_lookup(W, torch.tensor([3, 1, 3]), torch.tensor([0, 2, 3])).sum().backward()
    >>> W.grad._indices(), W.grad._values()      # rows 1 and 3; row 3 named twice
    (tensor([[1, 3]]), tensor([[1., 1.],
            [2., 2.]]))
    """
    out: torch.Tensor = _BagLookup.apply(
        weight, indices, offsets, weights, padding_idx, include_last_offset
    )
    return out


class GroupLookups(torch.autograd.Function):
    """The usual batch of a collection with a table bound to a ``fused=True`` optimizer (a
    collection without one calls the operators: :mod:`lookuplinear.modules.batched`).

    Sum lookups of several tables (``indices`` and ``offsets``: one lookup per table of
    ``weights``, ``offsets`` None for one entry per output row; ``kinds``:
    whether its output is feature-major, and its number of features) side by side in feature
    order in one ``(N, width)`` output, written by ``write`` (one kernel call; where it does
    not apply, torch's lookups and one copy). The backward copies each table's gradient rows
    out (:func:`_apart`) and hands them to it as its own lookup's backward would
    (:func:`~lookuplinear.ops.autograd.weight_grad`: row-sparse, or the fused update, one call for
    all tables)."""

    @staticmethod
    def forward(ctx: Any, indices: list[torch.Tensor], offsets: list[torch.Tensor | None],
                write: Callable[[torch.Tensor], bool], segs: torch.Tensor,
                kinds: list[tuple[bool, int]], n: int, width: int,
                *weights: torch.Tensor) -> torch.Tensor:
        out = torch.empty(n, width, dtype=weights[0].dtype, device=weights[0].device)
        if not write(out):
            outs = [F.embedding(idx, w.detach()).reshape(n, f * w.shape[1])
                    if off is None else
                    F.embedding_bag(idx, w.detach(), off, mode="sum", include_last_offset=True)
                    for idx, off, w, (_, f) in zip(indices, offsets, weights, kinds, strict=True)]
            out = interleave(_blocks(outs, kinds, n), segs)
        ctx.indices, ctx.offsets = indices, offsets
        ctx.segs, ctx.kinds, ctx.n, ctx.params = segs, kinds, n, weights
        ctx.save_for_backward(*weights)
        return out

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[Any, ...]:
        weights = ctx.saved_tensors
        shapes = [(f * ctx.n, w.shape[1]) if fm else (ctx.n, f * w.shape[1])
                  for (fm, f), w in zip(ctx.kinds, weights, strict=True)]
        parts = _apart(grad, ctx.segs, ctx.kinds, shapes, ctx.n)
        edges = ctx.next_functions[-len(weights):]  # the tensor inputs' edges end with the tables'
        grads = [
            weight_grad(param, w, part.reshape(-1, w.shape[1]), idx, off, node=edge[0])
            if ctx.needs_input_grad[7 + i] else None
            for i, (idx, off, w, param, part, edge) in enumerate(
                zip(ctx.indices, ctx.offsets, weights, ctx.params, parts, edges, strict=True))
        ]
        return (None, None, None, None, None, None, None, *grads)


def _apart(grad: torch.Tensor, segs: torch.Tensor, kinds: list[tuple[bool, int]],
           shapes: Sequence[Sequence[int]], n: int) -> list[torch.Tensor]:
    """The gradient of outputs put in feature order (``segs``) copied back into each output's
    layout (``kinds``, ``shapes``): one copy, or torch ops that can be differentiated again
    under ``create_graph=True``."""
    if len(kinds) == 1 and not kinds[0][0] and segs.shape[1] == 1:  # the output's own layout
        return [grad.reshape(tuple(shapes[0]))]
    if torch.is_grad_enabled():
        blocks = iter(split_blocks(grad, segs))
        grads = []
        for (fm, f), shape in zip(kinds, shapes, strict=True):
            rows = [next(blocks) for _ in range(f if fm else 1)]
            grads.append(torch.stack(rows).reshape(shape) if fm else rows[0].reshape(shape))
        return grads
    grads = [grad.new_empty(tuple(shape)) for shape in shapes]
    deinterleave(grad, segs, _blocks(grads, kinds, n))
    return grads


def _blocks(outs: Sequence[torch.Tensor], kinds: list[tuple[bool, int]], n: int
            ) -> list[torch.Tensor]:
    """The ``(N, width)`` blocks of lookup outputs: an example-major output is one, a
    feature-major one a block per feature (views)."""
    blocks: list[torch.Tensor] = []
    for out, (fm, f) in zip(outs, kinds, strict=True):
        if fm:  # (F * N, dim)
            blocks.extend(out.view(f, n, out.shape[1]).unbind(0))
        else:  # (N, F * dim)
            blocks.append(out)
    return blocks


def bag_max(
    weight: torch.Tensor, indices: torch.Tensor, offsets: torch.Tensor
) -> torch.Tensor | None:
    """``F.embedding_bag(indices, weight, offsets, mode="max", include_last_offset=True)`` by
    the C kernels (the operator ``lookuplinear::bag_max``), differentiable in ``weight``; None
    where they do not apply.

    Parameters
    ----------
    weight : torch.Tensor
        ``(rows, dim)`` table.
    indices : torch.Tensor
        ``(nnz,)`` int32/int64 entries.
    offsets : torch.Tensor
        ``(N + 1,)`` CSR offsets.

    Returns
    -------
    torch.Tensor or None
        ``(N, dim)``; None unless the C kernels apply: the backend runs C, all three on the CPU,
        ``weight`` contiguous float32/float64, the indices int32/int64. The backward adds
        ``grad_out[b, j]`` to the row that gave each maximum (``bag_max_backward``).

    Raises
    ------
    LookupIndexError
        An index outside ``[0, rows)``, before anything is read outside the table.
    OffsetsError
        ``offsets`` that are not CSR offsets of the entries.

    Examples
    --------
    >>> W = torch.tensor([[1.0, 5.0], [3.0, 2.0], [0.0, 0.0]])
    >>> out = bag_max(W, torch.tensor([0, 1, 2]), torch.tensor([0, 2, 2, 3]))
    >>> out is None or out.tolist() == [[3.0, 5.0], [0.0, 0.0], [0.0, 0.0]]  # None: no C library
    True
    """
    if c_operands(weight, indices, offsets) is None:
        return None
    try:
        out: torch.Tensor = _BAG_MAX(weight, indices, offsets)
    except (IndexError, ValueError) as e:  # a C++ kernel's builtin: the project's
        mapped = project_error(e)
        if mapped is None:
            raise
        raise mapped from None
    return out
