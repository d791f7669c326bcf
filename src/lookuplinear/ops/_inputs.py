"""Per-call input checks and input preparation of a bag lookup: C for CPU input, torch ops
elsewhere.

For CSR offsets (bag ``b`` is ``indices[offsets[b]:offsets[b + 1]]``):

* :func:`offsets_ok`: ``offsets[0] == 0``, never decreasing, ``offsets[-1] == nnz``;
* :func:`drop_entries`: the bags without their entries equal to one index (``padding_idx``);
* :func:`mode_weights`: per-entry weights that turn a weighted sum into ``mean`` or ``sqrtn``;
* :func:`one_id_rows`: a keyed batch of one ID per bag as the index input of one lookup;
* :func:`shifted_rows`: a keyed batch's entries as rows of the table holding all its tables.

:func:`offsets_ok` runs on every forward call, next to the lookup. With torch or numpy ops it
costs a noticeable share of a small lookup, and running their dispatch machinery between two
lookups slows the lookup that follows (its data and code are evicted from the core's caches;
benchmarks/bench_layer.py measures the lookup after each check). The C loop
(``csrc/inputs.c``) reads the offsets once without temporaries, the rest of the call being
ctypes' and the tensor's attribute reads. It is the operator ``lookuplinear::offsets_ok`` too,
but the eager check calls C directly: through the dispatcher a call costs 0.8 us more (2.2
against 1.4 us), 12% of a small layer's forward (a 256-entry batch); the same holds for
:func:`drop_entries`' count, which decides before the operator runs whether it has anything to
drop.
"""

from __future__ import annotations

import ctypes
from typing import Any

import numpy as np
import torch

from ..errors import InputValueError, OffsetsError
from . import _extension
from ._asserts import assert_offsets_twin, graph_message
from ._backend import backend, capturing, use_c, values_known
from ._clib import function, ptr, suffix
from ._errors import project_error, scalar_type_name

__all__ = ["check_keyed_operands", "check_offsets", "check_one_id_operands",
           "check_shifted_operands", "checked_one_id_rows", "checked_shifted_rows", "drop_entries",
           "mode_weights", "offsets_ok", "one_id_rows", "shifted_rows"]

_INT_SUFFIX = {torch.int32: "i32", torch.int64: "i64"}
_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1
_is_compiling = torch.compiler.is_compiling

#: tensor dtype (and numpy dtype) -> its ``ll_offsets_ok`` entry point, filled on the first call
#: that runs C. :func:`offsets_ok` runs on every forward call: it looks its entry point up in one
#: dict, and tests the tensor itself rather than calling ``use_c`` (a generator and
#: ``Tensor.device``), which together cost more than the C loop.
_OFFSETS_OK: dict[torch.dtype, Any] = {}
_NUMPY_OFFSETS_OK: dict[np.dtype[Any], Any] = {}


def _fill_offsets_ok() -> None:
    """Fill :data:`_OFFSETS_OK` and :data:`_NUMPY_OFFSETS_OK` (the C library must load)."""
    for dtype, numpy_dtype, sfx in ((torch.int32, np.int32, "i32"), (torch.int64, np.int64, "i64")):
        fn = function("ll_offsets_ok", sfx)
        _OFFSETS_OK[dtype] = _NUMPY_OFFSETS_OK[np.dtype(numpy_dtype)] = fn


def check_offsets(op: str, offsets: torch.Tensor, nnz: int, include_last: bool = True
                   ) -> None:
    """Raise :class:`OffsetsError` unless ``offsets`` are CSR offsets of ``nnz`` entries
    (``include_last=False``: ``nn.EmbeddingBag``'s start offsets, the last at most ``nnz``),
    as the C++ kernels check them where they run."""
    if not offsets_ok(offsets, nnz, include_last=include_last):
        head = offsets.reshape(-1)[:8].tolist()
        end = "end at" if include_last else "stay within"
        raise OffsetsError(
            f"lookuplinear::{op}: offsets must start at 0, never decrease and {end} the "
            f"number of entries, {nnz}; got {head}{' ...' if offsets.numel() > 8 else ''} "
            f"({offsets.numel()} offsets). Build the batch with Bags or KeyedBags (they "
            "check it), or give lengths instead of offsets.")


