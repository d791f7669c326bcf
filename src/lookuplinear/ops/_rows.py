"""The row kernels: the row-sparse gradient of a lookup, and the row-wise optimizer updates.

The weight gradient of ``densify(x) @ W`` is ``densify(x).T @ grad_out``: non-zero only in the
rows ``x`` names. :func:`group_rows` returns those rows, sorted and unique, with their summed
gradient::

    indices = [3, 1, 3]        rows   = [1, 3]
    offsets = [0, 2, 3]   ->   values = [g[0], g[0] + g[1]]     (g = grad_out)

:func:`update_rows` applies an optimizer's update to such rows (or to a gradient's rows as a
lookup's backward stores them, one per entry, each row's summed as it is read:
:func:`summed_runs`), :func:`fused_rows` the same update straight from a lookup's ``grad_out``
(grouped and updated row after row, the gradient never stored; several tables in one call).
Both run the C kernels (``csrc/rowkernels_impl.h``) and return False where those do not apply;
the optimizer then runs its torch-op twin on :func:`group_rows`' result, which gives the same
bits (tests/test_kernels.py).
"""

from __future__ import annotations

import ctypes
import functools
from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

import torch

from ..errors import InputValueError
from ._backend import use_c
from ._clib import _N_SCALARS, _SCALAR_NAMES, SCALARS, SUFFIXES, function, ptr, suffix
from ._clib import scalars as c_scalars
from ._errors import project_error
from ._inputs import check_offsets

__all__ = ["KERNELS", "FusedTable", "fused_rows", "fused_rows_c", "gather_into",
           "gather_rows", "group_rows", "grouped_rows", "summed_runs", "unique_sums",
           "update_rows", "update_rows_c"]

