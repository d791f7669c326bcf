"""The kernels as PyTorch operators (``torch.ops.lookuplinear.*``), eager and in recorded graphs.

Each operator has a schema, a CPU implementation that runs the C kernel, a torch-op
implementation for every other device (``CompositeExplicitAutograd``), a fake implementation
that gives the output's shape, and, where it is differentiable, its backward
(``torch.library.register_autograd``; the C++ extension registers ``bag_lookup``'s,
``bag_max``'s, ``in_feature_order``'s and ``gather_groups``' in C++). The
index range is checked inside the operator, where it runs.

The layers' sum and max lookups call ``bag_lookup`` and ``bag_max`` eagerly as they are
recorded. Other eager functions are decorated by :func:`routed`: called directly, or, while
``torch.compile`` or ``torch.export`` records a graph, as their registered operator. An
exported program then holds ``lookuplinear::`` operators, and runs where this module is
imported; :func:`decompositions` rewrites them to their torch-op twins for a program that
runs with PyTorch alone::

    program = torch.export.export(model, (batch,))
    aten_only = program.run_decompositions(lookuplinear.ops.decompositions())

The operators:

* ``bag_lookup(weight, indices, offsets=None, weights=None, padding_idx=None, mode=0, *,
  include_last_offset=True)``: ``densify(x) @ weight``, mode sum (``F.embedding`` for
  ``offsets=None``, else ``F.embedding_bag`` with ``per_sample_weights``), or with
  ``mode=1`` (ATen's mean, bags without weights) each bag's sum divided by its number of
  non-padding entries, ``nn.EmbeddingBag(mode="mean")``'s to the bit; its weight
  gradient is sparse: for bags coalesced, one row per distinct row, sorted, its sum
  (``row_sums``, of the output's gradient times ``1 / size`` for a mean, as ATen's mean
  backward scales it; how many rows the batch decides, a recorded graph included); for an
  index tensor (no offsets, no weights) and under ``create_graph=True``, each entry's own
  contribution, in entry order (for an index tensor ``nn.Embedding(sparse=True)``'s gradient).
* ``in_feature_order(outs, features, segments)``: lookup outputs' column segments side by
  side (``features``: per output, its number of features where it is feature-major,
  ``(F * N, dim)``, else 0; ``segments``: ``(block, first column, columns)`` triples,
  flattened, :func:`~lookuplinear.ops.segment_triples`).
* ``in_feature_order_backward(grad, features, segments)``: its gradient taken back apart, each
  output's in that output's layout (the segments take each block's columns once, left to
  right). The two are each other's backward: a gradient differentiates again as often as
  asked.
* ``gather_groups(weights, rows, columns, width)``: index lookups of several tables written
  side by side into one ``(N, width)`` output, ``out[i, c:c + dim_g] = weights[g][rows[g][i,
  j]]`` for the first column ``c`` of feature ``j`` of group ``g`` (``rows[g]``: ``(N, F_g)``;
  ``columns``: every group's features' first columns, group after group, each group's
  increasing; the features' columns tile ``[0, width)``); one C kernel call. Its weight
  gradient is each table's index lookup's, ``nn.Embedding(sparse=True)``'s: what
  ``bag_lookup`` on each group's rows, put in order by ``in_feature_order``, gives.
* ``idmap_find(table, keys)``: the value of every key in an :class:`~lookuplinear.IdMap`
  table, ``-1`` where absent.
* ``idmap_rows(found, keys, fallback_rows)``: an ``IdMap``'s rows of the keys it found
  (``found``, from ``idmap_find``), the hashed fallback rows of the others.
* ``bag_max(weight, indices, offsets)``: ``F.embedding_bag(mode="max")`` over CSR bags;
  where a graph is recorded, ``bag_max_arg``'s.
* ``bag_max_arg(weight, indices, offsets) -> (out, arg)``: the same pool and the row that gave
  each maximum (``arg``, int64 of the output's shape, ``-1`` in an empty bag; ATen's
  ``max_indices``), which its autograd node keeps: the backward needs neither the table nor
  the lookup again.
* ``bag_max_backward(grad, arg, num_rows)``: their weight gradient, ``grad[b, j]`` added to
  row ``arg[b, j]`` of a zero ``(num_rows, dim)`` table (dense, as ``nn.EmbeddingBag``'s);
  under ``create_graph=True`` the same scatter by torch ops, differentiable again.
* ``mode_weights(offsets, weights, sqrt, dtype, nnz)``: the per-entry weights that make a
  weighted sum a bag's mean (or sqrtn), :func:`lookuplinear.ops.mode_weights`.
* ``fused_bind(table, bind)``: name (``bind=True``) or forget a table bound to a
  ``fused=True`` optimizer (:mod:`lookuplinear._fusion`). In a backward that accumulates into
  such a table (``loss.backward()``, or ``backward(inputs=...)`` naming it; not
  ``torch.autograd.grad``, nor under ``create_graph=True``), the backward of ``bag_lookup``
  and ``gather_groups`` hands the table's ``grad_out`` and its lookup to
  ``fused_defer(table, grad_out, indices, offsets, weights, padding_idx)``, which the
  optimizer's side implements (:func:`lookuplinear._fusion.defer`): where it returns True,
  the backward returns no gradient for the table, whose rows the optimizer updates at the end
  of the backward (and tells the table's row watchers, :mod:`._hooks`, which rows).
* ``row_sums(grad, indices, offsets, weights, padding_idx, num_rows)``: ``bag_lookup``'s
  weight gradient, ``(rows, values)``: one row per distinct row of the entries, sorted
  (``padding_idx`` left out), its sum (as :func:`~lookuplinear.ops.group_rows` sums it); its
  size is the data's (a recorded graph gives it a size of its own).
* ``assert_bags(indices, offsets, num_rows, where, owner, include_last_offset=True)``:
  device-side asserts, without a host synchronisation, that every index is in
  ``[0, num_rows)`` and that ``offsets`` (or None) are the CSR offsets of the entries
  (``include_last_offset=False``: ``nn.EmbeddingBag``'s start offsets, the last at most the
  number of entries), ``where`` and ``owner`` naming them in the message
  (:func:`lookuplinear.ops.assert_bags`; one kernel on CUDA where the install compiled the
  CUDA kernels).

The host operators (:data:`HOST_SCHEMAS`: CPU kernels only, each called by one eager function,
never recorded in a graph): ``murmur3_32``, ``splitmix64`` and ``ngram_bucket``
(:mod:`._hashing`), ``renumber_ids`` and ``count_rows`` (:mod:`._ngrams`), ``offsets_ok``
and ``drop_entries`` (:mod:`._inputs`), ``dual_cd_epoch`` (:mod:`._dualcd`); and
``shifted_rows`` (:func:`lookuplinear.ops.shifted_rows`: a keyed batch's IDs as rows of its
tables' parameter) and ``one_id_rows`` (:func:`lookuplinear.ops.one_id_rows`: the same for a
batch of one ID a bag, in example order), which have torch-op twins on every other device,
their checks asserted there; the collection calls ``shifted_rows`` wherever its batch is,
eagerly and in recorded graphs, and ``one_id_rows`` eagerly on the CPU. So does
``group_order(values, offsets, n_features, order, group_features)``: a keyed batch's
features in the order ``order`` lists them, ``group_features`` of them per group (each group's
entries one slice of the values out, its CSR offsets from 0, group after group), which the
collection calls eagerly for bags over tables of several widths (each group's bags then
slices: one lookup per group). ``idmap_admit_(table, keys, row_id, last_used, assigned, clock,
fallback_rows) -> (rows, missing)``: an :class:`~lookuplinear.IdMap`'s call in training with
``admit_after=1``, in place on its state (new keys take the free rows in order of first
appearance, the rows read are stamped with the call's number); each key's row, and how many
keys found no free row (the map then gives them the least recently used rows in Python).

The optimizers' row updates (:data:`ROW_SCHEMAS`: in place, no autograd; a CPU kernel over the
C kernels that checks every operand first, the torch-op twins of :mod:`._updates`, which give
the C kernels' bits, on every other device):

* ``rows_update_(weight, state, rows, values, kernel, scalars)``: the update of ``weight``'s
  ``rows`` by their gradient rows ``values`` (``(len(rows), dim)``; rows in any order, a
  row's entries summed in entry order: a bag lookup's gradient has each row once, sorted, an
  index lookup's one row per entry), each row updated once, in place on
  ``weight`` and the optimizer ``state`` (contiguous, in the kernel's layout: SGD's momentum
  buffer, or any tensor without momentum; Adagrad's sums, ``(N, dim)``; row-wise Adagrad's,
  ``(N,)``; Adam's moments, ``(N, 2 * dim)``, a row's ``m`` then its ``v``); ``kernel`` one of
  ``sgd``, ``adagrad``, ``rowwise_adagrad``, ``adam``, its ``scalars`` in the order of
  :data:`lookuplinear.ops._clib.SCALARS` (:func:`~lookuplinear.ops.update_rows`).
* ``rows_fused_(weights, states, grad_outs, indices, offsets, per_sample_weights,
  padding_idx, kernel, scalars)``: the same update straight from lookups' ``grad_out``, for
  several tables (each table's lookup as :func:`~lookuplinear.ops.group_rows` takes it,
  ``padding_idx`` -1 for none, its scalars after the previous table's): each row updated as
  soon as its gradient is summed, the weights of ``group_rows`` then ``rows_update_``
  (:func:`~lookuplinear.ops.fused_rows`).
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import torch
from torch.autograd import forward_ad

from .._fusion import binding
from .._fusion import defer as fused_defer
from ..errors import InputValueError, LookupIndexError
from . import _asserts, _bagmax, _dualcd, _extension, _hashing, _idmap, _inputs, _ngrams, _updates
from ._backend import has_tangent, use_c
from ._columns import deinterleave as _deinterleave
from ._columns import interleave as _interleave
from ._columns import segment_tensor
from ._errors import project_error, scalar_type_name
from ._hashing import hash_int_ids as hash_ids
from ._inputs import _torch_mode_weights
from ._inputs import check_offsets as _check_offsets
from ._inputs import mode_weights as _mode_weights
from ._rows import gather_into as _gather_into
from ._rows import gather_rows, group_rows
from ._updates import check_float, check_padding

__all__ = ["check_pooling", "decompositions", "entry_grads", "idmap_find", "idmap_rows",
           "in_feature_order", "mode_weights", "per_sample_weights_grad", "project_error", "routed",
           "row_sums_grad", "sum_weight_grad"]

_F = TypeVar("_F", bound=Callable[..., Any])

#: the schemas, as ``csrc/ops.cpp`` defines them too
SCHEMAS = (
    "bag_lookup(Tensor weight, Tensor indices, Tensor? offsets=None, Tensor? weights=None, "
    "int? padding_idx=None, int mode=0, *, bool include_last_offset=True) -> Tensor",
    "in_feature_order(Tensor[] outs, int[] features, int[] segments) -> Tensor",
    "in_feature_order_backward(Tensor grad, int[] features, int[] segments) -> Tensor[]",
    "gather_groups(Tensor[] weights, Tensor[] rows, int[] columns, int width) -> Tensor",
    "idmap_find(Tensor table, Tensor keys) -> Tensor",
    "idmap_rows(Tensor found, Tensor keys, int fallback_rows) -> Tensor",
    "bag_max(Tensor weight, Tensor indices, Tensor offsets) -> Tensor",
    "bag_max_arg(Tensor weight, Tensor indices, Tensor offsets) -> (Tensor, Tensor)",
    "bag_max_backward(Tensor grad, Tensor arg, SymInt num_rows) -> Tensor",
    "mode_weights(Tensor offsets, Tensor? weights, bool sqrt, ScalarType dtype, "
    "SymInt nnz) -> Tensor",
    "row_sums(Tensor grad, Tensor indices, Tensor? offsets, Tensor? weights, "
    "int? padding_idx, SymInt num_rows) -> (Tensor, Tensor)",
    "fused_bind(Tensor table, bool bind) -> ()",
    "fused_defer(Tensor table, Tensor grad_out, Tensor indices, Tensor? offsets, "
    "Tensor? weights, int? padding_idx) -> bool",
    "assert_bags(Tensor indices, Tensor? offsets, int num_rows, str where, str owner, "
    "bool include_last_offset=True) -> ()",
)

#: whether the C++ extension defines the operators (:mod:`._extension`); else they are
#: defined here, and every implementation below is registered
CPP = _extension.LOADED
LIB = torch.library.Library("lookuplinear", "FRAGMENT" if CPP else "DEF")
if not CPP:
    for _schema in SCHEMAS:
        LIB.define(_schema)


def _impl(name: str, fn: Callable[..., Any], key: str) -> None:
    """Register ``fn`` as operator ``name``'s ``key`` kernel, unless the C++ extension has."""
    if CPP and torch._C._dispatch_has_kernel_for_dispatch_key(f"lookuplinear::{name}", key):
        return
    LIB.impl(name, fn, key)


