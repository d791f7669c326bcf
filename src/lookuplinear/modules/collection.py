"""``LookupCollection``: many categorical features, each pooled through its table.

What a collection computes is stated here and by its tables (:class:`TableConfig`); how is
the plan's (:mod:`lookuplinear.modules.plan`: tables of one width and dtype in one parameter, table
after table, as FBGEMM's table-batched embedding keeps them) and its execution's
(:mod:`lookuplinear.modules.batched`)::

    tables        user (4 rows), item (3 rows), both dim 2
    table_groups  [[u0, u1, u2, u3, i0, i1, i2]]   # one Parameter, row offsets user 0, item 4

    batch         user: [[3], [1, 2]]   item: [[0, 0], []]
    lookup        bags [[3], [1, 2], [4, 4], []]     # item's indices shifted by its offset 4
    output        (N=2, 4): [user's 2 columns | item's 2 columns]

so a batch of all features is one lookup forward, one row-sparse gradient (or one fused
optimizer pass) backward, whatever the number of tables. ``state_dict`` keeps one key per
table (``embedding_bags.<table>.weight``, TorchRec's names).
"""

from __future__ import annotations

import dataclasses
import functools
import math
import warnings
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, ClassVar, cast

import torch
from torch import nn

from .. import hugepages
from .._loading import checked_hook, unassignable, uncopyable
from .._tableinit import Init
from ..errors import InputTypeError, InputValueError, StateDictError
from ..functional import Mode, check_max_weights, lookup_linear
from ..ids.hashing import hash_ids, qr_rows
from ..ids.idmap import IdMap
from ..ops import capturing
from ..sparse.bags import Bags, check_index_range
from ..sparse.keyed import KeyedBags, KeyedTensor
from ..storage.tables import attach, drawn_eagerly, refuse_assign, refuse_conversion, storage_of
from .batched import BatchedLookup, sums_sparse_gradients
from .collection_base import CollectionBase, check_qr_weights, table_bags, weighted_as
from .layer import LookupLinear, init_weight_
from .plan import plan_collection
from .table_config import TableConfig
from .table_files import file_table

__all__ = ["LookupCollection", "TableConfig", "weighted_as"]


