"""``LookupLinear``: ``nn.Linear`` on one-hot / multi-hot / sparse input, computed as a lookup."""

from __future__ import annotations

import math
import os
from collections.abc import Callable
from typing import Any, cast

import torch
from torch import nn

from .. import hugepages
from .._sizes import as_size
from ..errors import InputTypeError, InputValueError
from ..functional import LookupInput, Mode, check_mode, lookup_linear, normalize_padding_idx
from ..storage.tables import TableStorage, attach, drawn_eagerly, drawn_input, refuse_assign

__all__ = ["LookupLinear", "init_weight_"]

Init = str | Callable[[torch.Tensor], Any]


def init_weight_(weight: torch.Tensor, init: Init, padding_idx: int | None) -> None:
    """Draw a ``(in_features, out_features)`` table in place as ``LookupLinear``'s ``init`` says.

    ``"normal"``: ``nn.Embedding``'s standard normal; ``"linear"``: ``nn.Linear``'s weight under
    the same RNG calls, transposed; a callable: called on ``weight``. The ``padding_idx`` row is
    zeroed.
    """
    with torch.no_grad():
        if init == "linear":
            # nn.Linear.reset_parameters on a (out, in) tensor, then transposed
            w_t = weight.new_empty(weight.shape[1], weight.shape[0])
            nn.init.kaiming_uniform_(w_t, a=math.sqrt(5))
            weight.copy_(w_t.T)
        elif callable(init):
            init(weight)
        else:
            nn.init.normal_(weight)
        if padding_idx is not None:
            weight[padding_idx].fill_(0)