def _fake(name: str) -> Callable[[_F], _F]:
    """Register the decorated function as operator ``name``'s fake (shape) implementation; it
    runs while a graph is recorded, where Inductor learns to call the operators first."""
    def register(fn: _F) -> _F:
        @functools.wraps(fn)
        def fake(*args: Any, **kwargs: Any) -> Any:
            _inductor_calls_the_operators()
            return fn(*args, **kwargs)
        torch.library.register_fake(f"lookuplinear::{name}", fake, lib=LIB)
        return fn
    return register


def _mapping_errors(kernel: Callable[..., Any]) -> Callable[..., Any]:
    """``kernel``, raising the project's errors where the C++ kernels under it raise builtins:
    the one Python frame between a caller and the C++ kernels (the ``Autograd`` kernel)."""
    @functools.wraps(kernel)
    def call(*args: Any, **kwargs: Any) -> Any:
        try:
            return kernel(*args, **kwargs)
        except (IndexError, ValueError) as e:
            mapped = project_error(e)
            if mapped is None:
                raise
            raise mapped from None
    return call


def _refusing_tangents(name: str, kernel: Callable[..., Any]) -> Callable[..., Any]:
    """``kernel``, refusing a tensor argument with a forward-mode tangent (``forward_ad``): the
    operators have no forward-mode formula, and the ``autograd.Function`` that
    ``register_autograd`` builds would return the output without a tangent, silently (the C++
    autograd kernels refuse it too)."""
    @functools.wraps(kernel)
    def call(*args: Any, **kwargs: Any) -> Any:
        if getattr(forward_ad, "_current_level", -1) >= 0:
            for arg in args:
                for t in arg if isinstance(arg, (list, tuple)) else (arg,):
                    if isinstance(t, torch.Tensor) and has_tangent(t):
                        raise NotImplementedError(
                            f"lookuplinear::{name}: forward-mode AD is not implemented (an "
                            "operand is a dual tensor with a tangent). Take the gradient with "
                            "backward() or torch.func.vjp, or compute the jvp on the dense "
                            "path (nn.Linear on the densified input).")
        return kernel(*args, **kwargs)
    return call


class _AutogradRegistration:
    """Where ``torch.library.register_autograd`` registers (its ``lib``): the library, each
    kernel refusing forward-mode tangents (:func:`_refusing_tangents`) and wrapped by
    :func:`_mapping_errors` where the C++ kernels run under it."""

    def impl(self, name: str, kernel: Callable[..., Any], key: str, **kwargs: Any) -> None:
        kernel = _refusing_tangents(name, kernel)
        LIB.impl(name, _mapping_errors(kernel) if CPP else kernel, key, **kwargs)


def _register_autograd(name: str, backward: Callable[..., Any],
                       setup_context: Callable[..., Any]) -> None:
    """Register operator ``name``'s backward, unless the C++ extension has (an ``Autograd``
    kernel: its errors then reach Python as builtins, which :func:`routed` maps)."""
    if CPP and torch._C._dispatch_has_kernel_for_dispatch_key(f"lookuplinear::{name}",
                                                               "Autograd"):
        return
    torch.library.register_autograd(f"lookuplinear::{name}", backward,
                                    setup_context=setup_context,
                                    lib=_AutogradRegistration())


def _below_autograd(name: str) -> None:
    """An ``Autograd`` kernel for the non-differentiable operator ``name`` under which the C++
    kernels run with the project's errors (:func:`_mapping_errors`); none where the C++
    extension has one (a fallthrough: the eager callers map, :func:`routed`)."""
    if torch._C._dispatch_has_kernel_for_dispatch_key(f"lookuplinear::{name}", "Autograd"):
        return
    op = getattr(torch.ops.lookuplinear, name).default
    after = torch._C._after_autograd_keyset

    def kernel(keyset: torch._C.DispatchKeySet, *args: Any, **kwargs: Any) -> Any:
        return op.redispatch(keyset & after, *args, **kwargs)
    LIB.impl(name, _mapping_errors(kernel), "Autograd", with_keyset=True)


# ---- bag_lookup ---------------------------------------------------------------------------


def _check_range(indices: torch.Tensor, num_rows: int, op: str = "bag_lookup") -> None:
    """Raise :class:`LookupIndexError` naming the first index outside ``[0, num_rows)``."""
    flat = indices.reshape(-1)
    bad = (flat < 0) | (flat >= num_rows)
    if flat.numel() == 0 or not bool(bad.any()):
        return
    k = int(torch.nonzero(bad)[0, 0])
    torch._check_with(
        LookupIndexError, False,
        lambda: f"lookuplinear::{op}: index {int(flat[k])} at indices[{k}] is out of "
        f"range for a table of {num_rows} rows. Map the IDs into [0, {num_rows}) first "
        "(hashing=, or an IdMap for raw IDs), or make the table larger.")


def check_pooling(offsets: torch.Tensor | None, weights: torch.Tensor | None,
                   mode: int) -> None:
    """Refuse a ``mode`` other than ATen's sum (0) and mean (1), a mean without offsets, a
    mean with per-entry weights (ATen's takes them for a sum only), and per-entry weights
    without offsets (an index lookup has no entries of bags to scale)."""
    if mode not in (0, 1):
        raise InputValueError(
            f"lookuplinear::bag_lookup: mode must be 0 (sum) or 1 (mean), ATen's embedding_bag "
            f"modes; got {mode}. A max is the operator lookuplinear::bag_max.")
    if mode == 1 and offsets is None:
        raise InputValueError(
            "lookuplinear::bag_lookup: mode=1 (mean) pools bags, so it needs offsets; got none. "
            "Give the bags' offsets, or mode=0 for a lookup of each index.")
    if mode == 1 and weights is not None:
        raise InputValueError(
            "lookuplinear::bag_lookup: mode=1 (mean) takes no per-entry weights (ATen's "
            "embedding_bag takes them for a sum only); got weights. Use mode=0 with the weights "
            "divided by their bag's total.")
    if offsets is None and weights is not None:
        raise InputValueError(
            "lookuplinear::bag_lookup: per-entry weights scale the entries of bags, so they need "
            "offsets; got weights and no offsets. Give the bags' offsets (one index a bag: "
            "torch.arange(n + 1)), or no weights.")


def _bag_lookup_twin(weight: torch.Tensor, indices: torch.Tensor,
                     offsets: torch.Tensor | None = None, weights: torch.Tensor | None = None,
                     padding_idx: int | None = None, mode: int = 0, *,
                     include_last_offset: bool = True) -> torch.Tensor:
    """``bag_lookup`` with torch ops (its weight gradient, differentiated by autograd, is dense:
    the operator's own backward gives the sparse one)."""
    if offsets is None:
        return torch.embedding(weight, indices, -1 if padding_idx is None else padding_idx)
    return torch.embedding_bag(weight, indices, offsets, False, mode, False, weights,
                               include_last_offset, padding_idx)[0]


def _bag_lookup_cpu(weight: torch.Tensor, indices: torch.Tensor,
                    offsets: torch.Tensor | None = None, weights: torch.Tensor | None = None,
                    padding_idx: int | None = None, mode: int = 0, *,
                    include_last_offset: bool = True) -> torch.Tensor:
    check_pooling(offsets, weights, mode)
    if padding_idx is not None and weight.dim() == 2:
        check_padding("bag_lookup", "padding_idx", padding_idx, weight.shape[0])
    if offsets is not None and offsets.dim() == 1 and not offsets.dtype.is_floating_point:
        _check_offsets("bag_lookup", offsets, indices.numel(), include_last_offset)
    try:
        out = gather_rows(weight, indices) if offsets is None else None
        if out is None:
            out = _no_view(_bag_lookup_twin(weight, indices, offsets, weights, padding_idx,
                                            mode, include_last_offset=include_last_offset))
    except (IndexError, RuntimeError):
        _check_range(indices, weight.shape[0])
        raise
    return out


def _no_view(out: torch.Tensor) -> torch.Tensor:
    """``out``, copied if it is a view (an index lookup of N-D indices is one of its rows):
    an operator's output that is a view takes no in-place op (a bias added in place)."""
    return out.clone() if out._is_view() else out


def _bag_lookup_other(weight: torch.Tensor, indices: torch.Tensor,
                      offsets: torch.Tensor | None = None, weights: torch.Tensor | None = None,
                      padding_idx: int | None = None, mode: int = 0, *,
                      include_last_offset: bool = True) -> torch.Tensor:
    check_pooling(offsets, weights, mode)
    if padding_idx is not None and weight.dim() == 2:
        check_padding("bag_lookup", "padding_idx", padding_idx, weight.shape[0])
    try:
        return _no_view(_bag_lookup_twin(weight, indices, offsets, weights, padding_idx, mode,
                                         include_last_offset=include_last_offset))
    except (IndexError, RuntimeError):
        _check_range(indices, weight.shape[0])
        raise


