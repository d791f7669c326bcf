"""The row kernels: the row-sparse gradient of a lookup, and the row-wise optimizer updates.

The weight gradient of ``densify(x) @ W`` is ``densify(x).T @ grad_out``: non-zero only in the
rows ``x`` names. :func:`group_rows` returns those rows, sorted and unique, with their summed
gradient::

    indices = [3, 1, 3]        rows   = [1, 3]
    offsets = [0, 2, 3]   ->   values = [g[0], g[0] + g[1]]     (g = grad_out)

:func:`update_rows` applies an optimizer's update to such rows, :func:`fused_rows` the same
update straight from a lookup's ``grad_out`` (grouped and updated row after row, the gradient
never stored; several tables in one call). Both run the C kernels (``csrc/rowkernels_impl.h``)
and return False where those do not apply; the optimizer then runs its torch-op twin on
:func:`group_rows`' result, which gives the same bits (tests/test_kernels.py).
"""

from __future__ import annotations

import ctypes
from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

import torch

from ._backend import use_c
from ._clib import SCALARS, SUFFIXES, function, ptr, suffix
from ._clib import scalars as c_scalars

__all__ = ["KERNELS", "FusedTable", "bag_sum_into", "fused_rows", "gather_into", "gather_rows",
           "group_rows", "update_rows"]

#: entries are numbered in 32 bits and rows keyed in 32 bits inside the C sort
_MAX_ENTRIES = 2**31 - 1
_MAX_ROWS = 2**32
_I64 = ctypes.c_int64
_P = ctypes.c_void_p
#: the optimizers' C entry points (``ll_rows_<name>_f32``, ``ll_fused_<name>_f32``, ...)
KERNELS = tuple(SCALARS)


def _c_operands(
    grad_out: torch.Tensor, num_rows: int, indices: torch.Tensor, offsets: torch.Tensor | None,
    per_sample_weights: torch.Tensor | None,
) -> tuple[torch.Tensor, torch.Tensor | None, int, torch.Tensor | None] | None:
    """``(indices, offsets, n_bags, per_sample_weights)`` as the C kernels read them (int64,
    contiguous, weights in ``grad_out``'s dtype; ``n_bags = -1``: one entry per row), or None
    where the C kernels do not take this lookup."""
    if (
        not use_c(indices, grad_out)
        or suffix(grad_out.dtype) not in ("f32", "f64")
        or grad_out.dim() != 2
        or indices.numel() > _MAX_ENTRIES
        or grad_out.shape[0] > _MAX_ENTRIES
        or num_rows > _MAX_ROWS
    ):
        return None
    idx = indices.detach().reshape(-1).to(torch.int64).contiguous()
    off = None if offsets is None else offsets.to(torch.int64).contiguous()
    w = None if per_sample_weights is None else \
        per_sample_weights.detach().to(grad_out.dtype).contiguous()
    return idx, off, -1 if off is None else off.numel() - 1, w


