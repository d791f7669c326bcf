"""The stateless kernel: ``nn.Linear`` on one-hot / multi-hot / sparse input, as a lookup.

``lookup_linear(x, W, b)`` computes ``densify(x) @ W + b`` for ``W`` of shape
``(in_features, out_features)`` (the embedding layout, i.e. ``nn.Linear``'s weight transposed)
without building ``densify(x)``: index input goes to ``F.embedding``, bags and sparse matrices to
``F.embedding_bag`` with CSR offsets and per-sample weights, dense input to ``addmm``.
"""

from __future__ import annotations

import operator
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeAlias, cast

import numpy as np
import torch
from torch.autograd import forward_ad

from .errors import (
    DeviceMismatchError,
    DtypeMismatchError,
    InputTypeError,
    InputValueError,
    PaddingIdxError,
)
from .modes import ENTRYWISE_MODES, MODES, Mode, check_mode, reduce_sums, row_scale, safe_inverse
from .ops import assert_bags, capturing, offsets_ok, values_known
from .ops._asserts import graph_message
from .ops._backend import has_tangent, torch_only, transformed
from .ops.autograd import bag_lookup
from .ops.library import mode_weights
from .sparse import offsets as _host
from .sparse.adapters import as_bags, check_columns
from .sparse.bags import Bags, check_index_range, is_scipy_sparse
from .sparse.offsets import csr_offsets, on_host

if TYPE_CHECKING:
    import scipy.sparse as sp

__all__ = ["MODES", "LookupInput", "Mode", "check_max_weights", "check_not_nested",
           "check_per_sample_weights_dtype", "check_weights_have_offsets", "lookup_linear",
           "normalize_padding_idx", "range_checked", "renorm_rows_", "row_scale"]

#: what ``lookup_linear`` and ``LookupLinear`` take: index / dense / torch sparse tensors, Bags,
#: scipy.sparse matrices and arrays
LookupInput: TypeAlias = "torch.Tensor | Bags | sp.spmatrix | sp.sparray"


def normalize_padding_idx(padding_idx: int | None, in_features: int,
                          size_name: str = "in_features") -> int | None:
    """``padding_idx`` in ``[0, in_features)``; negative counts from the end, as in PyTorch.

    ``size_name``: what the message calls the table's size (``"num_embeddings"`` for the
    ``nn.Embedding`` drop-ins).

    Raises
    ------
    InputTypeError
        ``padding_idx`` is not an integer.
    PaddingIdxError
        ``padding_idx`` is outside ``[-in_features, in_features)`` (also an ``AssertionError``
        and a ``RuntimeError``, as PyTorch's modules and functionals raise).

    Examples
    --------
    >>> normalize_padding_idx(-1, 10), normalize_padding_idx(None, 10)
    (9, None)
    """
    if padding_idx is None:
        return None
    try:  # an int, a numpy integer or a one-element integer tensor, as PyTorch reads it
        if isinstance(padding_idx, bool) or (
            isinstance(padding_idx, torch.Tensor) and padding_idx.dtype == torch.bool
        ):
            raise TypeError
        padding_idx = operator.index(padding_idx)
    except TypeError:
        raise InputTypeError(
            f"padding_idx must be an int or None, got {padding_idx!r}. Pass int(padding_idx)."
        ) from None
    if not -in_features <= padding_idx < in_features:
        raise PaddingIdxError(
            f"padding_idx must be within {size_name}={in_features} (-{in_features} through "
            f"{in_features - 1}), got {padding_idx}. Pass an index of the table (-1 is the last "
            "row) or None."
        )
    # int(): under torch.jit.trace a size is a traced tensor, and so would be the result (the
    # table's size is fixed: the index is a constant of the graph, as in nn.EmbeddingBag's)
    return int(padding_idx % in_features)


def renorm_rows_(weight: torch.Tensor, indices: torch.Tensor, max_norm: float,
                 norm_type: float) -> None:
    """Scale the rows of ``weight`` that ``indices`` names whose ``norm_type``-norm exceeds
    ``max_norm`` to norm ``max_norm``, in place, as ``F.embedding`` and ``F.embedding_bag`` do
    for ``max_norm``: on ``weight.detach()``, outside autograd, so forward-mode AD (which has no
    formula for the renorm) sees the table as it is, and a table made under
    ``torch.inference_mode`` is renormed outside it too.

    Examples
    --------
    >>> w = torch.tensor([[3.0, 4.0], [0.3, 0.4]], requires_grad=True)
    >>> renorm_rows_(w, torch.tensor([0, 1]), 1.0, 2.0)
    >>> w.detach().norm(dim=1).tolist()
    [1.0, 0.5]
    """
    with torch.no_grad():
        torch.embedding_renorm_(weight.detach(), indices.contiguous(), max_norm, norm_type)