class LookupCollection(CollectionBase):
    """Many categorical features in one module: each feature's bags pooled through its table.

    Dense equivalent: for each feature ``f`` of table ``t``, ``nn.Linear(t.num_embeddings,
    t.embedding_dim, bias=False)`` (``linear.weight == table.T``) applied to ``f``'s
    multi-hot rows (``kb[f].to_dense(t.num_embeddings)``, scaled by ``t.mode``); the outputs
    side by side in output order (:attr:`embedding_names`: a feature several tables read is
    one output per table). Features sharing a table share its ``nn.Linear``, so the
    table's gradient is the sum over them. ``check_equivalence(collection, kb)`` proves it.
    TorchRec's ``EmbeddingBagCollection`` over a ``KeyedJaggedTensor``: the tables of one
    width and dtype are one parameter (module docstring), looked up together, with the same
    outputs and gradients as each feature's own lookup.

    Parameters
    ----------
    tables : sequence of TableConfig
        Distinct table names. A feature may be read by several tables (TorchRec's shared
        feature): each pools it, and its outputs are keyed ``feature@table``, as TorchRec's
        ``EmbeddingBagCollection`` keys them.
    sparse : bool, default False
        Row-sparse gradients (for :mod:`lookuplinear.optim`, fused or not). A ``mode="max"``
        table, which has no row-sparse gradient, gets a dense one (its own parameter).
    is_weighted : bool, optional
        TorchRec's ``is_weighted``: whether a batch's per-entry ``weights`` scale its rows.
        ``None`` (default): they do when the batch has them. ``True``: they do, and a batch
        without weights raises. ``False``: they are ignored (as TorchRec's
        ``EmbeddingBagCollection(is_weighted=False)`` ignores a ``KeyedJaggedTensor``'s).
        :meth:`to_torchrec` and :meth:`from_torchrec` carry it (``to_torchrec`` asks for a
        choice where it is ``None``).
    device : torch.device or str, optional

    Attributes
    ----------
    table_groups : nn.ParameterList
        One ``(total rows, dim)`` parameter per group of tables of one width, dtype and kernel
        (what an optimizer is given, through ``parameters()``; named ``table_groups.<g>``).
        ``weights`` is its former name: it still reads, with a ``FutureWarning``.
    tables : tuple of TableConfig
    feature_names : list of str
        The keys a batch must hold: every table's features, each once, table after table.
    embedding_names : list of str
        The output's keys in order, one per (feature, table) pair, table after table: the
        feature's name, or ``feature@table`` for a feature several tables read (TorchRec's
        names). Equal to ``feature_names`` when no feature is shared.

    The output is in float32 for float16 and bfloat16 tables (each table pools in its dtype,
    then its outputs are cast, as TorchRec's ``EmbeddingBagCollection`` does); tables of several
    dtypes give the promoted one (float64 beside float32 gives float64). A ``{feature: index
    tensor}`` dict's rows (unpooled) are float32 too for float16 and bfloat16 tables, as
    TorchRec's ``EmbeddingCollection`` gives them.

    Raises
    ------
    InputValueError
        Table names repeated, a feature listed twice in one table; at ``forward``, a feature
        the tables need missing from the batch, a batch without weights with
        ``is_weighted=True``, a variable batch per key without ``inverse_indices``.

    Examples
    --------
    >>> _ = torch.manual_seed(0)
    >>> ebc = LookupCollection([TableConfig("user", 100, 4, ["user"]),
    ...                         TableConfig("item", 50, 4, ["item", "last_item"], mode="mean")])
    >>> kb = KeyedBags.from_dict({"user": [[3], [1, 4]], "item": [[7, 7, 2], []],
    ...                           "last_item": [[5], [6]]})
    >>> out = ebc(kb)
    >>> out.values().shape, out["item"].shape
    (torch.Size([2, 12]), torch.Size([2, 4]))
    >>> from lookuplinear import check_equivalence
    >>> check_equivalence(ebc, kb).ok
    True
    """

    #: attributes renamed since: a Checkpoint saved under the former name restores
    _former_names: ClassVar[dict[str, str]] = {"weights": "table_groups"}

    def __init__(
        self,
        tables: Sequence[TableConfig],
        *,
        sparse: bool = False,
        is_weighted: bool | None = None,
        device: torch.device | str | None = None,
    ) -> None:
        super().__init__()
        tables = tuple(tables)
        plan = self._collection_plan = plan_collection(tables)
        if is_weighted not in (None, True, False):
            raise InputTypeError(
                f"LookupCollection: is_weighted must be None, True or False, got {is_weighted!r}."
            )
        self.tables = tables
        self.sparse = sparse
        self.is_weighted = is_weighted
        self.feature_names = list(plan.feature_names)
        self.embedding_names = list(plan.embedding_names)
        #: how the plan is run: its tensors and caches (no module state)
        self._lookup_plan = BatchedLookup(plan)
        self.id_maps = nn.ModuleDict({
            t.name: IdMap(t.num_embeddings, fallback_rows=t.fallback_rows or 1,
                          admit_after=t.admit_after or 1, key_type=t.key_type)
            for t in self.tables if t.hashing == "map"
        })
        #: during a forward: the rows of each mapped output's IDs, as its map gave them
        self._mapped: dict[str, torch.Tensor] | None = None
        stored = {plan.places[t.name].group: t for t in self.tables if t.storage is not None}
        self.table_groups = nn.ParameterList(
            file_table(stored[g], group.dtype, device) if g in stored else
            nn.Parameter(hugepages.empty(group.rows, group.dim, dtype=group.dtype,
                                         device=device))
            for g, group in enumerate(plan.groups)
        )
        self.reset_parameters(fresh_only=True)
        self._register_state_dict_hook(_tables_state_dict)
        self._register_load_state_dict_pre_hook(_tables_load_state_dict, with_module=True)
        self.register_load_state_dict_post_hook(_tables_missing_keys)

    def reset_parameters(self, *, fresh_only: bool = False) -> None:
        """Draw every table as its ``init`` says, table after table (the values separate
        ``LookupLinear`` layers made in that order under the same seed would get); a table in
        a file has every row undrawn again (drawn from ``(seed, row)`` on its next lookup).
        An optimizer's state is left as it is (a table in a file's state files too)."""
        for name, place in self._places.items():
            storage = storage_of(self.table_groups[place.group])
            if storage is None:
                init_weight_(self._rows(name), place.config.init, place.config.padding_idx)
            elif not fresh_only:
                storage.clear()

    @property
    def weights(self) -> nn.ParameterList:
        """Former name of :attr:`table_groups` (the same ``ParameterList``); reading it warns
        with a ``FutureWarning``: the ``weights`` of a batch are its per-entry values."""
        warnings.warn(
            "LookupCollection.weights is renamed table_groups (the same ParameterList; "
            "parameters table_groups.<g>): 'weights' are a batch's per-entry values. Read "
            "collection.table_groups instead.",
            FutureWarning,
            stacklevel=2,
        )
        return self.table_groups

    # ------------------------------------------------------------------ tables
    def _sparse(self, cfg: TableConfig) -> bool:
        """Whether table ``cfg`` gets row-sparse gradients: ``sparse``, except a ``mode="max"``
        table (alone in its parameter), which has none and gets a dense one."""
        return self.sparse and cfg.mode != "max"

    def _group_sparse(self, param: torch.Tensor) -> bool | None:
        """Whether group parameter ``param`` gets row-sparse gradients (every table in it
        does, :meth:`_sparse`); None when ``param`` is not one of this collection's groups."""
        for g, q in enumerate(self.table_groups):
            if q is param:
                return all(self._sparse(place.config) for place in self._places.values()
                           if place.group == g)
        return None

    def _whole_tables(self) -> None:
        """Draw the rows no lookup has drawn yet of every table in a file: what is exported
        reads every row, as a lookup of each would, so that every export equals the
        collection."""
        for g in self._lookup_plan.stored:
            storage = storage_of(self.table_groups[g])
            assert storage is not None
            storage.materialize_all()

    def _rows(self, name: str) -> torch.Tensor:
        """Table ``name``: a differentiable view of its rows in its group's parameter."""
        g, off, cfg = self._places[name]
        return self.table_groups[g][off : off + cfg.stored_rows]

    def __getitem__(self, name: str) -> LookupLinear:
        """Table ``name`` as a :class:`~lookuplinear.LookupLinear` on the same memory (a new
        module each call: updating it updates the collection)."""
        if name not in self._places:
            raise KeyError(
                f"LookupCollection has no table {name!r}; its tables are {list(self._places)}."
            )
        g, _, cfg = self._places[name]
        mode = "sum" if cfg.hashing == "qr" else cfg.mode  # rows() folds the mode for qr
        layer = LookupLinear(cfg.stored_rows, cfg.embedding_dim, bias=False, mode=mode,
                             padding_idx=cfg.padding_idx, init=cfg.init, sparse=self._sparse(cfg),
                             device="meta", dtype=cfg.dtype)
        rows = self._rows(name).detach()
        layer.weight = nn.Parameter(rows, requires_grad=self.table_groups[g].requires_grad)
        layer._placed = rows.data_ptr()
        storage = storage_of(self.table_groups[g])
        if storage is not None:  # a table in a file (alone in its group): its rows drawn too
            attach(layer.weight, storage)
            layer.storage = storage
        return layer

    def table_of(self, name: str) -> LookupLinear:
        """The table that output ``name`` reads: a feature's name, or ``feature@table`` for
        a feature several tables read (one of :attr:`embedding_names`)."""
        return self[self._table_name(name)]

    def _table_name(self, name: str) -> str:
        table = self._table_of.get(name)
        if table is None:
            outputs = self._collection_plan.outputs_of(name)
            raise KeyError(
                f"LookupCollection has no output {name!r}; "
                + (f"feature {name!r} is read by several tables, as {outputs}: name one."
                   if outputs else f"its outputs are {self.embedding_names}.")
            )
        return table

    def features(self) -> Iterator[tuple[str, LookupLinear]]:
        """``(output name, table)`` pairs in output order (:attr:`embedding_names`)."""
        for f in self.embedding_names:
            yield f, self.table_of(f)

    @classmethod
    def from_layers(cls, layers: Mapping[str, LookupLinear], *,
                    sparse: bool | None = None) -> LookupCollection:
        """A collection with one table and one feature per key, holding copies of the layers'
        weights (same mode, padding, dtype, device; ``sparse`` defaults to the layers'): every
        row (a table in a file draws the rows it has not drawn yet). Frozen layers
        (``requires_grad=False``) give a frozen collection; a mix of frozen and trainable
        layers raises ``InputValueError`` (a collection's tables train together).

        Examples
        --------
        >>> user = LookupLinear(10, 3, bias=False)
        >>> ebc = LookupCollection.from_layers({"user": user})
        >>> torch.equal(ebc["user"].weight, user.weight)
        True
        """
        for k, layer in layers.items():
            if not isinstance(layer, LookupLinear):
                raise InputTypeError(
                    f"LookupCollection.from_layers: {k!r} must be a LookupLinear, got "
                    f"{type(layer).__name__}. Convert it first (LookupLinear.from_embedding)."
                )
            if layer.bias is not None:
                raise InputValueError(
                    f"LookupCollection.from_layers: {k!r} has a bias, and the tables of a "
                    "collection have none (as TorchRec's). Build it with bias=False, or add the "
                    "bias to the collection's output."
                )
        if not layers:
            raise InputValueError("LookupCollection.from_layers: got no layers.")
        first = next(iter(layers.values()))
        collection = cls(
            [TableConfig(k, layer.in_features, layer.out_features, [k], mode=layer.mode,
                         padding_idx=layer.padding_idx, init=layer.init,
                         dtype=layer.weight.dtype)
             for k, layer in layers.items()],
            sparse=first.sparse if sparse is None else sparse,
            device=first.weight.device,
        )
        frozen = _all_or_none_frozen(
            {k: layer.weight.requires_grad for k, layer in layers.items()}, "from_layers",
            "layers")
        with torch.no_grad():
            for k, layer in layers.items():  # every row (a table in a file draws its rest)
                collection._rows(k).copy_(layer._whole_table())
        if frozen:
            collection.requires_grad_(False)
        return collection

    def to_torchrec(self, *, is_weighted: bool | None = None) -> Any:
        """TorchRec's ``EmbeddingBagCollection`` with these tables (each in its dtype),
        features, weights and ``is_weighted`` (needs ``torchrec``; see docs/collection.md),
        whose outputs on a ``KeyedJaggedTensor`` equal this collection's on the same batch
        (``KeyedBags.to_kjt``), a feature read by several tables keyed ``feature@table`` in
        both.

        Each table's ``init`` is its config's: ``"linear"`` is uniform within
        +-1/sqrt(num_embeddings) (``weight_init_min``/``weight_init_max``, TorchRec's default
        bounds), ``"normal"`` and a callable are its ``init_fn`` (a ``uniform_`` with bounds,
        as :meth:`from_torchrec` makes, sets the bounds too), which TorchRec's
        ``reset_parameters`` draws with.

        Parameters
        ----------
        is_weighted : bool, optional
            The EBC's ``is_weighted``; by default the collection's. A collection built with
            ``is_weighted=None`` reads a batch's weights when it has them, which no EBC does
            (it reads them always or never): it needs this choice.

        Raises
        ------
        InputValueError
            What the EBC would compute differently: a table TorchRec's pooled tables cannot
            express (``mode`` other than sum or mean, a dtype other than float32 or float16,
            hashing, padding); ``is_weighted=None`` on both sides; an ``is_weighted`` other
            than the collection's ``True`` or ``False``; a ``mode="mean"`` table in a weighted
            EBC (``nn.EmbeddingBag`` has no weights with mean: every weighted batch would
            raise ``NotImplementedError`` in it); a float16 table in a weighted EBC
            (``nn.EmbeddingBag`` takes weights only in the table's dtype: float32 weights
            would raise ``RuntimeError`` in it).
        InputTypeError
            ``is_weighted`` not None, True or False.
        """
        if is_weighted not in (None, True, False):
            raise InputTypeError(
                f"to_torchrec: is_weighted must be None, True or False, got {is_weighted!r}."
            )
        if is_weighted is None and self.is_weighted is None:
            raise InputValueError(
                "to_torchrec: the collection has is_weighted=None (a batch's weights scale its "
                "rows when it has them), and TorchRec's EmbeddingBagCollection reads them "
                "always or never, so their outputs would differ on some batches. Choose: "
                "to_torchrec(is_weighted=True) for weighted batches, to_torchrec("
                "is_weighted=False) for unweighted ones (weights ignored), or build the "
                "collection with is_weighted=True or False."
            )
        if is_weighted is not None and self.is_weighted not in (None, is_weighted):
            raise InputValueError(
                f"to_torchrec(is_weighted={is_weighted}): the collection has is_weighted="
                f"{self.is_weighted}, so the EBC's outputs would differ from its on weighted "
                f"batches. Call to_torchrec() (is_weighted={self.is_weighted}), or build the "
                f"collection with is_weighted={is_weighted}."
            )
        weighted = bool(self.is_weighted if is_weighted is None else is_weighted)
        mean = [t.name for t in self.tables if t.mode == "mean"]
        if weighted and mean:
            raise InputValueError(
                f"to_torchrec: tables {mean} have mode='mean' and the EBC would be weighted "
                "(is_weighted=True); TorchRec pools them with nn.EmbeddingBag, which takes no "
                "per-entry weights with mode='mean' (every weighted batch would raise "
                "NotImplementedError). Use mode='sum' tables for weighted batches, or "
                "is_weighted=False (weights ignored)."
            )
        half = [t.name for t in self.tables
                if self.table_groups[self._places[t.name].group].dtype == torch.float16]
        if weighted and half:
            raise InputValueError(
                f"to_torchrec: tables {half} are float16 and the EBC would be weighted "
                "(is_weighted=True); TorchRec pools them with nn.EmbeddingBag, which takes "
                "per-entry weights only in the table's dtype, so a batch's weights (float32, "
                "as KeyedBags.to_kjt gives them) would fail in every float16 table and float16 "
                "weights in every float32 one (every weighted batch would raise RuntimeError). "
                "Use float32 tables for weighted batches (collection.float()), or "
                "is_weighted=False (weights ignored)."
            )
        from torchrec import EmbeddingBagCollection, EmbeddingBagConfig, PoolingType
        from torchrec.types import DataType

        pooling = {"sum": PoolingType.SUM, "mean": PoolingType.MEAN}
        dtypes = {torch.float32: DataType.FP32, torch.float16: DataType.FP16}
        configs = []
        for t in self.tables:
            dtype = self.table_groups[self._places[t.name].group].dtype
            if t.mode not in pooling or t.hashing or t.padding_idx is not None or (
                dtype not in dtypes
            ):
                raise InputValueError(
                    f"to_torchrec: table {t.name!r} (mode={t.mode!r}, hashing={t.hashing!r}, "
                    f"padding_idx={t.padding_idx}, {dtype}) has no TorchRec equivalent: its "
                    "pooled tables are sum or mean, float32 or float16 (its unsharded "
                    "bfloat16 tables are float16), without hashing or padding."
                )
            configs.append(EmbeddingBagConfig(
                num_embeddings=t.num_embeddings, embedding_dim=t.embedding_dim, name=t.name,
                feature_names=list(t.feature_names), pooling=pooling[t.mode],
                data_type=dtypes[dtype], **_torchrec_init(t)))
        ebc = EmbeddingBagCollection(tables=configs, is_weighted=weighted,
                                     device=self.table_groups[0].device)
        self._whole_tables()
        with torch.no_grad():
            for t in self.tables:
                weight = ebc.embedding_bags[t.name].weight
                weight.copy_(self._rows(t.name))
                # a frozen table stays frozen
                weight.requires_grad_(self.table_groups[self._places[t.name].group].requires_grad)
        return ebc

    @classmethod
    def from_torchrec(cls, ebc: Any, *, state_dict: Mapping[str, torch.Tensor] | None = None,
                      sparse: bool = False) -> LookupCollection:
        """A collection equal to TorchRec's ``EmbeddingBagCollection`` ``ebc``: its tables
        (each in its own dtype, its values exactly), features (a feature several tables read
        too, its outputs keyed ``feature@table`` as the EBC keys them), pooling, weights and
        ``is_weighted``. ``state_dict``: the weights to take instead of ``ebc``'s
        (``embedding_bags.<table>.weight``, e.g. gathered from a sharded model); each table
        keeps the EBC's dtype, the state dict's values cast to it as the EBC's
        ``load_state_dict`` casts them (a float32 state dict fills a float16 table with its
        values rounded to float16).

        Each table keeps its initialisation: its config's ``init_fn`` (TorchRec's default, or
        the one its ``weight_init_min``/``weight_init_max`` make: uniform within them) is the
        table's ``init``, which :meth:`reset_parameters` draws with.

        Raises
        ------
        InputValueError
            A table pooled otherwise than SUM or MEAN, or a MEAN table in a weighted EBC
            (which fails on every weighted batch: ``nn.EmbeddingBag`` has no weights with mean,
            so there is no result to equal).
        InputTypeError
            ``ebc`` is not an ``EmbeddingBagCollection`` (an ``EmbeddingCollection``, say), or
            is TorchRec's quantized one (``torchrec.quant``): pass the float EBC, and
            :meth:`quantize` the collection.
        StateDictError
            ``state_dict`` lacks a table's ``embedding_bags.<table>.weight`` or holds one of
            another shape than the table's ``(num_embeddings, embedding_dim)`` (TorchRec's
            ``load_state_dict`` refuses it too: "size mismatch"), or one that is not floating
            point (a quantized EBC's packed rows). Nothing is built then.
        """
        if _is_torchrec_quantized(ebc):
            raise InputTypeError(
                f"from_torchrec takes TorchRec's float EmbeddingBagCollection, got the "
                f"quantized {type(ebc).__module__}.{type(ebc).__name__}, whose tables are "
                "packed rows no float table holds. Pass the float EmbeddingBagCollection it was "
                "quantized from, then call .quantize(dtype) on the collection for a quantized "
                "one."
            )
        if not callable(getattr(ebc, "embedding_bag_configs", None)):
            unpooled = callable(getattr(ebc, "embedding_configs", None))
            raise InputTypeError(
                f"from_torchrec takes TorchRec's EmbeddingBagCollection, got "
                f"{type(ebc).__name__}"
                + (" (unpooled: one row per ID)" if unpooled else "") + ". "
                + ("Build the collection from its tables (TableConfig(name, num_embeddings, "
                   "embedding_dim, feature_names) each), load its state dict with the "
                   "'embeddings.' prefix of each key renamed 'embedding_bags.', and look up a "
                   "{feature: index tensor} dict for one row per ID."
                   if unpooled else "Pass an EmbeddingBagCollection.")
            )
        modes: dict[str, Mode] = {"SUM": "sum", "MEAN": "mean"}
        tables = []
        for c in ebc.embedding_bag_configs():
            if c.pooling.name not in modes:
                raise InputValueError(
                    f"from_torchrec: table {c.name!r} pools with {c.pooling.name}; "
                    "LookupCollection takes SUM and MEAN."
                )
            if c.pooling.name == "MEAN" and ebc.is_weighted():
                raise InputValueError(
                    f"from_torchrec: table {c.name!r} pools with MEAN in a weighted "
                    "EmbeddingBagCollection, which fails on every weighted batch (PyTorch's "
                    "embedding_bag takes per-sample weights only with sum), so there is no "
                    "result to equal. Pool it with SUM, or build the EBC with "
                    "is_weighted=False."
                )
            tables.append(TableConfig(c.name, c.num_embeddings, c.embedding_dim,
                                      list(c.feature_names), mode=modes[c.pooling.name],
                                      init=_torchrec_init_of(c)))
        own = ebc.state_dict()
        weights = own if state_dict is None else state_dict
        _check_torchrec_weights(tables, weights)
        frozen = _all_or_none_frozen(
            {t.name: ebc.embedding_bags[t.name].weight.requires_grad for t in tables},
            "from_torchrec", "EmbeddingBagCollection tables")
        some = next(iter(weights.values()))
        # each table in the EBC's dtype; a state dict of another dtype is cast while copied,
        # as the EBC's load_state_dict casts it
        collection = cls([dataclasses.replace(
                            t, dtype=own[f"embedding_bags.{t.name}.weight"].dtype)
                          for t in tables],
                         sparse=sparse, is_weighted=bool(ebc.is_weighted()), device=some.device)
        with torch.no_grad():
            for t in tables:
                collection._rows(t.name).copy_(weights[f"embedding_bags.{t.name}.weight"])
        if frozen:
            collection.requires_grad_(False)
        return collection

    def quantize(self, dtype: str | Mapping[str, str] = "int8") -> Any:
        """An inference copy with every table quantized row by row, as
        :meth:`LookupLinear.quantize <lookuplinear.LookupLinear.quantize>` quantizes one:
        ``"int8"``, ``"int4"`` or ``"float16"`` for all tables, or ``{table: dtype}`` for some
        (the others stay float, frozen copies). See
        :class:`~lookuplinear.QuantizedLookupCollection`.

        Examples
        --------
        >>> ebc = LookupCollection([TableConfig("user", 1000, 8, ["user"]),
        ...                         TableConfig("item", 50, 8, ["item"])])
        >>> q = ebc.quantize({"user": "int4"})
        >>> q.dtypes
        {'user': 'int4', 'item': None}
        """
        from ..quant.collection import QuantizedLookupCollection

        self._whole_tables()
        return QuantizedLookupCollection.from_float(self, dtype)

    # ------------------------------------------------------------------ forward
    def rows(self, features: KeyedBags, name: str, read: dict[str, Bags] | None = None
             ) -> Bags:
        """The bags of output ``name`` (a feature, or ``feature@table``) as its table reads
        them: the IDs hashed to rows where the table hashes (:func:`~lookuplinear.hash_ids`),
        else the feature's bags ``features[feature]`` themselves.

        ``read``: the features' bags already read (by feature name), where this one's is
        taken from and put. A feature that several tables read is then sliced out of the batch
        once: in a recorded graph each slice's bounds are new symbols, and a backward that
        reads a second slice of the same feature (a ``max`` table's, beside a sum group's)
        would name symbols its graph is not given (Inductor: "expected [u5, u4] to have been
        codegen-ed")."""
        cfg = self._places[self._table_name(name)].config
        feature = self._collection_plan.feature_of[name]
        if read is None:
            bags = features[feature]
        else:
            found = read.get(feature)
            bags = read[feature] = features[feature] if found is None else found
        if cfg.hashing == "map" and self._mapped is not None:  # inside forward: mapped once
            return Bags.from_checked(self._mapped[name], bags.offsets.long(), bags.weights)
        id_map = cast(IdMap, self.id_maps[cfg.name]) if cfg.hashing == "map" else None
        return table_bags(cfg, bags, id_map=id_map,
                          dtype=self.table_groups[self._places[cfg.name].group].dtype,
                          feature=feature)

    def _drawn(self, g: int, input: Any) -> Any:
        """Group ``g``'s input, with its new rows drawn first when the group is a table in a
        file (an eager call: a graph break inside a compiled graph). The lookup draws none."""
        if g in self._lookup_plan.stored:
            storage = storage_of(self.table_groups[g])
            assert storage is not None
            return drawn_eagerly(storage, input)
        return input

    def _unpooled(self, feature: str, x: torch.Tensor) -> torch.Tensor:
        g, ids, pad, sparse = self._unpooled_rows(feature, x)
        w = self.table_groups[g]
        if len(ids) == 2:  # "qr": the quotient's and the remainder's rows
            rows = (lookup_linear(self._drawn(g, ids[0]), w, None, sparse=sparse)
                    + lookup_linear(self._drawn(g, ids[1]), w, None, sparse=sparse))
        else:
            rows = lookup_linear(self._drawn(g, ids[0]), w, None, padding_idx=pad, sparse=sparse)
        # float16 and bfloat16 rows give float32, as TorchRec's EmbeddingCollection
        return rows.to(torch.promote_types(rows.dtype, torch.float32))

    def _unpooled_rows(self, feature: str, x: torch.Tensor
                       ) -> tuple[int, list[torch.Tensor], int | None, bool]:
        """``feature``'s IDs ``x`` (for a ``hashing="map"`` table their rows) checked, as rows
        of its table's group parameter: the group, the index tensors whose rows it adds (the
        quotient's and the remainder's for ``hashing="qr"``, else one), the padding row, and
        whether the lookup's gradient is row-sparse."""
        g, off, cfg = self._places[self._table_of[feature]]
        if cfg.hashing == "map":  # x: the rows its IDs were mapped to (_map_inputs)
            ids = x.to(self.table_groups[g].device)
        elif not isinstance(x, torch.Tensor) or x.dtype.is_floating_point or \
                x.dtype == torch.bool:
            raise InputTypeError(
                f"LookupCollection: feature {feature!r} needs an integer index tensor, got "
                f"{getattr(x, 'dtype', type(x).__name__)}."
            )
        else:
            ids = x if cfg.hashing is None else hash_ids(x, cfg.num_embeddings)
        if cfg.hashing is None:
            check_index_range(ids, cfg.num_embeddings, where=f"features[{feature!r}]")
        if cfg.hashing == "qr":
            q, r = qr_rows(ids, cfg.num_embeddings, int(cfg.qr_buckets or 1))
            return g, [q + off, r + off], None, self.sparse
        return (g, [ids + off], None if cfg.padding_idx is None else off + cfg.padding_idx,
                self._sparse(cfg))

    def _unpooled_outputs(self, plain: list[tuple[str, Any]], mapped: list[tuple[str, Any]]
                          ) -> dict[str, torch.Tensor]:
        """:meth:`CollectionBase._unpooled_outputs`, except that where a group parameter's
        row-sparse gradients cannot be added (:func:`~lookuplinear.modules.batched.
        sums_sparse_gradients`) the lookups of its outputs are one lookup
        (:meth:`_looked_up_together`): its one row-sparse gradient. Every output's IDs are
        checked before the maps are called, as there."""
        if not self.sparse or all(sums_sparse_gradients(w) for w in self.table_groups):
            return super()._unpooled_outputs(plain, mapped)
        inputs = list(plain)
        found = [self._unpooled_rows(n, x) for n, x in plain]
        if mapped:
            rows = self._mapped_rows(mapped)
            inputs += [(n, rows[n]) for n, _ in mapped]
            found += [self._unpooled_rows(n, rows[n]) for n, _ in mapped]
        by_group: dict[int, list[tuple[str, Any, list[torch.Tensor], int | None]]] = {}
        dense = set()  # the groups of a max table (alone in its group), whose gradient is dense
        for (n, x), (g, ids, pad, sparse) in zip(inputs, found, strict=True):
            by_group.setdefault(g, []).append((n, x, ids, pad))
            if not sparse:
                dense.add(g)
        out: dict[str, torch.Tensor] = {}
        for g, outputs in by_group.items():
            if (sum(len(ids) for _, _, ids, _ in outputs) > 1 and g not in dense
                    and not sums_sparse_gradients(self.table_groups[g])):
                together = self._looked_up_together(
                    g, [(n, ids, pad) for n, _, ids, pad in outputs])
                # float16 rows give float32, as TorchRec's EmbeddingCollection
                out.update((n, v.float()) for n, v in together.items())
            else:
                out.update((n, self._unpooled(n, x)) for n, x, _, _ in outputs)
        return out

    def _looked_up_together(self, g: int, outputs: list[tuple[str, list[torch.Tensor],
                                                                int | None]]
                            ) -> dict[str, torch.Tensor]:
        """The rows of ``outputs`` (each ``(output, its index tensors, its padding row)``, of
        group ``g``: :meth:`_unpooled_rows`) as one row-sparse lookup of the group's parameter,
        their index tensors side by side: the same rows, each output's :meth:`_unpooled`, and
        one gradient, their gradients' sum (a padding position leaves its row out, as there)."""
        w = self.table_groups[g]
        flat = [i.reshape(-1) for _, ids, _ in outputs for i in ids]
        every = self._drawn(g, torch.cat(flat))
        pads = sorted({pad for _, _, pad in outputs if pad is not None})
        if len(pads) <= 1:
            looked = lookup_linear(every, w, None, padding_idx=pads[0] if pads else None,
                                   sparse=True)
        else:  # several tables' padding rows: their positions read the rows, without gradient
            padding = torch.isin(every, torch.tensor(pads, device=every.device))
            if capturing():  # no branch on values in a recorded graph: zero gradients there
                looked = lookup_linear(every, w, None, sparse=True)
                looked = torch.where(padding.unsqueeze(-1), looked.detach(), looked)
            else:
                keep = torch.nonzero(~padding).squeeze(1)
                looked = w.detach()[every].index_copy(
                    0, keep, lookup_linear(every[keep], w, None, sparse=True))
        pieces = iter(looked.split([i.numel() for i in flat]))
        out = {}
        for n, ids, _ in outputs:
            rows = next(pieces).view(*ids[0].shape, w.shape[1])
            for _ in ids[1:]:  # "qr": the remainder's rows added
                rows = rows + next(pieces).view(*ids[0].shape, w.shape[1])
            out[n] = rows
        return out

    def _pooled(self, kb: KeyedBags) -> KeyedTensor:
        groups = list(self.table_groups)  # read once: a ParameterList's indexing is slow
        # the mapped rows, for rows() during this lookup (set only where there are maps: a
        # module's __setattr__ costs microseconds)
        mapping = len(self.id_maps) > 0
        # each feature's bags, sliced once for the maps and the lookup (rows())
        read: dict[str, Bags] | None = {} if mapping else None
        if read is not None:
            self._check_before_mapping(kb, read)
            self._mapped = self._map_ids(kb, read)
        try:
            values = self._lookup_plan.lookup(kb, groups, self.sparse, self, read)
        finally:
            if mapping:
                self._mapped = None
        # float16 and bfloat16 tables pool in their dtype and give float32, as TorchRec's
        dtype = torch.float32
        for w in groups:
            dtype = torch.promote_types(dtype, w.dtype)
        return KeyedTensor(self.embedding_names, list(self._collection_plan.dims),
                           values.to(dtype))

    def _check_before_mapping(self, kb: KeyedBags, read: dict[str, Bags]) -> None:
        """The refusals of ``kb`` by its lookup, run before the maps take its new IDs (a
        refused batch leaves them as they were): each ID of a table that does not hash in its
        table's rows, weights of 1 on ``max`` tables, no weights that require grad where a
        ``hashing="qr"`` table folds its mode into them."""
        feature_of = self._collection_plan.feature_of
        for name in self.embedding_names:
            cfg = self._places[self._table_of[name]].config
            if cfg.hashing is None:
                bags = self._lookup_plan._checked(kb, name, self, read)
            elif kb.weights is not None and (cfg.mode == "max" or cfg.hashing == "qr"):
                bags = kb[feature_of[name]]
            else:
                continue
            if cfg.mode == "max":
                check_max_weights(bags.indices, bags.weights, cfg.padding_idx)
            check_qr_weights(cfg, bags.weights, feature_of[name])

    def _map_rows(self, features: KeyedBags, name: str) -> torch.Tensor:
        """The rows of output ``name``'s IDs, of a ``hashing="map"`` table: ``rows(features,
        name).indices``, as mapped once in this forward."""
        if self._mapped is not None:
            return self._mapped[name]
        return self.rows(features, name).indices

    def _map_ids(self, kb: KeyedBags, read: dict[str, Bags]) -> dict[str, torch.Tensor]:
        """The rows of the IDs of every output of a ``hashing="map"`` table: one map call per
        table (its features' IDs together, so that no feature takes a row another reads in this
        batch); rows given to new IDs are re-drawn and their optimizer state marked for a fresh
        start. Each output's IDs are its feature's, ``kb[feature].indices``, its bags taken from
        and put in ``read`` (:meth:`rows`)."""
        feature_of = self._collection_plan.feature_of
        inputs = []
        for name, module in self.id_maps.items():
            if cast(IdMap, module).key_type == "str":
                raise InputTypeError(
                    f"LookupCollection: table {name!r} holds string IDs (key_type='str'), and a "
                    "KeyedBags holds integer IDs. Give its features as a {feature: IDs} dict "
                    "of strings (a list, numpy array or pandas column)."
                )
            for n in self._collection_plan.outputs_of_table(name):
                feature = feature_of[n]
                bags = read.get(feature)
                if bags is None:
                    bags = read[feature] = kb[feature]
                inputs.append((n, bags.indices))
        return self._map_inputs(inputs)

    def _renew(self, table: str) -> None:
        g, off, cfg = self._places[table]
        cast(IdMap, self.id_maps[table]).renew(self.table_groups[g], off, cfg.init)

    def _apply(self, fn: Any, recurse: bool = True) -> Any:
        for g in self._lookup_plan.stored:  # refused before anything is converted
            refuse_conversion(fn, self.table_groups[g], "LookupCollection (TableConfig storage=)")
        return super()._apply(fn, recurse)

    def extra_repr(self) -> str:
        return f"features={self.embedding_names}, groups={len(self.table_groups)}"

    def _check_state_entries(self, *args: Any) -> None:
        """The per-table entries checked before a load copies anything (:func:`_check_tables`)."""
        _check_tables(self, *args)