_impl("bag_lookup", _bag_lookup_cpu, "CPU")
_impl("bag_lookup", _bag_lookup_other, "CompositeExplicitAutograd")


@_fake("bag_lookup")
def _bag_lookup_fake(weight: torch.Tensor, indices: torch.Tensor,
                     offsets: torch.Tensor | None = None, weights: torch.Tensor | None = None,
                     padding_idx: int | None = None, mode: int = 0, *,
                     include_last_offset: bool = True) -> torch.Tensor:
    torch._check(weight.dim() == 2, lambda: f"bag_lookup: weight must be 2-D, got "
                 f"{weight.dim()}-D")
    if offsets is None:
        return weight.new_empty((*indices.shape, weight.shape[1]))
    n = offsets.shape[0] - 1 if include_last_offset else offsets.shape[0]
    return weight.new_empty((n, weight.shape[1]))


def _bag_ids(offsets: torch.Tensor, nnz: int) -> torch.Tensor:
    """The bag of every entry, for CSR ``offsets`` over ``nnz`` entries (given: a recorded
    graph then knows the result is as long as the indices)."""
    lengths = offsets[1:] - offsets[:-1]
    return torch.repeat_interleave(torch.arange(lengths.numel(), device=offsets.device),
                                   lengths, output_size=nnz)


def entry_grads(indices: torch.Tensor, offsets: torch.Tensor | None,
                weights: torch.Tensor | None, padding_idx: int | None, g: torch.Tensor,
                shape: tuple[int, ...]) -> torch.Tensor:
    """The weight gradient of a sum lookup whose output rows have the gradient ``g``
    (``(rows, dim)``; ``offsets``: CSR, or None for one entry per row), with torch ops: an
    uncoalesced sparse COO tensor of ``shape``, one row per entry (padding entries left
    out), as ``nn.EmbeddingBag(sparse=True)``'s; its values keep their graph."""
    idx = indices.reshape(-1).long()
    contrib = g if offsets is None else g.index_select(0, _bag_ids(offsets, idx.numel()))
    if weights is not None:
        contrib = contrib * weights.to(g.dtype).unsqueeze(1)
    if padding_idx is not None:  # left out, as ATen's sparse embedding backward leaves them
        keep = (idx != padding_idx).nonzero().view(-1)  # (by position: faster than its mask)
        idx, contrib = idx.index_select(0, keep), contrib.contiguous().index_select(0, keep)
    return torch.sparse_coo_tensor(idx.unsqueeze(0), contrib, shape, check_invariants=False)


def mean_grad(g: torch.Tensor, indices: torch.Tensor, offsets: torch.Tensor,
              padding_idx: int | None) -> torch.Tensor:
    """The gradient of a mean lookup's sums from its output's gradient ``g`` (CSR ``offsets``):
    each bag's row times ``1 / its number of non-padding entries`` (1 for an empty bag), ATen's
    mean backward (the product by the reciprocal, not a division)."""
    if padding_idx is None:
        sizes = offsets[1:] - offsets[:-1]
    else:  # the entries that count, summed between the offsets
        counted = torch.cat([indices.new_zeros(1, dtype=torch.long),
                             torch.cumsum(indices != padding_idx, 0)])
        at = counted.index_select(0, offsets.long())
        sizes = at[1:] - at[:-1]
    return g * sizes.clamp_min(1).to(g.dtype).reciprocal().unsqueeze(1)


def row_sums_grad(rows: torch.Tensor, sums: torch.Tensor, shape: tuple[int, ...]
                  ) -> torch.Tensor:
    """A bag lookup's weight gradient of ``shape`` from ``row_sums``' ``(rows, sums)``: a
    coalesced sparse COO tensor (each row once, sorted)."""
    return torch.sparse_coo_tensor(rows.unsqueeze(0), sums, shape, is_coalesced=True,
                                   check_invariants=False)


def per_sample_weights_grad(g: torch.Tensor, weight: torch.Tensor, indices: torch.Tensor,
                            offsets: torch.Tensor, dtype: torch.dtype,
                            padding_idx: int | None) -> torch.Tensor:
    """The gradient of a weighted sum lookup (CSR ``offsets``, 1-D ``indices``) with respect
    to its per-entry weights: ``d out[b] / d weights[e] = g[b] . weight[indices[e]]``, 0 for a
    padding entry, in ``dtype``."""
    grad = (g.index_select(0, _bag_ids(offsets, indices.numel()))
            * weight.index_select(0, indices)).sum(1)
    if padding_idx is not None:
        grad = grad.masked_fill(indices == padding_idx, 0)
    return grad.to(dtype)


# ---- assert_bags ---------------------------------------------------------------------------

_impl("assert_bags", _asserts.assert_bags_twin, "CompositeExplicitAutograd")


@_fake("assert_bags")
def _assert_bags_fake(indices: torch.Tensor, offsets: torch.Tensor | None, num_rows: int,
                      where: str, owner: str, include_last_offset: bool = True) -> None:
    """No output: the values it asserts are the device's (a recorded graph records
    :func:`~._asserts.assert_bags_twin`'s ops instead)."""


# ---- fused_bind, fused_defer ---------------------------------------------------------------


def _fused_bind(table: torch.Tensor, bind: bool) -> None:
    """Registered from Python, the operators' backward reads the binding itself
    (:func:`_fused_taken`)."""


_impl("fused_defer", fused_defer, "CompositeExplicitAutograd")
_impl("fused_bind", _fused_bind, "CompositeExplicitAutograd")


def _fused_taken(table: torch.Tensor, grad_out: torch.Tensor, indices: torch.Tensor,
                 offsets: torch.Tensor | None = None, weights: torch.Tensor | None = None,
                 padding_idx: int | None = None) -> bool:
    """In a backward, whether the ``fused=True`` optimizer bound to ``table`` took the gradient
    of its lookup (:func:`lookuplinear._fusion.defer`): only where the backward accumulates
    into ``table`` (``loss.backward()``, ``backward(inputs=...)`` naming it; not
    ``autograd.grad``, which captures its gradient, nor a gradient with a graph under
    ``create_graph=True``). What the
    C++ operators' backward asks, asked from Python."""
    if torch.is_grad_enabled() or binding(table) is None:
        return False
    try:
        if not torch._C._will_engine_execute_node(
                torch.autograd.graph.get_gradient_edge(table).node):
            return False
    except RuntimeError:  # autograd.grad() returns this table's gradient (torch refuses the
        return False      # question for a leaf it captures)
    return fused_defer(table, grad_out, indices, offsets, weights, padding_idx)


# ---- bag_lookup's backward -----------------------------------------------------------------


def _bag_lookup_setup(ctx: Any, inputs: tuple[Any, ...], keyword_only_inputs: dict[str, Any],
                      output: torch.Tensor) -> None:
    weight, indices, offsets, weights, padding_idx, mode = inputs
    ctx.table = weight  # the parameter itself: a fused=True optimizer may be bound to it
    if weights is not None and ctx.needs_input_grad[3]:
        ctx.save_for_backward(indices, offsets, weights, weight)
    else:
        ctx.save_for_backward(indices, offsets, weights)
    ctx.shape, ctx.padding_idx = tuple(weight.shape), padding_idx
    ctx.include_last_offset, ctx.mode = keyword_only_inputs["include_last_offset"], mode


def _sum_weight_grad(table: torch.Tensor, g: torch.Tensor, idx: torch.Tensor,
                     offsets: torch.Tensor | None, weights: torch.Tensor | None,
                     padding_idx: int | None, shape: tuple[int, ...]) -> torch.Tensor | None:
    """The weight gradient of a sum lookup of ``table`` whose output rows have the gradient
    ``g``: None where ``table``'s ``fused=True`` optimizer took it (:func:`_fused_taken`);
    under ``create_graph=True``, for an index tensor (no offsets, no weights: then
    ``nn.Embedding(sparse=True)``'s gradient) and off the CPU (``nn.EmbeddingBag
    (sparse=True)``'s: how many distinct rows there are is known on the device only, and
    reading it back would synchronise), each entry's contribution in entry order (under
    ``create_graph`` a graph to differentiate); else one row per distinct row, sorted, its sum
    (``row_sums``: the C kernel's sums where it runs)."""
    if _fused_taken(table, g, idx, offsets, weights, padding_idx):
        return None
    if torch.is_grad_enabled():
        return entry_grads(idx, offsets, weights, padding_idx, g, shape)
    return sum_weight_grad(g, idx, offsets, weights, padding_idx, shape)


def sum_weight_grad(g: torch.Tensor, idx: torch.Tensor, offsets: torch.Tensor | None,
                    weights: torch.Tensor | None, padding_idx: int | None,
                    shape: tuple[int, ...]) -> torch.Tensor:
    """The sparse weight gradient of ``shape`` of a sum lookup (1-D ``idx``, CSR ``offsets``
    or None for an index tensor) whose output rows have the gradient ``g``, as its backward
    stores it outside ``create_graph``: for an index tensor (no offsets, no weights:
    ``nn.Embedding(sparse=True)``'s) and off the CPU (``nn.EmbeddingBag(sparse=True)``'s) each
    entry's contribution in entry order (:func:`entry_grads`), else one row per distinct row,
    sorted, its sum (``row_sums``, :func:`row_sums_grad`)."""
    if (offsets is None and weights is None) or not idx.is_cpu:
        return entry_grads(idx, offsets, weights, padding_idx, g, shape)
    rows, sums = torch.ops.lookuplinear.row_sums(g, idx, offsets, weights, padding_idx,
                                                 shape[0])
    return row_sums_grad(rows, sums, shape)


def _bag_lookup_backward(ctx: Any, grad_out: torch.Tensor) -> tuple[Any, ...]:
    """The weight gradient (:func:`_sum_weight_grad`), and the per-entry weights'."""
    indices, offsets, weights, *table = ctx.saved_tensors
    # the output's rows (not reshape(-1, dim), which a table of no columns leaves open)
    g = grad_out.flatten(0, -2) if grad_out.dim() > 1 else grad_out.reshape(1, ctx.shape[1])
    idx = indices.reshape(-1)
    if offsets is not None and not ctx.include_last_offset:  # start offsets: append the end
        offsets = torch.cat([offsets, offsets.new_full((1,), idx.numel())])
    if ctx.mode == 1:
        assert offsets is not None
        g = mean_grad(g, idx, offsets, ctx.padding_idx)
    grad_weight = grad_weights = None
    if ctx.needs_input_grad[0]:
        grad_weight = _sum_weight_grad(ctx.table, g, idx, offsets, weights, ctx.padding_idx,
                                       ctx.shape)
    if table:
        assert offsets is not None
        grad_weights = per_sample_weights_grad(g, table[0], idx, offsets, weights.dtype,
                                               ctx.padding_idx)
    return grad_weight, None, None, grad_weights, None, None