def check_per_sample_weights_dtype(per_sample_weights: Any, weight: torch.Tensor) -> None:
    """Raise ``DtypeMismatchError`` unless floating ``per_sample_weights`` (a tensor, or None)
    have the table's dtype, as ``F.embedding_bag`` requires (it raises a ``RuntimeError``; so
    does this). Weights that are not floating point are ``Bags``' to refuse.

    Examples
    --------
    >>> check_per_sample_weights_dtype(torch.ones(3), torch.zeros(4, 2))
    >>> check_per_sample_weights_dtype(torch.ones(3, dtype=torch.float64), torch.zeros(4, 2))
    Traceback (most recent call last):
        ...
    lookuplinear.errors.DtypeMismatchError: per_sample_weights must have the same type as ...
    """
    if (isinstance(per_sample_weights, torch.Tensor)
            and per_sample_weights.dtype.is_floating_point
            and per_sample_weights.dtype != weight.dtype):
        raise DtypeMismatchError(
            f"per_sample_weights must have the same type as the table (weight), "
            f"{weight.dtype}; got {per_sample_weights.dtype}. Convert them with "
            "per_sample_weights.to(weight.dtype) (nn.EmbeddingBag refuses them too)."
        )


def check_not_nested(input: torch.Tensor) -> None:
    """Raise ``InputTypeError`` for a nested tensor: ``LookupLinear`` and
    ``QuantizedLookupLinear`` take its rows as bags (``Bags.from_lists``), not the tensor
    itself. (``EmbeddingBag`` reads a jagged one as ``B`` bags, as ``nn.EmbeddingBag`` does.)"""
    if input.is_nested:
        raise InputTypeError(
            "input must be a regular tensor, got a nested tensor. Pass its rows as "
            "Bags.from_lists([t.tolist() for t in x.unbind()])."
        )


def check_weights_have_offsets(per_sample_weights: Any) -> None:
    """Raise ``InputValueError`` for ``per_sample_weights`` given without ``offsets``.

    They weigh the entries of the 1-D index input that ``offsets`` cuts into bags, and nothing
    else: an index tensor without offsets is one lookup per position (no bag to weigh), and
    ``Bags``, scipy.sparse and torch sparse input hold their entries' weights as their values.
    ``LookupLinear`` and ``QuantizedLookupLinear`` both refuse them there, rather than drop them.
    (``EmbeddingBag`` reads a ``(B, N)`` tensor as ``B`` bags and weighs them, as
    ``nn.EmbeddingBag`` does.)
    """
    if per_sample_weights is not None:
        raise InputValueError(
            "per_sample_weights needs offsets: they weigh the entries of a 1-D index input cut "
            "into bags by offsets= (the bags' start offsets, as for nn.EmbeddingBag), so pass "
            "offsets too. Bags, scipy.sparse and torch sparse input carry their weights as "
            "their values (Bags(indices, offsets, weights)); an index tensor without offsets is "
            "one lookup per position, which no weight applies to."
        )