def _check_torchrec_weights(tables: list[TableConfig],
                            weights: Mapping[str, torch.Tensor]) -> None:
    """Raise :class:`StateDictError` unless ``weights`` holds each table's
    ``embedding_bags.<table>.weight`` of shape ``(num_embeddings, embedding_dim)``: what
    TorchRec's ``load_state_dict`` refuses ("size mismatch"), refused before anything is
    copied (a shape that broadcasts would fill the table with copies of one row or column)."""
    missing, wrong = [], []
    for t in tables:
        key = f"embedding_bags.{t.name}.weight"
        value = weights.get(key)
        want = (t.num_embeddings, t.embedding_dim)
        if value is None:
            missing.append(key)
        elif not isinstance(value, torch.Tensor) or tuple(value.shape) != want:
            got = tuple(value.shape) if isinstance(value, torch.Tensor) else type(value).__name__
            wrong.append(f"size mismatch for {key}: the state dict holds {got}, table "
                         f"{t.name!r} is {want} (num_embeddings, embedding_dim)")
        elif not value.dtype.is_floating_point:
            wrong.append(f"{key} holds {value.dtype} values, not a float table (a quantized "
                         "EBC's packed rows?): take the float EBC's")
    if missing or wrong:
        lacking = [f"missing {key} (its keys: {sorted(weights)[:6]})" for key in missing[:3]]
        raise StateDictError(
            "from_torchrec(state_dict=...): " + "; ".join(wrong + lacking) + ". Pass the "
            "state dict of the EmbeddingBagCollection whose configs these are (keys "
            "embedding_bags.<table>.weight, without a wrapper's prefix such as 'module.'), "
            "or build the EBC with these shapes. Nothing was built."
        )


