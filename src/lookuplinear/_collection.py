"""``TableConfig`` and ``LookupCollection``: many categorical features, each through its table."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, cast

import torch
from torch import nn

from ._bags import Bags
from ._hashing import hash_ids
from ._keyed import KeyedBags, KeyedTensor
from ._layer import LookupLinear
from .errors import InputTypeError, InputValueError
from .functional import Mode, check_mode

__all__ = ["LookupCollection", "TableConfig"]


@dataclass(frozen=True)
class TableConfig:
    """One table of a :class:`LookupCollection` and the features that look it up.

    TorchRec's ``EmbeddingBagConfig`` under lookuplinear's names: the table is a
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
        An index that contributes nothing and gets no gradient.
    init : {"normal", "linear"} or callable, default "normal"
        As :class:`~lookuplinear.LookupLinear`'s ``init``; ``"normal"`` is ``nn.Embedding``'s.
    hashing : {None, "mod"}, default None
        ``None``: IDs are row indices, each in ``[0, num_embeddings)``. ``"mod"``: any int64 ID
        (negative or huge too) reads row :func:`~lookuplinear.hash_ids` ``(id,
        num_embeddings)``, MurmurHash3 as scikit-learn's ``HashingVectorizer``; the dense
        equivalent is ``nn.Linear`` on the hashed one-hot ``one_hot(id) @ H``.
    dtype : torch.dtype, optional
        The table's dtype (default: torch's default dtype).

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

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name or "." in self.name:
            raise InputValueError(
                f"TableConfig: name must be a non-empty string without '.', got {self.name!r}."
            )
        names = (self.feature_names,) if isinstance(self.feature_names, str) else tuple(
            self.feature_names)
        if not names or not all(isinstance(f, str) for f in names):
            raise InputValueError(
                f"TableConfig {self.name!r}: feature_names must be a non-empty sequence of "
                f"strings, got {self.feature_names!r}."
            )
        object.__setattr__(self, "feature_names", names)
        check_mode(self.mode)
        if self.hashing not in (None, "mod"):
            raise InputValueError(
                f"TableConfig {self.name!r}: hashing must be None or 'mod', got "
                f"{self.hashing!r}."
            )