def lookup_linear(
    input: LookupInput,
    weight: torch.Tensor,
    bias: torch.Tensor | None = None,
    *,
    mode: Mode = "sum",
    padding_idx: int | None = None,
    offsets: torch.Tensor | None = None,
    per_sample_weights: torch.Tensor | None = None,
    sparse: bool = False,
    include_last_offset: bool = False,
) -> torch.Tensor:
    """Apply ``nn.Linear`` to the dense equivalent of ``input``, computed as a lookup.

    Dense equivalent: ``F.linear(densify(input), weight.T, bias)``, where ``densify`` gives the
    one-hot (index input) or multi-hot / weighted (matrix input) representation, with
    ``padding_idx`` entries dropped and, for matrix input, each row scaled by ``mode``.

    Parameters
    ----------
    input : Tensor, Bags or scipy.sparse matrix
        * integer tensor of any shape ``S``: one index per position; returns ``S + (out,)``.
        * floating (or bool) tensor of shape ``(..., in_features)``: dense rows.
        * ``Bags``, a scipy.sparse matrix/array or a torch sparse COO/CSR tensor of shape
          ``(N, in_features)``: entries with values as per-entry weights; returns ``(N, out)``.
        * a 1-D index tensor together with ``offsets`` (and ``per_sample_weights``): bags.
    weight : Tensor of shape (in_features, out_features)
        Row ``i`` is the output of the one-hot vector ``e_i``.
    bias : Tensor of shape (out_features,), optional
    mode : {"sum", "mean", "sqrtn", "max"}
        How each matrix row is reduced: ``sum`` is ``X @ W``; ``mean`` divides the row by the sum
        of its entries' weights; ``sqrtn`` by the square root of the sum of their squares
        (TensorFlow's combiner); ``max`` takes the element-wise max of the present rows of ``W``
        (entries must have weight 1). An empty row gives ``bias`` (or zeros), never NaN.
        Index input is one entry per position, so every mode gives the lookup.
    padding_idx : int, optional
        ``weight[padding_idx]`` gets no gradient. Bag and matrix entries equal to it contribute
        nothing (as in ``nn.EmbeddingBag``); an index position equal to it gives the row as it
        holds (as in ``nn.Embedding``: zero unless loaded or written otherwise), plus ``bias``.
    offsets, per_sample_weights : Tensor, optional
        The bags of a 1-D index ``input`` and per-entry weights, as ``F.embedding_bag`` takes
        them: ``N`` start offsets (bag ``b`` is ``input[offsets[b]:offsets[b + 1]]``, the last
        bag runs to the end of ``input``), or, with ``include_last_offset=True``, ``N + 1``
        CSR offsets ending at ``len(input)``. Offsets given as a list, tuple or numpy array of
        ints mean what the same tensor means. ``per_sample_weights`` without ``offsets`` raise
        ``InputValueError``: ``Bags`` and sparse input hold their weights as their values, and
        an index tensor without offsets has no bags to weigh.
    include_last_offset : bool, default False
        As in ``F.embedding_bag``: ``offsets`` has one more entry, the end of the last bag.
    sparse : bool
        Make the gradient of ``weight`` a sparse COO tensor (padding entries left out): for
        bags and matrix input coalesced, one row per distinct row the input names, sorted, its
        summed gradient; for an index tensor one row per entry, in entry order, as
        ``nn.Embedding(sparse=True)``'s (see :mod:`lookuplinear.ops.library`). Densified, it
        is ``densify(x).T @ grad``.

    Returns
    -------
    Tensor of shape ``S + (out_features,)`` or ``(N, out_features)``, dtype of ``weight``.

    Raises
    ------
    LookupIndexError
        An index is outside ``[0, in_features)``.
    InputValueError
        Wrong number of columns, bad offsets or weights, unknown mode, non-unit weights with
        ``mode="max"``; ``DeviceMismatchError`` when input and weight are on different devices.
    InputTypeError
        An input type that is none of the above.

    Examples
    --------
    >>> W = torch.arange(12.0).reshape(4, 3)       # (in_features=4, out_features=3)
    >>> lookup_linear(torch.tensor([2, 0]), W)     # == F.one_hot(x, 4).float() @ W
    tensor([[6., 7., 8.],
            [0., 1., 2.]])
    >>> lookup_linear(Bags.from_lists([[1, 3], []]), W)   # multi-hot rows [0,1,0,1], [0,0,0,0]
    tensor([[12., 14., 16.],
            [ 0.,  0.,  0.]])
    """
    if (
        mode == "sum"
        and padding_idx is None
        and weight.is_cpu
        and _host._CPU_IS_HOST  # (False: the tests run the other devices' path on the CPU)
        and weight.dim() == 2
    ):  # the common case in one place: its Python costs show beside a small lookup
        op = sparse and _eager_op()  # the operator, which checks the offsets itself
        if (
            offsets is None
            and per_sample_weights is None
            and type(input) is torch.Tensor
            and (input.dtype is torch.int64 or input.dtype is torch.int32)
            and input.is_cpu
            and input.layout is torch.strided
            and not input.is_nested
        ):  # an index tensor: _index_forward's lookup, range_checked's error
            if torch.compiler.is_compiling():  # a graph keeps no try: assert as range_checked
                assert_bags(input, None, weight.shape[0], where="input")
            try:
                if op:
                    out = _BAG_LOOKUP(weight, input, None, None, None)
                elif sparse:
                    out = bag_lookup(weight, input, None, None, None)
                else:
                    out = torch.embedding(weight, input)
            except (IndexError, RuntimeError) as exc:  # the kernel's: name the index
                failed = exc
            else:
                return out if bias is None else _plus_bias(out, bias)
            check_index_range(input, weight.shape[0], where="input")
            raise failed
        operands = _cpu_sum_operands(
            input, offsets, per_sample_weights, weight, include_last_offset, checked=op
        )
        if operands is not None:
            indices, bag_offsets, w, csr = operands
            try:
                if op:  # row-sparse gradient: the operator, _sparse_sum's
                    out = _BAG_LOOKUP(weight, indices, bag_offsets, w, None,
                                      include_last_offset=csr)
                elif sparse:
                    out = bag_lookup(weight, indices, bag_offsets, w, include_last_offset=csr)
                else:
                    out = torch.embedding_bag(
                        _forward_only(weight), indices, bag_offsets, False, _SUM, False, w,
                        csr, None,
                    )[0]
            except (IndexError, ValueError, RuntimeError) as exc:  # see range_checked
                failure = exc
            else:
                return out if bias is None else out + bias
            # bad offsets: the general path below names them as Bags does
            if offsets_ok(bag_offsets, indices.numel(), include_last=csr):
                check_index_range(indices, weight.shape[0], where="indices")
                raise failure
    elif (
        mode == "sum"
        and padding_idx is None
        and offsets is not None
        and weight.dim() == 2
        and type(input) is torch.Tensor
        and type(offsets) is torch.Tensor
        and (input.dtype is torch.int64 or input.dtype is torch.int32)
        and offsets.dtype is input.dtype
        and input.dim() == 1
        and offsets.dim() == 1
        and offsets.numel() > 0
        and input.device == weight.device
        and offsets.device == weight.device
        and (
            per_sample_weights is None
            or (
                type(per_sample_weights) is torch.Tensor
                and per_sample_weights.dtype is weight.dtype
                and per_sample_weights.shape == input.shape
                and per_sample_weights.device == weight.device
                and (sparse or weight.dtype is not torch.bfloat16)  # _embedding_bag's case
            )
        )
        and not capturing()
    ):  # nn.EmbeddingBag's call off the CPU: its offsets as they are (no CSR offsets built),
        # asserted on the device with the indices by one operator call, then the lookup
        assert_bags(input, offsets, weight.shape[0], where="indices",
                    include_last_offset=include_last_offset)
        if sparse:
            out = _BAG_LOOKUP(weight, input, offsets, per_sample_weights, None,
                              include_last_offset=include_last_offset)
        else:
            out = torch.embedding_bag(_forward_only(weight), input, offsets, False, _SUM, False,
                                      per_sample_weights, include_last_offset, None)[0]
        return out if bias is None else out + bias
    check_mode(mode)
    if weight.dim() != 2:
        raise InputValueError(
            f"weight must have shape (in_features, out_features), got {tuple(weight.shape)}."
        )
    in_features = weight.shape[0]
    if padding_idx is not None:
        padding_idx = normalize_padding_idx(padding_idx, in_features)
    if offsets is not None:
        if not isinstance(input, torch.Tensor) or input.dim() != 1:
            raise InputValueError(
                "offsets given, so input must be a 1-D index tensor (the bags' entries), got "
                f"{type(input).__name__} of shape {tuple(getattr(input, 'shape', ()))}. Pass the "
                "bags' indices flattened, or drop offsets= for a per-element lookup."
            )
        ends = csr_offsets(input, offsets, include_last_offset,
                           last_to_end=padding_idx is not None or mode == "max")
        input = Bags(input, ends, per_sample_weights)
    else:
        check_weights_have_offsets(per_sample_weights)

    if isinstance(input, Bags):  # the common case first: every check here costs
        bags = input
        _check_device(bags.indices.device, weight)
    elif isinstance(input, torch.Tensor):
        _check_device(input.device, weight)  # before any work on the input's device
        check_not_nested(input)
        if input.layout != torch.strided:
            bags = as_bags(input, in_features, merge=mode in ENTRYWISE_MODES)
        elif input.dtype.is_floating_point or input.dtype == torch.bool:
            return _dense_forward(input, weight, bias, mode, padding_idx)
        elif input.dtype.is_complex:
            raise InputTypeError(
                "input must be an integer index tensor or a real floating tensor, got dtype "
                f"{input.dtype}. Pass x.real (or x.abs()) for dense rows."
            )
        else:
            return range_checked(
                lambda: _index_forward(input, weight, bias, padding_idx, sparse),
                input,
                in_features,
                "input",
            )
    else:
        bags = as_bags(input, in_features, merge=mode in ENTRYWISE_MODES)
        if bags.indices.device != weight.device:  # host data from scipy: move it
            if mode == "max":  # its values read where they are, as on the CPU: on the
                # device they could only be asserted, which ends the process's CUDA context
                w = bags.weights
                check_max_weights(bags.indices, None if w is None else w.to(weight.dtype),
                                  padding_idx)
            bags = bags.to(weight.device)
    return range_checked(
        lambda: _bags_forward(bags, weight, bias, mode, padding_idx, sparse),
        bags.indices,
        in_features,
        "indices",
        bags.offsets,
    )