def _drop_entries_op(indices: torch.Tensor, offsets: torch.Tensor, value: int
                     ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The operator ``lookuplinear::drop_entries``, looked up on the first call (the operators
    are registered after this module is imported), then called directly: the overload's
    dispatcher entry (``OpOverload._op``; ``OpOverload.__call__`` is one Python frame around
    it, a quarter of the call's cost)."""
    global _drop_entries_op
    _drop_entries_op = torch.ops.lookuplinear.drop_entries.default._op
    return _drop_entries_op(indices, offsets, value)


def offsets_ok(offsets: torch.Tensor | np.ndarray, nnz: int, *, include_last: bool = True,
               recorded: bool = True) -> bool:
    """Whether ``offsets`` are valid offsets of ``nnz`` entries.

    True when ``offsets[0] == 0``, the offsets never decrease and ``offsets[-1] == nnz``
    (``include_last=True``: the ``N + 1`` CSR offsets, a scipy ``indptr``) or
    ``offsets[-1] <= nnz`` (``include_last=False``: the ``N`` start offsets of PyTorch's
    ``EmbeddingBag``). Empty offsets are never valid (there is no first offset to be 0).

    Parameters
    ----------
    offsets : torch.Tensor or numpy.ndarray
        1-D integer offsets: a tensor on any device, or a numpy array (a scipy ``indptr``).
    nnz : int
        The number of entries they index.
    include_last : bool, default True
        Whether the last offset is the end of the last bag (CSR) or its start.
    recorded : bool, default True
        The answer while ``torch.compile`` or ``torch.export`` records a graph, which has no
        values to read: True where the caller goes on to build the batch, whose constructor
        asserts the offsets where the graph runs
        (:func:`~lookuplinear.ops._asserts.assert_offsets_twin`); False where the caller
        would skip that check when they pass, and should take its checked path instead.

    Returns
    -------
    bool
        ``recorded`` while a graph is recorded.

    Notes
    -----
    Contiguous CPU int32/int64 offsets are read in place by one C loop (``ll_offsets_ok_i32``,
    ``ll_offsets_ok_i64``, called directly: the operator ``lookuplinear::offsets_ok`` runs the
    same loop, at a higher cost per call); anything else, or the ``torch`` backend, runs torch
    (or numpy) ops.

    Examples
    --------
    >>> ok, bad = torch.tensor([0, 2, 2, 5]), torch.tensor([0, 3, 2, 5])
    >>> offsets_ok(ok, 5), offsets_ok(bad, 5), offsets_ok(ok[:-1], 5, include_last=False)
    (True, False, True)
    """
    if _is_compiling():  # a recorded graph cannot branch on the values: the batch
        return recorded  # constructors assert them where the graph runs
    if not _OFFSETS_OK and backend() == "c":  # the first call that runs C
        _fill_offsets_ok()
    if isinstance(offsets, np.ndarray):
        fn = _NUMPY_OFFSETS_OK.get(offsets.dtype)
        if (
            fn is not None
            and offsets.ndim == 1
            and offsets.size > 0  # an empty buffer has no address to take
            and offsets.flags.c_contiguous
            and backend() == "c"
            and not _is_compiling()
        ):
            return bool(fn(_address(offsets), offsets.size, nnz, include_last))
        return _numpy_offsets_ok(offsets, nnz, include_last)
    fn = _OFFSETS_OK.get(offsets.dtype)
    if (
        fn is not None
        and offsets.is_cpu
        and offsets.is_contiguous()
        and backend() == "c"
    ):
        return bool(fn(offsets.data_ptr(), offsets.numel(), nnz, include_last))
    return _torch_offsets_ok(offsets, nnz, include_last)


def _address(a: np.ndarray) -> int:
    """The address of a non-empty C-contiguous array's first element: through the buffer
    protocol where the array is writable (a third of the cost of ``__array_interface__``)."""
    if a.flags.writeable:
        return ctypes.addressof(ctypes.c_char.from_buffer(a))  # type: ignore[arg-type]
    address: int = a.__array_interface__["data"][0]
    return address


def _torch_offsets_ok(offsets: torch.Tensor, nnz: int, include_last: bool) -> bool:
    """:func:`offsets_ok` with torch ops, for any device and strides."""
    o = offsets.reshape(-1)
    if o.numel() == 0:
        return False
    first, last = int(o[0]), int(o[-1])  # Python ints: nnz may not fit the offsets' dtype
    ends_ok = last == nnz if include_last else last <= nnz
    return first == 0 and ends_ok and bool((o[1:] >= o[:-1]).all())


def _numpy_offsets_ok(offsets: np.ndarray, nnz: int, include_last: bool) -> bool:
    """:func:`offsets_ok` of a numpy array with numpy ops, for any dtype and strides."""
    o = offsets.reshape(-1)
    if o.size == 0:
        return False
    last = int(o[-1])
    ends_ok = last == nnz if include_last else last <= nnz
    return bool(int(o[0]) == 0 and ends_ok and (o[1:] >= o[:-1]).all())


def drop_entries(
    indices: torch.Tensor, offsets: torch.Tensor, value: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None:
    """The entries not equal to ``value``: their positions, their indices and the new offsets.

    Parameters
    ----------
    indices : torch.Tensor
        ``(nnz,)`` integer entries.
    offsets : torch.Tensor
        ``(N + 1,)`` CSR offsets of ``indices``, already checked (:func:`offsets_ok`).
    value : int
        The index to drop (a ``padding_idx``).

    Returns
    -------
    tuple of torch.Tensor, or None
        ``(kept, new_indices, new_offsets)``: ``kept`` int64 positions of the entries kept (to
        select their weights), ``new_indices = indices[kept]`` and the bags' offsets without the
        dropped entries, in the input dtypes; None when no entry equals ``value``.

    Notes
    -----
    CPU int32/int64 input of one dtype runs C: a count of the entries to drop
    (``ll_count_equal_<i32|i64>``), then, if any, the operator ``lookuplinear::drop_entries``
    (one C pass that copies the others); boolean-mask indexing with torch ops costs several
    times more. Other input, or the ``torch`` backend, runs torch ops on its own device.

    Examples
    --------
    >>> kept, indices, offsets = drop_entries(torch.tensor([3, 0, 1, 0, 2]),
    ...                                       torch.tensor([0, 3, 4, 5]), 0)
    >>> kept.tolist(), indices.tolist(), offsets.tolist()
    ([0, 2, 4], [3, 1, 2], [0, 2, 2, 3])
    """
    if not _INT64_MIN <= value <= _INT64_MAX:
        return None  # no integer entry can equal it
    sfx = _INT_SUFFIX.get(indices.dtype)
    if (
        sfx is not None
        and not capturing()  # first: a recorded graph never reads the backend
        and offsets.dtype == indices.dtype
        and offsets.numel() > 0
        and indices.is_cpu  # use_c(indices, offsets), at a third of its cost (every forward)
        and offsets.is_cpu
        and backend() == "c"
    ):
        idx = indices.contiguous()
        # counted first, by the C count called directly (the common case, nothing to drop,
        # at a ctypes call's cost), then the operator (it counts again, to size its outputs)
        if function("ll_count_equal", sfx)(ptr(idx), idx.numel(), value) == 0:
            return None
        return _drop_entries_op(idx, offsets, value)
    return _torch_drop_entries(indices, offsets, value)


def drop_entries_twin(indices: torch.Tensor, offsets: torch.Tensor, value: int
                      ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``lookuplinear::drop_entries`` with torch ops: :func:`drop_entries`' three tensors, or
    three empty ones where no entry equals ``value``."""
    dropped = _torch_drop_entries(indices, offsets, value)
    if dropped is None:
        return (indices.new_empty(0, dtype=torch.int64), indices.new_empty(0),
                offsets.new_empty(0))
    return dropped


def _torch_drop_entries(
    indices: torch.Tensor, offsets: torch.Tensor, value: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None:
    """:func:`drop_entries` with torch ops, on the input's device."""
    info = torch.iinfo(indices.dtype)
    if not info.min <= value <= info.max:  # no entry can equal it (compared, it would wrap)
        return None
    keep = indices != value
    if values_known() and bool(keep.all()):  # (a recorded graph: no branch on the values)
        return None
    counts = torch.zeros(indices.numel() + 1, dtype=offsets.dtype, device=indices.device)
    torch.cumsum(keep, 0, dtype=offsets.dtype, out=counts[1:])  # entries kept before k
    kept = torch.nonzero(keep).squeeze(1)
    return kept, indices.index_select(0, kept), counts[offsets]


def mode_weights(
    offsets: torch.Tensor, weights: torch.Tensor | None, sqrt: bool, dtype: torch.dtype,
    nnz: int | None = None,
) -> torch.Tensor:
    """Per-entry weights that turn a bag's weighted sum into its mean (or sqrtn) reduction.

    Entry ``k`` of bag ``b`` gets ``w[k] / sum(w)`` (``sqrt``: ``w[k] / sqrt(sum(w**2))``),
    the sum over the bag's entries, with ``w = 1`` when ``weights`` is None, and 0 where the
    denominator is 0 (an empty bag gives the bias, never NaN). Sums in float64.

    Parameters
    ----------
    offsets : torch.Tensor
        ``(N + 1,)`` CSR offsets, already checked (:func:`offsets_ok`).
    weights : torch.Tensor or None
        ``(offsets[-1],)`` per-entry weights, or None (all 1). Read, not differentiated.
    sqrt : bool
        ``sqrtn`` rather than ``mean``.
    dtype : torch.dtype
        The result's dtype.
    nnz : int, optional
        ``offsets[-1]``, the number of entries, where the caller has it (the indices'
        length): a graph that ``torch.compile`` records then knows the result is as long as
        the indices it weights.

    Returns
    -------
    torch.Tensor
        ``(offsets[-1],)`` weights of ``dtype`` on ``offsets``' device.

    Notes
    -----
    CPU float32/float64 results with weights of the same dtype (or none) run one C pass
    (``ll_mode_weights_<f32|f64>_<i32|i64>``); anything else, or the ``torch`` backend, runs
    torch ops, whose sums may differ from C's in the last bit (C fuses a multiply-add where the
    CPU has one).

    Examples
    --------
    >>> mode_weights(torch.tensor([0, 2, 2, 3]), torch.tensor([1.0, 3.0, 2.0]), False,
    ...              torch.float32)
    tensor([0.2500, 0.7500, 1.0000])
    """
    if weights is not None:
        weights = weights.detach()
    sfx = suffix(dtype)
    isfx = _INT_SUFFIX.get(offsets.dtype)
    if (
        sfx in ("f32", "f64")
        and isfx is not None
        and (weights is None or weights.dtype == dtype)
        and offsets.numel() > 0
        and use_c(offsets, weights)
    ):
        off = offsets.contiguous()
        w = None if weights is None else weights.contiguous()
        out = torch.empty(int(off[-1]) if nnz is None else nnz, dtype=dtype)
        fn = function("ll_mode_weights", f"{sfx}_{isfx}")
        fn(ptr(off), off.numel() - 1, ptr(w), sqrt, ptr(out))
        return out
    return _torch_mode_weights(offsets, weights, sqrt, dtype, nnz)


def _torch_mode_weights(
    offsets: torch.Tensor, weights: torch.Tensor | None, sqrt: bool, dtype: torch.dtype,
    nnz: int | None = None,
) -> torch.Tensor:
    """:func:`mode_weights` with torch ops, on ``offsets``' device (``nnz``: the number of
    entries, where it is known without reading the offsets)."""
    device = offsets.device
    if offsets.numel() == 0:
        return torch.empty(0, dtype=dtype, device=device)
    lengths = (offsets[1:] - offsets[:-1]).long()
    n_bags = lengths.numel()
    if nnz is None and weights is not None:
        nnz = weights.numel()
    if weights is None:
        total = lengths.double()
    else:
        bag = torch.repeat_interleave(torch.arange(n_bags, device=device), lengths,
                                      output_size=nnz)
        vals = weights.double()
        # out of place: a decomposed graph (ops.decompositions()) must stay functional
        total = torch.zeros(n_bags, dtype=torch.float64, device=device).index_add(
            0, bag, vals * vals if sqrt else vals)
    if sqrt:
        total = total.sqrt()
    inv = torch.where(total == 0, torch.zeros_like(total), 1.0 / total)
    if weights is None:
        return torch.repeat_interleave(inv, lengths, output_size=nnz).to(dtype)
    return (vals * inv.index_select(0, bag)).to(dtype)


def one_id_rows(
    values: torch.Tensor,
    offsets: torch.Tensor,
    n_features: int,
    shift: torch.Tensor,
    limit: torch.Tensor,
    place: torch.Tensor | None = None,
) -> torch.Tensor | int | None:
    """A keyed batch whose every bag holds one ID, as the rows of the table holding its
    features' tables one after another.

    Parameters
    ----------
    values, offsets : torch.Tensor
        The ``F * N`` bags of ``F = n_features`` features, feature-major (all of feature 0's
        ``N`` bags, then feature 1's), as CSR offsets; checked offsets of one integer dtype.
    n_features : int
        ``F``.
    shift, limit : torch.Tensor
        ``(F,)`` int64 on ``values``' device: the first row of each feature's table, and its
        number of rows.
    place : torch.Tensor, optional
        ``(F, 2)`` int64 on ``values``' device: feature ``f``'s row of example ``n`` goes to
        ``out[place[f, 0] + n * place[f, 1]]`` of a flat output (the input of several lookups
        side by side, one per table parameter). None: ``(N, F)`` in example order.

    Returns
    -------
    torch.Tensor, int or None
        The ``(N, F)`` int64 rows ``values.view(F, N).T + shift`` (the ``(F * N,)`` rows in
        ``place``'s order) when every bag holds one ID and every ID of feature ``f`` is in
        ``[0, limit[f])``; None when a bag does not hold exactly one ID; the position in
        ``values`` of the first ID out of its range otherwise.

    Notes
    -----
    CPU input runs one C pass (``ll_one_id_rows_<i32|i64>``) that checks the offsets, checks
    and shifts the IDs and writes them in example order: the operator
    ``lookuplinear::one_id_rows`` where the C++ operators are loaded, else through ctypes. The
    torch ops it replaces made six passes and a transposed copy. Other devices get None (the
    general path): whether every bag holds one ID is a branch on the values.

    Examples
    --------
    >>> one_id_rows(torch.tensor([3, 1, 0, 2]), torch.arange(5), 2, torch.tensor([0, 4]),
    ...             torch.tensor([4, 3]))
    tensor([[3, 4],
            [1, 6]])
    >>> one_id_rows(torch.tensor([3, 1, 5, 2]), torch.arange(5), 2, torch.tensor([0, 4]),
    ...             torch.tensor([4, 3]))
    2
    """
    n_bags = offsets.numel() - 1
    if values.numel() != n_bags or n_features <= 0 or n_bags % n_features:
        return None
    if (_extension.LOADED and (values.dtype is torch.int64 or values.dtype is torch.int32)
            and offsets.dtype is values.dtype and values.is_cpu and not capturing()):
        try:
            return torch.ops.lookuplinear.one_id_rows.default(
                values, offsets, n_features, shift, limit, place)
        except RuntimeError:  # the CPU kernel's: an ID out of range, found again for its place
            return _torch_one_id_rows(values, offsets, n_features, shift, limit, place)
        except ValueError as e:
            if _NOT_ONE_ID in str(e):  # a bag that does not hold one ID: the general path
                return None
            raise project_error(e) or e from None
    return checked_one_id_rows(values, offsets, n_features, shift, limit, place)


#: the words of ``one_id_rows``' refusal of a bag that does not hold one ID (the C++ kernel's
#: and the Python registration's message), which :func:`one_id_rows` answers with None
_NOT_ONE_ID = "every bag must hold one ID"


def check_keyed_operands(values: torch.Tensor, offsets: torch.Tensor, n_features: int,
                         op: str, *, one_dtype: bool) -> None:
    """Raise :class:`InputValueError` unless ``values`` and ``offsets`` are a keyed batch of
    ``n_features`` features (1-D, int32 or int64, of one dtype where ``one_dtype``, at least
    one offset, ``n_features`` dividing the bags): the keyed passes' common operands, with the
    C++ kernels' messages."""
    ints = (torch.int32, torch.int64)
    if not (values.dtype in ints and offsets.dtype in ints and values.dim() == 1
            and offsets.dim() == 1 and offsets.numel() > 0
            and (offsets.dtype == values.dtype or not one_dtype)):
        kind = "of one dtype, int32 or int64" if one_dtype else "int32 or int64"
        raise InputValueError(
            f"lookuplinear::{op}: 1-D values and offsets {kind}, and at least one offset; got "
            f"{_dtype_shape(values)} and {_dtype_shape(offsets)}")
    if n_features < 1 or (offsets.numel() - 1) % n_features:
        raise InputValueError(f"lookuplinear::{op}: n_features must divide the "
                              f"{offsets.numel() - 1} bags; got {n_features}")


def _dtype_shape(t: torch.Tensor) -> str:
    """``t``'s dtype and shape as the C++ kernels' messages print them (``Long [3]``)."""
    return f"{scalar_type_name(t.dtype)} {list(t.shape)}"


def check_shifted_operands(values: torch.Tensor, offsets: torch.Tensor, n_features: int,
                           shift: torch.Tensor, limit: torch.Tensor,
                           op: str = "shifted_rows") -> None:
    """Raise :class:`InputValueError` for operands ``shifted_rows`` (or ``one_id_rows``)
    cannot read, as the C++ kernel checks them (before the C pass reads the entries the
    offsets name)."""
    check_keyed_operands(values, offsets, n_features, op, one_dtype=True)
    for t in (shift, limit):
        if t.dtype != torch.int64 or t.shape != (n_features,):
            raise InputValueError(
                f"lookuplinear::{op}: shift and limit must be int64 of shape "
                f"({n_features},); got {_dtype_shape(t)}")


def check_one_id_operands(values: torch.Tensor, offsets: torch.Tensor, n_features: int,
                          shift: torch.Tensor, limit: torch.Tensor,
                          place: torch.Tensor | None) -> None:
    """Raise :class:`InputValueError` for operands ``one_id_rows`` cannot read (the C++
    kernel's checks)."""
    check_shifted_operands(values, offsets, n_features, shift, limit, "one_id_rows")
    if values.numel() != offsets.numel() - 1:
        raise InputValueError(
            f"lookuplinear::one_id_rows: one ID per bag; got {values.numel()} IDs for "
            f"{offsets.numel() - 1} bags. Give bags of any length to shifted_rows.")
    if place is not None and (place.dtype != torch.int64 or place.shape != (n_features, 2)):
        raise InputValueError(
            f"lookuplinear::one_id_rows: place must be int64 of shape ({n_features}, 2); got "
            f"{_dtype_shape(place)}")


def _check_place(place: torch.Tensor, n_features: int, n: int) -> None:
    """Raise :class:`InputValueError` unless every row ``place`` names is inside the
    ``n_features * n`` outputs (read on the host, before the C pass writes them)."""
    if not n:
        return
    first, last = place[:, 0], place[:, 0] + (n - 1) * place[:, 1]
    outside = (torch.minimum(first, last) < 0) | (torch.maximum(first, last) >= n_features * n)
    if bool(outside.any()):
        f = int(torch.nonzero(outside)[0, 0])
        raise InputValueError(
            f"lookuplinear::one_id_rows: place[{f}] = ({int(place[f, 0])}, "
            f"{int(place[f, 1])}) puts feature {f}'s rows outside the {n_features * n} "
            "outputs")


def checked_one_id_rows(
    values: torch.Tensor,
    offsets: torch.Tensor,
    n_features: int,
    shift: torch.Tensor,
    limit: torch.Tensor,
    place: torch.Tensor | None = None,
) -> torch.Tensor | int | None:
    """:func:`direct_one_id_rows` after the operator's checks (:class:`InputValueError` for
    operands it cannot read), as every path runs them: the Python registration's CPU kernel,
    and :func:`one_id_rows` without the C++ operators."""
    check_one_id_operands(values, offsets, n_features, shift, limit, place)
    if place is not None and values.is_cpu:
        _check_place(place, n_features, values.numel() // n_features)
    return direct_one_id_rows(values, offsets, n_features, shift, limit, place)


def direct_one_id_rows(
    values: torch.Tensor,
    offsets: torch.Tensor,
    n_features: int,
    shift: torch.Tensor,
    limit: torch.Tensor,
    place: torch.Tensor | None = None,
) -> torch.Tensor | int | None:
    """:func:`one_id_rows` without the operator: the C pass through ctypes on the CPU (where
    the backend is ``c``), else torch ops."""
    n = values.numel() // n_features
    shape = (n, n_features) if place is None else (n * n_features,)
    c = _keyed_c("ll_one_id_rows", values, offsets, n_features, n, shift, limit, shape, place)
    if c is None:
        return _torch_one_id_rows(values, offsets, n_features, shift, limit, place)
    found, rows = c
    return None if found == -2 else rows if found == -1 else found


def _torch_one_id_rows(
    values: torch.Tensor,
    offsets: torch.Tensor,
    n_features: int,
    shift: torch.Tensor,
    limit: torch.Tensor,
    place: torch.Tensor | None = None,
) -> torch.Tensor | int | None:
    """:func:`one_id_rows` with torch ops, on the input's device: on the CPU; elsewhere (and
    while a graph is recorded) None, the general path, since whether every bag holds one ID is
    a branch on the values (off the CPU a host synchronisation at every call)."""
    if not values_known() or not values.is_cpu:
        return None
    if not bool(offsets.eq(torch.arange(offsets.numel())).all()):  # the C pass's test
        return None
    ids = values.long().view(n_features, -1)  # (F, N)
    bad = (ids < 0) | (ids >= limit.unsqueeze(1))
    if bool(bad.any()):
        return int(torch.nonzero(bad.reshape(-1))[0, 0])
    return placed_rows(ids + shift.unsqueeze(1), place)


def placed_rows(rows: torch.Tensor, place: torch.Tensor | None) -> torch.Tensor:
    """A one-ID batch's ``(F, N)`` feature-major rows in :func:`one_id_rows`' layout: ``(N, F)``
    in example order, or with ``place`` the flat ``(F * N,)`` output, feature ``f``'s row of
    example ``n`` at ``place[f, 0] + n * place[f, 1]``."""
    if place is None:
        return rows.t().contiguous()
    p = place.to(rows.device)
    at = p[:, :1] + torch.arange(rows.shape[1], device=rows.device) * p[:, 1:]
    return torch.empty_like(rows).view(-1).index_put_((at.reshape(-1),), rows.reshape(-1))


def shifted_rows(
    values: torch.Tensor,
    offsets: torch.Tensor,
    n_features: int,
    shift: torch.Tensor,
    limit: torch.Tensor,
) -> torch.Tensor | int:
    """A keyed batch's entries as rows of the table holding its features' tables one after
    another: each entry of feature ``f`` plus ``shift[f]``.

    Parameters
    ----------
    values, offsets : torch.Tensor
        The ``F * N`` bags of ``F = n_features`` features, feature-major, as checked CSR
        offsets of one integer dtype.
    n_features : int
        ``F``.
    shift, limit : torch.Tensor
        ``(F,)`` int64: the first row of each feature's table, and its number of rows.

    Returns
    -------
    torch.Tensor or int
        The ``(nnz,)`` int64 rows when every ID of feature ``f`` is in ``[0, limit[f])``, else
        the position in ``values`` of the first ID out of its range.

    Notes
    -----
    CPU input runs one C pass (``ll_shifted_rows_<i32|i64>``): the operator
    ``lookuplinear::shifted_rows`` where the C++ operators are loaded, else through ctypes; the
    torch ops it replaces made two passes and two small ops per feature. Other devices run the
    operator's torch ops (one call from Python), the range asserted on the device. A graph that
    ``torch.compile`` or ``torch.export`` records holds the operator (on the CPU its C pass
    when the graph runs, an ID out of range a ``RuntimeError`` naming it); ``torch.jit.trace``
    records the torch ops.

    Examples
    --------
    >>> shifted_rows(torch.tensor([3, 1, 0, 0, 2]), torch.tensor([0, 1, 2, 5, 5]), 2,
    ...              torch.tensor([0, 4]), torch.tensor([4, 3]))
    tensor([3, 1, 4, 4, 6])
    """
    if ((values.dtype is torch.int64 or values.dtype is torch.int32)
            and offsets.dtype is values.dtype and n_features > 0
            and (_extension.LOADED or _is_compiling()) and not torch.jit.is_tracing()):
        try:
            return torch.ops.lookuplinear.shifted_rows.default(
                values, offsets, n_features, shift, limit)
        except RuntimeError:  # the CPU kernel's: an ID out of range, found again for its place
            return _torch_shifted_rows(values, offsets, n_features, shift, limit)
        except ValueError as e:  # the C++ kernel's builtin, as the project's error
            raise project_error(e) or e from None
    return checked_shifted_rows(values, offsets, n_features, shift, limit)


def checked_shifted_rows(
    values: torch.Tensor,
    offsets: torch.Tensor,
    n_features: int,
    shift: torch.Tensor,
    limit: torch.Tensor,
) -> torch.Tensor | int:
    """:func:`direct_shifted_rows` after the operator's checks (:class:`InputValueError` for
    operands it cannot read, :class:`~lookuplinear.errors.OffsetsError` for offsets that are
    not the values' CSR offsets), as every path runs them: the Python registration's CPU
    kernel, and :func:`shifted_rows` without the C++ operators. Off the CPU (and in a trace)
    the offsets are asserted where the torch ops run instead."""
    check_shifted_operands(values, offsets, n_features, shift, limit)
    if values.is_cpu and not capturing():  # the C pass reads the entries they name
        check_offsets("shifted_rows", offsets, values.numel())
    return direct_shifted_rows(values, offsets, n_features, shift, limit)


def direct_shifted_rows(
    values: torch.Tensor,
    offsets: torch.Tensor,
    n_features: int,
    shift: torch.Tensor,
    limit: torch.Tensor,
) -> torch.Tensor | int:
    """:func:`shifted_rows` without the operator: the C pass through ctypes on the CPU (where
    the backend is ``c``), else torch ops."""
    n = (offsets.numel() - 1) // n_features if n_features else 0
    c = _keyed_c("ll_shifted_rows", values, offsets, n_features, n, shift, limit,
                 (values.numel(),))
    if c is None:
        return _torch_shifted_rows(values, offsets, n_features, shift, limit)
    found, out = c
    return out if found == -1 else found


def _keyed_c(
    name: str,
    values: torch.Tensor,
    offsets: torch.Tensor,
    n_features: int,
    n: int,
    shift: torch.Tensor,
    limit: torch.Tensor,
    shape: tuple[int, ...],
    *extra: torch.Tensor | None,
) -> tuple[int, torch.Tensor] | None:
    """The C pass ``name`` (``ll_one_id_rows``, ``ll_shifted_rows``) of a keyed batch of
    ``n_features`` x ``n`` bags: its return value and its int64 output of ``shape``, or None
    where the C kernels do not take this input (the caller runs torch ops). ``extra``: int64
    operands the pass takes before its output (None: a NULL pointer)."""
    sfx = _INT_SUFFIX.get(values.dtype)
    if (sfx is None or offsets.dtype != values.dtype
            or not use_c(values, offsets, shift, limit, *extra)):
        return None
    # named, so that they live through the call
    vals, off = values.contiguous(), offsets.contiguous()
    at, lim = shift.to(torch.int64).contiguous(), limit.to(torch.int64).contiguous()
    more: list[torch.Tensor | None] = []
    pointers: list[int | None] = []
    for x in extra:
        more.append(None if x is None else x.to(torch.int64).contiguous())
        pointers.append(None if x is None else more[-1].data_ptr())  # type: ignore[union-attr]
    out = torch.empty(shape, dtype=torch.int64)
    fn = function(name, sfx)
    found: int = fn(vals.data_ptr(), off.data_ptr(), n_features, n, at.data_ptr(),
                    lim.data_ptr(), *pointers, out.data_ptr())
    return found, out


#: the message of a range check inside a recorded graph (eager input gets the one naming the ID)
_OUT_OF_RANGE = graph_message(
    "lookuplinear: an ID is outside its feature's table [0, num_embeddings). Map raw IDs to "
    "rows first (IdMap, or a hashing TableConfig)."
)


#: the message of the bag count's check inside a recorded graph (eager input gets the one
#: naming the counts)
_BAD_KEYED_BAGS = graph_message(
    "lookuplinear: a KeyedBags must hold the same number of bags for every key, a multiple of "
    "the number of keys, but its offsets give another number. Give every key N bags (empty "
    "ones included), or a variable batch its stride_per_key_per_rank."
)


def assert_bag_count(offsets: torch.Tensor, n_features: int) -> None:
    """Assert where the graph (or the device) runs that ``offsets`` cut ``n_features`` times as
    many bags as there are examples: a device-side assert (at once on the CPU, a
    ``RuntimeError``), which a recorded graph keeps. An exported program checks the sizes
    when it is called, but an AOTInductor package reads no such constraint."""
    count = offsets.numel() - 1
    if not capturing():  # a size the host knows: checked there, no op on the device
        if n_features and count % n_features:
            raise RuntimeError(_BAD_KEYED_BAGS)
        return
    bags = torch.full((), count, dtype=torch.int64, device=offsets.device)
    torch._assert_async(bags.remainder(n_features) == 0, _BAD_KEYED_BAGS)


def assert_keyed_offsets(values: torch.Tensor, offsets: torch.Tensor, n_features: int) -> None:
    """Assert where the graph (or the device) runs, without a host synchronisation, that
    ``offsets`` are the CSR offsets of ``values`` (:func:`assert_offsets_twin`) and cut them
    into ``n_features`` times as many bags as there are examples (:func:`assert_bag_count`):
    device-side asserts, which a recorded graph keeps, as
    :func:`lookuplinear.ops.assert_bags`'."""
    assert_offsets_twin(offsets, values.numel(), "KeyedBags")
    assert_bag_count(offsets, n_features)


def _torch_shifted_rows(
    values: torch.Tensor,
    offsets: torch.Tensor,
    n_features: int,
    shift: torch.Tensor,
    limit: torch.Tensor,
    asserted: bool = False,
) -> torch.Tensor | int:
    """:func:`shifted_rows` with torch ops, on the input's device. Off the CPU (and while a
    graph is recorded, or ``asserted``: the operator's twin) the range is asserted on the
    device, without a host synchronisation: a device-side assert, as ``nn.EmbeddingBag``'s
    CUDA kernels raise for a bad index; on the CPU an ID out of range is returned as its
    position."""
    n = (offsets.numel() - 1) // n_features if n_features else 0
    in_graph = not values_known() or not values.is_cpu or asserted  # checked where it runs
    if in_graph:  # the offsets too (eager callers check them first), before they are read
        assert_keyed_offsets(values, offsets, n_features)
    # each feature's first entry: gathered, not a slice of stride n (a recorded graph keeps
    # the batch size symbolic, 1 included)
    bounds = offsets.index_select(0, torch.arange(n_features + 1, device=offsets.device) * n)
    counts = (bounds[1:] - bounds[:-1]).long()
    feature = torch.repeat_interleave(  # output_size: a recorded graph knows the size
        torch.arange(n_features, device=values.device), counts, output_size=values.numel())
    ids = values.long()
    bad = (ids < 0) | (ids >= limit.to(ids.device)[feature])
    if in_graph:
        torch._assert_async(~bad.any(), _OUT_OF_RANGE)
    elif bool(bad.any()):
        return int(torch.nonzero(bad)[0, 0])
    return ids + shift.to(ids.device)[feature]
