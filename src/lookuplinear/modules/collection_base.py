"""``CollectionBase``: what a collection of tables reads and returns, shared by the float
``LookupCollection`` and the ``QuantizedLookupCollection`` built from it.

A collection takes a :class:`KeyedBags` (every feature of its tables pooled, a
:class:`KeyedTensor` out) or a ``{feature: index tensor}`` dict (unpooled lookups, feature by
feature); each feature's IDs become its table's rows as :func:`table_bags` says (as they are,
hashed, mapped, or split into quotient and remainder rows).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any, cast

import torch
from torch import nn

from .._loading import AllOrNothingLoad
from ..errors import InputTypeError, InputValueError
from ..ids.hashing import hash_ids, qr_rows
from ..ids.idmap import IdMap
from ..ids.rawids import as_int_ids, as_str_ids
from ..ops.library import mode_weights
from ..sparse.bags import Bags
from ..sparse.keyed import KeyedBags, KeyedTensor
from .plan import CollectionPlan, TablePlace
from .table_config import TableConfig

__all__ = ["CollectionBase", "check_qr_weights", "map_together", "table_bags", "weighted_as"]


class CollectionBase(AllOrNothingLoad):
    """The forward of a collection: a batch checked and sent to the pooled or unpooled path.

    Subclasses set :attr:`tables`, :attr:`feature_names`, :attr:`is_weighted`, the plan
    (``_collection_plan``) and :attr:`id_maps` (an :class:`~lookuplinear.IdMap` per
    ``hashing="map"`` table), and implement ``_pooled(kb) -> KeyedTensor`` (every output of the
    plan, its feature present in ``kb``, ``N`` bags per key) and ``_unpooled(name, x) ->
    Tensor`` (output ``name``).
    """

    tables: tuple[TableConfig, ...]
    feature_names: list[str]
    is_weighted: bool | None
    _collection_plan: CollectionPlan
    id_maps: nn.ModuleDict

    @property
    def _places(self) -> Mapping[str, TablePlace]:
        """Each table's place (group, first row, config), as the plan lays them out."""
        return self._collection_plan.places

    @property
    def _table_of(self) -> Mapping[str, str]:
        """The table each feature reads."""
        return self._collection_plan.table_of

    def forward(
        self, features: KeyedBags | Mapping[str, torch.Tensor]
    ) -> KeyedTensor | dict[str, torch.Tensor]:
        """Pool every feature's bags through its table.

        ``features`` is a :class:`KeyedBags` (returns a :class:`KeyedTensor`: ``values()`` is
        ``(N, sum of dims)`` in output order, keyed by ``embedding_names``: ``out[f]`` one
        feature's ``(N, dim)``, ``out["f@t"]`` table ``t``'s of a feature several tables read)
        or a ``{feature: index tensor}`` dict (unpooled lookups, as TorchRec's
        ``EmbeddingCollection``: each ``S`` index tensor gives ``S + (dim,)`` per table that
        reads it, keyed as the pooled outputs). Features in the batch that no table reads are
        ignored.

        A variable batch per key (``kb.stride_per_key()``, ``kb.inverse_indices``, TorchRec's
        VBE) pools each key's bags once and gives example ``i`` of output ``f`` the pool of
        its bag ``inverse_indices[k, i]`` (``k`` the key ``f`` reads), as TorchRec's
        ``EmbeddingBagCollection`` expands its outputs: equal to the forward of
        ``kb.full_batch()``.
        """
        name = type(self).__name__
        if isinstance(features, KeyedBags):
            keys = features._keys  # read, not copied as keys() does
            missing = [] if keys == self.feature_names else [
                f for f in self.feature_names if f not in keys]
            if missing:
                raise InputValueError(
                    f"{name}: the batch has no feature {missing} (its keys are "
                    f"{features.keys()}); every feature of the tables must be in it."
                )
            kb = features if self.is_weighted is None else weighted_as(
                features, self.is_weighted, name)
            # kb.variable written out: the property's call costs beside a small batch
            variable = kb.inverse_indices is not None or kb._starts is not None
            return self._pooled_variable(kb, name) if variable else self._pooled(kb)
        if isinstance(features, Mapping):
            plan = self._collection_plan
            unknown = [f for f in features if f not in plan.feature_names]
            if unknown:
                raise InputValueError(
                    f"{name}: no table reads feature(s) {unknown}; the features are "
                    f"{self.feature_names}."
                )
            # the outputs of ID maps last, their inputs checked first: an input refused
            # leaves the maps as they were; then each map called once, on every ID of the
            # batch it maps, in output order (as for a KeyedBags)
            mapped = [(n, features[plan.feature_of[n]]) for n in plan.embedding_names
                      if plan.feature_of[n] in features
                      and plan.place_of(n).config.hashing == "map"]
            out = self._unpooled_outputs(
                [(n, x) for f, x in features.items() for n in plan.outputs_of(f)
                 if plan.place_of(n).config.hashing != "map"], mapped)
            # in the order of embedding_names, as TorchRec's EmbeddingCollection returns them
            return {n: out[n] for n in plan.embedding_names if n in out}
        raise InputTypeError(
            f"{name} takes a KeyedBags or a {{feature: index tensor}} dict, got "
            f"{type(features).__name__}. "
            + ("Convert it with KeyedBags.from_kjt(kjt)." if _is_kjt(features) else
               "Build one with KeyedBags.from_dict({name: bags}).")
        )

    def _unpooled_outputs(self, plain: list[tuple[str, Any]], mapped: list[tuple[str, Any]]
                          ) -> dict[str, torch.Tensor]:
        """The unpooled outputs of ``plain`` (each ``(output, its index tensor)``, of a table
        without an ID map) and of ``mapped`` (those of ``hashing="map"`` tables): each output's
        lookup (:meth:`_unpooled`), the plain ones first, then the maps' (:meth:`_mapped_rows`)."""
        out = {n: self._unpooled(n, x) for n, x in plain}
        if mapped:
            rows = self._mapped_rows(mapped)
            out.update((n, self._unpooled(n, rows[n])) for n, _ in mapped)
        return out

    def _mapped_rows(self, mapped: list[tuple[str, Any]]) -> dict[str, torch.Tensor]:
        """The rows of the IDs of ``mapped`` (each ``(output, its IDs)``, outputs of
        ``hashing="map"`` tables): every input checked by its map before any map is called (an
        input refused leaves the maps as they were), then :meth:`_map_inputs`."""
        if len(mapped) > 1:
            for n, x in mapped:
                cast(IdMap, self.id_maps[self._collection_plan.table_of[n]]).check(x)
        return self._map_inputs(mapped)

    def _pooled_variable(self, kb: KeyedBags, name: str) -> KeyedTensor:
        """A variable batch per key: each key's bags pooled once (the keys' bags padded with
        empty ones to one stride), then each output's rows gathered as its key's
        ``inverse_indices`` say (the gradient sums back over the examples that read a bag)."""
        if kb.inverse_indices is None:
            raise InputValueError(
                f"{name}: the batch has a variable batch per key (stride_per_key "
                f"{kb.stride_per_key()}) and no inverse_indices, so its keys' outputs have "
                "different numbers of rows, which no (N, sum of dims) output holds (TorchRec's "
                "EmbeddingBagCollection cannot put them side by side either). Give "
                "inverse_indices= (the bag each example reads, per key), or one stride for "
                "every key."
            )
        plan = self._collection_plan
        position = {k: i for i, k in enumerate(kb.inverse_keys)}
        unexpanded = [f for f in self.feature_names if f not in position]
        if unexpanded:
            raise InputValueError(
                f"{name}: the batch's inverse_indices have rows for keys {kb.inverse_keys}, "
                f"none for {unexpanded}, which the tables read, so those keys' bags have no "
                "examples to go to. Give inverse_indices a row for every feature the tables "
                "read (the bag each example reads)."
            )
        out = self._pooled(kb._padded())  # (S, width): every bag of every key once
        inverse = kb.inverse_indices.long()
        # each output's row of inverse_indices over its columns: views, then one copy (no
        # index or sizes copied from the host)
        index = torch.cat([inverse[position[f]].unsqueeze(1).expand(-1, d)
                           for f, d in zip(plan.inputs, plan.dims, strict=True)], 1)  # (N, width)
        values = out.values().gather(0, index.to(out.values().device))
        return KeyedTensor(out.keys(), out.length_per_key(), values)

    def _map_inputs(self, inputs: Sequence[tuple[str, Any]]) -> dict[str, torch.Tensor]:
        """The rows of the IDs of outputs of ``hashing="map"`` tables, ``inputs`` each
        ``(output, its IDs)``: one call of each table's map on its outputs' IDs together
        (:func:`map_together`: no output's new ID takes a row another reads in this batch),
        then :meth:`_renew` of the table."""
        by_table: dict[str, list[tuple[str, Any]]] = {}
        for n, x in inputs:
            by_table.setdefault(self._table_of[n], []).append((n, x))
        mapped: dict[str, torch.Tensor] = {}
        for table, pairs in by_table.items():
            rows = map_together(cast(IdMap, self.id_maps[table]), [x for _, x in pairs])
            mapped.update(zip([n for n, _ in pairs], rows, strict=True))
            self._renew(table)
        return mapped

    def _renew(self, table: str) -> None:
        """After a call of table ``table``'s map: the rows it took from evicted IDs re-drawn
        (nothing here: a collection whose maps add no IDs)."""

    def _pooled(self, kb: KeyedBags) -> KeyedTensor:
        raise NotImplementedError

    def _unpooled(self, feature: str, x: torch.Tensor) -> torch.Tensor:
        """Output ``feature``'s lookup of the index tensor ``x``; for an output of a
        ``hashing="map"`` table, ``x`` is its rows (:meth:`_map_inputs`)."""
        raise NotImplementedError