_register_autograd("bag_lookup", _bag_lookup_backward,
                   setup_context=_bag_lookup_setup)


# ---- in_feature_order ---------------------------------------------------------------------


def _triples(segments: Sequence[int]) -> list[tuple[int, int, int]]:
    return [(segments[i], segments[i + 1], segments[i + 2]) for i in range(0, len(segments), 3)]


def _rows_of(outs: Sequence[torch.Tensor], features: Sequence[int]) -> Any:
    """N: an output's rows, or its rows over its features where it is feature-major."""
    return outs[0].shape[0] // features[0] if features[0] else outs[0].shape[0]


def _blocks(outs: Sequence[torch.Tensor], features: Sequence[int]) -> list[torch.Tensor]:
    """The ``(N, width)`` blocks of ``outs``: a feature-major output (``features[i] = F``,
    ``(F * N, dim)``) is one block per feature, an example-major one (``0``) one block."""
    op = "lookuplinear::in_feature_order"
    if not outs or len(outs) != len(features) or min(features) < 0:
        raise InputValueError(f"{op}: one feature count >= 0 per output; got {len(outs)} "
                              f"outputs and the counts {list(features)}")
    if any(out.dim() != 2 for out in outs):
        raise InputValueError(f"{op}: the outputs are 2-D, (F * N, dim) or (N, width); got "
                              f"shapes {[list(out.shape) for out in outs]}")
    n = _rows_of(outs, features)
    for i, (out, f) in enumerate(zip(outs, features, strict=True)):
        if out.shape[0] != (f or 1) * n:
            raise InputValueError(
                f"{op}: output {i} has {out.shape[0]} rows; its {f or 1} block(s) of the "
                f"batch's {n} rows (output 0's) take {(f or 1) * n}")
    blocks: list[torch.Tensor] = []
    for out, f in zip(outs, features, strict=True):
        blocks.extend(out.view(f, n, out.shape[1]).unbind(0) if f else (out,))
    return blocks


def _segments_checked(blocks: Sequence[torch.Tensor], segments: Sequence[int]) -> None:
    """``InputValueError`` unless ``segments`` are ``(block, first column, columns)`` triples
    inside ``blocks``."""
    op = "lookuplinear::in_feature_order"
    if len(segments) % 3:
        raise InputValueError(f"{op}: segments are (block, first column, columns) triples; "
                              f"got {len(segments)} numbers")
    for s, (b, first, c) in enumerate(_triples(segments)):
        if not (0 <= b < len(blocks) and first >= 0 and c >= 0
                and first + c <= blocks[b].shape[1]):
            raise InputValueError(
                f"{op}: segment {s} ({b}, {first}, {c}) is not columns of one of the "
                f"{len(blocks)} blocks (widths {[blk.shape[1] for blk in blocks]}); build the "
                "segments with segment_triples")


def _in_feature_order_twin(outs: Sequence[torch.Tensor], features: Sequence[int],
                           segments: Sequence[int]) -> torch.Tensor:
    blocks = _blocks(outs, features)
    _segments_checked(blocks, segments)
    if not segments and blocks:  # no columns
        return _no_columns(blocks)
    return torch.cat([blocks[b].narrow(1, o, c) for b, o, c in _triples(segments)], 1)


def _no_columns(blocks: Sequence[torch.Tensor]) -> torch.Tensor:
    """``in_feature_order``'s output without segments: ``(N, 0)``, as the C++ kernel's."""
    return blocks[0].new_empty((blocks[0].shape[0], 0))


def _in_feature_order_cpu(outs: Sequence[torch.Tensor], features: Sequence[int],
                          segments: Sequence[int]) -> torch.Tensor:
    blocks = _blocks(outs, features)
    _segments_checked(blocks, segments)
    if not segments and blocks:  # no columns
        return _no_columns(blocks)
    return _interleave(blocks, segment_tensor(tuple(segments)))


_impl("in_feature_order", _in_feature_order_cpu, "CPU")
_impl("in_feature_order", _in_feature_order_twin, "CompositeExplicitAutograd")


@_fake("in_feature_order")
def _in_feature_order_fake(outs: Sequence[torch.Tensor], features: Sequence[int],
                           segments: Sequence[int]) -> torch.Tensor:
    torch._check(len(outs) == len(features) > 0 and len(segments) % 3 == 0,
                 lambda: f"in_feature_order: one feature count per output ({len(outs)} "
                 f"outputs, {len(features)} counts) and (block, first column, columns) "
                 f"triples ({len(segments)} numbers)")
    return outs[0].new_empty((_rows_of(outs, features), sum(segments[2::3])))


def _in_feature_order_setup(ctx: Any, inputs: tuple[Any, ...], output: torch.Tensor) -> None:
    _, ctx.features, ctx.segments = inputs


def _in_feature_order_backward(ctx: Any, grad: torch.Tensor) -> tuple[Any, ...]:
    """Each output's gradient in its layout: the operator ``in_feature_order_backward``."""
    return (torch.ops.lookuplinear.in_feature_order_backward(grad, ctx.features, ctx.segments),
            None, None)


_register_autograd("in_feature_order", _in_feature_order_backward,
                   setup_context=_in_feature_order_setup)

_IN_FEATURE_ORDER = torch.ops.lookuplinear.in_feature_order.default


def in_feature_order(outs: Sequence[torch.Tensor], features: Sequence[int],
                     segments: Sequence[int]) -> torch.Tensor:
    """The operator ``lookuplinear::in_feature_order`` (its C++ autograd, one C pass on the
    CPU); while a ``torch.func`` transform is active (which sees through torch ops, not the
    operator's C++ autograd) or a forward-mode AD level is open (the operator has no
    forward-mode formula), its torch-op twin: ``torch.cat`` of the segments' column slices,
    the same values, whose derivatives the transform or the tangent follows."""
    # transformed() written out: this runs per collection forward
    if (torch._C._functorch.maybe_current_level() is not None
            or getattr(forward_ad, "_current_level", -1) >= 0):
        return _in_feature_order_twin(outs, features, segments)
    out: torch.Tensor = _IN_FEATURE_ORDER(outs, features, segments)
    return out


def _block_widths(features: Sequence[int], segments: Sequence[int], total: int) -> list[int]:
    """The width of every block of ``in_feature_order``'s outputs: the columns its segments
    take, each block's once and left to right (as ``segment_triples`` gives them), checked
    against the gradient's ``total`` columns and a feature-major output's common width."""
    op = "lookuplinear::in_feature_order_backward"
    if not features or min(features) < 0 or len(segments) % 3:
        raise InputValueError(f"{op}: at least one output, feature counts >= 0 and (block, "
                              f"first column, columns) triples; got features {list(features)} "
                              f"and {len(segments)} numbers")
    widths = [0] * sum(f or 1 for f in features)
    for s, (b, first, c) in enumerate(_triples(segments)):
        if not (0 <= b < len(widths) and c >= 0 and first == widths[b]):
            raise InputValueError(
                f"{op}: segment {s} ({b}, {first}, {c}) does not take the next columns of one "
                f"of the {len(widths)} blocks; the segments take each block's columns once, "
                "left to right (segment_triples)")
        widths[b] += c
    if sum(widths) != total:
        raise InputValueError(f"{op}: the segments take {sum(widths)} columns; the gradient "
                              f"has {total}")
    b = 0
    for i, f in enumerate(features):
        if len(set(widths[b:b + f])) > 1:
            raise InputValueError(f"{op}: the blocks of feature-major output {i} have one "
                                  f"width; got {widths[b:b + f]}")
        b += f or 1
    return widths


def _in_feature_order_backward_twin(grad: torch.Tensor, features: Sequence[int],
                                    segments: Sequence[int]) -> list[torch.Tensor]:
    """Each block's segments of ``grad``, in order (new tensors: none a view of ``grad``),
    a feature-major output's blocks one below the other."""
    if grad.dim() != 2:
        raise InputValueError("lookuplinear::in_feature_order_backward: the gradient is 2-D, "
                              f"(N, width); got shape {list(grad.shape)}")
    widths = _block_widths(features, segments, grad.shape[1])
    pieces: list[list[torch.Tensor]] = [[] for _ in widths]
    at = 0
    for b, _, c in _triples(segments):
        pieces[b].append(grad.narrow(1, at, c))
        at += c
    blocks = [torch.cat(p, 1) if p else grad.narrow(1, 0, 0).clone() for p in pieces]
    grads, b = [], 0
    for f in features:
        grads.append(torch.cat(blocks[b:b + f], 0) if f else blocks[b])
        b += f or 1
    return grads


def _in_feature_order_backward_cpu(grad: torch.Tensor, features: Sequence[int],
                                   segments: Sequence[int]) -> list[torch.Tensor]:
    """One C pass (:func:`~lookuplinear.ops.deinterleave`) into each output's layout."""
    if grad.dim() != 2:
        return _in_feature_order_backward_twin(grad, features, segments)
    widths = _block_widths(features, segments, grad.shape[1])
    n, b = grad.shape[0], 0
    grads = []
    for f in features:
        grads.append(grad.new_empty(((f or 1) * n, widths[b])))
        b += f or 1
    _deinterleave(grad, segment_tensor(tuple(segments)), _blocks(grads, features))
    return grads


_impl("in_feature_order_backward", _in_feature_order_backward_cpu, "CPU")
_impl("in_feature_order_backward", _in_feature_order_backward_twin,
      "CompositeExplicitAutograd")


@_fake("in_feature_order_backward")
def _in_feature_order_backward_fake(grad: torch.Tensor, features: Sequence[int],
                                    segments: Sequence[int]) -> list[torch.Tensor]:
    widths = _block_widths(features, segments, sum(segments[2::3]))
    n, b = grad.shape[0], 0
    grads = []
    for f in features:
        grads.append(grad.new_empty(((f or 1) * n, widths[b])))
        b += f or 1
    return grads


def _in_feature_order_backward_setup(ctx: Any, inputs: tuple[Any, ...], output: Any) -> None:
    _, ctx.features, ctx.segments = inputs
    ctx.shapes = [out.shape for out in output]


def _in_feature_order_backward_backward(ctx: Any, grads: Sequence[torch.Tensor | None]
                                        ) -> tuple[Any, ...]:
    """The gradient of the outputs' gradients: ``in_feature_order`` of theirs (zeros for an
    output that has none)."""
    some = next((g for g in grads if g is not None), None)
    if some is None:
        return None, None, None
    given = [some.new_zeros(shape) if g is None else g
             for g, shape in zip(grads, ctx.shapes, strict=True)]
    return (torch.ops.lookuplinear.in_feature_order(given, ctx.features, ctx.segments),
            None, None)


_register_autograd("in_feature_order_backward", _in_feature_order_backward_backward,
                   setup_context=_in_feature_order_backward_setup)


