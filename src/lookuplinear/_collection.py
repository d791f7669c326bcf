"""``TableConfig`` and ``LookupCollection``: many categorical features, all tables in one lookup.

The tables of one width and dtype live in one ``(total rows, dim)`` parameter, table after
table, as FBGEMM's table-batched embedding keeps them::

    tables  user (4 rows), item (3 rows), both dim 2
    weights [u0, u1, u2, u3, i0, i1, i2]       # one Parameter, row offsets user 0, item 4

    batch   user: [[3], [1, 2]]   item: [[0, 0], []]
    lookup  bags [[3], [1, 2], [4, 4], []]     # item's indices shifted by its offset 4
    output  (N=2, 4): [user's 2 columns | item's 2 columns]

so a batch of all features is one lookup forward, one row-sparse gradient (or one fused
optimizer pass) backward, whatever the number of tables. Tables of several widths are one
parameter per width: the usual batch (plain sum tables, no per-entry weights) is checked and
shifted for all the widths in one pass and, with row-sparse gradients of one dtype, looked up
by one kernel call that writes each width's rows or sums straight into their columns of the
output; any other batch is one lookup per width, put in feature order by one copy. The
gradient is taken back apart by one copy either way. ``state_dict`` keeps one key per table
(``embedding_bags.<table>.weight``, TorchRec's names).
"""

from __future__ import annotations

import dataclasses
import functools
import math
import os
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple, cast

import torch
import torch.nn.functional as F
from torch import nn

from . import hugepages
from ._bags import Bags, check_index_range
from ._fusion import reset_rows
from ._hashing import hash_ids
from ._idmap import IdMap
from ._kernels import (
    Lookup,
    bag_sum_into,
    deinterleave,
    gather_into,
    interleave,
    mode_weights,
    one_id_rows,
    segments,
    shifted_rows,
    split_blocks,
)
from ._keyed import KeyedBags, KeyedTensor
from ._layer import LookupLinear, init_weight_
from ._rowgrad import weight_grad
from ._sizes import as_size
from ._storage import TableStorage, attach, drawn_eagerly, refuse_assign, storage_of
from .errors import InputTypeError, InputValueError
from .functional import Mode, check_mode, lookup_linear, normalize_padding_idx

__all__ = ["LookupCollection", "TableConfig", "route", "table_bags", "weighted_as"]


