"""``EmbeddingBag``: an ``nn.EmbeddingBag`` (a subclass) whose forward is lookuplinear's lookup.

Replacing ``nn.EmbeddingBag`` by ``lookuplinear.EmbeddingBag`` in a model changes nothing else:
the same positional signature and defaults (``mode="mean"``, no bias), the same attributes
(``num_embeddings``, ``embedding_dim``, ``weight``...), the same ``state_dict`` keys, the same
``from_pretrained`` and ``repr``, and ``isinstance(m, nn.EmbeddingBag)`` holds, so code that
decides by that test (PyTorch's ``DistributedDataParallel`` expects sparse gradients from an
``nn.EmbeddingBag`` with ``sparse=True``) treats it as one.
"""

from __future__ import annotations

from typing import Any, TypeVar, cast

import torch
from torch import nn

from .._loading import AllOrNothingLoad
from .._sizes import as_size, check_pretrained_table, check_table_shape
from ..errors import DtypeMismatchError, InputTypeError, InputValueError, ModeNotSupportedError
from ..functional import (
    LookupInput,
    Mode,
    check_mode,
    check_per_sample_weights_dtype,
    lookup_linear,
    normalize_padding_idx,
    renorm_rows_,
)
from ..sparse.bags import Bags, check_index_range
from ..sparse.offsets import as_offsets

__all__ = ["EmbeddingBag"]

_T = TypeVar("_T", bound="EmbeddingBag")