def _is_torchrec_quantized(ebc: Any) -> bool:
    """Whether ``ebc`` is one of TorchRec's quantized embedding modules (``torchrec.quant``,
    or a sharded one of ``torchrec.distributed.quant_*``), whose tables are packed rows."""
    module = type(ebc).__module__.split(".")
    return module[0] == "torchrec" and any(part.startswith("quant") for part in module[1:])


def _torchrec_init_of(config: Any) -> Init:
    """A TorchRec table config's initialisation as a table's ``init``: its ``init_fn``
    (uniform within ``weight_init_min``/``weight_init_max`` unless set otherwise)."""
    if config.init_fn is not None:
        return cast(Init, config.init_fn)
    return functools.partial(nn.init.uniform_, a=config.get_weight_init_min(),
                             b=config.get_weight_init_max())


def _torchrec_init(table: TableConfig) -> dict[str, Any]:
    """A table's ``init`` as TorchRec's ``EmbeddingBagConfig`` arguments: ``"linear"`` is
    uniform within +-1/sqrt(num_embeddings) (``nn.Linear``'s bound with num_embeddings inputs,
    TorchRec's default), ``"normal"`` and any callable its ``init_fn`` (a ``uniform_`` with
    bounds its ``weight_init_min``/``weight_init_max`` too)."""
    init = table.init
    if init == "linear":
        bound = math.sqrt(1 / table.num_embeddings)
        return {"weight_init_min": -bound, "weight_init_max": bound}
    if init == "normal":
        return {"init_fn": nn.init.normal_}
    out: dict[str, Any] = {"init_fn": init}
    if isinstance(init, functools.partial) and init.func is nn.init.uniform_ \
            and not init.args and set(init.keywords) == {"a", "b"}:
        out.update(weight_init_min=init.keywords["a"], weight_init_max=init.keywords["b"])
    return out