def _cpu_sum_operands(
    input: Any,
    offsets: torch.Tensor | None,
    per_sample_weights: Any,
    weight: torch.Tensor,
    include_last_offset: bool,
    *,
    checked: bool = False,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None, bool] | None:
    """Checked ``(indices, offsets, per-entry weights, include_last_offset)`` of the common CPU
    bag forms, for a sum with ATen's kernel on the CPU ``weight``; ``None`` for anything else
    (the general path then takes it, and raises its errors).

    The common forms: ``Bags`` and scipy.sparse input (checked on construction), and a 1-D index
    tensor with ``offsets`` (and ``per_sample_weights``) of the same integer dtype, checked here
    in one compiled pass over the offsets instead of building ``Bags`` (``checked``: not here,
    the ``bag_lookup`` operator that will take them checks them as it reads them). While a
    graph is recorded such offsets are left to the general path, whose ``Bags`` asserts them
    where the graph runs.
    """
    if offsets is not None:
        if (
            type(input) is torch.Tensor
            and type(offsets) is torch.Tensor
            and input.dtype is offsets.dtype
            and (input.dtype is torch.int64 or input.dtype is torch.int32)
            and input.dim() == 1
            and offsets.dim() == 1
            and input.is_cpu
            and offsets.is_cpu
            and offsets.numel() > 0
            and (
                per_sample_weights is None
                or (
                    type(per_sample_weights) is torch.Tensor
                    and per_sample_weights.dtype is weight.dtype
                    and per_sample_weights.shape == input.shape
                    and per_sample_weights.is_cpu
                )
            )
            # in a recorded graph unchecked (no values): the general path's Bags asserts them
            and (checked or offsets_ok(offsets, input.numel(), include_last=include_last_offset,
                                       recorded=False))
        ):
            return input, offsets, per_sample_weights, include_last_offset
        return None
    if per_sample_weights is not None:  # the general path refuses them
        return None
    if type(input) is Bags:
        bags = input
    elif is_scipy_sparse(input):
        check_columns(cast(Any, input).shape, weight.shape[0], "scipy.sparse matrix")
        bags = Bags._from_scipy(input, merge=False)  # a sum: duplicates add up either way
    else:
        return None
    if not bags.indices.is_cpu:
        return None
    w = bags.weights
    if w is not None and w.dtype is not weight.dtype:
        w = w.to(weight.dtype)
    return bags.indices, bags.offsets, w, True


