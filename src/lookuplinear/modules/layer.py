"""``LookupLinear``: ``nn.Linear`` on one-hot / multi-hot / sparse input, computed as a lookup."""

from __future__ import annotations

import math
import os
from collections.abc import Callable
from typing import Any, cast

import torch
from torch import nn

from .. import hugepages
from .._loading import AllOrNothingLoad, own_entry_problems
from .._sizes import as_size
from .._tableinit import Init, init_weight_
from ..errors import InputValueError
from ..functional import LookupInput, Mode, check_mode, lookup_linear, normalize_padding_idx
from ..storage.tables import (
    TableStorage,
    attach,
    drawn_eagerly,
    drawn_input,
    refuse_assign,
    refuse_conversion,
)
from .conversions import LayerConversions

__all__ = ["LookupLinear", "init_weight_"]

class LookupLinear(AllOrNothingLoad, LayerConversions, nn.Module):
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
        Its weight row starts at zero and gets no gradient, as in ``nn.Embedding``. Bag and
        matrix entries equal to it contribute nothing (``nn.EmbeddingBag``); an index position
        equal to it gives the row as it holds, plus the bias (``nn.Embedding``: a padding row
        loaded non-zero is output as loaded).
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
        written into them (``load_state_dict``, see docs/storage.md); the first dense
        gradient (``sparse=False``) draws every row, since its update changes every row;
        exports (``state_dict``,
        ``to_linear``, ``quantize``, ...) draw every row first, so they equal the layer. CPU
        only; the input must name rows (index, bags or sparse input, not dense rows). Reopen it
        with :meth:`open`.
    seed : int, optional
        The seed of a ``storage`` table's rows, an integer in ``[0, 2**64)``; by default drawn
        from PyTorch's generator (so ``torch.manual_seed`` fixes it, as it fixes an in-memory
        table).

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

    #: The version its ``state_dict`` carries in ``_metadata``: ``nn.Linear``'s carries 1, and
    #: its ``weight`` is ``(out_features, in_features)``, this layer's table transposed; a
    #: square weight marked 1 is refused on load (:meth:`_layout_problems`).
    _version = 2

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
        self.register_load_state_dict_post_hook(_adopt_after_load)
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
            ``path`` is not a table directory, a file in it is missing or of the wrong size,
            or a field of its ``meta.json`` is missing or out of its range (named).

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
        """Re-draw ``weight`` (and ``bias``) as ``init`` says; the padding row is zeroed. An
        optimizer's state is left as it is (for a table in a file too: its state files).

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
        # whose cost shows beside a small lookup (benchmarks/bench_layer.py). A parametrized or
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
        """Apply the huge-page policy to a table that arrived from elsewhere (moved, unpickled):
        one copy into huge-page memory (:func:`hugepages.place`)."""
        w = self._parameters.get("weight")
        if w is None or w.data_ptr() == getattr(self, "_placed", None):
            return
        placed = hugepages.place(w.data)
        if placed is not w.data:
            w.data = placed
        self._placed = w.data_ptr()

    def _apply(self, fn: Callable[[torch.Tensor], torch.Tensor], recurse: bool = True) -> Any:
        if self.storage is not None:  # refused before anything is converted
            refuse_conversion(fn, self.weight, "LookupLinear(storage=...)")
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

    def _check_state_entries(self, state_dict: dict[str, Any], prefix: str,
                             local_metadata: dict[str, Any], *args: Any) -> None:
        """What :meth:`_load_from_state_dict` refuses, refused before a load copies anything
        (:func:`lookuplinear._loading.check_state_dict`)."""
        if self.storage is not None and prefix + "weight" in state_dict:
            refuse_assign(local_metadata, prefix + "weight")
        errors = args[3]
        errors += self._layout_problems(state_dict, prefix, local_metadata)

    def _layout_problems(self, state_dict: Any, prefix: str,
                         local_metadata: Any) -> list[str]:
        """Why the state dict's ``weight`` may be ``nn.Linear``'s ``(out_features,
        in_features)`` layout rather than this layer's ``(in_features, out_features)``: its
        shape is the transpose of the table's, or it is square and its metadata says version 1
        (``nn.Linear``'s, which an older lookuplinear's state dict carries too). A state dict
        without metadata (a plain dict) is read as this layer's layout."""
        key = prefix + "weight"
        given = state_dict.get(key)
        if given is None or not torch.overrides.is_tensor_like(given):
            return []
        n_in, n_out = self.in_features, self.out_features
        fix = (f"Convert an nn.Linear with LookupLinear.from_linear(linear), or load its weight "
               f"transposed ({key!r}: linear.weight.T)")
        if n_in != n_out and tuple(given.shape) == (n_out, n_in):
            return [f"{key}: the state dict's is of shape {(n_out, n_in)}, nn.Linear's layout "
                    f"(out_features, in_features); this layer's table is (in_features, "
                    f"out_features) = {(n_in, n_out)}, the transpose. {fix}"]
        version = (local_metadata or {}).get("version")
        if n_in == n_out and version is not None and version < self._version:
            return [f"{key}: the state dict is marked version {version}, which is nn.Linear's "
                    f"(a weight of shape (out_features, in_features), this layer's table "
                    f"transposed) and an older lookuplinear's LookupLinear's (this layer's "
                    f"layout); a square weight cannot tell them apart, so it is not loaded. {fix}. "
                    f"For an older lookuplinear's state dict, mark it as this layer's: "
                    f"state_dict._metadata[{prefix[:-1]!r}]['version'] = {self._version}"]
        return []

    def _load_from_state_dict(self, state_dict: Any, prefix: str, local_metadata: Any,
                              strict: bool, missing_keys: list[str], unexpected_keys: list[str],
                              error_msgs: list[str]) -> None:
        """A table in a file keeps the loaded values: every row is marked written; a weight
        that may be ``nn.Linear``'s layout is refused (:meth:`_layout_problems`)."""
        layout = self._layout_problems(state_dict, prefix, local_metadata)
        if layout:
            error_msgs.extend(layout)
            return
        loads_table = self.storage is not None and prefix + "weight" in state_dict
        if loads_table:
            refuse_assign(local_metadata, prefix + "weight")
            problems = own_entry_problems(self, state_dict, prefix, assign=False)
            if problems:  # before any copy: a refused load writes none of the table's files
                error_msgs.extend(problems)
                return
        errors = len(error_msgs)
        super()._load_from_state_dict(state_dict, prefix, local_metadata, strict,
                                      missing_keys, unexpected_keys, error_msgs)
        if loads_table and len(error_msgs) == errors:
            assert self.storage is not None
            self.storage.mark_written()


def _adopt_after_load(module: nn.Module, incompatible_keys: Any) -> None:
    """``load_state_dict`` post-hook: an ``assign=True`` load brings a new table, which the layer
    adopts as given, as ``nn.Embedding`` does (a ``torch.load(..., mmap=True)`` tensor stays in
    its file, not copied into memory), and which later moves (:meth:`LookupLinear._apply`) then
    leave where it is."""
    w = module._parameters.get("weight")
    if isinstance(module, LookupLinear) and w is not None:
        module._placed = w.data_ptr()