def _tables_state_dict(module: LookupCollection, state: dict[str, Any], prefix: str,
                       local_metadata: Any) -> None:
    """``table_groups.<g>`` -> one ``embedding_bags.<table>.weight`` entry per table (views), with
    every row of a table in a file drawn."""
    module._whole_tables()
    groups = [state.pop(f"{prefix}table_groups.{g}") for g in range(len(module.table_groups))]
    for name, (g, off, cfg) in module._places.items():
        state[f"{prefix}embedding_bags.{name}.weight"] = groups[g][off : off + cfg.stored_rows]


def _table_entries(module: LookupCollection, state: dict[str, Any], prefix: str
                   ) -> tuple[dict[str, str], list[str], list[str]]:
    """Each table's ``state_dict`` key, the keys ``state`` lacks, and a message for each entry
    given that is not a tensor of its table's shape (``torch.cat`` of the group would crash
    on it, or the group's shape hide which table it is)."""
    keys = {name: f"{prefix}embedding_bags.{name}.weight" for name in module._places}
    absent = [k for k in keys.values() if k not in state]
    errors = []
    for name, key in keys.items():
        if key not in state:
            continue
        g, _, cfg = module._places[name]
        shape = (cfg.stored_rows, module.table_groups[g].shape[1])
        value = state[key]
        got = tuple(value.shape) if isinstance(value, torch.Tensor) else type(value).__name__
        if got != shape:
            errors.append(f"{key}: table {name!r} is of shape {shape} in this collection, the "
                          f"state dict's is {got}")
    return keys, absent, errors