def range_checked(
    forward: Callable[[], torch.Tensor], indices: torch.Tensor, in_features: int, where: str,
    offsets: torch.Tensor | None = None,
) -> torch.Tensor:
    """``forward()``, raising ``LookupIndexError`` if an index is outside ``[0, in_features)``.

    PyTorch's CPU lookup kernels check every index themselves, so on the CPU the range check
    only runs after a kernel error, to name the offending index (checking first would cost a
    pass over the indices and two syncs, a tenth of a 1024 x 20 bag lookup). On other devices
    the indices, and the CSR ``offsets`` of the bags they make if given (checked on the CPU
    where ``Bags`` is built), are asserted on the device first, without a host
    synchronisation, by one operator call (:func:`~lookuplinear.ops.assert_bags`): a bad one
    is a device-side assert, as in ``nn.EmbeddingBag``'s CUDA kernels; ``Bags.validate``
    names it. While a graph is recorded an index tensor's range is asserted the same way (the
    kernel's own error would be ATen's bare ``IndexError`` there, where eager raises
    ``LookupIndexError``, a ``RuntimeError``); bags are checked by their lookup's operator.
    """
    if not on_host(indices) or (offsets is None and not values_known()):
        assert_bags(indices, offsets, in_features, where=where)
        return forward()
    try:
        return forward()
    except (IndexError, RuntimeError) as exc:  # the kernel's "index out of range in self"
        failure = exc
    check_index_range(indices, in_features, where=where)  # outside except: no chained context
    raise failure


def _check_device(device: torch.device, weight: torch.Tensor) -> None:
    # a table on the meta device takes indices anywhere and gives a meta output, as
    # nn.Embedding's and nn.EmbeddingBag's (shapes only: nothing is read)
    if device != weight.device and weight.device.type != "meta":
        raise DeviceMismatchError(
            f"input is on {device} but the weight is on {weight.device}; move the input with "
            f".to({str(weight.device)!r}) (or the layer with .to({str(device)!r}))."
        )


def _index_forward(
    x: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None,
    padding_idx: int | None,
    sparse: bool,
) -> torch.Tensor:
    if x.dtype not in (torch.int32, torch.int64):
        x = x.long()
    if sparse and padding_idx is not None and torch.compiler.is_compiling():
        # a recorded graph: the padding positions stay in the gradient with zero values, a
        # size the batch's shape decides (leaving them out would size it by the values). The
        # lookup and its mask are of the flat index, its (entries, dim) output reshaped last:
        # so the gradient's values are the mask's own (entries, dim) buffer, not Inductor's
        # view of an (..., 1, dim) buffer, which gives a one-entry batch's values a stride of
        # 0 over the entries that ATen's sparse-into-dense sum (to_dense, SGD's step) reads
        # as rows of no elements: a gradient of zeros
        flat = x.reshape(-1)
        out = _sparse_sum(weight, flat, None, None, None)
        out = torch.where((flat == padding_idx).unsqueeze(-1), out.detach(), out)
        out = out.reshape(x.shape + out.shape[-1:])
    elif sparse:  # row-sparse gradient
        out = _sparse_sum(weight, x, None, None, padding_idx)
    else:
        # ATen's op: F.embedding's Python checks repeat ours at a cost (benchmarks/bench_layer.py)
        out = torch.embedding(weight, x, -1 if padding_idx is None else padding_idx)
    # a padding position gives the padding row as it holds (zero unless loaded otherwise), as
    # nn.Embedding's; the row gets no gradient (the kernels leave padding positions out)
    return out if bias is None else _plus_bias(out, bias)


