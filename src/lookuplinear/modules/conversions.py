"""The conversions of :class:`~lookuplinear.LookupLinear` from and to PyTorch's layers:
``from_linear``, ``from_embedding``, ``to_linear``, ``to_embedding``, ``to_embedding_bag`` and
``quantize``; each result equals the layer on the same input (the dense path)."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any, Protocol, cast

import torch
from torch import nn

from ..errors import InputTypeError, InputValueError
from ..modes import Mode

if TYPE_CHECKING:
    from .layer import LookupLinear

__all__ = ["LayerConversions"]


class _Layer(Protocol):
    """What the conversions read of a ``LookupLinear``."""

    @property
    def in_features(self) -> int: ...
    @property
    def out_features(self) -> int: ...
    @property
    def mode(self) -> str: ...
    @property
    def padding_idx(self) -> int | None: ...
    @property
    def sparse(self) -> bool: ...
    @property
    def include_last_offset(self) -> bool: ...
    @property
    def weight(self) -> nn.Parameter: ...
    @property
    def bias(self) -> nn.Parameter | None: ...
    def _whole_table(self) -> torch.Tensor: ...
    def _refuse_bias(self, target: str) -> None: ...
    def _copy_table(self, target: torch.Tensor) -> None: ...


def _keep_frozen(target: nn.Module, source: Any) -> None:
    """``target``'s weight and bias as frozen as ``source``'s (``requires_grad`` carried
    over; an embedding's ``freeze``): a conversion does not make a frozen table trainable."""
    for name in ("weight", "bias"):
        mine, theirs = getattr(target, name, None), getattr(source, name, None)
        if isinstance(mine, nn.Parameter) and isinstance(theirs, torch.Tensor):
            mine.requires_grad_(theirs.requires_grad)


class LayerConversions:
    """``LookupLinear``'s ``from_*`` classmethods and ``to_*`` methods (a base of that class)."""

    # ------------------------------------------------------------------ conversions in
    @classmethod
    def from_linear(
        cls, linear: nn.Linear, *, mode: Mode = "sum", sparse: bool = False,
        storage: str | os.PathLike[str] | None = None,
    ) -> LookupLinear:
        """A ``LookupLinear`` with ``weight = linear.weight.T`` and the same bias (copies).

        ``storage``: copy them into a new table in a file at this path (see ``LookupLinear``'s
        ``storage``); every row then holds the linear layer's values, none is drawn.

        Examples
        --------
        >>> from lookuplinear import LookupLinear
        >>> lin = nn.Linear(4, 3)
        >>> layer = LookupLinear.from_linear(lin)
        >>> x = torch.tensor([3, 0])
        >>> torch.allclose(layer(x), lin(F.one_hot(x, 4).float()))
        True
        """
        if not isinstance(linear, nn.Linear):
            raise InputTypeError(f"from_linear expects nn.Linear, got {type(linear).__name__}.")
        w = linear.weight
        layer: LookupLinear = cast(Any, cls)(
            linear.in_features,
            linear.out_features,
            bias=linear.bias is not None,
            mode=mode,
            sparse=sparse,
            device=None if storage is not None else w.device,
            dtype=w.dtype,
            storage=storage,
        )
        state = {"weight": w.detach().T} | ({} if linear.bias is None else {"bias": linear.bias})
        layer.load_state_dict(state)
        _keep_frozen(layer, linear)
        return layer

    @classmethod
    def from_embedding(
        cls, embedding: nn.Embedding | nn.EmbeddingBag, *,
        storage: str | os.PathLike[str] | None = None,
    ) -> LookupLinear:
        """A bias-free ``LookupLinear`` with the embedding's table, ``padding_idx``, ``mode``,
        ``sparse``, ``include_last_offset`` and ``freeze`` (the table's ``requires_grad``), copied.

        Called as the embedding was (``emb(indices, offsets)``), the layer gives the same output
        (a padding row that is not zero included: index positions read it, bags drop it);
        a ``(B, N)`` index tensor is ``nn.Embedding``'s input here (one row per position), where
        ``nn.EmbeddingBag`` reads ``B`` bags: :class:`~lookuplinear.EmbeddingBag` keeps that call.
        ``storage``: copy the table into a new table in a file at this path (see
        ``LookupLinear``'s ``storage``): pretrained embeddings larger than memory, loaded once;
        every row then holds the embedding's values, none is drawn.

        Raises
        ------
        InputTypeError
            The table is not floating point (an integer table has no linear layer).
        InputValueError
            ``max_norm`` or ``scale_grad_by_freq`` is set (a linear layer has neither).

        Examples
        --------
        >>> from lookuplinear import LookupLinear
        >>> emb = nn.EmbeddingBag(10, 3, mode="mean")
        >>> layer = LookupLinear.from_embedding(emb)
        >>> layer
        LookupLinear(10, 3, bias=False, mode='mean')
        """
        if not isinstance(embedding, nn.Embedding | nn.EmbeddingBag):
            raise InputTypeError(
                "from_embedding expects nn.Embedding or nn.EmbeddingBag, got "
                f"{type(embedding).__name__}."
            )
        name = type(embedding).__name__
        if embedding.max_norm is not None or embedding.scale_grad_by_freq:
            raise InputValueError(
                f"{name} has max_norm={embedding.max_norm}, "
                f"scale_grad_by_freq={embedding.scale_grad_by_freq}; these rewrite the table or "
                "the gradient, which a linear layer cannot represent. Build it without them."
            )
        is_bag = isinstance(embedding, nn.EmbeddingBag)
        mode = cast(Mode, embedding.mode if isinstance(embedding, nn.EmbeddingBag) else "sum")
        w = embedding.weight
        if not w.dtype.is_floating_point:
            raise InputTypeError(
                f"{name}'s table has dtype {w.dtype}; LookupLinear's weight must be floating "
                "point (it is nn.Linear's weight). Convert it first: "
                "nn.Embedding.from_pretrained(table.float())."
            )
        pad = embedding.padding_idx
        layer: LookupLinear = cast(Any, cls)(
            embedding.num_embeddings,
            embedding.embedding_dim,
            bias=False,
            mode=mode,
            padding_idx=pad,
            sparse=embedding.sparse,
            include_last_offset=bool(is_bag and embedding.include_last_offset),
            device=None if storage is not None else w.device,
            dtype=w.dtype,
            storage=storage,
        )
        # the padding row as it holds: index positions read it, as nn.Embedding's do; bags drop
        # padding entries whatever it holds, as nn.EmbeddingBag's do
        layer.load_state_dict({"weight": w.detach()})
        _keep_frozen(layer, embedding)  # from_pretrained(..., freeze=True)
        return layer

    # ------------------------------------------------------------------ conversions out
    def quantize(self: _Layer, dtype: str = "int8") -> Any:
        """An inference copy with the table quantized row by row: ``"int8"``, ``"int4"``
        (FBGEMM's fused row-wise formats, PyTorch's quantized embedding-bag kernels) or
        ``"float16"``; see :class:`~lookuplinear.QuantizedLookupLinear`. With ``"int8"`` each
        value moves by at most half its row's quantization step, ``(max - min) / 255 / 2``,
        plus ``1e-8`` (FBGEMM's epsilon on the range); with ``"int4"``, whose row minimum and
        step are float16, by at most ``step / 2 + h(min) + 15 * h(step)``,
        ``step = (max - min) / 15``, ``h(v) = 2**-11 * |v|`` (``2**-25`` for
        ``|v| < 2**-14``), float16's rounding; with ``"float16"`` by at most ``2**-11`` of
        itself (half a float16 unit in the last place; ``2**-25`` for ``|w| < 2**-14``). All
        on top of float32's rounding of the value read back.

        Raises
        ------
        InputValueError
            An unknown ``dtype``, an odd ``out_features`` for ``"int4"``, a row that float16
            storage cannot hold (a value beyond 65504 for ``"float16"``; an offset or step
            beyond it for ``"int4"``: use ``"int8"``, whose scale and offset are float32), or a
            row with a NaN or inf value for ``"int8"`` and ``"int4"`` (``"float16"`` keeps
            them).

        Examples
        --------
        >>> from lookuplinear import LookupLinear
        >>> q = LookupLinear(10_000, 64).quantize("int4")
        >>> q.packed.shape, q.packed.dtype       # 32 bytes of values + 4 of scale and offset
        (torch.Size([10000, 36]), torch.uint8)
        """
        from ..quant.layer import QuantizedLookupLinear

        self._whole_table()
        return QuantizedLookupLinear(self, dtype)

    def to_linear(self: _Layer, *, strict: bool = True) -> nn.Linear:
        """An ``nn.Linear`` with ``weight = self.weight.T`` (a copy) and the same bias.

        With ``mode="sum"`` it is a drop-in: ``layer(x) == to_linear()(densify(x))``. For
        ``mean``/``sqrtn`` the mode is a per-row scaling of the input that ``nn.Linear`` cannot
        hold; ``strict=False`` returns the linear map anyway, which then equals the layer on
        :func:`lookuplinear.densify` 's scaled rows. The padding column is the padding row as it
        holds: an index position equal to ``padding_idx`` reads it, as its one-hot row does, and
        ``densify`` zeroes that column for bag and matrix input, which drop padding entries.

        Raises
        ------
        InputValueError
            ``strict`` and ``mode != "sum"``.

        Examples
        --------
        >>> from lookuplinear import LookupLinear
        >>> layer = LookupLinear(4, 3)
        >>> lin = layer.to_linear()
        >>> lin
        Linear(in_features=4, out_features=3, bias=True)
        >>> from lookuplinear import Bags
        >>> bags = Bags.from_lists([[1, 3], [2]])
        >>> torch.allclose(layer(bags), lin(bags.to_dense(4)))
        True
        """
        if strict and self.mode != "sum":
            raise InputValueError(
                f"mode={self.mode!r} scales or maxes each input row, which nn.Linear cannot do. "
                "Call to_linear(strict=False) for the linear map; it equals this layer on "
                "lookuplinear.densify(x, layer) (mode 'max' has no linear equivalent)."
            )
        w = self._whole_table().detach()
        lin = nn.Linear(
            self.in_features,
            self.out_features,
            bias=self.bias is not None,
            device=w.device,
            dtype=w.dtype,
        )
        with torch.no_grad():
            lin.weight.copy_(w.T)
            if self.bias is not None:
                lin.bias.copy_(self.bias)
        _keep_frozen(lin, self)
        return lin

    def to_embedding(self: _Layer) -> nn.Embedding:
        """An ``nn.Embedding`` with the same table and ``padding_idx`` (a copy).

        Equal to the layer on index input (any mode: one entry per position).

        Raises
        ------
        InputValueError
            The layer has a bias, which ``nn.Embedding`` cannot hold.

        Examples
        --------
        >>> from lookuplinear import LookupLinear
        >>> layer = LookupLinear(4, 3, bias=False, padding_idx=0)
        >>> emb = layer.to_embedding()
        >>> emb
        Embedding(4, 3, padding_idx=0)
        >>> x = torch.tensor([[0, 2], [3, 1]])
        >>> torch.equal(emb(x), layer(x))
        True
        """
        self._refuse_bias("nn.Embedding")
        emb = nn.Embedding(
            self.in_features,
            self.out_features,
            padding_idx=self.padding_idx,
            sparse=self.sparse,
            device=self.weight.device,
            dtype=self.weight.dtype,
        )
        self._copy_table(emb.weight)
        return emb

    def to_embedding_bag(self: _Layer) -> nn.EmbeddingBag:
        """An ``nn.EmbeddingBag`` with the same table, ``mode``, ``padding_idx``, ``sparse`` and
        ``include_last_offset`` (a copy): called as the layer is, it gives the same output.

        Raises
        ------
        InputValueError
            The layer has a bias, or ``mode="sqrtn"`` (``nn.EmbeddingBag`` has no such mode).

        Examples
        --------
        >>> from lookuplinear import LookupLinear
        >>> layer = LookupLinear(4, 3, bias=False, mode="mean")
        >>> bag = layer.to_embedding_bag()
        >>> indices, offsets = torch.tensor([1, 3, 2]), torch.tensor([0, 2, 2])  # 3 bags
        >>> torch.allclose(bag(indices, offsets), layer(indices, offsets))
        True
        """
        self._refuse_bias("nn.EmbeddingBag")
        if self.mode == "sqrtn":
            raise InputValueError(
                "nn.EmbeddingBag has modes 'sum', 'mean' and 'max', not 'sqrtn'; convert a "
                "layer with another mode or keep LookupLinear."
            )
        bag = nn.EmbeddingBag(
            self.in_features,
            self.out_features,
            mode=self.mode,
            padding_idx=self.padding_idx,
            sparse=self.sparse,
            include_last_offset=self.include_last_offset,
            device=self.weight.device,
            dtype=self.weight.dtype,
        )
        self._copy_table(bag.weight)
        return bag

    def _refuse_bias(self: _Layer, target: str) -> None:
        if self.bias is not None:
            raise InputValueError(
                f"{target} has no bias but this layer has one; dropping it would change the "
                "output. Build the layer with bias=False, or use to_linear()."
            )

    def _copy_table(self: _Layer, target: torch.Tensor) -> None:
        with torch.no_grad():  # the padding row as it holds, which index positions read
            target.copy_(self._whole_table())
        target.requires_grad_(self.weight.requires_grad)  # a frozen table stays frozen