def _left_out(module: LookupCollection, absent: list[str], keys: dict[str, str]
              ) -> list[str]:
    """The refusal of a ``strict=False`` load that leaves out a table of a group held in a
    file: the rows of that table no lookup has drawn have no values to keep."""
    out = []
    for name, key in keys.items():
        param = module.table_groups[module._places[name].group]
        if key in absent and storage_of(param) is not None:
            out.append(f"{key}: left out of a strict=False load, but its group is a table in "
                       "a file, whose rows not drawn yet have no values to keep; give every "
                       "table of the group, or load this table through its layer, "
                       "collection[name].load_state_dict({'weight': ...})")
    return out


@checked_hook  # by _check_tables
def _tables_load_state_dict(module: LookupCollection, state: dict[str, Any], prefix: str,
                            local_metadata: dict[str, Any], strict: bool,
                            missing_keys: list[str], unexpected_keys: list[str],
                            error_msgs: list[str]) -> None:
    """Per-table entries -> the group parameters they live in (missing tables: left missing);
    a table in a file loaded whole keeps the values (every row marked written)."""
    module.__dict__["_loading_prefix"] = prefix  # the missing keys' names: _tables_missing_keys
    keys, absent, errors = _table_entries(module, state, prefix)
    errors += _uncopyable_tables(module, state, keys, local_metadata)
    if len(absent) == len(keys) and not errors:
        return  # strict loading reports the missing keys (table_groups.<g>)
    if absent and not strict:
        errors += _left_out(module, absent, keys)
    if errors:
        error_msgs.extend(errors)
        for key in keys.values():
            state.pop(key, None)
        return
    # a table left out (strict=False) keeps its values, as a module's parameter does, and is
    # reported missing by its name
    missing_keys.extend(absent)
    for g, param in enumerate(module.table_groups):
        names = [n for n, p in module._places.items() if p.group == g]
        parts = []
        for n in names:
            if keys[n] in state:
                parts.append(state.pop(keys[n]))
            else:
                off, rows = module._places[n].offset, module._places[n].config.stored_rows
                parts.append(param.detach()[off:off + rows].clone())
        state[f"{prefix}table_groups.{g}"] = torch.cat(parts)
        storage = storage_of(module.table_groups[g])
        if storage is not None:
            refuse_assign(local_metadata, keys[names[0]])
            storage.mark_written()