#: entries are numbered in 32 bits and rows keyed in 32 bits inside the C sort (a row + 1 in
#: the fused update's hash table: at most 2**32 - 1 rows, as the C++ operators take)
_MAX_ENTRIES = 2**31 - 1
_MAX_ROWS = 2**32 - 1
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
    *,
    op: str = "group_rows",
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(rows, values)``: the non-zero rows of ``densify(x).T @ grad_out``, rows sorted.

    ``x`` is the lookup's input, as ``F.embedding_bag`` takes it: ``indices`` ``(nnz,)``, the
    entries; ``offsets`` CSR ``(N + 1,)`` (bag ``b`` is ``indices[offsets[b]:offsets[b + 1]]``),
    or None for one entry per output row (index input); ``per_sample_weights`` ``(nnz,)`` or
    None (all 1); entries equal to ``padding_idx`` are left out. ``grad_out`` has one row per
    bag (or per entry); ``num_rows`` is the table's number of rows. Values are summed in entry
    order, in ``grad_out``'s dtype. ``op``: the operator the error messages name.

    Raises
    ------
    OffsetsError
        ``offsets`` are not CSR offsets of the entries.
    InputValueError
        ``grad_out`` is not 2-D with one row per bag (per entry without offsets), or
        ``per_sample_weights`` does not hold one value per entry.

    Examples
    --------
    >>> g = torch.tensor([[1.0, 2.0], [10.0, 20.0]])
    >>> group_rows(g, 4, torch.tensor([3, 1, 3]), torch.tensor([0, 2, 3]))
    (tensor([1, 3]), tensor([[ 1.,  2.],
            [11., 22.]]))
    """
    _check_group(op, grad_out, indices.numel(), offsets, per_sample_weights)
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


def _check_group(op: str, grad_out: torch.Tensor, nnz: int, offsets: torch.Tensor | None,
                per_sample_weights: torch.Tensor | None) -> None:
    """Raise :class:`~lookuplinear.errors.OffsetsError` unless ``offsets`` (if given) are CSR
    offsets of the ``nnz`` entries, :class:`~lookuplinear.errors.InputValueError` unless
    ``grad_out`` is 2-D with one row per bag (per entry without offsets) and
    ``per_sample_weights`` (if given) holds one value per entry: what :func:`group_rows`
    reads (the C++ ``row_sums``' checks, the same messages)."""
    if offsets is not None:
        check_offsets(op, offsets, nnz)
    n_out = nnz if offsets is None else offsets.numel() - 1
    if grad_out.dim() != 2 or grad_out.shape[0] != n_out:
        raise InputValueError(
            f"lookuplinear::{op}: the gradient is 2-D, one row per "
            f"{'entry' if offsets is None else 'bag'}, {n_out}; got shape "
            f"{list(grad_out.shape)}")
    if per_sample_weights is not None and per_sample_weights.numel() != nnz:
        raise InputValueError(
            f"lookuplinear::{op}: weights must hold one value per entry, {nnz}; got "
            f"{per_sample_weights.numel()}. Give per-entry weights as long as the indices.")


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
    return unique_sums(idx, contrib)


def _table_ok(weight: torch.Tensor, state: torch.Tensor) -> bool:
    return (
        weight.dim() == 2
        and suffix(weight.dtype) in ("f32", "f64")
        and weight.is_contiguous()
        and state.dtype == weight.dtype
        and state.device.type == "cpu"
        and use_c(weight)
    )


@functools.cache
def _op(name: str) -> Any:
    """``torch.ops.lookuplinear.<name>``, looked up once: the C++ operator where the extension
    is loaded (its CPU kernel checks the operands, then runs the C kernel), else the same
    schema registered from Python (:mod:`.library`: the same checks, the C kernel through
    ctypes)."""
    return getattr(torch.ops.lookuplinear, name).default


def _mapped(e: Exception) -> Exception:
    """The project's error for a C++ operator's builtin one (:func:`._errors.project_error`)."""
    return project_error(e) or e


def summed_runs(rows: torch.Tensor, values: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``(rows, values)`` with each run of equal rows next to each other made one row, its
    value rows summed in entry order (``v0 + v1 + ...``, as a coalesce sums them): the update
    :func:`update_rows` makes, in torch ops. Unique rows are returned as they are.

    Examples
    --------
    >>> summed_runs(torch.tensor([1, 3, 3]), torch.tensor([[1.0], [2.0], [-0.0]]))
    (tensor([1, 3]), tensor([[1.],
            [2.]]))
    """
    if rows.numel() < 2:
        return rows, values
    heads, run = torch.unique_consecutive(rows, return_inverse=True)
    if heads.numel() == rows.numel():
        return rows, values
    return heads, _sums(values, run, heads.numel(), values.dtype)


def _sums(values: torch.Tensor, at: torch.Tensor, n: int, dtype: torch.dtype) -> torch.Tensor:
    """``n`` rows, row ``r`` the sum of the rows ``values[at == r]`` in entry order, summed in
    ``dtype`` and returned in ``values``' dtype. Each sum starts from ``-0.0``, which adds
    nothing (``-0.0 + x`` is ``x``, to the bit), so a row of one entry is that entry's row, as
    a coalesce copies it."""
    sums = values.new_full((n, *values.shape[1:]), -0.0, dtype=dtype)
    return sums.index_add_(0, at, values.to(dtype)).to(values.dtype)


def grouped_rows(rows: torch.Tensor, values: torch.Tensor, num_rows: int
                 ) -> tuple[torch.Tensor, torch.Tensor]:
    """``(rows, values)`` with each row once, sorted, its value rows summed in entry order: on
    the CPU the runs of rows that never decrease summed (:func:`summed_runs`), any other rows
    grouped (:func:`group_rows`); on another device :func:`unique_sums`, which does not read
    back whether the rows are in order.

    Examples
    --------
    >>> grouped_rows(torch.tensor([3, 1, 3]), torch.tensor([[1.0], [2.0], [4.0]]), 5)
    (tensor([1, 3]), tensor([[2.],
            [5.]]))
    """
    if rows.numel() < 2:
        return rows, values
    if not rows.is_cpu:
        return unique_sums(rows, values)
    if not bool((rows[1:] >= rows[:-1]).all()):
        flat = values.reshape(values.shape[0], -1)
        rows, sums = group_rows(flat, num_rows, rows)
        return rows, sums.reshape(-1, *values.shape[1:])
    return summed_runs(rows, values)


def unique_sums(rows: torch.Tensor, values: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``(rows, values)`` with each row once, sorted, its value rows summed in entry order, in
    one grouping (``torch.unique``) whatever the rows' order: no value is read back but how
    many rows there are, as a coalesce reads it (on CUDA a read makes the host wait for the
    device). Summed as :func:`summed_runs` sums, in float32 for float16 and bfloat16 (as a
    CUDA coalesce sums them): float32 and float64 rows in order get :func:`summed_runs`'
    sums, to the bit, and rows in any order a coalesce's.

    Examples
    --------
    >>> unique_sums(torch.tensor([3, 1, 3]), torch.tensor([[1.0], [2.0], [4.0]]))
    (tensor([1, 3]), tensor([[2.],
            [5.]]))
    """
    heads, at = torch.unique(rows, sorted=True, return_inverse=True)
    half = values.dtype in (torch.float16, torch.bfloat16)
    return heads, _sums(values, at, heads.numel(), torch.float32 if half else values.dtype)


def update_rows(
    kernel: str,
    weight: torch.Tensor,
    state: torch.Tensor,
    rows: torch.Tensor,
    values: torch.Tensor,
    scalars: Mapping[str, float],
) -> bool:
    """Update ``weight``'s ``rows`` by the gradient rows ``values`` with the C kernel ``kernel``
    (one of :data:`KERNELS`), in place; False (nothing done) where it does not apply.

    Each row is updated once, by the sum of its value rows, in entry order: the sums
    :func:`summed_runs` gives, never stored where the rows never decrease. Rows in any other
    order are first grouped (:func:`group_rows`' sums).

    ``state`` is the optimizer state in the kernel's layout (``lookuplinear::rows_update_``:
    contiguous, SGD's momentum buffer or an empty tensor without momentum, Adagrad's sums,
    row-wise Adagrad's, Adam's moments as ``(rows, 2 * dim)``), ``scalars`` the kernel's
    parameters by name (:data:`._clib.SCALARS`). Runs the operator
    ``lookuplinear::rows_update_``: bad operands raise the project's errors
    (``InputValueError``, ``LookupIndexError``) and change nothing.
    """
    if not _table_ok(weight, state) or rows.device.type != "cpu":
        return False
    values = values.to(weight.dtype)
    try:
        _op("rows_update_")(weight, state, rows, values, kernel,
                            c_scalars(kernel, scalars, False))
    except (IndexError, ValueError) as e:
        raise _mapped(e) from None
    return True


def update_rows_c(kernel: str, weight: torch.Tensor, state: torch.Tensor, rows: torch.Tensor,
                  values: torch.Tensor, scalars: Sequence[float]) -> bool:
    """The C kernel ``ll_rows_<kernel>`` on checked operands (:func:`._updates.check_update`,
    :func:`._updates.check_rows`), in place; False (nothing done) where it does not take the
    table (the C library, dtype, layout, device)."""
    if not (_table_ok(weight, state) and state.is_contiguous() and rows.is_cpu
            and values.is_cpu):
        return False
    r = rows.to(torch.int64).contiguous()  # named: they live through the call
    v = values.contiguous()
    params = (ctypes.c_double * _N_SCALARS)(*scalars)
    fn = function(f"ll_rows_{kernel}", str(suffix(weight.dtype)))
    if fn(ptr(weight), ptr(state), ptr(r), r.numel(), ptr(v), weight.shape[1], params) < 0:
        raise MemoryError("lookuplinear::rows_update_: out of memory summing the gradient rows "
                          "(nothing was updated)")
    return True


class FusedTable(NamedTuple):
    """One table's part of a fused update: a lookup's ``grad_out`` rows, the table ``weight``,
    the optimizer ``state`` in the kernel's layout, the kernel's ``scalars`` by name, and the
    lookup's input as :func:`group_rows` takes it."""

    grad_out: torch.Tensor
    weight: torch.Tensor
    state: torch.Tensor
    scalars: Mapping[str, float]
    indices: torch.Tensor
    offsets: torch.Tensor | None = None
    per_sample_weights: torch.Tensor | None = None
    padding_idx: int | None = None


def fused_rows(kernel: str, tables: Sequence[FusedTable], *, c: bool | None = None
               ) -> list[bool]:
    """:func:`group_rows` then :func:`update_rows` in one C pass, for several tables: each row
    is updated as soon as its gradient is summed (the same sums, the same update, so the same
    bits). The tables the C kernels take are updated in one call of
    ``lookuplinear::rows_fused_`` (of any widths and dtypes). Returns, per table, whether it
    was updated; False: nothing was done to it (the C kernels do not apply), and the caller
    updates it another way. ``c``: :func:`~lookuplinear.ops.use_c` ``()`` where the caller
    has asked it already (None: asked here). Bad operands raise the project's errors, and no
    table is updated then."""
    taken = [False] * len(tables)
    if not (use_c() if c is None else c):  # the backend, asked once; each table's devices below
        return taken
    names, expected = SCALARS[kernel], _SCALAR_NAMES[kernel]
    # rows_fused_'s list operands (padding_idx -1: none) and each table's scalars after the
    # previous table's; written out, no call per table: this loop runs per table per backward
    weights: list[Any] = []
    states: list[Any] = []
    grad_outs: list[Any] = []
    indices: list[Any] = []
    offsets: list[Any] = []
    psws: list[Any] = []
    pads: list[Any] = []
    scalars: list[float] = []
    for i, t in enumerate(tables):
        weight, state, grad_out = t.weight, t.state, t.grad_out
        if (SUFFIXES.get(weight.dtype) not in ("f32", "f64") or weight.dim() != 2
                or not weight.is_contiguous() or not weight.is_cpu
                or state.dtype != weight.dtype or not state.is_cpu
                or grad_out.dtype != weight.dtype or not grad_out.is_cpu
                or not t.indices.is_cpu):
            continue
        named = t.scalars
        if named.keys() != expected:
            c_scalars(kernel, named, False)  # raises, naming the missing and unknown names
        taken[i] = True
        weights.append(weight)
        states.append(state)
        grad_outs.append(grad_out.detach())
        indices.append(t.indices.detach())
        offsets.append(t.offsets)
        psws.append(None if t.per_sample_weights is None else t.per_sample_weights.detach())
        pads.append(-1 if t.padding_idx is None else t.padding_idx)
        scalars += map(float, map(named.__getitem__, names))  # c_scalars, written out
    if not weights:
        return taken
    try:
        _op("rows_fused_")(weights, states, grad_outs, indices, offsets, psws, pads, kernel,
                           scalars)
    except (IndexError, ValueError) as e:
        raise _mapped(e) from None
    return taken


def fused_rows_c(kernel: str, tables: Sequence[FusedTable], scalars: Sequence[Sequence[float]]
                 ) -> list[bool]:
    """The C kernel ``ll_fused_<kernel>`` on checked tables (:func:`._updates._fused_tables`),
    in place, the tables of one dtype in one call; per table, whether it was updated (False:
    the C kernels do not take it, or it ran out of memory: nothing was done to it)."""
    taken = [False] * len(tables)
    by_dtype: dict[str, list[tuple[int, tuple[Any, ...]]]] = {}
    for i, t in enumerate(tables):
        weight, state, indices = t.weight, t.state, t.indices
        grad_out = t.grad_out.detach().contiguous()
        sfx = SUFFIXES.get(weight.dtype)
        if (not _table_ok(weight, state) or not state.is_contiguous() or not grad_out.is_cpu
                or not indices.is_cpu or indices.numel() > _MAX_ENTRIES
                or grad_out.shape[0] > _MAX_ENTRIES or weight.shape[0] > _MAX_ROWS):
            continue
        idx = indices.detach().reshape(-1).to(torch.int64).contiguous()
        off = None if t.offsets is None else t.offsets.to(torch.int64).contiguous()
        psw = t.per_sample_weights
        w = None if psw is None else psw.detach().reshape(-1).to(grad_out.dtype).contiguous()
        by_dtype.setdefault(str(sfx), []).append(
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
            own = list(scalars[i])
            params += own + [0.0] * (_N_SCALARS - len(own))
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