def _plus_bias(out: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    """``out + bias`` for an index lookup's output ``out``: added in place (a new tensor of
    the lookup's, no second output allocated), but out of place while a ``torch.func``
    transform is active, where ``bias`` may be batched and ``out`` not (``vmap`` over the
    bias alone), which an in-place add cannot write."""
    return (out + bias if torch._C._functorch.maybe_current_level() is not None  # transformed()
            else out.add_(bias))


def _dense_forward(
    x: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None,
    mode: str,
    padding_idx: int | None,
) -> torch.Tensor:
    in_features = weight.shape[0]
    if x.dim() == 0 or x.shape[-1] != in_features:
        raise InputValueError(
            f"a floating input is read as dense rows of shape (..., in_features={in_features}), "
            f"got shape {tuple(x.shape)}. For indices pass an integer tensor (x.long())."
        )
    x = x.to(weight.dtype)
    if padding_idx is not None:
        # the index made on x's device (a tensor from the host would be a copy to it)
        x = x.index_fill(-1, torch.full((1,), padding_idx, device=x.device), 0)
    lead = x.shape[:-1]
    rows = x.reshape(-1, in_features)  # (N, in)
    if mode == "max":
        out = _bags_forward(Bags.from_dense(rows), weight, bias, mode, None, False)
        return out.reshape(*lead, weight.shape[1])
    if mode == "sum":
        out = rows @ weight if bias is None else torch.addmm(bias, rows, weight)
    else:
        vals = rows if mode == "mean" else rows * rows
        out = rows @ weight  # under autocast of its dtype, as nn.Linear's output is
        scale = safe_inverse(vals.sum(1), sqrt=mode == "sqrtn")
        out = out * scale.to(out.dtype).unsqueeze(1)
        if bias is not None:
            out = out + bias.to(out.dtype)
    return out.reshape(*lead, weight.shape[1])


def _bags_forward(
    bags: Bags,
    weight: torch.Tensor,
    bias: torch.Tensor | None,
    mode: str,
    padding_idx: int | None,
    sparse: bool,
) -> torch.Tensor:
    if (padding_idx is not None and bags.indices.is_cpu and weight.dtype is not torch.bfloat16
            and not capturing() and not transformed()):
        # ATen's CPU embedding_bag leaves its fast kernel whenever padding_idx is set (many times
        # slower, docs/performance.md): drop the padding entries and look up the rest (not in
        # a captured graph or under torch.func's vmap: whether there are any to drop is a
        # property of one batch; not for a bfloat16 table, whose sums the two kernels round
        # differently: it takes nn.EmbeddingBag's kernel with padding_idx, as the graph does).
        bags, padding_idx = bags.drop_index(padding_idx), None
    w = bags.weights  # indices: range-checked by the caller, range_checked
    if w is not None and w.dtype != weight.dtype:
        w = w.to(weight.dtype)
    if mode == "max":
        if sparse:
            raise InputValueError(
                'mode="max" with sparse=True on bags or matrix input: F.embedding_bag has no '
                "sparse gradient for max. Use sparse=False, or another mode."
            )
        check_max_weights(bags.indices, w, padding_idx)
        if _compiled_ok(bags, weight, padding_idx):  # ATen's CPU max is far off its fast path:
            # the C kernel's operator (its backward: bag_max_backward)
            out = _BAG_MAX(weight, bags.indices, bags.offsets)
        else:
            out = _embedding_bag(bags, weight, None, _MAX, padding_idx)
    elif mode != "sum" and (w is not None or mode == "sqrtn") \
            and _folds_mode(bags, weight, w, padding_idx):
        # the mode's per-bag factor folded into per-entry weights by one C pass, then one
        # weighted-sum lookup: on weighted rows faster than the sum, the factor and their
        # product apart. Not an unweighted mean, which is nn.EmbeddingBag's: its sums divided
        # by the bag sizes (ATen's own mean, or reduce_sums), to the bit; a folded mean rounds
        # otherwise
        psw = mode_weights(bags.offsets, w, mode == "sqrtn", weight.dtype, bags.indices.shape[0])
        if sparse:
            out = _sparse_sum(weight, bags.indices, bags.offsets, psw, None)
        else:
            out = _embedding_bag(bags, weight, psw, _SUM, None)
    elif sparse and mode == "mean" and w is None and _exact_mean(weight):
        # nn.EmbeddingBag(mode="mean", sparse=True)'s, to the bit: the operator's mean (ATen's
        # forward; its backward scales the output's gradient by 1 / size, then sums the rows),
        # or in a trace its twin's, ATen's own
        out = _sparse_sum(weight, bags.indices, bags.offsets, None, padding_idx, _MEAN)
    elif sparse:  # row-sparse gradient
        out = _sparse_sum(weight, bags.indices, bags.offsets, w, padding_idx)
        if mode != "sum":
            out = reduce_sums(out, bags, mode, padding_idx)
    elif mode == "mean" and w is None:
        out = _embedding_bag(bags, weight, None, _MEAN, padding_idx)
    else:
        out = _embedding_bag(bags, weight, w, _SUM, padding_idx)
        if mode != "sum":
            out = reduce_sums(out, bags, mode, padding_idx)
    return out if bias is None else out + bias


def check_max_weights(indices: torch.Tensor, weights: torch.Tensor | None,
                      padding_idx: int | None = None) -> None:
    """Refuse weights other than 1 on the entries of ``mode="max"`` bags (padding entries
    aside): a max takes the rows present in a bag, unweighted. Where the values cannot be read
    on the host (a recorded graph, a device tensor), asserted where the program runs."""
    if weights is None:
        return
    bad = weights != 1
    if padding_idx is not None:  # padding entries are dropped anyway
        bad &= indices != padding_idx
    if not values_known() or not on_host(bad):
        # checked where the graph, or the device, runs: no read back to the host
        torch._assert_async(~bad.any(), _MAX_WEIGHTS)
    elif bool(bad.any()):
        k = int(torch.nonzero(bad)[0, 0])
        fix = ("drop the entries of weight 0 (a stored zero of a scipy matrix: "
               "X.eliminate_zeros())" if float(weights[k]) == 0 else
               "pass 0/1 values (a scipy matrix of counts: X.data[:] = 1, with no stored zeros)")
        raise InputValueError(
            f'mode="max" takes the max over the rows present in a bag, so every entry must '
            f"have weight 1; entry {k} has weight {float(weights[k])}. Use mode='sum'/'mean', "
            f"or {fix}."
        )


_SUM, _MEAN, _MAX = 0, 1, 2  # ATen's embedding_bag modes
#: a recorded graph's message for a max bag's entry of weight other than 1
_MAX_WEIGHTS = graph_message(
    'lookuplinear: mode="max" takes the max over the rows present in a bag, so every entry '
    "must have weight 1. Use mode='sum'/'mean', or give weights of 1.")
_BAG_LOOKUP = torch.ops.lookuplinear.bag_lookup.default
_BAG_MAX = torch.ops.lookuplinear.bag_max.default


def _eager_op() -> bool:
    """Whether a sum lookup with a row-sparse gradient calls the operator
    ``lookuplinear::bag_lookup``: always, but while a ``torch.jit.trace`` records (whose graph
    and ONNX export hold ATen's ops: :func:`_sparse_sum`), a ``torch.func`` transform (which
    sees through ATen's ops, not the operator's C++ autograd) is active, or a forward-mode AD
    level is open (the operator has no forward-mode formula; ATen's index lookup,
    ``nn.Embedding(sparse=True)``'s, has one, and its bag lookup refuses a tangent)."""
    # transformed() written out: this runs per lookup
    return (not torch.jit.is_tracing() and torch._C._functorch.maybe_current_level() is None
            and getattr(forward_ad, "_current_level", -1) < 0)


def _exact_mean(weight: torch.Tensor) -> bool:
    """Whether an unweighted mean lookup of ``weight`` with a row-sparse gradient takes ATen's
    mean: the operator ``lookuplinear::bag_lookup`` in its mean mode, or while a
    ``torch.jit.trace`` records its twin :func:`~lookuplinear.ops.autograd.bag_lookup` (ATen's
    ops). A float32 or float64 table (a float16/bfloat16 one keeps the float32 division of
    :func:`~lookuplinear.modes.reduce_sums`), not under a ``torch.func`` transform, which sees
    through ATen's ops, not the operator's C++ autograd (:func:`_eager_op`)."""
    return ((weight.dtype is torch.float32 or weight.dtype is torch.float64)
            and torch._C._functorch.maybe_current_level() is None)


def _sparse_sum(
    weight: torch.Tensor,
    indices: torch.Tensor,
    offsets: torch.Tensor | None,
    per_sample_weights: torch.Tensor | None,
    padding_idx: int | None,
    mode: int = _SUM,
) -> torch.Tensor:
    """The sum (``mode`` ``_SUM``) or mean (``_MEAN``) lookup whose weight gradient is
    row-sparse: the operator ``lookuplinear::bag_lookup`` (``offsets``: CSR, or None for index
    input), whose backward gives bags' gradient one row per distinct row, sorted, its sum
    (:mod:`lookuplinear.ops.library`; a table bound to a ``fused=True`` optimizer hands it
    to the optimizer instead). A ``torch.jit.trace`` (whose graph and ONNX export hold ATen's
    ops) takes torch's own sparse lookup (:func:`~lookuplinear.ops.autograd.bag_lookup`)."""
    if _eager_op():
        return _BAG_LOOKUP(weight, indices, offsets, per_sample_weights, padding_idx, mode)
    return bag_lookup(weight, indices, offsets, per_sample_weights, padding_idx, mode)


_NUMPY_DTYPE = {torch.float32: np.float32, torch.float64: np.float64}


def _compiled_ok(bags: Bags, weight: torch.Tensor, padding_idx: int | None) -> bool:
    """Whether a compiled CPU kernel can take these bags: a CPU float32/float64 table, padding
    already dropped (a graph that ``torch.compile`` or ``torch.export`` records records the
    kernel's operator, :mod:`lookuplinear.ops.library`); not while ``torch.jit.trace``
    records (its graph and ONNX export hold ATen's ops), with ``LOOKUPLINEAR_BACKEND=torch``,
    or for a table with a forward-mode tangent (which the kernels would drop; ATen's
    ``embedding_bag`` refuses it, as ``nn.EmbeddingBag``'s)."""
    return (padding_idx is None and bags.indices.is_cpu and weight.dtype in _NUMPY_DTYPE
            and not torch.jit.is_tracing() and not torch_only() and not has_tangent(weight))


def _folds_mode(
    bags: Bags, weight: torch.Tensor, w: torch.Tensor | None, padding_idx: int | None
) -> bool:
    """Whether ``mean``/``sqrtn`` can be computed as a weighted sum with compiled per-entry
    weights (:func:`_compiled_ok`, and weights that need no derivative,
    :func:`_needs_derivative`: the per-entry weights carry none); otherwise ``row_scale`` with
    torch ops."""
    return not _needs_derivative(w) and _compiled_ok(bags, weight, padding_idx)


def _needs_derivative(w: torch.Tensor | None) -> bool:
    """Whether per-entry weights ``w`` need a derivative: a gradient (``requires_grad``) or a
    forward-mode tangent (a ``forward_ad`` dual tensor). Such weights are never folded with a
    mode's factors by a C pass, which reads their values only: they take torch ops, which
    carry the derivative or refuse it as ATen's ``embedding_bag`` does (it has no forward
    AD), never an output without it."""
    return w is not None and (w.requires_grad or has_tangent(w))


def _embedding_bag(
    bags: Bags,
    weight: torch.Tensor,
    per_sample_weights: torch.Tensor | None,
    mode: int,
    padding_idx: int | None,
) -> torch.Tensor:
    """``F.embedding_bag(bags.indices, weight, bags.offsets, include_last_offset=True, ...)``.

    ATen's op is called directly: ``F.embedding_bag``'s own Python checks repeat what ``Bags``
    has checked, at a cost that shows beside a small lookup (benchmarks/bench_layer.py).

    A CUDA bfloat16 table with per-entry weights or ``max``: the batch's rows are gathered
    and pooled in float32, then rounded to bfloat16, because CUDA's ``embedding_bag``
    backward has no bfloat16 kernel for those in some torch releases (torch 2.11 raises
    ``NotImplementedError`` in the backward).
    """
    if (weight.dtype == torch.bfloat16 and weight.is_cuda
            and (per_sample_weights is not None or mode == _MAX)):
        return _float32_pooled(bags, weight, per_sample_weights, mode, padding_idx)
    return torch.embedding_bag(
        _forward_only(weight), bags.indices, bags.offsets, False, mode, False,
        per_sample_weights, True, padding_idx,
    )[0]


def _float32_pooled(
    bags: Bags,
    weight: torch.Tensor,
    per_sample_weights: torch.Tensor | None,
    mode: int,
    padding_idx: int | None,
) -> torch.Tensor:
    """:func:`_embedding_bag` on the batch's own rows in float32: entry ``k`` looks up row
    ``k`` of ``weight[indices]`` (a padding entry an appended zero row, left out as padding),
    whose gradient flows back to ``weight`` through the gather."""
    nnz = bags.indices.numel()
    rows = weight.index_select(0, bags.indices).float()
    local = torch.arange(nnz, device=weight.device)
    pad = None
    if padding_idx is not None:
        rows = torch.cat([rows, rows.new_zeros(1, rows.shape[1])])
        local = torch.where(bags.indices == padding_idx, nnz, local)
        pad = nnz
    psw = None if per_sample_weights is None else per_sample_weights.float()
    out = torch.embedding_bag(rows, local, bags.offsets, False, mode, False, psw, True, pad)[0]
    return out.to(weight.dtype)


def _forward_only(weight: torch.Tensor) -> torch.Tensor:
    """``weight`` detached where no gradient can be taken (under ``torch.no_grad`` with no
    forward-mode AD level open), else ``weight`` itself.

    ATen's ``embedding_bag`` picks its kernel by ``weight.requires_grad``, not by grad mode: on a
    parameter under ``no_grad`` it still builds what its backward would need (``offset2bag``,
    bag sizes); on a detached weight it runs ``_embedding_bag_forward_only``, which skips that
    work (benchmarks/bench_layer.py times both). Same values either way (tests/test_layer.py).
    Never while a graph is recorded (:func:`~lookuplinear.ops.capturing`: ``torch.export``,
    ``torch.compile``, ``torch.jit.trace``): the graph runs in any grad mode (an exported
    program fine-tuned later), and a recorded detach would cut the weight's gradient in all
    of them.
    """
    if (
        torch.is_grad_enabled()
        or getattr(forward_ad, "_current_level", 0) >= 0
        or capturing()
    ):
        return weight
    return weight.detach()