def group_rows(
    grad_out: torch.Tensor,
    num_rows: int,
    indices: torch.Tensor,
    offsets: torch.Tensor | None = None,
    per_sample_weights: torch.Tensor | None = None,
    padding_idx: int | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(rows, values)``: the non-zero rows of ``densify(x).T @ grad_out``, rows sorted.

    ``x`` is the lookup's input, as ``F.embedding_bag`` takes it: ``indices`` ``(nnz,)``, the
    entries; ``offsets`` CSR ``(N + 1,)`` (bag ``b`` is ``indices[offsets[b]:offsets[b + 1]]``),
    or None for one entry per output row (index input); ``per_sample_weights`` ``(nnz,)`` or
    None (all 1); entries equal to ``padding_idx`` are left out. ``grad_out`` has one row per
    bag (or per entry); ``num_rows`` is the table's number of rows. Values are summed in entry
    order, in ``grad_out``'s dtype.

    Examples
    --------
    >>> g = torch.tensor([[1.0, 2.0], [10.0, 20.0]])
    >>> group_rows(g, 4, torch.tensor([3, 1, 3]), torch.tensor([0, 2, 3]))
    (tensor([1, 3]), tensor([[ 1.,  2.],
            [11., 22.]]))
    """
    grad_out = grad_out.detach().contiguous()
    c = _c_operands(grad_out, num_rows, indices, offsets, per_sample_weights)
    if c is None:
        return _group_rows_torch(grad_out, indices, offsets, per_sample_weights, padding_idx)
    idx, off, n_bags, w = c
    n, dim = idx.numel(), grad_out.shape[1]
    rows = torch.empty(n, dtype=torch.int64)  # at most one row per entry
    values = torch.empty(n, dim, dtype=grad_out.dtype)
    fn = function("ll_group_rows", str(suffix(grad_out.dtype)))
    m = fn(ptr(idx), n, ptr(off), n_bags, -1 if padding_idx is None else padding_idx, ptr(w),
           ptr(grad_out), dim, ptr(rows), ptr(values))
    if m < 0:
        raise MemoryError("lookuplinear: out of memory grouping the rows of a backward")
    return rows[:m], values[:m]


def _group_rows_torch(
    grad_out: torch.Tensor, indices: torch.Tensor, offsets: torch.Tensor | None,
    per_sample_weights: torch.Tensor | None, padding_idx: int | None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`group_rows` with torch ops, on any device and dtype."""
    idx = indices.detach().reshape(-1).long()
    if offsets is None:
        bag = torch.arange(idx.numel(), device=idx.device)
    else:
        lengths = offsets[1:] - offsets[:-1]
        bag = torch.repeat_interleave(torch.arange(lengths.numel(), device=idx.device), lengths)
    contrib = grad_out.index_select(0, bag)  # (nnz, out)
    if per_sample_weights is not None:
        contrib = contrib * per_sample_weights.detach().to(grad_out.dtype).unsqueeze(1)
    if padding_idx is not None:
        keep = idx != padding_idx
        idx, contrib = idx[keep], contrib[keep]
    rows, inverse = torch.unique(idx, sorted=True, return_inverse=True)
    acc = torch.float32 if grad_out.dtype in (torch.float16, torch.bfloat16) else grad_out.dtype
    values = torch.zeros(rows.numel(), grad_out.shape[1], dtype=acc, device=grad_out.device)
    values.index_add_(0, inverse, contrib.to(acc))
    return rows, values.to(grad_out.dtype)


def _params(kernel: str, scalars: Mapping[str, float]) -> ctypes.Array[ctypes.c_double]:
    """An optimizer's scalars as the C kernel ``kernel`` reads them (:data:`._clib.SCALARS`)."""
    values = c_scalars(kernel, scalars)
    return (ctypes.c_double * len(values))(*values)


def _table_ok(weight: torch.Tensor, state: torch.Tensor) -> bool:
    return (
        weight.dim() == 2
        and suffix(weight.dtype) in ("f32", "f64")
        and weight.is_contiguous()
        and state.dtype == weight.dtype
        and state.device.type == "cpu"
        and use_c(weight)
    )


def update_rows(
    kernel: str,
    weight: torch.Tensor,
    state: torch.Tensor,
    rows: torch.Tensor,
    values: torch.Tensor,
    scalars: Mapping[str, float],
) -> bool:
    """Update ``weight``'s ``rows`` (unique) by the gradient rows ``values`` with the C kernel
    ``kernel`` (one of :data:`KERNELS`), in place; False (nothing done) where it does not apply.

    ``state`` is the optimizer state the kernel reads at its first element (its layout is the
    optimizer's to check), ``scalars`` the kernel's parameters by name (:data:`._clib.SCALARS`).
    """
    if not _table_ok(weight, state) or rows.device.type != "cpu":
        return False
    rows = rows.to(torch.int64).contiguous()
    values = values.to(weight.dtype).contiguous()
    if values.shape != (rows.numel(), weight.shape[1]):
        return False
    fn = function(f"ll_rows_{kernel}", str(suffix(weight.dtype)))
    fn(ptr(weight), ptr(state), ptr(rows), rows.numel(), ptr(values), weight.shape[1],
       _params(kernel, scalars))
    return True


class FusedTable(NamedTuple):
    """One table's part of a fused update: a lookup's ``grad_out`` rows, the table ``weight``,
    the optimizer ``state`` the kernel reads at its first element, the kernel's ``scalars`` by
    name, and the lookup's input as :func:`group_rows` takes it."""

    grad_out: torch.Tensor
    weight: torch.Tensor
    state: torch.Tensor
    scalars: Mapping[str, float]
    indices: torch.Tensor
    offsets: torch.Tensor | None = None
    per_sample_weights: torch.Tensor | None = None
    padding_idx: int | None = None


def fused_rows(kernel: str, tables: Sequence[FusedTable]) -> list[bool]:
    """:func:`group_rows` then :func:`update_rows` in one C pass, for several tables: each row
    is updated as soon as its gradient is summed (the same sums, the same update, so the same
    bits). The tables of one dtype that the C kernels take are updated in one call, whatever
    their widths. Returns, per table, whether it was updated; False: nothing was done to it
    (the C kernels do not apply, or it ran out of memory), and the caller updates it another
    way."""
    taken = [False] * len(tables)
    if not use_c():  # the backend, asked once; each table's devices below
        return taken
    by_dtype: dict[str, list[tuple[int, tuple[Any, ...]]]] = {}
    for i, t in enumerate(tables):
        # _table_ok and _c_operands, written out: this loop runs per table per backward
        weight, state, indices = t.weight, t.state, t.indices
        grad_out = t.grad_out.detach().contiguous()
        sfx = SUFFIXES.get(weight.dtype)
        if (sfx not in ("f32", "f64") or weight.dim() != 2 or not weight.is_contiguous()
                or not weight.is_cpu or state.dtype != weight.dtype or not state.is_cpu
                or grad_out.dtype != weight.dtype or grad_out.dim() != 2
                or grad_out.shape[1] != weight.shape[1] or not grad_out.is_cpu
                or not indices.is_cpu or indices.numel() > _MAX_ENTRIES
                or grad_out.shape[0] > _MAX_ENTRIES or weight.shape[0] > _MAX_ROWS):
            continue
        idx = indices.detach().reshape(-1).to(torch.int64).contiguous()
        off = None if t.offsets is None else t.offsets.to(torch.int64).contiguous()
        psw = t.per_sample_weights
        w = None if psw is None else psw.detach().to(grad_out.dtype).contiguous()
        by_dtype.setdefault(sfx, []).append(
            (i, (idx, off, -1 if off is None else off.numel() - 1, w, grad_out)))
    for sfx, items in by_dtype.items():
        k = len(items)
        # the kernel's arrays, one entry per table: (idx, offsets, n_bags, weights, grad_out)
        # of each stay alive in ``items`` till the call is done
        ids, n, offs, n_bags, pads, ws, gs = (_P * k)(), (_I64 * k)(), (_P * k)(), \
            (_I64 * k)(), (_I64 * k)(), (_P * k)(), (_P * k)()
        dims, weights, states = (_I64 * k)(), (_P * k)(), (_P * k)()
        params: list[float] = []
        for j, (i, (ix, of, nb, wt, go)) in enumerate(items):
            t = tables[i]
            ids[j], n[j], n_bags[j], gs[j] = ix.data_ptr(), ix.numel(), nb, go.data_ptr()
            offs[j] = None if of is None else of.data_ptr()
            ws[j] = None if wt is None else wt.data_ptr()
            pads[j] = -1 if t.padding_idx is None else t.padding_idx
            dims[j], weights[j], states[j] = (t.weight.shape[1], t.weight.data_ptr(),
                                              t.state.data_ptr())
            params += c_scalars(kernel, t.scalars)
        groups = (_I64 * k)()
        fn = function(f"ll_fused_{kernel}", sfx)
        fn(k, ids, n, offs, n_bags, pads, ws, gs, dims, weights, states,
           (ctypes.c_double * len(params))(*params), groups)
        for j, (i, _) in enumerate(items):
            taken[i] = groups[j] >= 0
    return taken


def _ptrs(tensors: Sequence[torch.Tensor]) -> ctypes.Array[ctypes.c_void_p]:
    """The data pointers of ``tensors`` as a C array."""
    return (_P * len(tensors))(*map(torch.Tensor.data_ptr, tensors))


def _i64s(values: Sequence[int]) -> ctypes.Array[ctypes.c_int64]:
    """``values`` as a C array of int64."""
    return (_I64 * len(values))(*values)


def gather_rows(weight: torch.Tensor, rows: torch.Tensor) -> torch.Tensor | None:
    """``weight[rows]``, of shape ``rows.shape + (dim,)``: the forward of an index lookup
    (``one_hot(rows) @ weight``), by the C kernel (``csrc/gather.c``: fixed-width copies, the rows
    ahead prefetched); None where it does not apply, and the caller runs torch's embedding.

    Raises ``IndexError`` (torch's own message, which the callers' range check turns into a
    ``LookupIndexError`` naming the index) when a row is outside the table; nothing is
    written then.
    """
    sfx = suffix(weight.dtype)
    if (
        sfx not in ("f32", "f64")
        or weight.dim() != 2
        or not weight.is_contiguous()
        or rows.dtype not in (torch.int32, torch.int64)
        or not use_c(weight, rows)
    ):
        return None
    r = rows.to(torch.int64).contiguous()  # named: it lives through the call
    out = torch.empty(*rows.shape, weight.shape[1], dtype=weight.dtype)
    fn = function("ll_gather_rows", sfx)
    if fn(ptr(weight), weight.shape[0], weight.shape[1], ptr(r), r.numel(), ptr(out)) >= 0:
        raise IndexError("index out of range in self")
    return out


def gather_into(tables: Sequence[tuple[torch.Tensor, torch.Tensor, torch.Tensor]],
                out: torch.Tensor) -> bool:
    """``out[i, cols[j]:cols[j] + dim] = weight[rows[i, j]]`` for each ``(weight, rows, cols)``
    of ``tables`` (``rows``: ``(N, F)``, checked), in place: index lookups of several tables,
    of any widths, written straight into column ranges of one wider output by one call of the
    C kernel ``ll_gather_into`` (``csrc/gather.c``). False (nothing written) where it does not
    apply; the caller then writes ``weight[rows]`` with torch ops."""
    sfx = suffix(out.dtype)
    if sfx not in ("f32", "f64") or not out.is_contiguous() or not use_c(out):
        return False
    k = len(tables)
    weights, dims, rows, widths, cols = (_P * k)(), (_I64 * k)(), (_P * k)(), (_I64 * k)(), \
        (_P * k)()
    alive: list[torch.Tensor] = []  # int64 copies, alive through the call
    for j, (w, r, c) in enumerate(tables):
        if (w.dim() != 2 or not w.is_contiguous() or w.dtype != out.dtype or not w.is_cpu
                or not r.is_cpu):
            return False
        r, c = r.to(torch.int64).contiguous(), c.to(torch.int64).contiguous()
        alive += (r, c)
        weights[j], dims[j], rows[j], widths[j], cols[j] = (
            w.data_ptr(), w.shape[1], r.data_ptr(), r.shape[1], c.data_ptr())
    fn = function("ll_gather_into", sfx)
    fn(k, weights, dims, rows, out.shape[0], widths, cols, out.data_ptr(), out.shape[1])
    return True


def bag_sum_into(weights: Sequence[torch.Tensor], cols: Sequence[int], indices: torch.Tensor,
                 offsets: torch.Tensor, out: torch.Tensor) -> bool:
    """``out[:, cols[f]:cols[f] + dim_f] = densify(bags of f) @ weights[f]`` for every feature
    ``f`` of a feature-major batch (``offsets``: ``F * N + 1``, the bags of feature ``f`` are
    ``f * N`` to ``(f + 1) * N``; ``indices`` checked rows of each feature's table), in place:
    sum-pooled lookups of several tables, of any widths, written straight into column ranges
    of one ``(N, width)`` output by one call of the C kernel ``ll_bag_sum_into``
    (``csrc/gather.c``; the sums in entry order, as ``F.embedding_bag``'s). False (nothing
    written) where it does not apply; the caller then runs torch's."""
    sfx = suffix(out.dtype)
    if sfx not in ("f32", "f64") or not out.is_contiguous() or not use_c(out, indices, offsets):
        return False
    for w in weights:
        if w.dim() != 2 or not w.is_contiguous() or w.dtype != out.dtype or not w.is_cpu:
            return False
    idx = indices.to(torch.int64).contiguous()  # named: they live through the call
    off = offsets.to(torch.int64).contiguous()
    fn = function("ll_bag_sum_into", sfx)
    fn(len(weights), _ptrs(weights), _i64s([w.shape[1] for w in weights]), _i64s(cols),
       idx.data_ptr(), off.data_ptr(), out.shape[0], out.data_ptr(), out.shape[1])
    return True