def _uncopyable_tables(module: LookupCollection, state: dict[str, Any], keys: dict[str, str],
                       local_metadata: dict[str, Any]) -> list[str]:
    """The per-table entries without values to copy (:func:`lookuplinear._loading.uncopyable`),
    or, where the load assigns, those whose group (their concatenation) cannot be assigned
    (:func:`lookuplinear._loading.unassignable`): refused before a group is built (or a table
    in a file marked written), also where the collection loads inside another module's load."""
    problems = []
    if local_metadata.get("assign_to_params_buffers"):
        for g, param in enumerate(module.table_groups):
            names = [n for n, p in module._places.items() if p.group == g]
            dtypes = [getattr(state.get(keys[n]), "dtype", None) for n in names]
            if not all(isinstance(d, torch.dtype) for d in dtypes):
                continue  # missing or not a tensor: reported as such
            dtype = functools.reduce(torch.promote_types, cast(list[torch.dtype], dtypes))
            for name in names:
                problem = unassignable(keys[name], dtype, param)
                if problem is not None:
                    problems.append(problem)
        return problems
    for name, key in keys.items():
        given = state.get(key)
        param = module.table_groups[module._places[name].group]
        problem = uncopyable(key, given, param) if isinstance(given, torch.Tensor) else None
        if problem is not None:
            problems.append(problem)
    return problems