# ---- gather_groups ------------------------------------------------------------------------


def _gather_groups_segments(weights: Sequence[torch.Tensor], rows: Sequence[torch.Tensor],
                            columns: Sequence[int], width: int) -> tuple[int, ...]:
    """The operands checked (:class:`InputValueError` naming what came), and the segments that
    put the groups' ``(N, F_g * dim_g)`` outputs in the output's column order (every output
    example-major): each group's features left to right, the features' columns tiling
    ``[0, width)``."""
    op = "lookuplinear::gather_groups"
    if not weights or len(weights) != len(rows):
        raise InputValueError(f"{op}: one (N, F_g) row tensor per table; got {len(weights)} "
                              f"tables and {len(rows)} row tensors")
    for g, (w, r) in enumerate(zip(weights, rows, strict=True)):
        if w.dim() != 2 or w.dtype != weights[0].dtype or not w.is_floating_point():
            raise InputValueError(f"{op}: the tables are 2-D, of one floating dtype; got table "
                                  f"{g} of shape {list(w.shape)} and dtype {w.dtype} (table 0: "
                                  f"{weights[0].dtype})")
        if (r.dim() != 2 or r.dtype not in (torch.int32, torch.int64)
                or r.shape[0] != rows[0].shape[0]):
            raise InputValueError(f"{op}: the rows are (N, F_g) int32/int64, one N for all; got "
                                  f"rows {g} of shape {list(r.shape)} and dtype {r.dtype} "
                                  f"(rows 0: {list(rows[0].shape)})")
    n_cols = sum(r.shape[1] for r in rows)
    if len(columns) != n_cols:
        raise InputValueError(f"{op}: one first column per feature ({n_cols} features); got "
                              f"{len(columns)}")
    at, k = [], 0
    for g, r in enumerate(rows):
        for j in range(r.shape[1]):
            if j and columns[k] <= columns[k - 1]:
                raise InputValueError(f"{op}: a group's features take its columns left to "
                                      f"right; got first columns {columns[k - 1]} then "
                                      f"{columns[k]} in group {g}")
            at.append((columns[k], g, j))
            k += 1
    segments: list[list[int]] = []
    end = 0
    for first, g, j in sorted(at):
        dim = weights[g].shape[1]
        if first != end:
            raise InputValueError(f"{op}: the features' columns tile the output's {width} "
                                  f"columns, each feature's next to the one before; a feature "
                                  f"of group {g} starts at column {first} where column {end} "
                                  "was due")
        if segments and segments[-1][0] == g and segments[-1][1] + segments[-1][2] == j * dim:
            segments[-1][2] += dim  # the group's next feature: one segment
        else:
            segments.append([g, j * dim, dim])
        end += dim
    if end != width:
        raise InputValueError(f"{op}: the features take {end} columns; the output has {width}")
    return tuple(v for seg in segments for v in seg)


def _gather_groups_range(weights: Sequence[torch.Tensor], rows: Sequence[torch.Tensor]
                         ) -> None:
    """:class:`LookupIndexError` naming the first row outside its table."""
    for g, (w, r) in enumerate(zip(weights, rows, strict=True)):
        bad = (r < 0) | (r >= w.shape[0])
        if r.numel() == 0 or not bool(bad.any()):
            continue
        i, j = (int(v) for v in torch.nonzero(bad)[0])
        raise LookupIndexError(
            f"lookuplinear::gather_groups: row {int(r[i, j])} at rows[{g}][{i}, {j}] is out of "
            f"range for table {g} of {w.shape[0]} rows. Map the IDs into [0, {w.shape[0]}) "
            "first, or make the table larger.")


def _gather_groups_twin(weights: Sequence[torch.Tensor], rows: Sequence[torch.Tensor],
                        columns: Sequence[int], width: int) -> torch.Tensor:
    """``gather_groups`` with torch ops: an ``index_select`` per table, one ``cat`` of their
    columns in output order."""
    segments = _gather_groups_segments(weights, rows, columns, width)
    try:
        outs = [w.index_select(0, r.reshape(-1)).view(r.shape[0], r.shape[1] * w.shape[1])
                for w, r in zip(weights, rows, strict=True)]
    except (IndexError, RuntimeError):
        _gather_groups_range(weights, [r.cpu() for r in rows])
        raise
    return _in_feature_order_twin(outs, [0] * len(outs), segments)


def _gather_groups_cpu(weights: Sequence[torch.Tensor], rows: Sequence[torch.Tensor],
                       columns: Sequence[int], width: int) -> torch.Tensor:
    """One call of the C kernel ``ll_gather_into`` (:func:`~lookuplinear.ops.gather_into`),
    the rows checked first; the twin where it does not apply."""
    _gather_groups_segments(weights, rows, columns, width)
    _gather_groups_range(weights, rows)
    out = weights[0].new_empty((rows[0].shape[0], width))
    cols = torch.tensor(list(columns), dtype=torch.int64).split([r.shape[1] for r in rows])
    if _gather_into(list(zip(weights, rows, cols, strict=True)), out):
        return out
    return _gather_groups_twin(weights, rows, columns, width)


_impl("gather_groups", _gather_groups_cpu, "CPU")
_impl("gather_groups", _gather_groups_twin, "CompositeExplicitAutograd")


@_fake("gather_groups")
def _gather_groups_fake(weights: Sequence[torch.Tensor], rows: Sequence[torch.Tensor],
                        columns: Sequence[int], width: int) -> torch.Tensor:
    torch._check(len(weights) == len(rows) > 0, lambda: "gather_groups: one (N, F_g) row "
                 f"tensor per table; got {len(weights)} tables and {len(rows)} row tensors")
    return weights[0].new_empty((rows[0].shape[0], width))


def _gather_groups_setup(ctx: Any, inputs: tuple[Any, ...], output: torch.Tensor) -> None:
    weights, rows, columns, width = inputs
    ctx.segments = _gather_groups_segments(weights, rows, columns, width)
    ctx.shapes = [tuple(w.shape) for w in weights]
    ctx.tables = weights  # the parameters: a fused=True optimizer may be bound to one
    ctx.save_for_backward(*rows)


def _gather_groups_backward(ctx: Any, grad: torch.Tensor) -> tuple[Any, ...]:
    """Each table's gradient as its index lookup's (``bag_lookup``'s, one row per entry in
    entry order): the gradient's columns copied back by ``in_feature_order_backward``."""
    rows = ctx.saved_tensors
    parts = torch.ops.lookuplinear.in_feature_order_backward(grad, [0] * len(rows),
                                                             ctx.segments)
    grads: list[torch.Tensor | None] = []
    for r, part, shape, table in zip(rows, parts, ctx.shapes, ctx.tables, strict=True):
        g, idx = part.reshape(-1, shape[1]), r.reshape(-1)
        grads.append(None if _fused_taken(table, g, idx)  # taken by a fused=True optimizer
                     else entry_grads(idx, None, None, None, g, shape))
    return grads, [None] * len(rows), None, None


_register_autograd("gather_groups", _gather_groups_backward,
                   setup_context=_gather_groups_setup)


# ---- idmap_find ---------------------------------------------------------------------------


def _idmap_find_twin(table: torch.Tensor, keys: torch.Tensor) -> torch.Tensor:
    _idmap.check_table("idmap_find", table, size=False)  # (a search: no probe to mask)
    return _idmap._sorted_find(table, keys.reshape(-1).to(torch.int64))


_impl("idmap_find", _idmap.find, "CPU")
_impl("idmap_find", _idmap_find_twin, "CompositeExplicitAutograd")


@_fake("idmap_find")
def _idmap_find_fake(table: torch.Tensor, keys: torch.Tensor) -> torch.Tensor:
    return keys.new_empty((keys.numel(),), dtype=torch.int64)


def _check_idmap_rows(found: torch.Tensor, keys: torch.Tensor, fallback_rows: int) -> None:
    """``InputValueError`` unless ``fallback_rows >= 0``, ``found`` holds one value per key,
    and ``fallback_rows >= 1`` where a key is absent (``found < 0``: hashed into the fallback
    rows), as the C++ kernels check them."""
    if fallback_rows < 0:
        raise InputValueError("lookuplinear::idmap_rows: fallback_rows (the rows before the "
                              f"map's) must be >= 0; got {fallback_rows}")
    if found.numel() != keys.numel():
        raise InputValueError(f"lookuplinear::idmap_rows: one found value per key; got "
                              f"{found.numel()} values for {keys.numel()} keys")
    if fallback_rows == 0 and bool((found < 0).any()):
        raise InputValueError("lookuplinear::idmap_rows: a key absent from the map is hashed "
                              "into fallback_rows, which must be >= 1; got 0")


def _idmap_rows_twin(found: torch.Tensor, keys: torch.Tensor, fallback_rows: int
                     ) -> torch.Tensor:
    _check_idmap_rows(found, keys, fallback_rows)
    if fallback_rows == 0:  # every key found: nothing to hash
        return found + 0
    return torch.where(found < 0, hash_ids(keys, fallback_rows), found + fallback_rows)


def _idmap_rows_cpu(found: torch.Tensor, keys: torch.Tensor, fallback_rows: int
                    ) -> torch.Tensor:
    _check_idmap_rows(found, keys, fallback_rows)
    rows = found + fallback_rows
    miss = found < 0
    if bool(miss.any()):  # only the keys the map does not hold are hashed
        rows[miss] = hash_ids(keys[miss], fallback_rows)
    return rows


_impl("idmap_rows", _idmap_rows_cpu, "CPU")
_impl("idmap_rows", _idmap_rows_twin, "CompositeExplicitAutograd")


@_fake("idmap_rows")
def _idmap_rows_fake(found: torch.Tensor, keys: torch.Tensor, fallback_rows: int
                     ) -> torch.Tensor:
    return torch.empty_like(found)


# ---- bag_max -------------------------------------------------------------------------------


def _bag_max_twin(weight: torch.Tensor, indices: torch.Tensor, offsets: torch.Tensor
                  ) -> torch.Tensor:
    return torch.embedding_bag(weight, indices, offsets, False, 2, False, None, True)[0]


def _bag_max_cpu(weight: torch.Tensor, indices: torch.Tensor, offsets: torch.Tensor
                 ) -> torch.Tensor:
    return _bag_max_arg_cpu(weight, indices, offsets)[0]


_impl("bag_max", _bag_max_cpu, "CPU")
_impl("bag_max", _bag_max_twin, "CompositeExplicitAutograd")


@_fake("bag_max")
def _bag_max_fake(weight: torch.Tensor, indices: torch.Tensor, offsets: torch.Tensor
                  ) -> torch.Tensor:
    return weight.new_empty((offsets.shape[0] - 1, weight.shape[1]))