def map_together(id_map: IdMap, inputs: Sequence[Any]) -> list[torch.Tensor]:
    """The rows of the IDs of each of ``inputs`` from one call of ``id_map``, each in its
    input's shape (and a tensor's device): in training, the IDs looked up together, so that
    no input's new ID takes a row another input reads in the same batch."""
    if len(inputs) == 1:
        return [id_map(inputs[0])]
    flat: Any
    if id_map.key_type == "str":
        parts = [as_str_ids(x, "IdMap(key_type='str')") for x in inputs]
        flat = [s for strs, _ in parts for s in strs]
        shapes = [shape for _, shape in parts]
        devices = [torch.device("cpu")] * len(inputs)
    else:
        ids = [as_int_ids(x, "IdMap") for x in inputs]
        flat = torch.cat([t.reshape(-1).to("cpu", torch.int64) for t in ids])
        shapes, devices = [tuple(t.shape) for t in ids], [t.device for t in ids]
    rows = id_map(flat).split([math.prod(s) for s in shapes])
    return [r.reshape(s).to(d) for r, s, d in zip(rows, shapes, devices, strict=True)]


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
    two = torch.stack(qr_rows(h, cfg.num_embeddings, int(cfg.qr_buckets or 1)), dim=1).reshape(-1)
    w = bags.weights
    check_qr_weights(cfg, w, feature)
    if cfg.mode in ("mean", "sqrtn"):  # the weights rounded to dtype first, as lookup_linear's
        w = mode_weights(bags.offsets, None if w is None else w.to(dtype), cfg.mode == "sqrtn",
                         dtype, bags.indices.numel())
    return Bags(two, bags.offsets * 2, None if w is None else w.repeat_interleave(2))


def check_qr_weights(cfg: TableConfig, weights: torch.Tensor | None, feature: str) -> None:
    """Refuse weights that require grad on the feature of a ``hashing="qr"`` table of mode
    ``mean`` or ``sqrtn``: its mode is folded into the entries' weights, without a gradient."""
    if (cfg.hashing == "qr" and cfg.mode in ("mean", "sqrtn") and weights is not None
            and weights.requires_grad):
        raise InputValueError(
            f"LookupCollection: feature {feature!r} has weights that require grad, and "
            f"its table {cfg.name!r} (hashing='qr', mode={cfg.mode!r}) folds the mode "
            "into them without a gradient. Use mode='sum', or detach the weights."
        )


def _is_kjt(x: Any) -> bool:
    """Whether ``x`` is TorchRec's ``KeyedJaggedTensor`` (by its class name: TorchRec is not
    imported here)."""
    return any(c.__name__ == "KeyedJaggedTensor" for c in type(x).__mro__)