@dataclass(frozen=True)
class TableConfig:
    """One table of a :class:`LookupCollection` and the features that look it up.

    TorchRec's ``EmbeddingBagConfig`` under lookuplinear's names: the table behaves as a
    ``LookupLinear(num_embeddings, embedding_dim, bias=False, mode=mode, ...)``.

    Parameters
    ----------
    name : str
        The table's name (its ``state_dict`` key is ``embedding_bags.<name>.weight``).
    num_embeddings : int
        Rows: the size of the features' one-hot dimension.
    embedding_dim : int
        Output width of each feature that reads the table.
    feature_names : sequence of str
        The features (keys of a :class:`KeyedBags`) looked up in this table; several features
        may share one table.
    mode : {"sum", "mean", "sqrtn", "max"}, default "sum"
        How each bag is pooled.
    padding_idx : int, optional
        An index that contributes nothing and gets no gradient (its row starts at zero).
    init : {"normal", "linear"} or callable, default "normal"
        As :class:`~lookuplinear.LookupLinear`'s ``init``; ``"normal"`` is ``nn.Embedding``'s.
    hashing : {None, "mod", "qr"}, default None
        ``None``: IDs are row indices, each in ``[0, num_embeddings)``. ``"mod"``: any int64 ID
        (negative or huge too) reads row ``h = hash_ids(id, num_embeddings)``
        (:func:`~lookuplinear.hash_ids`, MurmurHash3 as scikit-learn's ``HashingVectorizer``);
        the dense equivalent is ``nn.Linear`` on the hashed one-hot ``one_hot(id) @ H``.
        ``"qr"``: the quotient-remainder trick (Shi et al., KDD 2020): row ``h`` is
        ``Q[h // m] + R[h % m]`` with ``m = qr_buckets`` remainder rows and
        ``ceil(num_embeddings / m)`` quotient rows, stored one after the other: about
        ``2 * sqrt(num_embeddings)`` rows instead of ``num_embeddings``. Its dense equivalent is
        ``nn.Linear`` on the multi-hot of each ID's two stored rows. No ``padding_idx`` with
        hashing, and no ``mode="max"`` with ``"qr"``.
    qr_buckets : int, optional
        ``m``, the remainder rows of ``hashing="qr"`` (default ``ceil(sqrt(num_embeddings))``).
    fallback_rows, admit_after : int, optional
        ``hashing="map"``: a managed, collision-free :class:`~lookuplinear.IdMap` gives each
        int64 ID its own row on first sight (after ``admit_after`` sightings, default 1), up
        to ``num_embeddings - fallback_rows`` IDs (``fallback_rows`` default 1), then takes the
        least recently used ID's row, re-drawn as ``init`` says and with fresh optimizer state
        (:mod:`lookuplinear.optim`); IDs without a row share the fallback rows. The map is in
        the collection's ``state_dict``. In eval mode nothing is added.
    key_type : {"int", "str"}, default "int"
        ``hashing="map"``: the IDs the table's ``IdMap`` holds. A ``"str"`` table reads string
        IDs (a list, numpy array or pandas column of str) in a ``{feature: IDs}`` dict.
    dtype : torch.dtype, optional
        The table's dtype (default: torch's default dtype).
    storage : path, optional
        Keep this table and its optimizer state in memory-mapped files of a directory at this
        path (:class:`~lookuplinear.TableStorage`, as ``LookupLinear(..., storage=)``): rows
        drawn lazily from ``(seed, row)``, a table larger than memory. A path that holds a
        table of this shape is opened (writable) and goes on from its values; a new path is
        created. CPU only; ``init`` ``"normal"`` or ``"linear"``.

    Examples
    --------
    >>> TableConfig("ids", 1000, 8, ["user", "friend"]).feature_names
    ('user', 'friend')
    """

    name: str
    num_embeddings: int
    embedding_dim: int
    feature_names: Sequence[str]
    mode: Mode = "sum"
    padding_idx: int | None = None
    init: str | Callable[[torch.Tensor], Any] = field(default="normal", compare=False)
    hashing: str | None = None
    dtype: torch.dtype | None = None
    qr_buckets: int | None = None
    fallback_rows: int | None = None
    admit_after: int | None = None
    storage: str | os.PathLike[str] | None = field(default=None, compare=False)
    key_type: str = "int"

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name or "." in self.name:
            raise InputValueError(
                f"TableConfig: name must be a non-empty string without '.', got {self.name!r}."
            )
        where = f"TableConfig {self.name!r}"
        for key in ("num_embeddings", "embedding_dim"):
            object.__setattr__(self, key, as_size(getattr(self, key), key, where=where))
        names = (self.feature_names,) if isinstance(self.feature_names, str) else tuple(
            self.feature_names)
        if not names or not all(isinstance(f, str) for f in names):
            raise InputValueError(
                f"TableConfig {self.name!r}: feature_names must be a non-empty sequence of "
                f"strings, got {self.feature_names!r}."
            )
        object.__setattr__(self, "feature_names", names)
        check_mode(self.mode)
        object.__setattr__(self, "padding_idx",
                           normalize_padding_idx(self.padding_idx, self.num_embeddings))
        if not (self.init in ("normal", "linear") or callable(self.init)):
            raise InputValueError(
                f"TableConfig {self.name!r}: init must be 'normal', 'linear' or a callable, "
                f"got {self.init!r}."
            )
        if self.storage is not None and self.init not in ("normal", "linear"):
            raise InputValueError(
                f"TableConfig {self.name!r}: storage= draws each row on its first lookup from "
                f"(seed, row), so init must be 'normal' or 'linear', got {self.init!r}."
            )
        if self.hashing not in (None, "mod", "qr", "map"):
            raise InputValueError(
                f"TableConfig {self.name!r}: hashing must be None, 'mod', 'qr' or 'map', got "
                f"{self.hashing!r}."
            )
        for key in ("fallback_rows", "admit_after"):
            if getattr(self, key) is not None:
                object.__setattr__(self, key, as_size(getattr(self, key), key, where=where))
        if self.hashing != "map" and (self.fallback_rows, self.admit_after, self.key_type) != (
                None, None, "int"):
            raise InputValueError(
                f"TableConfig {self.name!r}: fallback_rows, admit_after and key_type are for "
                f"hashing='map', got hashing={self.hashing!r}."
            )
        if self.hashing is not None and self.padding_idx is not None:
            raise InputValueError(
                f"TableConfig {self.name!r}: padding_idx={self.padding_idx} with "
                f"hashing={self.hashing!r}: any ID may hash to that row. Drop the padding IDs "
                "from the batch instead (or hashing=None)."
            )
        if self.hashing == "qr":
            if self.mode == "max":
                raise InputValueError(
                    f"TableConfig {self.name!r}: hashing='qr' sums two rows per ID, which a "
                    "max over rows cannot express; use mode 'sum', 'mean' or 'sqrtn'."
                )
            m = self.qr_buckets
            if m is None:
                object.__setattr__(self, "qr_buckets", math.isqrt(self.num_embeddings - 1) + 1)
            else:
                object.__setattr__(self, "qr_buckets", as_size(m, "qr_buckets", where=where))
        elif self.qr_buckets is not None:
            raise InputValueError(
                f"TableConfig {self.name!r}: qr_buckets is for hashing='qr', got "
                f"hashing={self.hashing!r}."
            )

    @property
    def stored_rows(self) -> int:
        """The rows the table holds: ``num_embeddings``, or with ``hashing="qr"`` the
        quotient rows plus ``qr_buckets`` remainder rows.

        Examples
        --------
        >>> TableConfig("ids", 1_000_000, 16, ["user"], hashing="qr").stored_rows
        2000
        """
        if self.hashing != "qr":
            return self.num_embeddings
        m = int(self.qr_buckets or 1)
        return -(-self.num_embeddings // m) + m


class _Place(NamedTuple):
    """Where a table lives: its parameter (``weights[group]``) and its first row there."""

    group: int
    offset: int
    config: TableConfig


class LookupCollection(nn.Module):
    """Many categorical features in one module: each feature's bags pooled through its table.

    Dense equivalent: for each feature ``f`` of table ``t``, ``nn.Linear(t.num_embeddings,
    t.embedding_dim, bias=False)`` (``linear.weight == table.T``) applied to ``f``'s
    multi-hot rows (``kb[f].to_dense(t.num_embeddings)``, scaled by ``t.mode``); the outputs
    side by side in feature order. Features sharing a table share its ``nn.Linear``, so the
    table's gradient is the sum over them. ``check_equivalence(collection, kb)`` proves it.
    TorchRec's ``EmbeddingBagCollection`` over a ``KeyedJaggedTensor``, as one lookup: the
    tables of one width and dtype are one parameter (module docstring), so a batch is one
    kernel call forward and one backward per width and dtype, or for all widths of one dtype
    with ``sparse=True`` (``mode="max"`` tables are looked up on their own).

    Parameters
    ----------
    tables : sequence of TableConfig
        Distinct table names; every feature in exactly one table.
    sparse : bool, default False
        Row-sparse gradients (for :mod:`lookuplinear.optim`, fused or not). A ``mode="max"``
        table, which has no row-sparse gradient, gets a dense one (its own parameter).
    is_weighted : bool, optional
        TorchRec's ``is_weighted``: whether a batch's per-entry ``weights`` scale its rows.
        ``None`` (default): they do when the batch has them. ``True``: they do, and a batch
        without weights raises. ``False``: they are ignored (as TorchRec's
        ``EmbeddingBagCollection(is_weighted=False)`` ignores a ``KeyedJaggedTensor``'s).
        :meth:`to_torchrec` and :meth:`from_torchrec` carry it.
    device : torch.device or str, optional

    Attributes
    ----------
    weights : nn.ParameterList
        One ``(total rows, dim)`` parameter per group of tables (what an optimizer is given,
        through ``parameters()``).
    tables : tuple of TableConfig
    feature_names : list of str
        The output order: every table's features, table after table.

    The output is in float32 for float16 and bfloat16 tables (each table pools in its dtype,
    then its outputs are cast, as TorchRec's ``EmbeddingBagCollection`` does); tables of several
    dtypes give the promoted one (float64 beside float32 gives float64).

    Raises
    ------
    InputValueError
        Table names repeated, a feature in two tables; at ``forward``, a feature the tables need
        missing from the batch, a batch without weights with ``is_weighted=True``.

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

    def __init__(
        self,
        tables: Sequence[TableConfig],
        *,
        sparse: bool = False,
        is_weighted: bool | None = None,
        device: torch.device | str | None = None,
    ) -> None:
        super().__init__()
        tables = _distinct(tuple(tables))
        if is_weighted not in (None, True, False):
            raise InputTypeError(
                f"LookupCollection: is_weighted must be None, True or False, got {is_weighted!r}."
            )
        self.tables = tables
        self.sparse = sparse
        self.is_weighted = is_weighted
        owner: dict[str, str] = {}
        for t in tables:
            for f in t.feature_names:
                if f in owner:
                    raise InputValueError(
                        f"LookupCollection: feature {f!r} is in tables {owner[f]!r} and "
                        f"{t.name!r}; a feature reads one table."
                    )
                owner[f] = t.name
        self._table_of = owner
        self.feature_names = list(owner)
        dtype_of = {t.name: t.dtype or torch.get_default_dtype() for t in tables}
        keys: dict[tuple[Any, ...], int] = {}
        places: dict[str, _Place] = {}
        sizes: list[tuple[int, int, torch.dtype]] = []
        for t in tables:  # group by (dim, dtype); a max table alone (it has no sparse grad),
            # and a table in a file alone (its own files)
            alone = t.mode == "max" or t.storage is not None
            key = (t.embedding_dim, dtype_of[t.name], t.name if alone else None)
            if key not in keys:
                keys[key] = len(sizes)
                sizes.append((0, t.embedding_dim, dtype_of[t.name]))
            g = keys[key]
            rows, dim, dt = sizes[g]
            places[t.name] = _Place(g, rows, t)
            sizes[g] = (rows + t.stored_rows, dim, dt)
        self._places = places
        self._plan()
        self.id_maps = nn.ModuleDict({
            t.name: IdMap(t.num_embeddings, fallback_rows=t.fallback_rows or 1,
                          admit_after=t.admit_after or 1, key_type=t.key_type)
            for t in tables if t.hashing == "map"
        })
        self._mapped: dict[str, torch.Tensor] | None = None
        stored = {self._places[t.name].group: t for t in tables if t.storage is not None}
        self._stored = frozenset(stored)
        self.weights = nn.ParameterList(
            _file_table(stored[g], dt, device) if g in stored else
            nn.Parameter(hugepages.empty(rows, dim, dtype=dt, device=device))
            for g, (rows, dim, dt) in enumerate(sizes)
        )
        self.reset_parameters(fresh_only=True)
        self._register_state_dict_hook(_tables_state_dict)
        self._register_load_state_dict_pre_hook(_tables_load_state_dict, with_module=True)

    def _plan(self) -> None:
        """The features of each group (in feature order) and their positions in the batch."""
        groups: dict[int, list[str]] = {}
        for f in self.feature_names:
            groups.setdefault(self._places[self._table_of[f]].group, []).append(f)
        self._groups = list(groups.items())
        self._dims = [self._places[self._table_of[f]].config.embedding_dim
                      for f in self.feature_names]
        self._index = {f: i for i, f in enumerate(self.feature_names)}
        self._positions = [torch.tensor([self._index[f] for f in feats])
                           for _, feats in self._groups]
        # a one-ID batch's rows, group after group, each group's (N, F_g) in example order:
        # group g's are rows[N * first : N * (first + F_g)], feature f's (column j of its group)
        # at N * first + j + n * F_g (one_id_rows' ``place``)
        self._first: dict[int, int] = {}
        place = [(0, 0, 0)] * len(self.feature_names)
        first = 0
        for g, feats in self._groups:
            self._first[g] = first
            for j, f in enumerate(feats):
                place[self._index[f]] = (first, j, len(feats))
            first += len(feats)
        self._place = torch.tensor(place, dtype=torch.int64).reshape(-1, 3)
        starts = [sum(self._dims[:i]) for i in range(len(self._dims))]
        #: where each group's features' columns start in the output
        self._cols = {g: torch.tensor([starts[self._index[f]] for f in feats], dtype=torch.int64)
                      for g, feats in self._groups}
        #: where each feature's columns start, and the position of its group in ``_groups``
        self._feature_cols = starts
        self._feature_group = [next(i for i, (_, feats) in enumerate(self._groups) if f in feats)
                               for f in self.feature_names]
        self._segments: dict[Any, torch.Tensor] = {}
        #: every table a plain sum (no padding, no hashing): a batch's IDs are its rows
        self._plain = all(t.mode == "sum" and t.padding_idx is None and t.hashing is None
                          for t in self.tables)

    def reset_parameters(self, *, fresh_only: bool = False) -> None:
        """Draw every table as its ``init`` says, table after table (the values separate
        ``LookupLinear`` layers made in that order under the same seed would get); a table in
        a file has every row undrawn again (drawn from ``(seed, row)`` on its next lookup)."""
        for name, place in self._places.items():
            storage = storage_of(self.weights[place.group])
            if storage is None:
                init_weight_(self._rows(name), place.config.init, place.config.padding_idx)
            elif not fresh_only:
                storage.clear()

    # ------------------------------------------------------------------ tables
    def _sparse(self, cfg: TableConfig) -> bool:
        """Whether table ``cfg`` gets row-sparse gradients: ``sparse``, except a ``mode="max"``
        table (alone in its parameter), which has none and gets a dense one."""
        return self.sparse and cfg.mode != "max"

    def _whole_tables(self) -> None:
        """Draw the rows no lookup has drawn yet of every table in a file: what is exported
        reads every row, as a lookup of each would, so that every export equals the
        collection."""
        for g in self._stored:
            storage = storage_of(self.weights[g])
            assert storage is not None
            storage.materialize_all()

    def _rows(self, name: str) -> torch.Tensor:
        """Table ``name``: a differentiable view of its rows in its group's parameter."""
        g, off, cfg = self._places[name]
        return self.weights[g][off : off + cfg.stored_rows]

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
        layer.weight = nn.Parameter(rows, requires_grad=self.weights[g].requires_grad)
        layer._placed = rows.data_ptr()
        storage = storage_of(self.weights[g])
        if storage is not None:  # a table in a file (alone in its group): its rows drawn too
            attach(layer.weight, storage)
            layer.storage = storage
        return layer

    def table_of(self, feature: str) -> LookupLinear:
        """The table that ``feature`` reads."""
        return self[self._table_of[feature]]

    def features(self) -> Iterator[tuple[str, LookupLinear]]:
        """``(feature, table)`` pairs in output order."""
        for f in self.feature_names:
            yield f, self.table_of(f)

    @classmethod
    def from_layers(cls, layers: Mapping[str, LookupLinear], *,
                    sparse: bool | None = None) -> LookupCollection:
        """A collection with one table and one feature per key, holding copies of the layers'
        weights (same mode, padding, dtype, device; ``sparse`` defaults to the layers').

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
        with torch.no_grad():
            for k, layer in layers.items():
                collection._rows(k).copy_(layer.weight)
        return collection

    def to_torchrec(self) -> Any:
        """TorchRec's ``EmbeddingBagCollection`` with these tables (each in its dtype),
        features, weights and ``is_weighted`` (needs ``torchrec``; see docs/collection.md).
        Tables with ``mode`` sum or mean, float32 or float16, no hashing, no padding:
        what TorchRec's pooled tables express; anything else raises ``InputValueError``.
        ``is_weighted=None`` (weights when a batch has them) becomes TorchRec's default
        ``False``: equal on unweighted batches; build the collection with ``is_weighted=True``
        for weighted ones."""
        from torchrec import EmbeddingBagCollection, EmbeddingBagConfig, PoolingType
        from torchrec.types import DataType

        pooling = {"sum": PoolingType.SUM, "mean": PoolingType.MEAN}
        dtypes = {torch.float32: DataType.FP32, torch.float16: DataType.FP16}
        configs = []
        for t in self.tables:
            dtype = self.weights[self._places[t.name].group].dtype
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
                data_type=dtypes[dtype]))
        ebc = EmbeddingBagCollection(tables=configs, is_weighted=bool(self.is_weighted),
                                     device=self.weights[0].device)
        self._whole_tables()
        with torch.no_grad():
            for t in self.tables:
                ebc.embedding_bags[t.name].weight.copy_(self._rows(t.name))
        return ebc

    @classmethod
    def from_torchrec(cls, ebc: Any, *, state_dict: Mapping[str, torch.Tensor] | None = None,
                      sparse: bool = False) -> LookupCollection:
        """A collection equal to TorchRec's ``EmbeddingBagCollection`` ``ebc``: its tables
        (each in its own dtype, its values exactly), features, pooling, weights and
        ``is_weighted``. ``state_dict``: the weights to take instead of ``ebc``'s
        (``embedding_bags.<table>.weight``, e.g. gathered from a sharded model)."""
        modes: dict[str, Mode] = {"SUM": "sum", "MEAN": "mean"}
        tables = []
        for c in ebc.embedding_bag_configs():
            if c.pooling.name not in modes:
                raise InputValueError(
                    f"from_torchrec: table {c.name!r} pools with {c.pooling.name}; "
                    "LookupCollection takes SUM and MEAN."
                )
            tables.append(TableConfig(c.name, c.num_embeddings, c.embedding_dim,
                                      list(c.feature_names), mode=modes[c.pooling.name]))
        weights = ebc.state_dict() if state_dict is None else state_dict
        some = next(iter(weights.values()))
        collection = cls([dataclasses.replace(
                            t, dtype=weights[f"embedding_bags.{t.name}.weight"].dtype)
                          for t in tables],
                         sparse=sparse, is_weighted=bool(ebc.is_weighted()), device=some.device)
        with torch.no_grad():
            for t in tables:
                collection._rows(t.name).copy_(weights[f"embedding_bags.{t.name}.weight"])
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
        from ._quantized_collection import QuantizedLookupCollection

        self._whole_tables()
        return QuantizedLookupCollection(self, dtype)

    # ------------------------------------------------------------------ forward
    def rows(self, features: KeyedBags, feature: str) -> Bags:
        """``feature``'s bags as its table reads them: the IDs hashed to rows where the table
        hashes (:func:`~lookuplinear.hash_ids`), else ``features[feature]`` itself."""
        cfg = self._places[self._table_of[feature]].config
        if cfg.hashing == "map" and self._mapped is not None:  # inside forward: mapped once
            bags = features[feature]
            return Bags(self._mapped[feature], bags.offsets, bags.weights)
        id_map = cast(IdMap, self.id_maps[cfg.name]) if cfg.hashing == "map" else None
        return table_bags(cfg, features[feature], id_map=id_map,
                          dtype=self.weights[self._places[cfg.name].group].dtype,
                          feature=feature)

    def forward(
        self, features: KeyedBags | Mapping[str, torch.Tensor]
    ) -> KeyedTensor | dict[str, torch.Tensor]:
        """Pool every feature's bags through its table.

        ``features`` is a :class:`KeyedBags` (returns a :class:`KeyedTensor`: ``values()`` is
        ``(N, sum of dims)`` in :attr:`feature_names` order, ``out[f]`` one feature's ``(N, dim)``)
        or a ``{feature: index tensor}`` dict (unpooled lookups, as TorchRec's
        ``EmbeddingCollection``: each ``S`` index tensor gives ``S + (dim,)``). Features in the
        batch that no table reads are ignored.
        """
        return route(self, features)

    def _drawn(self, g: int, input: Any) -> Any:
        """Group ``g``'s input, with its new rows drawn first when the group is a table in a
        file (an eager call, a graph break inside a compiled graph, where ``lookup_linear``
        cannot draw them). Also when this runs eagerly: under ``torch.compile`` this frame may
        run eagerly after a graph break while ``lookup_linear`` runs compiled, and then neither
        would draw; an eager ``lookup_linear`` finds the rows drawn."""
        if g in self._stored:
            return drawn_eagerly(self.weights[g], input)
        return input

    def _unpooled(self, feature: str, x: torch.Tensor) -> torch.Tensor:
        g, off, cfg = self._places[self._table_of[feature]]
        if cfg.hashing == "map":  # the map takes any IDs it holds (and checks them)
            id_map = cast(IdMap, self.id_maps[cfg.name])
            ids = id_map(x).to(self.weights[g].device)
            if id_map.evicted.numel():
                self._renew(cfg.name, id_map.evicted)
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
            m = int(cfg.qr_buckets or 1)
            n_q = -(-cfg.num_embeddings // m)
            w = self.weights[g]
            return (lookup_linear(self._drawn(g, ids // m + off), w, None, sparse=self.sparse)
                    + lookup_linear(self._drawn(g, ids % m + (off + n_q)), w, None,
                                    sparse=self.sparse))
        pad = None if cfg.padding_idx is None else off + cfg.padding_idx
        return lookup_linear(self._drawn(g, ids + off), self.weights[g], None, padding_idx=pad,
                             sparse=self._sparse(cfg))

    def _pooled(self, kb: KeyedBags) -> KeyedTensor:
        self._mapped = self._map_ids(kb) if len(self.id_maps) else None
        try:
            values = self._lookup(kb)
        finally:
            self._mapped = None
        # float16 and bfloat16 tables pool in their dtype and give float32, as TorchRec's
        dtype = functools.reduce(torch.promote_types, (w.dtype for w in self.weights),
                                 torch.float32)
        return KeyedTensor(self.feature_names, self._dims, values.to(dtype))

    def _map_ids(self, kb: KeyedBags) -> dict[str, torch.Tensor]:
        """The rows of every feature of a ``hashing="map"`` table: one map call per table (its
        features' IDs together, so that no feature takes a row another reads in this batch);
        rows given to new IDs are re-drawn and their optimizer state marked for a fresh start."""
        mapped: dict[str, torch.Tensor] = {}
        for name, module in self.id_maps.items():
            id_map = cast(IdMap, module)
            if id_map.key_type == "str":
                raise InputTypeError(
                    f"LookupCollection: table {name!r} holds string IDs (key_type='str'), and a "
                    "KeyedBags holds integer IDs. Give its features as a {feature: IDs} dict "
                    "of strings (a list, numpy array or pandas column)."
                )
            feats = [f for f in self.feature_names if self._table_of[f] == name]
            ids = [kb[f].indices for f in feats]
            rows = id_map(torch.cat(ids)).split([x.numel() for x in ids])
            mapped.update(zip(feats, rows, strict=True))
            if id_map.evicted.numel():
                self._renew(name, id_map.evicted)
        return mapped

    @torch.no_grad()
    def _renew(self, name: str, rows: torch.Tensor) -> None:
        """Re-draw ``rows`` of table ``name`` (as its ``init`` draws a table) and mark their
        optimizer state for a fresh start (:func:`lookuplinear._fusion.reset_rows`)."""
        g, off, cfg = self._places[name]
        weight = self.weights[g]
        fresh = weight.new_empty(rows.numel(), cfg.embedding_dim)
        init_weight_(fresh, "normal" if cfg.init == "linear" else cfg.init, None)
        at = rows.to(weight.device) + off
        weight.index_copy_(0, at, fresh)
        reset_rows(weight, at)

    def _lookup(self, kb: KeyedBags) -> torch.Tensor:
        """The ``(N, sum of dims)`` pooled outputs in feature order, each in its table's dtype
        (promoted where tables of several dtypes meet)."""
        weights_need_grad = kb.weights is not None and kb.weights.requires_grad
        n = kb.batch_size
        whole = self._shifted(kb)
        single = len(self._groups) == 1
        # each lookup's output, its features, and whether it is feature-major ((F * N, dim):
        # feature after feature) or example-major ((N, F * dim))
        parts: list[tuple[torch.Tensor, list[str], bool]] = []
        if (whole is not None and not single and self.sparse
                and len({w.dtype for w in self.weights}) == 1):
            return self._written(whole, n)
        for (g, feats), at in zip(self._groups, self._positions, strict=True):
            dim = self.weights[g].shape[1]
            if weights_need_grad or self._places[self._table_of[feats[0]]].config.mode == "max":
                # one feature at a time: a max, or weights that need their gradient; each
                # reads the group's parameter at its table's rows (a row-sparse gradient
                # cannot flow back through a view); a max has no row-sparse gradient
                for f in feats:
                    _, off, cfg = self._places[self._table_of[f]]
                    mode = "sum" if cfg.hashing == "qr" else cfg.mode  # rows() folded it
                    bags = self._checked(kb, f)
                    pad = None if cfg.padding_idx is None else off + cfg.padding_idx
                    parts.append((lookup_linear(
                        self._drawn(g, Bags(bags.indices + off, bags.offsets, bags.weights)),
                        self.weights[g], None, mode=mode, padding_idx=pad,
                        sparse=self._sparse(cfg)), [f], True))
                continue
            if isinstance(whole, torch.Tensor):  # (N, F) rows: one lookup into (N, F_g, dim)
                rows = whole if single else self._group_rows(whole, g, len(feats), n)
                out = lookup_linear(self._drawn(g, rows), self.weights[g], None,
                                    sparse=self.sparse).reshape(n, len(feats) * dim)
                if single:  # in example order already: no copy, forward or backward
                    return out
                parts.append((out, feats, False))
                continue
            bags = (self._group_bags(kb, feats) if whole is None else
                    whole if single else _select_features(whole, at, n))
            flat = lookup_linear(self._drawn(g, bags), self.weights[g], None,
                                 sparse=self.sparse)  # (F_g * N, dim), feature-major
            if single:  # (N, F * dim): one copy, whose backward is one copy too
                return (flat.view(len(feats), n, dim).transpose(0, 1)
                        .reshape(n, len(feats) * dim))
            parts.append((flat, feats, True))
        return self._in_feature_order(parts, n)

    def _in_feature_order(self, parts: list[tuple[torch.Tensor, list[str], bool]], n: int
                          ) -> torch.Tensor:
        """The lookups' outputs as one ``(N, sum of dims)`` matrix in feature order (one copy,
        and one copy of its gradient into theirs)."""
        segs = self._segments_of([(feats, fm) for _, feats, fm in parts])
        dtype = functools.reduce(torch.promote_types, (out.dtype for out, _, _ in parts))
        kinds = [(fm, len(feats)) for _, feats, fm in parts]
        values: torch.Tensor = _InFeatureOrder.apply(segs, kinds, n,
                                                     *(out.to(dtype) for out, _, _ in parts))
        return values

    def _segments_of(self, layout: list[tuple[list[str], bool]]) -> torch.Tensor:
        """The segments (:func:`~lookuplinear._kernels.segments`) that put outputs of this
        ``layout`` (each output's features, and whether it is feature-major) in feature order."""
        key = tuple((tuple(feats), fm) for feats, fm in layout)
        segs = self._segments.get(key)
        if segs is None:
            block_of: dict[str, int] = {}
            widths: list[int] = []
            for feats, fm in layout:
                for f in feats:
                    if fm or f == feats[0]:
                        widths.append(0)
                    block_of[f] = len(widths) - 1
                    widths[-1] += self._dims[self._index[f]]
            segs = segments([(block_of[f], d) for f, d in zip(self.feature_names, self._dims,
                                                                strict=True)], widths)
            self._segments[key] = segs
        return segs

    def _group_rows(self, rows: torch.Tensor, g: int, n_feats: int, n: int) -> torch.Tensor:
        """Group ``g``'s ``(N, F_g)`` rows among a one-ID batch's rows (:meth:`_shifted`)."""
        first = self._first[g] * n
        return rows[first:first + n * n_feats].view(n, n_feats)

    def _written(self, whole: torch.Tensor | Bags, n: int) -> torch.Tensor:
        """The usual batch (``whole``: :meth:`_shifted`'s) over tables of several widths, for
        row-sparse gradients (``sparse=True``) of one dtype, looked up by one kernel call
        straight into the ``(N, sum of dims)`` output in feature order: a one-ID batch's rows
        gathered, or bags summed."""
        weights = [self.weights[g] for g, _ in self._groups]
        one_id = isinstance(whole, torch.Tensor)
        write: Callable[[torch.Tensor], bool]
        if isinstance(whole, torch.Tensor):  # each group's (N, F_g) rows
            rows = [self._drawn(g, self._group_rows(whole, g, len(feats), n))
                    for g, feats in self._groups]
            lookups = [Lookup(r.reshape(-1)) for r in rows]
            write = functools.partial(gather_into, [
                (w, r, self._cols[g]) for w, r, (g, _) in zip(weights, rows, self._groups,
                                                             strict=True)])
        else:  # each group's F_g * N bags; the kernel reads every feature's from ``whole``
            bags = [self._drawn(g, _select_features(whole, at, n))
                    for (g, _), at in zip(self._groups, self._positions, strict=True)]
            lookups = [Lookup(b.indices, b.offsets) for b in bags]
            write = functools.partial(bag_sum_into, [weights[i] for i in self._feature_group],
                                      self._feature_cols, whole.indices, whole.offsets)
        layout = [(feats, not one_id) for _, feats in self._groups]
        kinds = [(not one_id, len(feats)) for _, feats in self._groups]
        values: torch.Tensor = _Lookups.apply(lookups, write, self._segments_of(layout), kinds,
                                              n, sum(self._dims), *weights)
        return values

    def _checked(self, kb: KeyedBags, feature: str) -> Bags:
        """``rows(kb, feature)`` with every index checked against its table's rows."""
        bags = self.rows(kb, feature)
        cfg = self._places[self._table_of[feature]].config
        if cfg.hashing is None:
            check_index_range(bags.indices, cfg.num_embeddings, where=f"kb[{feature!r}]")
        return bags

    def _group_bags(self, kb: KeyedBags, feats: list[str]) -> Bags:
        """The ``F * N`` bags of one group's features as one lookup of its parameter: indices
        shifted by their table's first row, padding dropped, ``mean``/``sqrtn`` folded into
        per-entry weights (the same weights ``lookup_linear`` folds for one table)."""
        indices, lengths, weights = [], [], []
        dtype = self.weights[self._places[self._table_of[feats[0]]].group].dtype
        any_weights = kb.weights is not None or any(
            self._places[self._table_of[f]].config.mode in ("mean", "sqrtn") for f in feats)
        for f in feats:
            _, off, cfg = self._places[self._table_of[f]]
            bags = self._checked(kb, f)
            if cfg.padding_idx is not None:
                bags = bags.drop_index(cfg.padding_idx)
            indices.append(bags.indices.long() + off if off else bags.indices.long())
            lengths.append(bags.lengths())
            if any_weights:
                if cfg.mode in ("mean", "sqrtn") and cfg.hashing != "qr":
                    weights.append(mode_weights(bags.offsets, bags.weights, cfg.mode == "sqrtn",
                                                dtype))
                elif bags.weights is not None:
                    weights.append(bags.weights.to(dtype))
                else:
                    weights.append(torch.ones(bags.nnz, dtype=dtype, device=bags.device))
        offsets = torch.zeros(sum(x.numel() for x in lengths) + 1, dtype=torch.long,
                              device=kb.device)
        torch.cumsum(torch.cat(lengths), 0, out=offsets[1:])
        out = Bags.__new__(Bags)  # checked feature by feature: nothing to check again
        out.indices = torch.cat(indices)
        out.offsets = offsets
        out.weights = torch.cat(weights) if any_weights else None
        return out

    def _bounds(self, feats: list[str], device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
        """Each feature's first row in its group's parameter and its table's rows, int64."""
        places = [self._places[self._table_of[f]] for f in feats]
        both = torch.tensor([[p.offset, p.config.num_embeddings] for p in places], device=device)
        return both[:, 0], both[:, 1]

    def _shifted(self, kb: KeyedBags) -> torch.Tensor | Bags | None:
        """The usual batch (plain sum tables, no per-entry weights, the batch's keys exactly
        :attr:`feature_names`) checked and shifted to the rows of the groups' parameters in one
        pass: when every bag holds one ID, its rows, each group's ``(N, F_g)`` in example order,
        group after group (the ``(N, F)`` rows for one group); else the batch's bags with
        shifted indices. None for any other batch (each group then builds its own)."""
        if not self._plain or kb.weights is not None or kb.keys() != self.feature_names:
            return None
        feats = self.feature_names
        shift, limit = self._bounds(feats, kb.device)
        found: torch.Tensor | int | None = None
        if not torch.compiler.is_compiling() and kb.values.numel() == kb.offsets.numel() - 1:
            place = None if len(self._groups) == 1 else torch.stack(
                [self._place[:, 0] * kb.batch_size + self._place[:, 1], self._place[:, 2]], 1
            ).to(kb.device)
            found = one_id_rows(kb.values, kb.offsets, len(feats), shift, limit, place)
        if found is None:
            found = shifted_rows(kb.values, kb.offsets, len(feats), shift, limit)
            if not isinstance(found, int):
                out = Bags.__new__(Bags)  # a checked batch, shifted: nothing to check again
                out.indices, out.offsets, out.weights = found, kb.offsets, None
                return out
        if isinstance(found, int):  # an ID outside its table: raise, naming its feature
            starts = kb.offsets[::kb.batch_size].tolist()
            self._checked(kb, feats[next(f for f in range(len(feats))
                                         if found < starts[f + 1])])
            raise AssertionError("unreachable: an ID out of range was not found again")
        return found

    def extra_repr(self) -> str:
        return f"features={self.feature_names}, groups={len(self.weights)}"


class _InFeatureOrder(torch.autograd.Function):
    """Lookup outputs (``kinds``: per output, feature-major or not and its number of features)
    side by side in feature order (``segs``: :func:`~lookuplinear._kernels.segments`); the
    backward copies the gradient's columns back into each output's layout."""

    @staticmethod
    def forward(ctx: Any, segs: torch.Tensor, kinds: list[tuple[bool, int]], n: int,
                *outs: torch.Tensor) -> torch.Tensor:
        ctx.segs, ctx.kinds, ctx.n = segs, kinds, n
        ctx.shapes = [out.shape for out in outs]
        return interleave(_blocks(outs, kinds, n), segs)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[Any, ...]:
        return (None, None, None, *_apart(grad, ctx.segs, ctx.kinds, ctx.shapes, ctx.n))


class _Lookups(torch.autograd.Function):
    """Sum lookups of several tables (``lookups``: one per table of ``weights``; ``kinds``:
    whether its output is feature-major, and its number of features) side by side in feature
    order in one ``(N, width)`` output, written by ``write`` (one kernel call; where it does
    not apply, torch's lookups and one copy). The backward copies each table's gradient rows
    out (:func:`_apart`) and hands them to it as its own lookup's backward would
    (:func:`~lookuplinear._rowgrad.weight_grad`: row-sparse, or the fused update, one call for
    all tables)."""

    @staticmethod
    def forward(ctx: Any, lookups: list[Lookup], write: Callable[[torch.Tensor], bool],
                segs: torch.Tensor, kinds: list[tuple[bool, int]], n: int, width: int,
                *weights: torch.Tensor) -> torch.Tensor:
        out = torch.empty(n, width, dtype=weights[0].dtype, device=weights[0].device)
        if not write(out):
            outs = [F.embedding(lk.indices, w.detach()).reshape(n, f * w.shape[1])
                    if lk.offsets is None else
                    F.embedding_bag(lk.indices, w.detach(), lk.offsets, mode="sum",
                                    include_last_offset=True)
                    for lk, w, (_, f) in zip(lookups, weights, kinds, strict=True)]
            out = interleave(_blocks(outs, kinds, n), segs)
        ctx.lookups, ctx.segs, ctx.kinds, ctx.n, ctx.params = lookups, segs, kinds, n, weights
        ctx.save_for_backward(*weights)
        return out

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[Any, ...]:
        weights = ctx.saved_tensors
        shapes = [(f * ctx.n, w.shape[1]) if fm else (ctx.n, f * w.shape[1])
                  for (fm, f), w in zip(ctx.kinds, weights, strict=True)]
        parts = _apart(grad, ctx.segs, ctx.kinds, shapes, ctx.n)
        grads = [
            weight_grad(param, w, lk, part.reshape(-1, w.shape[1]))
            if ctx.needs_input_grad[6 + i] else None
            for i, (lk, w, param, part) in enumerate(
                zip(ctx.lookups, weights, ctx.params, parts, strict=True))
        ]
        return (None, None, None, None, None, None, *grads)


def _apart(grad: torch.Tensor, segs: torch.Tensor, kinds: list[tuple[bool, int]],
           shapes: Sequence[Sequence[int]], n: int) -> list[torch.Tensor]:
    """The gradient of outputs put in feature order (``segs``) copied back into each output's
    layout (``kinds``, ``shapes``): one copy, or torch ops that can be differentiated again
    under ``create_graph=True``."""
    if torch.is_grad_enabled():
        blocks = iter(split_blocks(grad, segs))
        grads = []
        for (fm, f), shape in zip(kinds, shapes, strict=True):
            rows = [next(blocks) for _ in range(f if fm else 1)]
            grads.append(torch.stack(rows).reshape(shape) if fm else rows[0].reshape(shape))
        return grads
    grads = [grad.new_empty(tuple(shape)) for shape in shapes]
    deinterleave(grad, segs, _blocks(grads, kinds, n))
    return grads


def _blocks(outs: Sequence[torch.Tensor], kinds: list[tuple[bool, int]], n: int
            ) -> list[torch.Tensor]:
    """The ``(N, width)`` blocks of lookup outputs: an example-major output is one, a
    feature-major one a block per feature (views)."""
    blocks: list[torch.Tensor] = []
    for out, (fm, f) in zip(outs, kinds, strict=True):
        if fm:  # (F * N, dim)
            blocks.extend(out.view(f, n, out.shape[1]).unbind(0))
        else:  # (N, F * dim)
            blocks.append(out)
    return blocks


def _select_features(bags: Bags, at: torch.Tensor, n: int) -> Bags:
    """The bags of the features at positions ``at`` of a feature-major batch of ``n`` bags per
    feature, feature after feature (one copy of their indices)."""
    lengths = (bags.offsets[1:] - bags.offsets[:-1]).view(-1, n).index_select(
        0, at.to(bags.offsets.device))
    starts = bags.offsets[::n].tolist()
    out = Bags.__new__(Bags)  # parts of a checked batch
    out.indices = torch.cat([bags.indices[starts[f]:starts[f + 1]] for f in at.tolist()])
    out.offsets = torch.zeros(lengths.numel() + 1, dtype=torch.long, device=bags.offsets.device)
    torch.cumsum(lengths.reshape(-1), 0, out=out.offsets[1:])
    out.weights = None
    return out


def route(module: Any, features: Any) -> Any:
    """A collection's forward: a ``KeyedBags`` to ``module._pooled`` (every feature of the
    tables must be in it; its weights kept or dropped as ``module.is_weighted`` says), a
    ``{feature: index tensor}`` dict to ``module._unpooled`` feature by feature; anything else,
    or unknown or missing features, a clear error."""
    name = type(module).__name__
    if isinstance(features, KeyedBags):
        missing = [f for f in module.feature_names if f not in features]
        if missing:
            raise InputValueError(
                f"{name}: the batch has no feature {missing} (its keys are "
                f"{features.keys()}); every feature of the tables must be in it."
            )
        return module._pooled(weighted_as(features, module.is_weighted, name))
    if isinstance(features, Mapping):
        unknown = [f for f in features if f not in module._table_of]
        if unknown:
            raise InputValueError(
                f"{name}: no table reads feature(s) {unknown}; the features are "
                f"{module.feature_names}."
            )
        return {f: module._unpooled(f, x) for f, x in features.items()}
    raise InputTypeError(
        f"{name} takes a KeyedBags or a {{feature: index tensor}} dict, got "
        f"{type(features).__name__}. Build one with KeyedBags.from_dict({{name: bags}})."
    )


def weighted_as(kb: KeyedBags, is_weighted: bool | None, name: str) -> KeyedBags:
    """``kb`` as a collection with ``is_weighted`` reads it: its weights dropped for
    ``False``, kept for ``None``; for ``True`` a batch without weights raises."""
    if is_weighted and kb.weights is None:
        raise InputValueError(
            f"{name}(is_weighted=True) needs a batch with weights (one per entry of values), "
            "got a KeyedBags without weights. Give weights=, or build the collection with "
            "is_weighted=None (weights when the batch has them)."
        )
    return kb.unweighted() if is_weighted is False else kb


def _file_table(cfg: TableConfig, dtype: torch.dtype,
                device: torch.device | str | None) -> nn.Parameter:
    """The parameter of a table in a file: opened where ``cfg.storage`` holds one of this
    shape, else created (seed drawn from PyTorch's generator)."""
    if torch.device(device or "cpu").type != "cpu":
        raise InputValueError(
            f"TableConfig {cfg.name!r}: storage= keeps the table in a memory-mapped file, which "
            f"is CPU memory; got device={device!r}."
        )
    path = os.fspath(cfg.storage)  # type: ignore[arg-type]
    if os.path.exists(path):
        storage = TableStorage.open(path, writable=True)
        m = storage.meta
        if (m["rows"], m["dim"], storage.dtype) != (cfg.stored_rows, cfg.embedding_dim, dtype):
            raise InputValueError(
                f"TableConfig {cfg.name!r}: {path} holds a {m['rows']} x {m['dim']} "
                f"{m['dtype']} table, the config asks for {cfg.stored_rows} x "
                f"{cfg.embedding_dim} {dtype}. Give another path, or remove it."
            )
    else:
        layer = {"bias": False, "mode": cfg.mode, "padding_idx": cfg.padding_idx,
                 "sparse": True, "include_last_offset": False}
        storage = TableStorage.create(path, cfg.stored_rows, cfg.embedding_dim, dtype=dtype,
                                      init=str(cfg.init), seed=int(torch.randint(0, 2**62, ())),
                                      layer=layer)
    param = nn.Parameter(storage.weight)
    attach(param, storage)
    return param


def table_bags(cfg: TableConfig, bags: Bags, *, id_map: IdMap | None, dtype: torch.dtype,
               feature: str) -> Bags:
    """``bags`` (feature ``feature``'s) as table ``cfg`` reads them: the IDs themselves, hashed
    (``"mod"``), mapped by ``id_map`` in eval mode (``"map"``: nothing added), or for ``"qr"``
    two entries per ID, its quotient row and its remainder row, with the ID's weight times the
    mode's (in ``dtype``), read by a ``sum`` over the stored rows."""
    if cfg.hashing is None:
        return bags
    if cfg.hashing == "map":
        assert id_map is not None
        training = id_map.training
        id_map.eval()  # look up only, change nothing
        try:
            return Bags(id_map(bags.indices), bags.offsets, bags.weights)
        finally:
            id_map.train(training)
    h = hash_ids(bags.indices, cfg.num_embeddings)
    if cfg.hashing == "mod":
        return Bags(h, bags.offsets, bags.weights)
    # qr: each ID becomes two entries, its quotient row and its remainder row, with the
    # ID's weight (mode folded in from the ID's bag), so the table's sum is the mode's
    m = int(cfg.qr_buckets or 1)
    n_q = -(-cfg.num_embeddings // m)
    two = torch.stack([h // m, n_q + h % m], dim=1).reshape(-1)
    w = bags.weights
    if cfg.mode in ("mean", "sqrtn"):
        if w is not None and w.requires_grad:
            raise InputValueError(
                f"LookupCollection: feature {feature!r} has weights that require grad, and "
                f"its table {cfg.name!r} (hashing='qr', mode={cfg.mode!r}) folds the mode "
                "into them without a gradient. Use mode='sum', or detach the weights."
            )
        w = mode_weights(bags.offsets, w, cfg.mode == "sqrtn", dtype)
    return Bags(two, bags.offsets * 2, None if w is None else w.repeat_interleave(2))


def _distinct(tables: tuple[TableConfig, ...]) -> tuple[TableConfig, ...]:
    if not tables:
        raise InputValueError("LookupCollection: needs at least one TableConfig.")
    if not all(isinstance(t, TableConfig) for t in tables):
        raise InputTypeError(
            "LookupCollection: tables must be TableConfig objects, got "
            f"{[type(t).__name__ for t in tables]}."
        )
    names = [t.name for t in tables]
    if len(set(names)) != len(names):
        repeated = sorted({n for n in names if names.count(n) > 1})
        raise InputValueError(
            f"LookupCollection: table names must be distinct, got {repeated} more than once."
        )
    return tables


def _tables_state_dict(module: LookupCollection, state: dict[str, Any], prefix: str,
                       local_metadata: Any) -> None:
    """``weights.<g>`` -> one ``embedding_bags.<table>.weight`` entry per table (views), with
    every row of a table in a file drawn."""
    module._whole_tables()
    groups = [state.pop(f"{prefix}weights.{g}") for g in range(len(module.weights))]
    for name, (g, off, cfg) in module._places.items():
        state[f"{prefix}embedding_bags.{name}.weight"] = groups[g][off : off + cfg.stored_rows]


def _tables_load_state_dict(module: LookupCollection, state: dict[str, Any], prefix: str,
                            local_metadata: dict[str, Any], *args: Any) -> None:
    """Per-table entries -> the group parameters they live in (missing tables: left missing);
    a table in a file loaded whole keeps the values (every row marked written)."""
    keys = {name: f"{prefix}embedding_bags.{name}.weight" for name in module._places}
    if not all(k in state for k in keys.values()):
        return  # strict loading reports the missing keys (weights.<g>)
    for g in range(len(module.weights)):
        names = [n for n, p in module._places.items() if p.group == g]
        group = state[f"{prefix}weights.{g}"] = torch.cat([state.pop(keys[n]) for n in names])
        storage = storage_of(module.weights[g])
        if storage is not None:
            refuse_assign(local_metadata, keys[names[0]])
            if group.shape == module.weights[g].shape:  # else the load reports the mismatch
                storage.mark_written()