class EmbeddingBag(AllOrNothingLoad, nn.EmbeddingBag):
    r"""``nn.EmbeddingBag`` computed by lookuplinear: a drop-in, with the same arguments and state.

    Dense equivalent: ``nn.Linear(num_embeddings, embedding_dim, bias=False)`` with
    ``linear.weight == self.weight.T``, applied to each bag's multi-hot row (entry ``i`` of a bag
    adds ``e_i``, times its ``per_sample_weights``; ``padding_idx`` entries dropped), the row
    divided by its entry count for ``mode="mean"``; ``mode="max"`` takes the element-wise max of
    the bag's rows. An empty bag gives zeros. That is ``nn.EmbeddingBag``'s output, on the same
    calls, to the float rounding of a sum.

    Against ``nn.EmbeddingBag`` it adds what ``LookupLinear`` has: row-sparse gradients the
    fused optimizers of :mod:`lookuplinear.optim` apply in the backward (``sparse=True``),
    incremental :class:`~lookuplinear.Checkpoint` saves, :meth:`quantize`, ``Bags`` and
    scipy.sparse input and ``mode="sqrtn"``; and it refuses with an error the calls
    ``nn.EmbeddingBag`` reads in another way or crashes on (an index out of range, a 1-D input
    without ``offsets``). Each error is also the exception
    ``nn.EmbeddingBag`` raises for the same mistake (``RuntimeError`` for bad offsets,
    ``NotImplementedError`` for ``per_sample_weights`` with a mode other than ``"sum"``...).

    Parameters
    ----------
    num_embeddings : int
        Rows of the table (0 allowed, as in PyTorch); an int, a numpy integer or a one-element
        integer tensor.
    embedding_dim : int
        Columns of the table.
    max_norm : float, optional
        As in ``nn.EmbeddingBag``: before each lookup, the rows the input names whose
        ``norm_type``-norm exceeds ``max_norm`` are scaled to norm ``max_norm`` in place.
    norm_type : float, default 2.0
    scale_grad_by_freq : bool, default False
        Scale a row's gradient by the inverse of its count in the batch. lookuplinear's lookup
        has no such gradient, so this forward is PyTorch's own ``F.embedding_bag`` (same output;
        the gradient is PyTorch's, stored, which ``fused=True`` optimizers then apply in
        ``step``). With ``sparse=True`` too the layer is built and computes its forward (a
        frozen table, ``torch.no_grad``), and a backward that computes the weight gradient
        raises PyTorch's ``RuntimeError``, as ``nn.EmbeddingBag``'s does.
    mode : {"mean", "sum", "max", "sqrtn"}, default "mean"
        ``"max"`` has no sparse gradient: with ``sparse=True`` every forward raises
        ``InputValueError`` (the ``ValueError`` ``nn.EmbeddingBag`` raises there too; both
        build the layer).
    sparse : bool, default False
        Gradient of ``weight`` as a sparse COO tensor (one row per distinct index).
    _weight : Tensor of shape (num_embeddings, embedding_dim), optional
        The table to hold (as ``nn.EmbeddingBag``: used as given, the padding row unchanged).
    include_last_offset : bool, default False
        ``offsets`` holds ``N + 1`` CSR offsets ending at ``len(input)`` instead of ``N``
        starts.
    padding_idx : int, optional
        Entries equal to it are dropped from their bag (and from its mean's count); the row
        starts at zero and gets no gradient. Negative counts from the end.
    device, dtype
        As for any ``nn.Module`` factory.

    Raises
    ------
    SizeTypeError
        A size that is not an integer (also the ``TypeError`` ``nn.EmbeddingBag`` raises).
    SizeError
        A negative size (also the ``RuntimeError`` ``nn.EmbeddingBag`` raises).
    TableShapeError
        ``_weight`` of another shape (also the ``AssertionError`` ``nn.EmbeddingBag`` raises).
    InputValueError
        An unknown ``mode``.
    PaddingIdxError
        ``padding_idx`` outside the table (also the ``AssertionError`` ``nn.EmbeddingBag``
        raises).

    Examples
    --------
    >>> import lookuplinear
    >>> _ = torch.manual_seed(0)
    >>> bag = lookuplinear.EmbeddingBag(10, 3)              # was: nn.EmbeddingBag(10, 3)
    >>> bag
    EmbeddingBag(10, 3, mode='mean')
    >>> isinstance(bag, nn.EmbeddingBag), list(bag.state_dict())
    (True, ['weight'])
    >>> _ = torch.manual_seed(0)
    >>> ref = nn.EmbeddingBag(10, 3)                        # the same draw
    >>> input, offsets = torch.tensor([1, 2, 4, 5, 4, 3, 2, 9]), torch.tensor([0, 4])
    >>> torch.allclose(bag(input, offsets), ref(input, offsets))
    True
    >>> torch.allclose(bag(torch.tensor([[1, 2], [4, 9]])), ref(torch.tensor([[1, 2], [4, 9]])))
    True
    """

    def __init__(
        self,
        num_embeddings: int,
        embedding_dim: int,
        max_norm: float | None = None,
        norm_type: float = 2.0,
        scale_grad_by_freq: bool = False,
        mode: str = "mean",
        sparse: bool = False,
        _weight: torch.Tensor | None = None,
        include_last_offset: bool = False,
        padding_idx: int | None = None,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        num_embeddings = as_size(num_embeddings, "num_embeddings", low=0, where="EmbeddingBag")
        embedding_dim = as_size(embedding_dim, "embedding_dim", low=0, where="EmbeddingBag")
        check_mode(mode)
        if scale_grad_by_freq and mode == "max":
            raise InputValueError(
                "EmbeddingBag: scale_grad_by_freq=True scales a row's gradient by its count, "
                "which mode='max' (one row per column) does not have; PyTorch refuses it too. "
                "Use mode 'sum' or 'mean', or drop scale_grad_by_freq."
            )
        padding_idx = normalize_padding_idx(padding_idx, num_embeddings, "num_embeddings")
        check_table_shape(_weight, num_embeddings, embedding_dim, "EmbeddingBag")
        super().__init__(
            num_embeddings, embedding_dim, max_norm, norm_type, scale_grad_by_freq, mode,
            sparse, _weight, include_last_offset, padding_idx, device, dtype,
        )

    @classmethod
    def from_pretrained(cls: type[_T], embeddings: torch.Tensor, freeze: bool = True,
                        max_norm: float | None = None, norm_type: float = 2.0,
                        scale_grad_by_freq: bool = False, mode: str = "mean",
                        sparse: bool = False, include_last_offset: bool = False,
                        padding_idx: int | None = None) -> _T:
        """``nn.EmbeddingBag.from_pretrained``: a layer that holds ``embeddings`` as its table, with
        the same arguments (``freeze=True`` by default, then the layer's settings).

        Raises
        ------
        TableShapeError
            ``embeddings`` is not 2-D (also the ``AssertionError`` ``nn.EmbeddingBag`` raises).

        Examples
        --------
        >>> bag = EmbeddingBag.from_pretrained(torch.tensor([[0.5, 1.0], [2.0, 3.0]]))
        >>> bag(torch.tensor([[1, 0]])).tolist(), bag.weight.requires_grad
        ([[1.25, 2.0]], False)
        """
        check_pretrained_table(embeddings, cls.__name__)
        layer = super().from_pretrained(embeddings, freeze, max_norm, norm_type,
                                        scale_grad_by_freq, mode, sparse, include_last_offset,
                                        padding_idx)
        return cast(_T, layer)

    def __prepare_scriptable__(self) -> nn.EmbeddingBag:
        """What ``torch.jit.script(self)`` compiles: the ``nn.EmbeddingBag`` this layer is a
        drop-in for, with its settings and its weight (the same ``Parameter``), since
        TorchScript cannot compile the library's Python. The scripted module gives the same
        outputs (a mean to the rounding of a sum); it has ``nn.EmbeddingBag``'s own checks and
        gradients."""
        stock = nn.EmbeddingBag(
            self.num_embeddings, self.embedding_dim, self.max_norm, self.norm_type,
            self.scale_grad_by_freq, self.mode, self.sparse, None, self.include_last_offset,
            self.padding_idx, device="meta", dtype=self.weight.dtype)
        stock.weight = self.weight
        return stock.train(self.training)

    def forward(
        self,
        input: LookupInput,
        offsets: torch.Tensor | None = None,
        per_sample_weights: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """The bags' reduced rows, shape ``(B, embedding_dim)``, as ``nn.EmbeddingBag`` gives them.

        Parameters
        ----------
        input : Tensor
            ``(B, N)`` indices: ``B`` bags of ``N`` each (``offsets`` must be None); or ``(nnz,)``
            indices with ``offsets``; or a nested tensor (``layout=torch.jagged``) of ``B`` bags.
            Also ``Bags`` and scipy.sparse ``(B, num_embeddings)`` input (values as per-entry
            weights, so no ``per_sample_weights`` beside them).
        offsets : Tensor of shape (B,) or (B + 1,), optional
            Start of each bag in a 1-D ``input`` (``B + 1`` CSR offsets with
            ``include_last_offset``). A list, tuple or numpy array of ints means what the same
            tensor means (``nn.EmbeddingBag`` takes tensors only).
        per_sample_weights : Tensor of the shape of ``input``, optional
            One weight per entry (``mode="sum"`` only, as in PyTorch).

        Raises
        ------
        InputValueError
            1-D input without ``offsets``, 2-D input with them, input of another rank,
            ``per_sample_weights`` of another shape than ``input``, or beside ``Bags`` or
            scipy.sparse input.
        OffsetsError
            ``offsets`` that do not start at 0, decrease or run past the end of ``input`` (also
            the ``RuntimeError`` ``nn.EmbeddingBag`` raises).
        ModeNotSupportedError
            ``per_sample_weights`` with a mode other than ``"sum"`` (also the
            ``NotImplementedError`` ``nn.EmbeddingBag`` raises).
        InputTypeError
            A tensor input that is not integer indices, or a nested tensor of another layout
            than ``torch.jagged``; ``DtypeMismatchError`` (also a ``RuntimeError``, as in
            PyTorch) for ``per_sample_weights`` of another dtype than ``weight``.
        LookupIndexError
            An index outside ``[0, num_embeddings)``.
        """
        # read once, as LookupLinear.forward reads it (no __getattr__): a parametrized weight
        # is computed on each read, and the one renormed must be the one looked up
        params = self._parameters
        weight = cast(torch.Tensor, params["weight"] if "weight" in params else self.weight)  # noqa: SIM401
        if (type(input) is torch.Tensor and offsets is not None and per_sample_weights is None
                and input.dim() == 1 and input.layout is torch.strided and not input.is_nested
                and (input.dtype is torch.int64 or input.dtype is torch.int32)
                and self.max_norm is None and not self.scale_grad_by_freq):
            # DLRM's call, (indices, offsets): nothing for bag_input to convert or check; its
            # Python costs show beside a small lookup (bench_dlrm.py)
            return lookup_linear(input, weight, mode=cast(Mode, self.mode),
                                 padding_idx=self.padding_idx, offsets=offsets, sparse=self.sparse,
                                 include_last_offset=self.include_last_offset)
        if self.scale_grad_by_freq:  # a gradient lookuplinear's lookup does not compute
            if not isinstance(input, torch.Tensor):
                raise InputTypeError(
                    "EmbeddingBag: scale_grad_by_freq=True runs PyTorch's F.embedding_bag, which "
                    f"takes index tensors, got {type(input).__name__}. Pass the indices and "
                    "offsets as nn.EmbeddingBag takes them."
                )
            if offsets is not None:  # a list means what the tensor means, as in lookup_linear
                offsets = as_offsets(offsets, input.device)
            return super().forward(input, offsets, per_sample_weights)
        if self.mode == "sum":  # (another mode refuses any weights first, as torch's does)
            check_per_sample_weights_dtype(per_sample_weights, weight)
        input, offsets, per_sample_weights = bag_input(
            input, offsets, per_sample_weights, self.mode
        )
        if self.max_norm is not None:  # as F.embedding_bag: the named rows renormed in place
            indices = input.indices if isinstance(input, Bags) else input
            if not isinstance(indices, torch.Tensor) or indices.layout != torch.strided:
                raise InputTypeError(
                    f"EmbeddingBag: max_norm renorms the rows an index tensor names, got "
                    f"{type(input).__name__}. Pass indices and offsets (or Bags)."
                )
            check_index_range(indices, self.num_embeddings, where="input")
            renorm_rows_(weight, indices, self.max_norm, self.norm_type)
        return lookup_linear(
            input,
            weight,
            mode=cast(Mode, self.mode),
            padding_idx=self.padding_idx,
            offsets=offsets,
            per_sample_weights=per_sample_weights,
            sparse=self.sparse,
            include_last_offset=self.include_last_offset,
        )

    def quantize(self, dtype: str = "int8") -> Any:
        """An inference copy with the table quantized row by row (``"int8"``, ``"int4"`` or
        ``"float16"``), called as this layer is; see :class:`~lookuplinear.QuantizedLookupLinear`.

        Examples
        --------
        >>> bag = EmbeddingBag(1000, 16, mode="sum")
        >>> q = bag.quantize("int8")
        >>> x = torch.tensor([[1, 2], [3, 999]])
        >>> (q(x) - bag(x)).abs().max() < 0.05
        tensor(True)
        """
        from ..quant.layer import QuantizedEmbeddingBag

        return QuantizedEmbeddingBag.from_float(self, dtype)


def bag_input(
    input: LookupInput,
    offsets: torch.Tensor | None,
    per_sample_weights: torch.Tensor | None,
    mode: str,
) -> tuple[LookupInput, torch.Tensor | None, torch.Tensor | None]:
    """``nn.EmbeddingBag``'s input forms as ``(input, offsets, per_sample_weights)`` for
    :func:`~lookuplinear.lookup_linear`: a ``(B, N)`` tensor is ``B`` bags of ``N`` and a nested
    tensor (``layout=torch.jagged``) its rows (both as ``Bags``); a 1-D tensor needs
    ``offsets``; ``Bags`` and scipy.sparse input pass as they are."""
    if per_sample_weights is not None and mode != "sum":
        raise ModeNotSupportedError(
            f"EmbeddingBag: per_sample_weights is only supported for mode='sum' (as in "
            f"PyTorch), got mode={mode!r}. Build the layer with mode='sum', or drop the weights."
        )
    if not isinstance(input, torch.Tensor) or (input.layout != torch.strided
                                               and not input.is_nested):
        return input, offsets, per_sample_weights
    if input.dtype.is_floating_point or input.dtype.is_complex or input.dtype == torch.bool:
        raise DtypeMismatchError(  # a RuntimeError too, as F.embedding_bag raises
            f"EmbeddingBag: input must be integer indices (int64 or int32), got dtype "
            f"{input.dtype}. Pass the row indices; for weighted entries use per_sample_weights."
        )
    if (per_sample_weights is not None and not input.is_nested
            and per_sample_weights.shape != input.shape):
        raise InputValueError(
            f"EmbeddingBag: per_sample_weights {tuple(per_sample_weights.shape)} must have the "
            f"same shape as the input {tuple(input.shape)}. Give one weight per index."
        )
    if input.is_nested:
        if input.layout != torch.jagged:  # nn.EmbeddingBag fails on it with an AttributeError
            raise InputTypeError(
                f"EmbeddingBag: a nested input must have layout=torch.jagged (its bags are its "
                f"rows), got {input.layout}. Build it with torch.nested.nested_tensor(rows, "
                "layout=torch.jagged), or pass the indices flattened with their offsets."
            )
        if offsets is not None:
            raise InputValueError(
                "EmbeddingBag: a nested input holds its bags, so offsets must be None."
            )
        if per_sample_weights is not None and not per_sample_weights.is_nested:
            raise InputValueError(
                "EmbeddingBag: a nested input needs nested per_sample_weights (one per index)."
            )
        weights = None if per_sample_weights is None else per_sample_weights.values()
        return Bags(input.values(), input.offsets(), weights), None, None  # type: ignore[attr-defined]
    if input.dim() == 2:
        if offsets is not None:
            raise InputValueError(
                f"EmbeddingBag: a 2-D input {tuple(input.shape)} is B bags of N indices, so "
                "offsets must be None (as in PyTorch). Drop offsets=, or pass the indices "
                "flattened (1-D) with their offsets."
            )
        if input.dtype is not torch.int64 and input.dtype is not torch.int32:
            raise DtypeMismatchError(  # as F.embedding_bag's check (its 1-D form casts)
                f"EmbeddingBag: a 2-D input must be integer indices of dtype int64 or int32 "
                f"(as in PyTorch), got {input.dtype}. Cast it with .long()."
            )
        b, n = input.shape
        csr = torch.arange(b + 1, dtype=input.dtype, device=input.device) * n
        weights = None if per_sample_weights is None else per_sample_weights.reshape(-1)
        return Bags(input.reshape(-1), csr, weights), None, None
    if input.dim() == 1:
        if offsets is None:
            raise InputValueError(
                f"EmbeddingBag: a 1-D input ({input.numel()} indices) needs offsets, the start "
                "of each bag (as in PyTorch). Pass offsets=torch.tensor([0]) for one bag, or a "
                "(B, N) input for B bags of N."
            )
        return input, offsets, per_sample_weights
    raise InputValueError(
        f"EmbeddingBag: input must be 1-D (with offsets) or 2-D (B bags of N), got shape "
        f"{tuple(input.shape)}. Reshape it to (B, N)."
    )

