"""``Embedding``: an ``nn.Embedding`` (a subclass) whose forward is lookuplinear's lookup.

Replacing ``nn.Embedding`` by ``lookuplinear.Embedding`` in a model changes nothing else: the same
positional signature and defaults, the same attributes (``num_embeddings``, ``embedding_dim``,
``padding_idx``, ``weight``...), the same ``state_dict`` keys, ``from_pretrained`` and ``repr``,
and ``isinstance(m, nn.Embedding)`` holds. :class:`~lookuplinear.EmbeddingBag` is the same for
``nn.EmbeddingBag``.
"""

from __future__ import annotations

from typing import Any, TypeVar, cast

import torch
from torch import nn

from .._fusion import binding
from .._loading import AllOrNothingLoad
from .._sizes import as_size, check_pretrained_table, check_table_shape
from ..errors import DtypeMismatchError, InputTypeError, LayoutError
from ..functional import lookup_linear, normalize_padding_idx, range_checked, renorm_rows_
from ..sparse.bags import check_index_range

__all__ = ["Embedding"]

_T = TypeVar("_T", bound="Embedding")


class Embedding(AllOrNothingLoad, nn.Embedding):
    r"""``nn.Embedding`` computed by lookuplinear: a drop-in, with the same arguments and state.

    Dense equivalent: ``nn.Linear(num_embeddings, embedding_dim, bias=False)`` with
    ``linear.weight == self.weight.T``, applied to ``F.one_hot(input, num_embeddings)``: each
    index position gives its row of ``weight``, shape ``input.shape + (embedding_dim,)``. That is
    ``nn.Embedding``'s output, on the same calls, bit for bit; a ``padding_idx`` position gives
    the padding row as it holds (zero unless loaded or written otherwise), which gets no
    gradient.

    Against ``nn.Embedding`` it adds what ``LookupLinear`` has: an index out of range raises
    :class:`~lookuplinear.LookupIndexError` naming the index and its position (PyTorch's says
    ``index out of range in self``), fused row-wise optimizers of :mod:`lookuplinear.optim`
    applied in the backward (``sparse=True``), incremental :class:`~lookuplinear.Checkpoint`
    saves, and :meth:`to_lookup_linear` for the rest (bags, sparse matrices, quantization).

    Parameters
    ----------
    num_embeddings : int
        Rows of the table (0 allowed, as in PyTorch); an int, a numpy integer or a one-element
        integer tensor.
    embedding_dim : int
        Columns of the table.
    padding_idx : int, optional
        The row that index positions equal to it read as it is and that gets no gradient; it
        starts at zero. Negative counts from the end.
    max_norm : float, optional
        As in ``nn.Embedding``: before each lookup, the rows the input names whose
        ``norm_type``-norm exceeds ``max_norm`` are scaled to norm ``max_norm`` in place.
    norm_type : float, default 2.0
    scale_grad_by_freq : bool, default False
        Scale a row's gradient by the inverse of its count in the batch. lookuplinear's lookup
        has no such gradient, so this forward is PyTorch's own ``F.embedding`` (same output).
    sparse : bool, default False
        Gradient of ``weight`` as a sparse COO tensor, one row per index position in input order
        (uncoalesced), as ``nn.Embedding`` gives it; a ``fused=True`` optimizer of
        :mod:`lookuplinear.optim` takes it in the backward instead.
    _weight : Tensor of shape (num_embeddings, embedding_dim), optional
        The table to hold (as ``nn.Embedding``: used as given, the padding row unchanged).
    _freeze : bool, default False
        ``_weight`` without gradient.
    device, dtype
        As for any ``nn.Module`` factory.

    Raises
    ------
    SizeTypeError
        A size that is not an integer (also the ``TypeError`` ``nn.Embedding`` raises).
    SizeError
        A negative size (also the ``RuntimeError`` ``nn.Embedding`` raises).
    TableShapeError
        ``_weight`` of another shape (also the ``AssertionError`` ``nn.Embedding`` raises).
    PaddingIdxError
        ``padding_idx`` outside the table (also the ``AssertionError`` ``nn.Embedding`` raises).

    Examples
    --------
    >>> import lookuplinear
    >>> _ = torch.manual_seed(0)
    >>> emb = lookuplinear.Embedding(10, 3, padding_idx=0)     # was: nn.Embedding(10, 3, ...)
    >>> emb
    Embedding(10, 3, padding_idx=0)
    >>> isinstance(emb, nn.Embedding), list(emb.state_dict())
    (True, ['weight'])
    >>> _ = torch.manual_seed(0)
    >>> ref = nn.Embedding(10, 3, padding_idx=0)               # the same draw
    >>> x = torch.tensor([[0, 2, 4], [9, 0, 1]])
    >>> torch.equal(emb(x), ref(x))
    True
    >>> with torch.no_grad():                                  # a padding row loaded non-zero
    ...     emb.weight[0] = ref.weight[0] = 7.0
    >>> torch.equal(emb(x), ref(x)), emb(x)[0, 0].tolist()
    (True, [7.0, 7.0, 7.0])
    """

    def __init__(
        self,
        num_embeddings: int,
        embedding_dim: int,
        padding_idx: int | None = None,
        max_norm: float | None = None,
        norm_type: float = 2.0,
        scale_grad_by_freq: bool = False,
        sparse: bool = False,
        _weight: torch.Tensor | None = None,
        _freeze: bool = False,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        num_embeddings = as_size(num_embeddings, "num_embeddings", low=0, where="Embedding")
        embedding_dim = as_size(embedding_dim, "embedding_dim", low=0, where="Embedding")
        padding_idx = normalize_padding_idx(padding_idx, num_embeddings, "num_embeddings")
        check_table_shape(_weight, num_embeddings, embedding_dim, "Embedding")
        super().__init__(
            num_embeddings, embedding_dim, padding_idx, max_norm, norm_type,
            scale_grad_by_freq, sparse, _weight, _freeze, device, dtype,
        )

    @classmethod
    def from_pretrained(cls: type[_T], embeddings: torch.Tensor, freeze: bool = True,
                        padding_idx: int | None = None, max_norm: float | None = None,
                        norm_type: float = 2.0, scale_grad_by_freq: bool = False,
                        sparse: bool = False) -> _T:
        """``nn.Embedding.from_pretrained``: a layer that holds ``embeddings`` as its table, with
        the same arguments (``freeze=True`` by default, then the layer's settings).

        Raises
        ------
        TableShapeError
            ``embeddings`` is not 2-D (also the ``AssertionError`` ``nn.Embedding`` raises).

        Examples
        --------
        >>> emb = Embedding.from_pretrained(torch.tensor([[0.5, 1.0], [2.0, 3.0]]))
        >>> emb(torch.tensor([1, 0])).tolist(), emb.weight.requires_grad
        ([[2.0, 3.0], [0.5, 1.0]], False)
        """
        check_pretrained_table(embeddings, cls.__name__)
        layer = super().from_pretrained(embeddings, freeze, padding_idx, max_norm, norm_type,
                                        scale_grad_by_freq, sparse)
        return cast(_T, layer)

    def __prepare_scriptable__(self) -> nn.Embedding:
        """What ``torch.jit.script(self)`` compiles: the ``nn.Embedding`` this layer is a
        drop-in for, with its settings and its weight (the same ``Parameter``), since
        TorchScript cannot compile the library's Python. The scripted module gives the same
        outputs (a mean to the rounding of a sum); it has ``nn.Embedding``'s own checks and
        gradients."""
        stock = nn.Embedding(
            self.num_embeddings, self.embedding_dim, self.padding_idx, self.max_norm,
            self.norm_type, self.scale_grad_by_freq, self.sparse, device="meta",
            dtype=self.weight.dtype)
        stock.weight = self.weight
        return stock.train(self.training)

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        """The rows ``input`` names, shape ``input.shape + (embedding_dim,)``, as
        ``nn.Embedding`` gives them.

        Parameters
        ----------
        input : Tensor of any shape, int64 or int32
            Row indices; a nested tensor (``layout=torch.jagged`` or strided) gives a nested
            tensor of rows, as ``nn.Embedding`` gives it.

        Raises
        ------
        InputTypeError
            ``input`` is not a tensor of indices; ``DtypeMismatchError`` (also the
            ``RuntimeError`` ``nn.Embedding`` raises) for a tensor of another dtype than
            int64 or int32 (float, bool, uint8, int16...).
        LayoutError
            A sparse tensor (also the ``RuntimeError`` ``nn.Embedding`` raises for it). A
            nested tensor is looked up by ``nn.Embedding``'s own forward, as there (its
            indices range-checked first).
        LookupIndexError
            An index outside ``[0, num_embeddings)`` (also an ``IndexError``, as PyTorch's).
        """
        if isinstance(input, torch.Tensor) and input.is_nested:
            # nn.Embedding's own lookup, which takes nested tensors (its gradient stored, as
            # for scale_grad_by_freq), after the range check that names a bad index
            flat = (input.values() if input.layout == torch.jagged
                    else torch.cat([t.reshape(-1) for t in input.unbind()]))
            if not flat.dtype.is_floating_point and flat.dtype != torch.bool:
                check_index_range(flat, self.num_embeddings, where="input.values()")
            return super().forward(input)
        if isinstance(input, torch.Tensor) and input.layout != torch.strided:
            # the layout, not the dtype, is what is wrong (a RuntimeError too, as F.embedding
            # raises for a sparse one)
            raise LayoutError(
                f"Embedding: input must be a strided tensor of integer indices, got layout "
                f"{input.layout}. Pass input.to_dense(), or for sparse rows use "
                "lookuplinear.EmbeddingBag or LookupLinear."
            )
        if not isinstance(input, torch.Tensor) or not (input.dtype is torch.int64
                                                       or input.dtype is torch.int32):
            what = (f"dtype {input.dtype}" if isinstance(input, torch.Tensor)
                    else type(input).__name__)
            # a tensor of another dtype (uint8, int16 too): a RuntimeError too, as F.embedding
            # raises
            error = DtypeMismatchError if isinstance(input, torch.Tensor) else InputTypeError
            fix = ("Convert them with input.long()" if isinstance(input, torch.Tensor)
                   and not (input.dtype.is_floating_point or input.dtype.is_complex
                            or input.dtype == torch.bool) else "Pass the row indices")
            raise error(
                f"Embedding: input must be a tensor of integer indices (int64 or int32), got "
                f"{what}. {fix}; for bags or sparse rows use lookuplinear.EmbeddingBag or "
                "LookupLinear."
            )
        if self.scale_grad_by_freq:  # a gradient lookuplinear's lookup does not compute
            return super().forward(input)
        # read once (as LookupLinear.forward reads it, no __getattr__): a parametrized weight
        # is computed on each read, and the one renormed must be the one looked up
        params = self._parameters
        weight = cast(torch.Tensor, params["weight"] if "weight" in params else self.weight)  # noqa: SIM401
        if self.max_norm is not None:  # as F.embedding: the named rows renormed in place
            check_index_range(input, self.num_embeddings, where="input")
            renorm_rows_(weight, input, self.max_norm, self.norm_type)
        if self.sparse and not torch.compiler.is_compiling() and binding(weight) is None:
            # nn.Embedding's sparse gradient, one row per position in input order (ATen's
            # backward); lookup_linear's is coalesced, which a fused optimizer takes instead
            # a padding_idx set on the layer after construction may be negative: ATen reads
            # -1 as "no padding", so it is made a row number first, as F.embedding does
            pad = normalize_padding_idx(self.padding_idx, self.num_embeddings, "num_embeddings")
            pad = -1 if pad is None else pad
            return range_checked(lambda: torch.embedding(weight, input, pad, False, True),
                                 input, self.num_embeddings, "input")
        return lookup_linear(input, weight, padding_idx=self.padding_idx, sparse=self.sparse)

    def to_lookup_linear(self) -> Any:
        """A bias-free :class:`~lookuplinear.LookupLinear` with this table (a copy),
        ``padding_idx`` and ``sparse``: equal to this layer on index input, and it also takes
        bags, sparse matrices and :meth:`~lookuplinear.LookupLinear.quantize`.

        Examples
        --------
        >>> emb = Embedding(10, 3)
        >>> x = torch.tensor([[1, 2], [3, 9]])
        >>> torch.equal(emb.to_lookup_linear()(x), emb(x))
        True
        """
        from .layer import LookupLinear

        return LookupLinear.from_embedding(self)