def _bag_max_arg_twin(weight: torch.Tensor, indices: torch.Tensor, offsets: torch.Tensor
                      ) -> tuple[torch.Tensor, torch.Tensor]:
    """ATen's pool and its ``max_indices`` (0 in an empty bag: made -1, as the C kernel's)."""
    pooled = torch.embedding_bag(weight, indices, offsets, False, 2, False, None, True)
    rows = pooled[3].long()
    empty = (offsets[1:] == offsets[:-1]).unsqueeze(1).expand_as(rows)
    return pooled[0], rows.masked_fill(empty, -1)


def _bag_max_arg_cpu(weight: torch.Tensor, indices: torch.Tensor, offsets: torch.Tensor
                     ) -> tuple[torch.Tensor, torch.Tensor]:
    c = _bagmax.c_operands(weight, indices, offsets)
    # ATen's CPU kernel takes some offsets that do not cover the entries (decreasing ones)
    _check_offsets("bag_max", offsets if c is None else c[1], indices.numel())
    try:
        return _bag_max_arg_twin(weight, indices, offsets) if c is None else _bagmax.bag_max_c(
            weight, *c)
    except (IndexError, RuntimeError):  # torch's kernel refused it: the operator's error
        _check_range(indices, weight.shape[0], "bag_max")
        raise


_impl("bag_max_arg", _bag_max_arg_cpu, "CPU")
_impl("bag_max_arg", _bag_max_arg_twin, "CompositeExplicitAutograd")


@_fake("bag_max_arg")
def _bag_max_arg_fake(weight: torch.Tensor, indices: torch.Tensor, offsets: torch.Tensor
                      ) -> tuple[torch.Tensor, torch.Tensor]:
    shape = (offsets.shape[0] - 1, weight.shape[1])
    return weight.new_empty(shape), weight.new_empty(shape, dtype=torch.int64)


def _check_bag_max_grad(grad: torch.Tensor, arg: torch.Tensor) -> None:
    """``InputValueError`` unless ``grad`` has ``arg``'s shape, one row per bag (the C++
    kernel's check, the same message)."""
    if list(grad.shape) != list(arg.shape):
        raise InputValueError(f"lookuplinear::bag_max_backward: the gradient has one row per "
                              f"bag, {list(arg.shape)}; got {list(grad.shape)}")


def _bag_max_backward_twin(grad: torch.Tensor, arg: torch.Tensor, num_rows: int
                           ) -> torch.Tensor:
    """``grad`` added to the rows ``arg`` names by torch ops, differentiable in ``grad`` (a
    gradient under ``create_graph=True`` differentiates again): an empty bag's (``-1``) to a
    spare row past the table's, left out."""
    _check_bag_max_grad(grad, arg)
    rows = arg.masked_fill(arg < 0, num_rows)
    return grad.new_zeros((num_rows + 1, grad.shape[1])).scatter_add(0, rows, grad)[:num_rows]


def _bag_max_backward_cpu(grad: torch.Tensor, arg: torch.Tensor, num_rows: int
                          ) -> torch.Tensor:
    _check_bag_max_grad(grad, arg)
    if arg.dim() != 2 or arg.dtype != torch.int64:
        raise InputValueError(f"lookuplinear::bag_max_backward: arg is bag_max_arg's, 2-D "
                              f"int64; got {scalar_type_name(arg.dtype)} of {arg.dim()} "
                              "dimensions")
    if arg.numel() > 0:  # the C kernel writes where arg says: every row in the table
        lo, hi = (int(v) for v in torch.aminmax(arg))
        if lo < -1 or hi >= num_rows:
            raise LookupIndexError(f"lookuplinear::bag_max_backward: arg holds rows of a table "
                                   f"of {num_rows} rows, or -1 for an empty bag; got values in "
                                   f"[{lo}, {hi}]")
    if grad.dtype not in (torch.float32, torch.float64) or not use_c(grad):
        return _bag_max_backward_twin(grad, arg, num_rows)
    return _bagmax.bag_max_grad_c(arg.contiguous(), grad, (num_rows, grad.shape[1]))


_impl("bag_max_backward", _bag_max_backward_cpu, "CPU")
_impl("bag_max_backward", _bag_max_backward_twin, "CompositeExplicitAutograd")


@_fake("bag_max_backward")
def _bag_max_backward_fake(grad: torch.Tensor, arg: torch.Tensor, num_rows: int
                           ) -> torch.Tensor:
    return grad.new_empty((num_rows, grad.shape[1]))


def _bag_max_arg_setup(ctx: Any, inputs: tuple[Any, ...], output: tuple[Any, ...]) -> None:
    ctx.num_rows = inputs[0].shape[0]
    ctx.save_for_backward(output[1])


def _bag_max_arg_backward(ctx: Any, grad: torch.Tensor, _: Any) -> tuple[Any, ...]:
    """``grad`` added to the rows that gave each maximum, as the forward found them (the table
    may have changed since); under ``create_graph=True`` by torch ops, with its graph."""
    (arg,) = ctx.saved_tensors
    if not ctx.needs_input_grad[0]:
        return None, None, None
    if torch.is_grad_enabled():
        return _bag_max_backward_twin(grad, arg, ctx.num_rows), None, None
    return torch.ops.lookuplinear.bag_max_backward(grad, arg, ctx.num_rows), None, None


_register_autograd("bag_max_arg", _bag_max_arg_backward, setup_context=_bag_max_arg_setup)


def _bag_max_autograd(keyset: torch._C.DispatchKeySet, weight: torch.Tensor,
                      indices: torch.Tensor, offsets: torch.Tensor) -> torch.Tensor:
    """``bag_max``'s ``Autograd`` kernel (as the C++ extension's): where a graph is recorded,
    ``bag_max_arg``'s pool, whose node keeps the rows that gave each maximum; else the
    operator's kernel, nothing kept."""
    if torch.is_grad_enabled() and weight.requires_grad:
        out: torch.Tensor = torch.ops.lookuplinear.bag_max_arg(weight, indices, offsets)[0]
        return out
    return torch.ops.lookuplinear.bag_max.default.redispatch(
        keyset & torch._C._after_autograd_keyset, weight, indices, offsets)


if not torch._C._dispatch_has_kernel_for_dispatch_key("lookuplinear::bag_max", "Autograd"):
    LIB.impl("bag_max", _refusing_tangents("bag_max", _bag_max_autograd), "Autograd",
             with_keyset=True)


# ---- mode_weights --------------------------------------------------------------------------


def _mode_weights_twin(offsets: torch.Tensor, weights: torch.Tensor | None, sqrt: bool,
                       dtype: torch.dtype, nnz: int) -> torch.Tensor:
    check_float("mode_weights", "dtype", dtype)
    return _torch_mode_weights(offsets, weights, sqrt, dtype, nnz)


def _mode_weights_cpu(offsets: torch.Tensor, weights: torch.Tensor | None, sqrt: bool,
                      dtype: torch.dtype, nnz: int) -> torch.Tensor:
    check_float("mode_weights", "dtype", dtype)
    if offsets.numel() > 0:
        _check_offsets("mode_weights", offsets, nnz)
    if weights is not None and weights.numel() != nnz:
        raise InputValueError(
            f"lookuplinear::mode_weights: weights must hold one value per entry, {nnz}; got "
            f"{weights.numel()}. Give per-entry weights as long as the indices.")
    return _mode_weights(offsets, weights, sqrt, dtype, nnz)


_impl("mode_weights", _mode_weights_cpu, "CPU")
_impl("mode_weights", _mode_weights_twin, "CompositeExplicitAutograd")


@_fake("mode_weights")
def _mode_weights_fake(offsets: torch.Tensor, weights: torch.Tensor | None, sqrt: bool,
                       dtype: torch.dtype, nnz: int) -> torch.Tensor:
    return offsets.new_empty((nnz,), dtype=dtype)


# ---- row_sums -------------------------------------------------------------------------------


def _row_sums_twin(grad: torch.Tensor, indices: torch.Tensor, offsets: torch.Tensor | None,
                   weights: torch.Tensor | None, padding_idx: int | None, num_rows: int
                   ) -> tuple[torch.Tensor, torch.Tensor]:
    """Each entry's contribution (``entry_grads``' values) summed per distinct row in entry
    order, as :func:`~lookuplinear.ops.group_rows`' torch ops sum them: the rows sorted,
    ``padding_idx`` left out."""
    check_float("row_sums", "grad", grad.dtype)
    if padding_idx is not None and isinstance(num_rows, int):
        check_padding("row_sums", "padding_idx", padding_idx, num_rows)
    idx = indices.reshape(-1).long()
    order = torch.argsort(idx, stable=True)
    rows = idx.index_select(0, order)
    first = torch.ones_like(rows, dtype=torch.bool)
    first[1:] = rows[1:] != rows[:-1]
    if padding_idx is not None:
        first &= rows != padding_idx
    distinct = rows[first]  # how many: the data's (a graph records a size of its own)
    slot = torch.cumsum(first, 0) - 1  # each sorted entry's row among the distinct ones
    contrib = grad if offsets is None else grad.index_select(0, _bag_ids(offsets, idx.numel()))
    if weights is not None:
        contrib = contrib * weights.to(grad.dtype).unsqueeze(1)
    if padding_idx is not None:  # padding entries add into a row of their own, past the others
        slot = torch.where(rows == padding_idx, distinct.shape[0], slot)
    sums = contrib.new_zeros((distinct.shape[0] + 1, contrib.shape[1]))
    sums.index_add_(0, slot, contrib.index_select(0, order))
    return distinct, sums[:-1]


def _row_sums_cpu(grad: torch.Tensor, indices: torch.Tensor, offsets: torch.Tensor | None,
                  weights: torch.Tensor | None, padding_idx: int | None, num_rows: int
                  ) -> tuple[torch.Tensor, torch.Tensor]:
    """The eager backward's sums (:func:`~lookuplinear.ops.group_rows`: the C kernel where
    it takes the lookup)."""
    check_float("row_sums", "grad", grad.dtype)
    if padding_idx is not None:
        check_padding("row_sums", "padding_idx", padding_idx, num_rows)
    idx = indices.reshape(-1).long()
    _check_range(idx, num_rows, "row_sums")
    rows, values = group_rows(grad, num_rows, idx, offsets, weights, padding_idx, op="row_sums")
    return rows, values.to(grad.dtype)


_impl("row_sums", _row_sums_cpu, "CPU")
_impl("row_sums", _row_sums_twin, "CompositeExplicitAutograd")


@_fake("row_sums")
def _row_sums_fake(grad: torch.Tensor, indices: torch.Tensor, offsets: torch.Tensor | None,
                   weights: torch.Tensor | None, padding_idx: int | None, num_rows: int
                   ) -> tuple[torch.Tensor, torch.Tensor]:
    # as many rows as the entries have distinct rows: known when the graph runs
    distinct = torch.library.get_ctx().new_dynamic_size(max=indices.numel())
    return (indices.new_empty((distinct,), dtype=torch.int64),
            grad.new_empty((distinct, grad.shape[1])))