def _tables_missing_keys(module: LookupCollection, incompatible: Any) -> None:
    """This collection's groups reported missing (``strict=False``) named as its tables'
    entries, the names ``state_dict()`` gives (``embedding_bags.<table>.weight``); its prefix
    in the model is the one its load's pre-hook saw (:func:`_tables_load_state_dict`)."""
    prefix = module.__dict__.pop("_loading_prefix", None)
    if prefix is None:
        return
    groups = {f"{prefix}table_groups.{g}": g for g in range(len(module.table_groups))}
    named = []
    for key in incompatible.missing_keys:
        if key not in groups:
            named.append(key)
            continue
        named.extend(f"{prefix}embedding_bags.{n}.weight" for n, p in module._places.items()
                     if p.group == groups[key])
    incompatible.missing_keys[:] = named


def _check_tables(module: LookupCollection, state: dict[str, Any], prefix: str,
                  local_metadata: dict[str, Any], strict: bool, missing_keys: list[str],
                  unexpected_keys: list[str], error_msgs: list[str]) -> None:
    """:func:`_tables_load_state_dict` without copying anything: the per-table entries checked
    and replaced by placeholders of their groups' shapes (:func:`_placeholder`), for
    :func:`lookuplinear._loading.check_state_dict`."""
    keys, absent, errors = _table_entries(module, state, prefix)
    errors += _uncopyable_tables(module, state, keys, local_metadata)
    if strict and absent:
        missing_keys.extend(absent)
    elif absent and len(absent) < len(keys):
        errors += _left_out(module, absent, keys)
    error_msgs.extend(errors)
    if len(absent) == len(keys):
        if strict:  # reported by table; not again as their groups
            for g, param in enumerate(module.table_groups):
                state.setdefault(f"{prefix}table_groups.{g}", _placeholder(param))
        return
    for g, param in enumerate(module.table_groups):
        names = [n for n, p in module._places.items() if p.group == g]
        if storage_of(param) is not None:
            refuse_assign(local_metadata, keys[names[0]])
        state[f"{prefix}table_groups.{g}"] = _placeholder(param)
    for key in keys.values():
        state.pop(key, None)


def _placeholder(param: torch.Tensor) -> torch.Tensor:
    """An entry of ``param``'s shape, dtype and layout that holds no memory (one value,
    expanded): what :func:`_check_tables` puts in a group's place."""
    return torch.zeros((), dtype=param.dtype).expand(param.shape)


def _all_or_none_frozen(trains: Mapping[str, bool], where: str, what: str) -> bool:
    """Whether every table of ``trains`` (``{table: requires_grad}``) is frozen: a conversion
    keeps a frozen table frozen (as :func:`~lookuplinear.LookupLinear.from_linear` and the
    drop-ins' conversions do), and a collection's tables train together (several share a
    parameter), so a mix is refused."""
    frozen = sorted(k for k, grad in trains.items() if not grad)
    if frozen and len(frozen) < len(trains):
        raise InputValueError(
            f"LookupCollection.{where}: the tables {frozen} are frozen (requires_grad=False) "
            "and the others are not, and a collection's tables train together. Pass "
            f"{what} that all train, or all frozen; or freeze the collection's parameters "
            "after building it."
        )
    return bool(frozen)