class LookupCollection(nn.Module):
    """Many categorical features in one module: each feature's bags pooled through its table.

    Dense equivalent: for each feature ``f`` of table ``t``, ``nn.Linear(t.num_embeddings,
    t.embedding_dim, bias=False)`` (``linear.weight == table.weight.T``) applied to ``f``'s
    multi-hot rows (``kb[f].to_dense(t.num_embeddings)``, scaled by ``t.mode``); the outputs
    side by side in feature order. Features sharing a table share its ``nn.Linear``, so the
    table's gradient is the sum over them. ``check_equivalence(collection, kb)`` proves it.
    TorchRec's ``EmbeddingBagCollection`` with a ``KeyedJaggedTensor``, as a lookup.

    Parameters
    ----------
    tables : sequence of TableConfig
        Distinct table names; every feature in exactly one table.
    sparse : bool, default False
        Row-sparse gradients (for :mod:`lookuplinear.optim`, fused or not).
    device : torch.device or str, optional

    Attributes
    ----------
    embedding_bags : nn.ModuleDict
        ``{table name: LookupLinear}``; ``collection[name]`` is the same module.
    tables : tuple of TableConfig
    feature_names : list of str
        The output order: every table's features, table after table.

    Raises
    ------
    InputValueError
        Table names repeated, a feature in two tables; at ``forward``, a feature the tables need
        missing from the batch.

    Examples
    --------
    >>> _ = torch.manual_seed(0)
    >>> ebc = LookupCollection([TableConfig("user", 100, 4, ["user"]),
    ...                         TableConfig("item", 50, 2, ["item", "last_item"], mode="mean")])
    >>> kb = KeyedBags.from_dict({"user": [[3], [1, 4]], "item": [[7, 7, 2], []],
    ...                           "last_item": [[5], [6]]})
    >>> out = ebc(kb)
    >>> out.values().shape, out["item"].shape
    (torch.Size([2, 8]), torch.Size([2, 2]))
    >>> from lookuplinear import check_equivalence
    >>> check_equivalence(ebc, kb).ok
    True
    """

    def __init__(
        self,
        tables: Sequence[TableConfig],
        *,
        sparse: bool = False,
        device: torch.device | str | None = None,
    ) -> None:
        super().__init__()
        tables = tuple(tables)
        if not all(isinstance(t, TableConfig) for t in tables):
            raise InputTypeError(
                "LookupCollection: tables must be TableConfig objects, got "
                f"{[type(t).__name__ for t in tables]}."
            )
        layers = {
            t.name: LookupLinear(
                t.num_embeddings, t.embedding_dim, bias=False, mode=t.mode,
                padding_idx=t.padding_idx, init=t.init, sparse=sparse, device=device,
                dtype=t.dtype,
            )
            for t in _distinct(tables)
        }
        self._setup(tables, layers)

    def _setup(self, tables: tuple[TableConfig, ...], layers: Mapping[str, LookupLinear]) -> None:
        self.tables = tables
        self.embedding_bags = nn.ModuleDict(dict(layers))
        owner: dict[str, str] = {}
        for t in tables:
            for f in t.feature_names:
                if f in owner:
                    raise InputValueError(
                        f"LookupCollection: feature {f!r} is in tables {owner[f]!r} and "
                        f"{t.name!r}; a feature reads one table (tables may share features' "
                        "names only once)."
                    )
                owner[f] = t.name
        self._table_of = owner
        self._hashed = {t.name for t in tables if t.hashing == "mod"}
        self.feature_names = list(owner)

    @classmethod
    def from_layers(cls, layers: Mapping[str, LookupLinear]) -> LookupCollection:
        """A collection of existing layers, one table and one feature per key (shared, no copy).

        A layer with a bias keeps it (its features' dense equivalent is then ``nn.Linear`` with
        that bias).

        Examples
        --------
        >>> user = LookupLinear(10, 3, bias=False)
        >>> ebc = LookupCollection.from_layers({"user": user})
        >>> ebc["user"] is user
        True
        """
        for k, layer in layers.items():
            if not isinstance(layer, LookupLinear):
                raise InputTypeError(
                    f"LookupCollection.from_layers: {k!r} must be a LookupLinear, got "
                    f"{type(layer).__name__}. Convert it first (LookupLinear.from_embedding)."
                )
        tables = _distinct(tuple(
            TableConfig(k, layer.in_features, layer.out_features, [k], mode=layer.mode,
                        padding_idx=layer.padding_idx, init=layer.init,
                        dtype=layer.weight.dtype)
            for k, layer in layers.items()
        ))
        collection = cls.__new__(cls)
        nn.Module.__init__(collection)
        collection._setup(tables, layers)
        return collection

    def __getitem__(self, name: str) -> LookupLinear:
        """The table ``name`` (a :class:`~lookuplinear.LookupLinear`, shared, not a copy)."""
        if name not in self.embedding_bags:
            raise KeyError(
                f"LookupCollection has no table {name!r}; its tables are "
                f"{list(self.embedding_bags)}."
            )
        return cast(LookupLinear, self.embedding_bags[name])

    def table_of(self, feature: str) -> LookupLinear:
        """The table that ``feature`` reads."""
        return self[self._table_of[feature]]

    def rows(self, features: KeyedBags, feature: str) -> Bags:
        """``feature``'s bags as its table reads them: the IDs hashed to rows where the table
        hashes (:func:`~lookuplinear.hash_ids`), else ``features[feature]`` itself."""
        bags = features[feature]
        table = self._table_of[feature]
        if table not in self._hashed:
            return bags
        return Bags(hash_ids(bags.indices, self[table].in_features), bags.offsets, bags.weights)

    def _ids(self, feature: str, x: torch.Tensor) -> torch.Tensor:
        table = self._table_of[feature]
        return hash_ids(x, self[table].in_features) if table in self._hashed else x

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
        if isinstance(features, KeyedBags):
            missing = [f for f in self.feature_names if f not in features]
            if missing:
                raise InputValueError(
                    f"LookupCollection: the batch has no feature {missing} (its keys are "
                    f"{features.keys()}); every feature of the tables must be in it."
                )
            outs = [self.table_of(f)(self.rows(features, f)) for f in self.feature_names]
            dims = [o.shape[1] for o in outs]
            return KeyedTensor(self.feature_names, dims, torch.cat(outs, dim=1))
        if isinstance(features, Mapping):
            unknown = [f for f in features if f not in self._table_of]
            if unknown:
                raise InputValueError(
                    f"LookupCollection: no table reads feature(s) {unknown}; the features are "
                    f"{self.feature_names}."
                )
            return {f: self.table_of(f)(self._ids(f, x)) for f, x in features.items()}
        raise InputTypeError(
            "LookupCollection takes a KeyedBags or a {feature: index tensor} dict, got "
            f"{type(features).__name__}. Build one with KeyedBags.from_dict({{name: bags}})."
        )

    def features(self) -> Iterator[tuple[str, LookupLinear]]:
        """``(feature, table)`` pairs in output order."""
        for f in self.feature_names:
            yield f, self.table_of(f)

    def extra_repr(self) -> str:
        return f"features={self.feature_names}"


def _distinct(tables: tuple[TableConfig, ...]) -> tuple[TableConfig, ...]:
    names = [t.name for t in tables]
    if len(set(names)) != len(names):
        repeated = sorted({n for n in names if names.count(n) > 1})
        raise InputValueError(
            f"LookupCollection: table names must be distinct, got {repeated} more than once."
        )
    if not tables:
        raise InputValueError("LookupCollection: needs at least one TableConfig.")
    return tables