if CPP:
    for _name in ("idmap_find", "idmap_rows", "bag_max_backward", "mode_weights", "row_sums"):
        _below_autograd(_name)


# ---- eager, recorded ----------------------------------------------------------------------

#: each operator's torch-op twin (a decomposition, and its other devices' implementation)
_TWINS: dict[str, Callable[..., Any]] = {
    "bag_lookup": _bag_lookup_twin,
    "in_feature_order": _in_feature_order_twin,
    "in_feature_order_backward": _in_feature_order_backward_twin,
    "gather_groups": _gather_groups_twin,
    "idmap_find": _idmap_find_twin,
    "idmap_rows": _idmap_rows_twin,
    "bag_max": _bag_max_twin,
    "bag_max_arg": _bag_max_arg_twin,
    "bag_max_backward": _bag_max_backward_twin,
    "mode_weights": _mode_weights_twin,
    "row_sums": _row_sums_twin,
}


_inductor_told = False


def _in_torch_table(name: str, twin: Callable[..., Any]) -> None:
    """Put operator ``name``'s twin in PyTorch's decomposition table, which
    ``torch.onnx.export(dynamo=True)`` reads. A fake tensor with symbolic sizes runs that entry
    instead of the operator's fake (an ``export`` or AOTInductor trace with dynamic shapes), so
    the entry tells Inductor first, as the fakes do (:func:`_inductor_calls_the_operators`)."""
    @functools.wraps(twin)
    def decomposition(*args: Any, **kwargs: Any) -> Any:
        _inductor_calls_the_operators()
        return twin(*args, **kwargs)
    torch._decomp.register_decomposition(getattr(torch.ops.lookuplinear, name).default)(
        decomposition)


for _name, _twin in _TWINS.items():
    _in_torch_table(_name, _twin)


def _inductor_calls_the_operators() -> None:
    """Tell Inductor, once it is loaded, to call the operators rather than decompose them.

    A decomposition in PyTorch's table (above, for ONNX) makes Inductor's implicit fallback
    refuse the operator where the ``CI`` environment variable is set ("a decomposition exists,
    we should switch to it"). An explicit fallback with ``override_decomp`` says that the
    operator, its C kernel, is what a compiled graph runs. Called by the fake implementations
    and by the decompositions in PyTorch's table (:func:`_in_torch_table`), one of which runs
    while a graph is recorded, before Inductor lowers it; Inductor is never imported here.
    """
    global _inductor_told
    lowering = sys.modules.get("torch._inductor.lowering")
    if _inductor_told or lowering is None:
        return
    for name in _TWINS:
        op = getattr(torch.ops.lookuplinear, name).default
        if op not in lowering.lowerings:
            lowering.make_fallback(op, warn=False, override_decomp=True)
    _inductor_told = True


def routed(name: str) -> Callable[[_F], _F]:
    """Decorate the eager function of operator ``name`` (of the same signature): called as
    ``torch.ops.lookuplinear.<name>`` where the C++ extension is loaded, and while
    ``torch.compile`` or ``torch.export`` records a graph; directly otherwise (the Python
    registration's kernel, without the dispatcher's Python frames), and while
    ``torch.jit.trace`` records (its graph holds the torch ops the function runs,
    :func:`~lookuplinear.ops.use_c`). The operator's builtin errors become the project's."""
    op = getattr(torch.ops.lookuplinear, name).default
    is_compiling = torch.compiler.is_compiling
    is_tracing = torch.jit.is_tracing

    def decorate(direct: _F) -> _F:
        @functools.wraps(direct)
        def call(*args: Any, **kwargs: Any) -> Any:
            if not (CPP or is_compiling()) or is_tracing():
                return direct(*args, **kwargs)
            try:
                return op(*args, **kwargs)
            except (IndexError, ValueError) as e:  # a C++ kernel's builtin: the project's
                mapped = project_error(e)
                if mapped is None:
                    raise
                raise mapped from None
        return call  # type: ignore[return-value]
    return decorate


@routed("mode_weights")
def mode_weights(offsets: torch.Tensor, weights: torch.Tensor | None, sqrt: bool,
                 dtype: torch.dtype, nnz: int) -> torch.Tensor:
    """:func:`lookuplinear.ops.mode_weights` of bags of ``nnz`` entries (the operator's
    output size, which its offsets' values give only where they can be read)."""
    return _mode_weights(offsets, weights, sqrt, dtype, nnz)


idmap_find = routed("idmap_find")(_idmap.find)
idmap_rows = routed("idmap_rows")(_idmap_rows_cpu)
idmap_rows.__doc__ = """The row of every key: its value ``found`` in the map plus ``fallback_rows``,
or where the map does not hold it (``found < 0``) ``hash_ids(key, fallback_rows)``."""
idmap_find.__doc__ = """The value of every key of an :class:`~lookuplinear.IdMap` table (``-1``
where absent): the operator (its C probe on the CPU), or without the C++ extension the probe
through ctypes."""


def decompositions() -> dict[torch._ops.OperatorBase, Callable[..., Any]]:
    """A table for ``ExportedProgram.run_decompositions``: PyTorch's own
    (``torch.export.default_decompositions()``, to core ATen) and every ``lookuplinear::``
    operator rewritten to its torch-op twin, so that the program runs with PyTorch alone.

    Examples
    --------
    >>> import lookuplinear
    >>> model = lookuplinear.LookupLinear(10, 3, sparse=True)
    >>> program = torch.export.export(model, (torch.tensor([[1, 2]]),))
    >>> def operators(p):
    ...     return {str(n.target).split(".")[0] for n in p.graph.nodes if n.op == "call_function"}
    >>> "lookuplinear" in operators(program)
    True
    >>> aten = program.run_decompositions(lookuplinear.ops.decompositions())
    >>> "lookuplinear" in operators(aten)
    False
    """
    table = torch.export.default_decompositions()
    for name, twin in _TWINS.items():
        table[getattr(torch.ops.lookuplinear, name).default] = twin
    return table


# ---- the host operators ----------------------------------------------------------------------
# Strings, texts, offsets read on the host and a solver's state: CPU kernels (the C++ ones, else
# these twins), no autograd, never in a recorded graph (the eager functions run the twins while
# one is recorded) but shifted_rows, the collection's input, which has a twin on every device.
# Fakes where the output's shape follows from the inputs' (none is needed where it is
# data-dependent: count_rows, drop_entries; or not a tensor: offsets_ok, dual_cd_epoch).

#: the host operators' schemas, as the second block of ``csrc/ops.cpp`` defines them
HOST_SCHEMAS = (
    "murmur3_32(Tensor data, Tensor starts) -> Tensor",
    "splitmix64(Tensor keys) -> Tensor",
    "ngram_bucket(Tensor hashes, int buckets) -> Tensor",
    "renumber_ids(Tensor(a!) ids) -> ()",
    "count_rows(Tensor ids, Tensor doc_ptr, Tensor column, Tensor text, Tensor starts, "
    "int word_ngrams, int buckets, int n_words, ScalarType index_dtype) -> "
    "(Tensor, Tensor, Tensor)",
    "offsets_ok(Tensor offsets, int nnz, bool include_last=True) -> bool",
    "drop_entries(Tensor indices, Tensor offsets, int value) -> (Tensor, Tensor, Tensor)",
    "dual_cd_epoch(Tensor(a!) weight, Tensor(b!) bias, Tensor indptr, Tensor indices, "
    "Tensor data, Tensor(c!) order, int n_active, Tensor qdiag, Tensor target, Tensor diag, "
    "Tensor(d!) dual, int loss, float shrink_above) -> (int, float, float)",
    "shifted_rows(Tensor values, Tensor offsets, int n_features, Tensor shift, Tensor limit) "
    "-> Tensor",
    "one_id_rows(Tensor values, Tensor offsets, int n_features, Tensor shift, Tensor limit, "
    "Tensor? place=None) -> Tensor",
    "group_order(Tensor values, Tensor offsets, int n_features, int[] order, "
    "int[] group_features) -> (Tensor, Tensor)",
    "idmap_admit_(Tensor(a!) table, Tensor keys, Tensor(b!) row_id, Tensor(c!) last_used, "
    "Tensor(d!) assigned, Tensor(e!) clock, int fallback_rows) -> (Tensor, int)",
)
if not CPP:
    for _schema in HOST_SCHEMAS:
        LIB.define(_schema)


# ---- shifted_rows: a keyed batch's IDs as rows of its tables' parameter -------------------
# (a host operator with a twin on every other device: the collection's input, on any device)


def _id_out_of_range(op: str, values: torch.Tensor, found: int, feature: int,
                     limit: torch.Tensor) -> None:
    """Raise the :class:`LookupIndexError` (a ``RuntimeError`` too) of both keyed passes for
    the ID at ``values[found]`` of ``feature``, outside its table ``[0, limit[feature])``."""
    torch._check_with(
        LookupIndexError, False,
        lambda: f"lookuplinear::{op}: ID {int(values[found])} at values[{found}] (feature "
        f"{feature}) is outside its feature's table, rows [0, {int(limit[feature])}). Map raw "
        "IDs to rows first (IdMap, or a hashing TableConfig).")