class LookupLinear(nn.Module):
    r"""A linear layer whose input is categorical or sparse: ``y = densify(x) @ weight + bias``.

    Dense equivalent: ``nn.Linear(in_features, out_features)`` with ``linear.weight ==
    self.weight.T``, applied to ``F.one_hot(x, in_features)`` for index input or to the
    multi-hot / weighted rows for matrix input. It is computed as a lookup: only the rows of
    ``weight`` that the input names are read, the dense input is never built.

    ================================  ==========================================================
    input                              equals
    ================================  ==========================================================
    integer tensor, shape ``S``        ``linear(one_hot(x, in_features).float())``, shape
                                       ``S + (out_features,)`` (``nn.Embedding`` plus bias)
    ``Bags`` / scipy.sparse / torch    ``linear(X_dense)`` with ``mode="sum"``, the values as
    sparse, shape ``(N, in)``          per-entry weights; shape ``(N, out_features)``
    float tensor ``(..., in)``         ``linear(X)`` (``addmm``)
    ================================  ==========================================================

    Parameters
    ----------
    in_features : int
        Size of the one-hot / vocabulary dimension (``num_embeddings``).
    out_features : int
        Size of each output row (``embedding_dim``).
    bias : bool, default True
        Add a learnable bias of shape ``(out_features,)``, initialised to zero for
        ``init="normal"``.
    mode : {"sum", "mean", "sqrtn", "max"}, default "sum"
        Row reduction for matrix input, see :func:`lookuplinear.functional.lookup_linear`.
    padding_idx : int, optional
        Entries equal to it contribute nothing and get no gradient; an index position equal to it
        outputs the bias. Its weight row starts at zero, as in ``nn.Embedding``.
    init : {"normal", "linear"} or callable, default "normal"
        ``"normal"`` draws ``weight`` as ``nn.Embedding`` does (standard normal, same RNG calls);
        ``"linear"`` gives the values ``nn.Linear(in_features, out_features)`` would get under the
        same seed (weight transposed, bias included); a callable is called on ``weight`` in place.
    sparse : bool, default False
        Gradient of ``weight`` as a sparse COO tensor (for ``lookuplinear.optim``).
    include_last_offset : bool, default False
        How ``layer(indices, offsets)`` reads ``offsets``, as ``nn.EmbeddingBag`` does: ``N``
        start offsets (the default), or ``N + 1`` CSR offsets ending at ``len(indices)``.
    device, dtype
        As for any ``nn.Module`` factory.
    storage : path, optional
        Keep the table, the bias and the optimizer state in memory-mapped files of a new
        directory at this path (:class:`~lookuplinear.TableStorage`): a table larger than memory
        trains as one that fits. Rows are drawn lazily, on their first lookup, from ``(seed,
        row)`` (``init`` ``"normal"`` or ``"linear"``'s distribution), and never over values
        written into them (``load_state_dict``, see docs/storage.md); exports (``state_dict``,
        ``to_linear``, ``quantize``, ...) draw every row first, so they equal the layer. CPU
        only; the input must name rows (index, bags or sparse input, not dense rows). Reopen it
        with :meth:`open`.
    seed : int, optional
        The seed of a ``storage`` table's rows; by default drawn from PyTorch's generator (so
        ``torch.manual_seed`` fixes it, as it fixes an in-memory table).

    Attributes
    ----------
    weight : Parameter of shape (in_features, out_features)
        The embedding layout: row ``i`` is what the one-hot vector ``e_i`` produces.
    bias : Parameter of shape (out_features,) or None

    Examples
    --------
    >>> _ = torch.manual_seed(123)
    >>> layer = LookupLinear(4, 5, bias=False)
    >>> layer.weight[0]
    tensor([ 0.3374, -0.1778, -0.3035, -0.5880,  1.5810], grad_fn=<SelectBackward0>)
    >>> x = torch.tensor([2, 3, 1])
    >>> torch.equal(layer(x), layer.to_linear()(F.one_hot(x, 4).float()))
    True
    """

    def __init__(
        self,
        in_features: int,
        out_features: int,
        *,
        bias: bool = True,
        mode: Mode = "sum",
        padding_idx: int | None = None,
        init: Init = "normal",
        sparse: bool = False,
        include_last_offset: bool = False,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
        storage: str | os.PathLike[str] | TableStorage | None = None,
        seed: int | None = None,
    ) -> None:
        super().__init__()
        in_features = as_size(in_features, "in_features")
        out_features = as_size(out_features, "out_features")
        check_mode(mode)
        if not (init in ("normal", "linear") or callable(init)):
            raise InputValueError(
                f"init must be 'normal', 'linear' or a callable taking the weight, got {init!r}."
            )
        self.in_features = in_features
        self.out_features = out_features
        self.mode = mode
        self.padding_idx = normalize_padding_idx(padding_idx, in_features)
        self.init = init
        self.sparse = sparse
        self.include_last_offset = include_last_offset
        factory: dict[str, Any] = {"device": device, "dtype": dtype}
        self.storage: TableStorage | None = None
        if storage is not None:
            self._init_storage(storage, bias, seed, factory)
            return
        # huge pages (lookuplinear.hugepages): fewer TLB misses when rows are read scattered
        self.weight = nn.Parameter(hugepages.empty(in_features, out_features, **factory))
        self._placed = self.weight.data_ptr()  # the table memory the policy has seen
        self.register_load_state_dict_post_hook(_place_after_load)
        self.bias: nn.Parameter | None
        if bias:
            self.bias = nn.Parameter(torch.empty(out_features, **factory))
        else:
            self.register_parameter("bias", None)
        self.reset_parameters()

    def _init_storage(self, storage: str | os.PathLike[str] | TableStorage, bias: bool,
                      seed: int | None, factory: dict[str, Any]) -> None:
        if torch.device(factory["device"] or "cpu").type != "cpu":
            raise InputValueError(
                f"storage= keeps the table in a memory-mapped file, which is CPU memory; got "
                f"device={factory['device']!r}. Drop device=, or drop storage= for a GPU table."
            )
        if self.init not in ("normal", "linear"):
            raise InputValueError(
                "storage= draws each row on its first lookup from (seed, row), so init must be "
                f"'normal' or 'linear', got {self.init!r}."
            )
        if not isinstance(storage, TableStorage):
            if seed is None:
                seed = int(torch.randint(0, 2**62, ()))
            layer = {"bias": bias, "mode": self.mode, "padding_idx": self.padding_idx,
                     "sparse": self.sparse, "include_last_offset": self.include_last_offset}
            storage = TableStorage.create(
                storage, self.in_features, self.out_features,
                dtype=factory["dtype"] or torch.get_default_dtype(), init=str(self.init),
                seed=seed, layer=layer)
            if bias and self.init == "linear":
                bound = 1 / math.sqrt(self.in_features)
                assert storage.bias is not None
                nn.init.uniform_(storage.bias, -bound, bound)
        self.storage = storage
        self.weight = nn.Parameter(storage.weight, requires_grad=storage.writable)
        attach(self.weight, storage)
        self._placed = self.weight.data_ptr()
        if storage.bias is not None:
            self.bias = nn.Parameter(storage.bias, requires_grad=storage.writable)
        else:
            self.register_parameter("bias", None)

    @classmethod
    def open(cls, path: str | os.PathLike[str], *, writable: bool = False) -> LookupLinear:
        """The layer whose table lives at ``path`` (made by ``LookupLinear(..., storage=path)``).

        Read-only by default, for serving: the files are mapped copy-on-write (``MAP_PRIVATE``),
        so opening takes the same time whatever the table's size, processes share the pages, and
        the parameters do not require gradients. ``writable=True`` maps them shared, to go on
        training (after a crash, restore a :class:`~lookuplinear.Checkpoint` instead: the files
        then hold a mix of steps).

        Raises
        ------
        ModelFileError
            ``path`` is not a table directory, or a file in it is missing or of the wrong size.

        Examples
        --------
        >>> import tempfile, pathlib
        >>> path = pathlib.Path(tempfile.mkdtemp()) / "table"
        >>> layer = LookupLinear(1_000_000, 8, storage=path, seed=0)
        >>> y = layer(torch.tensor([5, 999_999]))
        >>> layer.storage.flush()
        >>> served = LookupLinear.open(path)
        >>> torch.equal(served(torch.tensor([5, 999_999])), y)
        True
        """
        storage = TableStorage.open(path, writable=writable)
        m = storage.meta
        return cls(m["rows"], m["dim"], bias=m["bias"], mode=m["mode"],
                   padding_idx=m["padding_idx"], init=m["init"], sparse=m["sparse"],
                   include_last_offset=m["include_last_offset"], dtype=storage.dtype,
                   storage=storage)

    def reset_parameters(self) -> None:
        """Re-draw ``weight`` (and ``bias``) as ``init`` says; the padding row is zeroed.

        Examples
        --------
        >>> layer = LookupLinear(4, 2, padding_idx=0)
        >>> _ = torch.manual_seed(0)
        >>> layer.reset_parameters()
        >>> layer.weight[0]
        tensor([0., 0.], grad_fn=<SelectBackward0>)
        """
        with torch.no_grad():
            if self.storage is not None:  # rows drawn again from (seed, row) on first lookup
                self.storage.clear()
            else:
                init_weight_(self.weight, self.init, self.padding_idx)
            if self.bias is not None:
                if self.init == "linear":
                    bound = 1 / math.sqrt(self.in_features)
                    nn.init.uniform_(self.bias, -bound, bound)
                else:
                    nn.init.zeros_(self.bias)

    def forward(
        self,
        input: LookupInput,
        offsets: torch.Tensor | None = None,
        per_sample_weights: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Compute ``densify(input) @ weight + bias``; see :func:`~lookuplinear.lookup_linear`."""
        # the parameters read from their dict: ``self.weight`` goes through nn.Module.__getattr__,
        # 1-2 us a call beside a 100 us lookup (benchmarks/bench_layer.py). A parametrized or
        # weight-normed ``weight`` is no longer in the dict, and is read as an attribute (only
        # then: ``get`` would evaluate ``self.weight`` on every call).
        params = self._parameters
        weight = cast(torch.Tensor, params["weight"] if "weight" in params else self.weight)  # noqa: SIM401
        if self.storage is not None:  # a table in a file: draw the rows input reads first
            # (inside a compiled graph an eager call, a graph break, before the lookup)
            draw = drawn_eagerly if torch.compiler.is_compiling() else drawn_input
            input = draw(self.storage, input, offsets)
        return lookup_linear(
            input,
            weight,
            params["bias"] if "bias" in params else self.bias,  # noqa: SIM401
            mode=self.mode,
            padding_idx=self.padding_idx,
            offsets=offsets,
            per_sample_weights=per_sample_weights,
            sparse=self.sparse,
            include_last_offset=self.include_last_offset,
        )

    def _place_table(self) -> None:
        """Apply the huge-page policy to a table that arrived from elsewhere (moved, loaded with
        ``assign=True``, unpickled): one copy into huge-page memory (:func:`hugepages.place`)."""
        w = self._parameters.get("weight")
        if w is None or w.data_ptr() == getattr(self, "_placed", None):
            return
        placed = hugepages.place(w.data)
        if placed is not w.data:
            w.data = placed
        self._placed = w.data_ptr()

    def _apply(self, fn: Callable[[torch.Tensor], torch.Tensor], recurse: bool = True) -> Any:
        out = super()._apply(fn, recurse)
        self._place_table()
        return out

    def __setstate__(self, state: dict[str, Any]) -> None:
        state.setdefault("storage", None)
        super().__setstate__(state)
        self._place_table()

    def extra_repr(self) -> str:
        s = f"{self.in_features}, {self.out_features}, bias={self.bias is not None}"
        if self.mode != "sum":
            s += f", mode={self.mode!r}"
        if self.padding_idx is not None:
            s += f", padding_idx={self.padding_idx}"
        if self.sparse:
            s += ", sparse=True"
        if self.include_last_offset:
            s += ", include_last_offset=True"
        if self.storage is not None:
            s += f", storage={str(self.storage.path)!r}"
        return s

    # ------------------------------------------------------------------ the table's values
    def _whole_table(self) -> torch.Tensor:
        """``weight`` with every row holding its value: a table in a file first draws the rows
        no lookup has drawn yet (what is exported reads every row, as a lookup of each would),
        so that every export equals the layer."""
        if self.storage is not None:
            self.storage.materialize_all()
        return self.weight

    def _save_to_state_dict(self, destination: dict[str, Any], prefix: str,
                            keep_vars: bool) -> None:
        self._whole_table()
        super()._save_to_state_dict(destination, prefix, keep_vars)

    def _load_from_state_dict(self, state_dict: Any, prefix: str, local_metadata: Any,
                              strict: bool, missing_keys: list[str], unexpected_keys: list[str],
                              error_msgs: list[str]) -> None:
        """A table in a file keeps the loaded values: every row is marked written."""
        loads_table = self.storage is not None and prefix + "weight" in state_dict
        if loads_table:
            refuse_assign(local_metadata, prefix + "weight")
        errors = len(error_msgs)
        super()._load_from_state_dict(state_dict, prefix, local_metadata, strict,
                                      missing_keys, unexpected_keys, error_msgs)
        if loads_table and len(error_msgs) == errors:
            assert self.storage is not None
            self.storage.mark_written()

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
        >>> lin = nn.Linear(4, 3)
        >>> layer = LookupLinear.from_linear(lin)
        >>> x = torch.tensor([3, 0])
        >>> torch.allclose(layer(x), lin(F.one_hot(x, 4).float()))
        True
        """
        if not isinstance(linear, nn.Linear):
            raise InputTypeError(f"from_linear expects nn.Linear, got {type(linear).__name__}.")
        w = linear.weight
        layer = cls(
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
        return layer

    @classmethod
    def from_embedding(
        cls, embedding: nn.Embedding | nn.EmbeddingBag, *,
        storage: str | os.PathLike[str] | None = None,
    ) -> LookupLinear:
        """A bias-free ``LookupLinear`` with the embedding's table, ``padding_idx``, ``mode``,
        ``sparse``, ``include_last_offset`` and ``freeze`` (the table's ``requires_grad``), copied.

        Called as the embedding was (``emb(indices, offsets)``), the layer gives the same output;
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
            ``max_norm`` or ``scale_grad_by_freq`` is set (a linear layer has neither), or an
            ``nn.Embedding``'s padding row is non-zero (it would output that row; the layer
            outputs zero there).

        Examples
        --------
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
        if isinstance(embedding, nn.Embedding) and pad is not None and bool(w[pad].any()):
            raise InputValueError(
                f"nn.Embedding's padding row {pad} is non-zero, so the embedding outputs it at "
                "padding positions while LookupLinear drops padding entries. Zero it first "
                f"(emb.weight.data[{pad}] = 0) or build the embedding without padding_idx."
            )
        layer = cls(
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
        table = w.detach()
        if pad is not None:  # the bag drops padding whatever the row holds
            table = table.clone()
            table[pad] = 0
        layer.load_state_dict({"weight": table})
        layer.weight.requires_grad_(w.requires_grad)  # from_pretrained(..., freeze=True)
        return layer

    # ------------------------------------------------------------------ conversions out
    def quantize(self, dtype: str = "int8") -> Any:
        """An inference copy with the table quantized row by row: ``"int8"``, ``"int4"``
        (FBGEMM's fused row-wise formats, PyTorch's quantized embedding-bag kernels) or
        ``"float16"``; see :class:`~lookuplinear.QuantizedLookupLinear`. Each value moves by at
        most half its row's quantization step.

        Examples
        --------
        >>> q = LookupLinear(10_000, 64).quantize("int4")
        >>> q.packed.shape, q.packed.dtype       # 32 bytes of values + 4 of scale and offset
        (torch.Size([10000, 36]), torch.uint8)
        """
        from ..quant.layer import QuantizedLookupLinear

        self._whole_table()
        return QuantizedLookupLinear(self, dtype)

    def to_linear(self, *, strict: bool = True) -> nn.Linear:
        """An ``nn.Linear`` with ``weight = self.weight.T`` (a copy) and the same bias.

        With ``mode="sum"`` it is a drop-in: ``layer(x) == to_linear()(densify(x))``. For
        ``mean``/``sqrtn`` the mode is a per-row scaling of the input that ``nn.Linear`` cannot
        hold; ``strict=False`` returns the linear map anyway, which then equals the layer on
        :func:`lookuplinear.densify` 's scaled rows. The padding column is zero.

        Raises
        ------
        InputValueError
            ``strict`` and ``mode != "sum"``.

        Examples
        --------
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
            if self.padding_idx is not None:
                lin.weight[:, self.padding_idx].fill_(0)
            if self.bias is not None:
                lin.bias.copy_(self.bias)
        return lin

    def to_embedding(self) -> nn.Embedding:
        """An ``nn.Embedding`` with the same table and ``padding_idx`` (a copy).

        Equal to the layer on index input (any mode: one entry per position).

        Raises
        ------
        InputValueError
            The layer has a bias, which ``nn.Embedding`` cannot hold.

        Examples
        --------
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

    def to_embedding_bag(self) -> nn.EmbeddingBag:
        """An ``nn.EmbeddingBag`` with the same table, ``mode``, ``padding_idx``, ``sparse`` and
        ``include_last_offset`` (a copy): called as the layer is, it gives the same output.

        Raises
        ------
        InputValueError
            The layer has a bias, or ``mode="sqrtn"`` (``nn.EmbeddingBag`` has no such mode).

        Examples
        --------
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

    def _refuse_bias(self, target: str) -> None:
        if self.bias is not None:
            raise InputValueError(
                f"{target} has no bias but this layer has one; dropping it would change the "
                "output. Build the layer with bias=False, or use to_linear()."
            )

    def _copy_table(self, target: torch.Tensor) -> None:
        with torch.no_grad():
            target.copy_(self._whole_table())
            if self.padding_idx is not None:
                target[self.padding_idx].fill_(0)
        target.requires_grad_(self.weight.requires_grad)  # a frozen table stays frozen


def _place_after_load(module: nn.Module, incompatible_keys: Any) -> None:
    """``load_state_dict`` post-hook: an ``assign=True`` load brings a new table."""
    if isinstance(module, LookupLinear):
        module._place_table()
