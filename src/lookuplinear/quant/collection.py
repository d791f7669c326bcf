"""``QuantizedLookupCollection``: a trained ``LookupCollection`` with its tables quantized row
by row, for inference.

Each table becomes the :class:`~lookuplinear.QuantizedLookupLinear` that
``collection[table].quantize(dtype)`` gives. A batch is looked up feature by feature: each
feature's IDs are first turned into rows as the float collection turns them in eval mode
(hashed, mapped without adding IDs, or split into quotient and remainder rows), then pooled by
its table's quantized layer.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import cast

import torch
from torch import nn

from ..errors import InputTypeError, InputValueError
from ..ids.hashing import hash_ids, qr_rows
from ..ids.idmap import IdMap
from ..modules.collection import LookupCollection
from ..modules.collection_base import CollectionBase, table_bags
from ..modules.table_config import TableConfig
from ..sparse.bags import check_index_range
from ..sparse.keyed import KeyedBags, KeyedTensor
from .layer import DTYPES

__all__ = ["QuantizedLookupCollection"]


class QuantizedLookupCollection(CollectionBase):
    """A ``LookupCollection`` for inference whose tables are quantized row by row.

    Dense equivalent: the float collection with each quantized table replaced by its
    dequantized values (``layers[t].dequantize().weight``), in eval mode; for every feature
    ``f`` of table ``t``, ``out[f] == layers[t](collection.rows(kb, f))``, the quantized
    layer on the rows the float collection reads (a table left float: its frozen
    ``LookupLinear``, whose float16 and bfloat16 means and sqrtn, and padded bags, equal the
    float collection's to the rounding of a sum in the table's dtype, not always to the bit).
    Takes what ``LookupCollection.forward`` takes: a :class:`KeyedBags` (returns a
    :class:`KeyedTensor`) or a ``{feature: index tensor}`` dict (unpooled lookups). Build
    one with :meth:`from_float` (or ``LookupCollection.quantize``). It stays an inference
    module in any mode, as PyTorch's quantized modules do: ``train()`` sets ``training``
    only, and its output records no gradient.

    Parameters
    ----------
    collection : LookupCollection
        The trained collection, on the CPU (PyTorch's quantized embedding-bag kernels run
        there). Copied: the quantized collection shares no memory with it.
    dtype : {"int8", "int4", "float16"} or dict of str to str, default "int8"
        The storage of every table, or ``{table: dtype}`` for some tables; a table not named
        stays float (a frozen copy of its ``LookupLinear``).

    Attributes
    ----------
    layers : nn.ModuleDict
        Table name -> its :class:`~lookuplinear.QuantizedLookupLinear` (or frozen
        ``LookupLinear`` for a table left float).
    dtypes : dict of str to str or None
        Table name -> its storage, ``None`` for a float table.
    id_maps : nn.ModuleDict
        Copies of the collection's ``hashing="map"`` ID maps; they only look up.

    Raises
    ------
    InputValueError
        An unknown dtype or table name, or a collection off the CPU.
    InputTypeError
        ``dtype`` neither a string nor a dict.

    Examples
    --------
    >>> from lookuplinear import LookupCollection, TableConfig
    >>> _ = torch.manual_seed(0)
    >>> ebc = LookupCollection([TableConfig("user", 1000, 8, ["user"], hashing="mod"),
    ...                         TableConfig("item", 50, 8, ["item"], mode="mean")])
    >>> q = ebc.quantize("int8")
    >>> kb = KeyedBags.from_dict({"user": [[2**40], [-3, 7]], "item": [[1, 1, 4], []]})
    >>> bool((q(kb).values() - ebc.eval()(kb).values().detach()).abs().max() < 0.05)
    True
    """

    def __init__(self, collection: LookupCollection,
                 dtype: str | Mapping[str, str] = "int8") -> None:
        super().__init__()
        if not isinstance(collection, LookupCollection):
            raise InputTypeError(
                "QuantizedLookupCollection takes a LookupCollection, got "
                f"{type(collection).__name__}. For one table use LookupLinear.quantize."
            )
        names = [t.name for t in collection.tables]
        self.dtypes = _dtypes(dtype, names)
        device = collection.table_groups[0].device
        if device.type != "cpu":
            raise InputValueError(
                f"quantize: the tables are on {device}; PyTorch's quantized embedding-bag "
                "kernels run on the CPU. Call collection.cpu().quantize(...)."
            )
        self.tables: tuple[TableConfig, ...] = collection.tables
        self.feature_names = list(collection.feature_names)
        #: the output's keys (a feature several tables read: ``feature@table``)
        self.embedding_names = list(collection.embedding_names)
        #: the collection's ``is_weighted`` (whether a batch's weights scale its rows)
        self.is_weighted = collection.is_weighted
        self._collection_plan = collection._collection_plan
        layers: dict[str, nn.Module] = {}
        #: the dtype each table computes in (a quantized one: float32), for qr's mode weights
        self._weight_dtype: dict[str, torch.dtype] = {}
        for name in names:
            layer = collection[name]  # a view of the table's rows
            table_dtype = self.dtypes[name]
            if table_dtype == "int4" and layer.out_features % 2:
                raise InputValueError(
                    f"quantize: table {name!r} has embedding_dim {layer.out_features}, and int4 "
                    "packs two values per byte: it needs an even width. Quantize it as 'int8' "
                    f"(dtype={{{name!r}: 'int8', ...}})."
                )
            if table_dtype is not None:
                try:
                    layers[name] = layer.quantize(table_dtype)
                except InputValueError as exc:  # (a row it cannot store): name the table
                    raise InputValueError(f"table {name!r}: {exc}") from exc
                self._weight_dtype[name] = torch.float32
                continue
            layer.weight = nn.Parameter(layer.weight.detach().clone(), requires_grad=False)
            layer._placed = layer.weight.data_ptr()
            layers[name] = layer.eval()
            self._weight_dtype[name] = layer.weight.dtype
        self.layers = nn.ModuleDict(layers)
        self.id_maps = copy.deepcopy(collection.id_maps).eval()
        self.training = False

    @classmethod
    def from_float(cls, collection: LookupCollection,
                   dtype: str | Mapping[str, str] = "int8") -> QuantizedLookupCollection:
        """The quantized copy of a trained ``collection`` (as PyTorch's quantized modules are
        built ``from_float``); the same as ``QuantizedLookupCollection(collection, dtype)``.

        Examples
        --------
        >>> from lookuplinear import LookupCollection, TableConfig
        >>> ebc = LookupCollection([TableConfig("user", 100, 8, ["user"])])
        >>> QuantizedLookupCollection.from_float(ebc, "int4").dtypes
        {'user': 'int4'}
        """
        return cls(collection, dtype)

    def train(self, mode: bool = True) -> QuantizedLookupCollection:
        """Set ``training`` to ``mode`` and return ``self``, as ``nn.Module.train`` does (a
        training loop calls it on the model that holds the collection); the tables and ID maps
        stay in inference (an ID map in training would number new IDs), as PyTorch's quantized
        modules compute the same in either mode."""
        self.training = mode
        return self

    @torch.no_grad()
    def _pooled(self, kb: KeyedBags) -> KeyedTensor:
        """Every feature pooled through its quantized table, feature by feature."""
        blocks = []
        places, table_of = self._places, self._table_of
        feature_of = self._collection_plan.feature_of
        for name in self.embedding_names:
            cfg = places[table_of[name]].config
            f = feature_of[name]
            layer = self.layers[cfg.name]
            id_map = cast(IdMap, self.id_maps[cfg.name]) if cfg.hashing == "map" else None
            bags = table_bags(cfg, kb[f], id_map=id_map, dtype=self._weight_dtype[cfg.name],
                              feature=f)
            if cfg.hashing is None:
                check_index_range(bags.indices, cfg.num_embeddings, where=f"kb[{f!r}]")
            blocks.append(layer(bags))  # (N, dim)
        values = torch.cat(blocks, dim=1) if len(blocks) > 1 else blocks[0]
        # float16 and bfloat16 tables give float32, as the float collection and TorchRec's
        dtype = torch.promote_types(values.dtype, torch.float32)
        return KeyedTensor(self.embedding_names, list(self._collection_plan.dims),
                           values.to(dtype))

    @torch.no_grad()
    def _unpooled(self, feature: str, x: torch.Tensor) -> torch.Tensor:
        cfg = self._places[self._table_of[feature]].config
        if cfg.hashing != "map" and (not isinstance(x, torch.Tensor) or
                                     x.dtype.is_floating_point or x.dtype == torch.bool):
            raise InputTypeError(
                f"QuantizedLookupCollection: feature {feature!r} needs an integer index tensor, "
                f"got {getattr(x, 'dtype', type(x).__name__)}."
            )
        layer = self.layers[cfg.name]
        if cfg.hashing == "map":  # x: the rows its IDs were mapped to (_map_inputs)
            ids = x
        elif cfg.hashing is None:
            check_index_range(x, cfg.num_embeddings, where=f"features[{feature!r}]")
            ids = x
        else:
            ids = hash_ids(x, cfg.num_embeddings)
        if cfg.hashing == "qr":  # an ID reads its quotient row plus its remainder row
            q, r = qr_rows(ids, cfg.num_embeddings, int(cfg.qr_buckets or 1))
            return cast(torch.Tensor, layer(q) + layer(r))
        return cast(torch.Tensor, layer(ids))

    def extra_repr(self) -> str:
        return f"features={self.embedding_names}, dtypes={self.dtypes}"


def _dtypes(dtype: str | Mapping[str, str], names: list[str]) -> dict[str, str | None]:
    """Every table's storage (None: float) from ``quantize``'s ``dtype``, checked."""
    if isinstance(dtype, str):
        chosen: Mapping[str, str] = dict.fromkeys(names, dtype)
    elif isinstance(dtype, Mapping):
        unknown = [k for k in dtype if k not in names]
        if unknown:
            raise InputValueError(
                f"quantize: dtype names table(s) {unknown}, which the collection does not "
                f"have; its tables are {names}."
            )
        chosen = dtype
    else:
        raise InputTypeError(
            "quantize: dtype must be a string or a {table: dtype} dict, got "
            f"{type(dtype).__name__}; for example quantize('int8') or "
            "quantize({'user': 'int4'})."
        )
    for name, d in chosen.items():
        if d not in DTYPES:
            raise InputValueError(
                f"quantize: dtype of table {name!r} must be one of {sorted(DTYPES)}, got {d!r}."
            )
    return {name: chosen.get(name) for name in names}