def _shifted_rows_cpu(values: torch.Tensor, offsets: torch.Tensor, n_features: int,
                      shift: torch.Tensor, limit: torch.Tensor) -> torch.Tensor:
    found = _inputs.checked_shifted_rows(values, offsets, n_features, shift, limit)
    if isinstance(found, int):
        ends = offsets[::(offsets.numel() - 1) // n_features][1:].contiguous()
        _id_out_of_range("shifted_rows", values, found,
                         int(torch.searchsorted(ends, found, right=True)), limit)
    assert isinstance(found, torch.Tensor)
    return found


def _shifted_rows_twin(values: torch.Tensor, offsets: torch.Tensor, n_features: int,
                       shift: torch.Tensor, limit: torch.Tensor) -> torch.Tensor:
    _inputs.check_shifted_operands(values, offsets, n_features, shift, limit)
    out = _inputs._torch_shifted_rows(values, offsets, n_features, shift, limit, asserted=True)
    assert isinstance(out, torch.Tensor)
    return out


_impl("shifted_rows", _shifted_rows_cpu, "CPU")
_impl("shifted_rows", _shifted_rows_twin, "CompositeExplicitAutograd")
# recorded in graphs (the collection's input), as the lookups are: rewritten to its twin by
# decompositions() and ONNX, called as the operator by Inductor
_TWINS["shifted_rows"] = _shifted_rows_twin
_in_torch_table("shifted_rows", _shifted_rows_twin)


@_fake("shifted_rows")
def _shifted_rows_fake(values: torch.Tensor, offsets: torch.Tensor, n_features: int,
                       shift: torch.Tensor, limit: torch.Tensor) -> torch.Tensor:
    return values.new_empty(values.shape, dtype=torch.int64)


# ---- one_id_rows: a keyed batch of one ID a bag as rows, in example order -----------------


def _one_id_rows_cpu(values: torch.Tensor, offsets: torch.Tensor, n_features: int,
                     shift: torch.Tensor, limit: torch.Tensor,
                     place: torch.Tensor | None = None) -> torch.Tensor:
    found = _inputs.checked_one_id_rows(values, offsets, n_features, shift, limit, place)
    n = values.numel() // n_features
    if found is None:
        raise InputValueError(
            f"lookuplinear::one_id_rows: every bag must hold one ID (offsets equal to "
            f"arange({offsets.numel()})); these offsets do not. Give bags of any length to "
            "shifted_rows.")
    if isinstance(found, int):
        _id_out_of_range("one_id_rows", values, found, found // n, limit)
    assert isinstance(found, torch.Tensor)
    return found


def _one_id_rows_twin(values: torch.Tensor, offsets: torch.Tensor, n_features: int,
                      shift: torch.Tensor, limit: torch.Tensor,
                      place: torch.Tensor | None = None) -> torch.Tensor:
    _inputs.check_one_id_operands(values, offsets, n_features, shift, limit, place)
    n = values.numel() // n_features
    longs = torch.arange(offsets.numel(), device=values.device)
    torch._assert_async(offsets.long().eq(longs).all(),
                        "lookuplinear: one_id_rows: every bag must hold one ID.")
    ids = values.long().view(n_features, n)
    bad = (ids < 0) | (ids >= limit.to(ids.device).unsqueeze(1))
    torch._assert_async(~bad.any(), _inputs._OUT_OF_RANGE)
    return _inputs.placed_rows(ids + shift.to(ids.device).unsqueeze(1), place)


_impl("one_id_rows", _one_id_rows_cpu, "CPU")
_impl("one_id_rows", _one_id_rows_twin, "CompositeExplicitAutograd")


@_fake("one_id_rows")
def _one_id_rows_fake(values: torch.Tensor, offsets: torch.Tensor, n_features: int,
                      shift: torch.Tensor, limit: torch.Tensor,
                      place: torch.Tensor | None = None) -> torch.Tensor:
    if place is not None:
        return values.new_empty(values.shape, dtype=torch.int64)
    return values.new_empty((values.shape[0] // n_features, n_features), dtype=torch.int64)


# ---- group_order: a keyed batch in group order, each group's bags then slices ------------


def _check_group_order_operands(values: torch.Tensor, offsets: torch.Tensor, n_features: int,
                                order: Sequence[int], group_features: Sequence[int]) -> None:
    """Raise :class:`InputValueError` for operands ``group_order`` cannot read, as the C++
    kernel checks them."""
    _inputs.check_keyed_operands(values, offsets, n_features, "group_order", one_dtype=False)
    if sorted(order) != list(range(n_features)):
        raise InputValueError(f"lookuplinear::group_order: order must list each of the "
                              f"{n_features} features once; got {list(order)}")
    if any(k < 1 for k in group_features) or sum(group_features) != n_features:
        raise InputValueError(f"lookuplinear::group_order: every group has a feature, and "
                              f"group_features add up to the {n_features} features; got "
                              f"{list(group_features)}")


def _group_order_twin(values: torch.Tensor, offsets: torch.Tensor, n_features: int,
                      order: Sequence[int], group_features: Sequence[int]
                      ) -> tuple[torch.Tensor, torch.Tensor]:
    _check_group_order_operands(values, offsets, n_features, order, group_features)
    n = (offsets.numel() - 1) // n_features
    o = offsets.long()
    every = (o[1:] - o[:-1]).view(n_features, n)
    # the features in `order` as slices of the operands: an index tensor of `order` would be
    # copied from the host, a synchronisation on CUDA
    lengths = torch.cat([every[f:f + 1] for f in order])
    pieces, k = [], 0  # each group: a zero, then its bags' ends
    for features in group_features:
        pieces += [o.new_zeros(1), lengths[k:k + features].reshape(-1).cumsum(0)]
        k += features
    # each entry's place in the input: its feature's first entry there, plus its rank in it
    counts = lengths.sum(1)
    moved = counts.cumsum(0) - counts  # each feature's first place out
    source = torch.arange(values.numel(), device=values.device) + torch.repeat_interleave(
        torch.cat([o[f * n:f * n + 1] for f in order]) - moved, counts,
        output_size=values.numel())
    return values.index_select(0, source), torch.cat(pieces)


def _group_order_cpu(values: torch.Tensor, offsets: torch.Tensor, n_features: int,
                     order: Sequence[int], group_features: Sequence[int]
                     ) -> tuple[torch.Tensor, torch.Tensor]:
    _check_group_order_operands(values, offsets, n_features, order, group_features)
    _check_offsets("group_order", offsets, values.numel())  # as the C++ pass reads them
    return _group_order_twin(values, offsets, n_features, order, group_features)


_impl("group_order", _group_order_cpu, "CPU")
_impl("group_order", _group_order_twin, "CompositeExplicitAutograd")


@_fake("group_order")
def _group_order_fake(values: torch.Tensor, offsets: torch.Tensor, n_features: int,
                      order: Sequence[int], group_features: Sequence[int]
                      ) -> tuple[torch.Tensor, torch.Tensor]:
    return (values.new_empty(values.shape),
            offsets.new_empty((offsets.shape[0] - 1 + len(group_features),), dtype=torch.int64))


def _offsets_ok_twin(offsets: torch.Tensor, nnz: int, include_last: bool = True) -> bool:
    return _inputs._torch_offsets_ok(offsets, nnz, include_last)


def _splitmix64_twin(keys: torch.Tensor) -> torch.Tensor:
    if keys.dtype != torch.int64:  # the C++ kernel's check
        raise InputValueError("lookuplinear::splitmix64: keys must be int64; got "
                              f"{scalar_type_name(keys.dtype)}")
    return _hashing.splitmix64(keys)


def _check_cpu_vector(op: str, name: str, t: torch.Tensor, dtype: torch.dtype) -> None:
    """Raise :class:`InputValueError` unless ``t`` is a 1-D CPU tensor of ``dtype``, in the C++
    kernels' words."""
    if t.dim() != 1 or t.dtype != dtype or not t.is_cpu:
        raise InputValueError(
            f"lookuplinear::{op}: {name} must be a 1-D {scalar_type_name(dtype)} CPU tensor; "
            f"got {scalar_type_name(t.dtype)} of shape {list(t.shape)} on {t.device}")


def _check_bounds(op: str, name: str, bounds: torch.Tensor, size: int) -> None:
    """Raise :class:`InputValueError` unless ``bounds`` are at least one segment bound in
    ``[0, size]``, never decreasing (the segments the kernel reads), in the C++ kernels'
    words."""
    if not (bounds.numel() >= 1 and int(bounds[0]) >= 0 and int(bounds[-1]) <= size
            and bool((bounds[1:] >= bounds[:-1]).all())):
        raise InputValueError(f"lookuplinear::{op}: {name} must be at least one bound, never "
                              f"decreasing, within [0, {size}]")


def _murmur3_32_twin(data: torch.Tensor, starts: torch.Tensor) -> torch.Tensor:
    _check_cpu_vector("murmur3_32", "data", data, torch.uint8)  # the C++ kernel's checks
    _check_cpu_vector("murmur3_32", "starts", starts, torch.int64)
    _check_bounds("murmur3_32", "starts", starts, data.numel())
    return _hashing.murmur3_segments(data, starts)


#: each host operator's twin, its CPU kernel where the C++ operators are not loaded
HOST_TWINS: dict[str, Callable[..., Any]] = {
    "murmur3_32": _murmur3_32_twin,
    "splitmix64": _splitmix64_twin,
    "ngram_bucket": _hashing.ngram_bucket,
    "renumber_ids": _ngrams.renumber_twin,
    "count_rows": _ngrams.count_rows_twin,
    "offsets_ok": _offsets_ok_twin,
    "drop_entries": _inputs.drop_entries_twin,
    "dual_cd_epoch": _dualcd.dual_cd_cpu,
    "idmap_admit_": _idmap.admit_twin,
}
for _name, _twin in HOST_TWINS.items():
    _impl(_name, _twin, "CPU")


@_fake("murmur3_32")
def _murmur3_32_fake(data: torch.Tensor, starts: torch.Tensor) -> torch.Tensor:
    return starts.new_empty((starts.shape[0] - 1,), dtype=torch.int64)


@_fake("splitmix64")
def _splitmix64_fake(keys: torch.Tensor) -> torch.Tensor:
    return torch.empty_like(keys, dtype=torch.int64)


@_fake("ngram_bucket")
def _ngram_bucket_fake(hashes: torch.Tensor, buckets: int) -> torch.Tensor:
    return torch.empty_like(hashes, dtype=torch.int64)


@_fake("renumber_ids")
def _renumber_ids_fake(ids: torch.Tensor) -> None:
    return None


# ---- the optimizers' row updates ---------------------------------------------------------------
# lookuplinear.optim's updates of a table's rows, in place on the table and its optimizer state
# (no autograd): CPU kernels over the C kernels (the C++ ones, else these, which call them
# through ctypes), the torch-op twins (:mod:`._updates`, the same bits where the CPU fuses
# multiply-adds) on every other device and for what the C kernels do not take.

#: the row updates' schemas, as the last block of ``csrc/ops.cpp`` defines them
ROW_SCHEMAS = (
    "rows_update_(Tensor(a!) weight, Tensor(b!) state, Tensor rows, Tensor values, str kernel, "
    "float[] scalars) -> ()",
    "rows_fused_(Tensor(a!)[] weights, Tensor(b!)[] states, Tensor[] grad_outs, "
    "Tensor[] indices, Tensor?[] offsets, Tensor?[] per_sample_weights, int[] padding_idx, "
    "str kernel, float[] scalars) -> ()",
)
if not CPP:
    for _schema in ROW_SCHEMAS:
        LIB.define(_schema)

#: each row update's twin (its kernel on every device but the CPU)
ROW_TWINS: dict[str, Callable[..., Any]] = {
    "rows_update_": _updates.rows_update_twin,
    "rows_fused_": _updates.rows_fused_twin,
}
_impl("rows_update_", _updates.rows_update_cpu, "CPU")
_impl("rows_fused_", _updates.rows_fused_cpu, "CPU")
for _name, _twin in ROW_TWINS.items():
    _impl(_name, _twin, "CompositeExplicitAutograd")
    _below_autograd(_name)


@_fake("rows_update_")
def _rows_update_fake(weight: torch.Tensor, state: torch.Tensor, rows: torch.Tensor,
                      values: torch.Tensor, kernel: str, scalars: Sequence[float]) -> None:
    return None


@_fake("rows_fused_")
def _rows_fused_fake(*args: Any) -> None:
    return None
