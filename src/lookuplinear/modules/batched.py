"""The execution of a collection's plan (:mod:`lookuplinear.modules.plan`): a batch of every
feature looked up in one kernel call, or feature by feature.

The usual batch (tables of sums, means and sqrtn without padding, their IDs their rows, hashed
to them by ``hashing="mod"`` or mapped by an ``IdMap``; the batch's keys exactly the
collection's features, or a feature read by several tables taken once per table) is hashed where
its tables hash (one hash of every ID) and mapped where they map, checked and shifted to the
rows of the groups' parameters in one pass. A mean or sqrtn of one ID is that ID's row; bags get
the modes' factors folded into per-entry weights by one pass over the whole batch (the weights
the feature-by-feature way folds). With row-sparse gradients of one dtype, one ID per feature
over several groups is one call of the operator ``lookuplinear::gather_groups``, which writes
every group's rows into their columns (their gradient each group's lookup's, one copy in the
backward); one group, or bags, one call of the operator ``lookuplinear::bag_lookup`` per group,
and the operator ``lookuplinear::in_feature_order`` puts the outputs in feature order where they
are not. With dense gradients each group is one ATen lookup. Any other batch (a ``max`` table,
padding, a ``"qr"`` table, per-entry weights that need a gradient or carry a tangent beside a
mean; while a graph is recorded, hashing, ID maps, a mix of modes or several groups) is one
lookup per group of its (feature, table) pairs, put side by side in output order by the same
operator: the reference the batched way equals. Eager calls and recorded graphs call the same
operators (:mod:`lookuplinear.ops.library`), and the sparse gradient has their one layout.

A table bound to a ``fused=True`` optimizer takes the same path: the operators' backward hands
its gradient to the optimizer (:mod:`lookuplinear._fusion`). A ``torch.jit.trace`` records
one group's lookup with dense gradients (torch's own ops); a batch cut by feature raises there
(:meth:`KeyedBags.offset_per_key <lookuplinear.KeyedBags.offset_per_key>`: its bounds would be
the trace's constants).
"""

from __future__ import annotations

import functools
import itertools
import operator
from collections.abc import Sequence
from typing import Any, NamedTuple, Protocol

import torch

from ..functional import _eager_op, _needs_derivative, lookup_linear
from ..ids.hashing import murmur3_ids, signed_rows
from ..modes import mean_of_sums, reduce_sums
from ..ops import capturing, one_id_rows, segment_triples, shifted_rows
from ..ops.library import in_feature_order, mode_weights
from ..sparse.bags import Bags, check_index_range
from ..sparse.keyed import KeyedBags
from ..sparse.offsets import on_host
from .plan import CollectionPlan
from .table_config import TableConfig

__all__ = ["BatchedLookup", "ExactMeans", "TableReader", "sums_sparse_gradients"]

_BAG_LOOKUP = torch.ops.lookuplinear.bag_lookup.default
#: the operator ``lookuplinear::in_feature_order``, or its torch-op twin under a
#: ``torch.func`` transform or with a forward-mode AD level open (:func:`in_feature_order`)
_IN_FEATURE_ORDER = in_feature_order
_GATHER_GROUPS = torch.ops.lookuplinear.gather_groups.default
_GROUP_ORDER = torch.ops.lookuplinear.group_order.default


class TableReader(Protocol):
    """What the execution of a plan reads of its collection besides the parameters: a
    feature's bags as its table reads them (and the rows an ``IdMap`` gave its IDs), a
    group's input with a file table's rows drawn first, and whether a table's gradient is
    row-sparse."""

    def rows(self, features: KeyedBags, feature: str,
             read: dict[str, Bags] | None = None) -> Bags: ...

    def _map_rows(self, features: KeyedBags, feature: str) -> torch.Tensor: ...

    def _drawn(self, g: int, input: Any) -> Any: ...

    def _sparse(self, cfg: TableConfig) -> bool: ...


class ExactMeans(NamedTuple):
    """A batch without weights' mean outputs computed as their sums divided by the bag sizes
    (:meth:`BatchedLookup._divided`), or by the operator's mean for a group of them."""

    #: per output, whether it is such a mean
    outputs: list[bool]
    #: the outputs' modes to fold into per-entry weights, those means summed
    runs: list[tuple[int, int, str]]
    #: per group: True (every feature's output such a mean), a bool per feature, or None
    groups: list[bool | torch.Tensor | None]


class BatchedLookup:
    """The pooled lookup of a collection's batch, as its plan (:class:`CollectionPlan`) lays
    the tables out: the plan, and the tensors and caches built from it.

    Holds no parameter: each call is given the collection's ``table_groups`` (one parameter
    per group of the plan, as a list: a ``ParameterList``'s indexing costs a microsecond), its
    ``sparse`` flag and its :class:`TableReader`. Its tensors are no module's state (no
    ``state_dict`` entry, no buffer); those that depend on the device are kept per device, so
    the collection's ``to(device)`` needs nothing of it.

    Parameters
    ----------
    plan : CollectionPlan
    """

    def __init__(self, plan: CollectionPlan) -> None:
        self.plan = plan
        #: each group's index and its features in output order
        self.groups = [(g, list(group.features)) for g, group in enumerate(plan.groups)]
        #: the groups of tables in files (their rows drawn before a lookup)
        self.stored = frozenset(g for g, group in enumerate(plan.groups)
                                if group.kernel == "file")
        #: the outputs in order, and the batch key each reads (a list, as a batch's ``keys()``:
        #: a batch of exactly these keys is the usual batch)
        self.feature_names = list(plan.embedding_names)
        self.inputs = list(plan.inputs)
        #: a feature read by several tables: the usual batch is taken once per output
        self._shared = len(set(plan.inputs)) < len(plan.inputs)
        self._index = {f: i for i, f in enumerate(self.feature_names)}
        #: the outputs in group order (each group's in output order), and a picker of a
        #: sequence's items in that order
        self._order = [i for group in plan.groups for i in group.positions]
        self._pick = operator.itemgetter(*self._order)
        self._place = torch.tensor(plan.one_id_place(), dtype=torch.int64).reshape(-1, 3)
        self._cols = {g: torch.tensor(group.columns, dtype=torch.int64)
                      for g, group in enumerate(plan.groups)}
        self._feature_cols = list(plan.columns)
        #: every group's features' first columns, group after group (``gather_groups``'), and
        #: each group's number of features
        self._all_columns = [c for group in plan.groups for c in group.columns]
        self._features = [len(group.features) for group in plan.groups]
        self._segments: dict[Any, tuple[int, ...]] = {}
        #: the usual batch's groups' outputs put in feature order (a one-ID batch's, example-major,
        #: under True; bags', feature-major, under False): their segments
        self._written_segs = {one_id: self._segments_of(
            [(feats, not one_id) for _, feats in self.groups]) for one_id in (True, False)}
        self._at = [list(group.positions) for group in plan.groups]
        self._layouts: dict[tuple[torch.device, int],
                            tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]] = {}
        #: the host tensors built here, copied to a device once (:meth:`_on`)
        self._copies: dict[tuple[int, torch.device], tuple[torch.Tensor, torch.Tensor]] = {}
        configs = [plan.place_of(f).config for f in plan.embedding_names]
        #: the outputs' modes as runs of consecutive outputs ``(first, end, mode)``; none
        #: where every table sums (a batch's bags then need no per-entry factor)
        modes = [c.mode for c in configs]
        self._runs = _runs_of(modes)
        #: the outputs whose unweighted bags are averaged as ``nn.EmbeddingBag(mode="mean")``
        #: averages them, to the bit (:func:`~lookuplinear.modes.mean_of_sums`): mean tables
        #: without padding or ``"qr"`` hashing
        self._mean_outputs = [c.mode == "mean" and c.padding_idx is None and c.hashing != "qr"
                              for c in configs]
        #: per group: True (every feature's output such a mean), a bool per feature, or None
        #: (made here, eagerly: never a recorded graph's)
        group_means: list[bool | torch.Tensor | None] = []
        for group in plan.groups:
            which = [self._mean_outputs[i] for i in group.positions]
            group_means.append(True if all(which) else torch.tensor(which)
                               if any(which) else None)
        self._exact = ExactMeans(self._mean_outputs, _runs_of(
            ["sum" if e else m for e, m in zip(self._mean_outputs, modes, strict=True)]),
            group_means) if any(self._mean_outputs) else None
        #: each output's rows where its table hashes its IDs, else 0; the outputs whose tables
        #: map them (an ``IdMap``)
        self._hashed = [c.num_embeddings if c.hashing == "mod" else 0 for c in configs]
        #: (as a tensor, which :meth:`_on` puts on a batch's device)
        self._hashed_rows_of = torch.tensor(self._hashed, dtype=torch.int64)
        self._mapped = [i for i, c in enumerate(configs) if c.hashing == "map"]
        #: per group, the row of its parameter that its lookup off the CPU takes as
        #: ``padding_idx``: its first padded table's padding row (None where none pads)
        self._padding_rows = [next((
            p.offset + p.config.padding_idx for p in map(plan.place_of, feats)
            if p.config.padding_idx is not None), None) for _, feats in self.groups]

    def __getstate__(self) -> dict[str, Any]:
        return {"plan": self.plan}  # everything else is built from it

    def __setstate__(self, state: dict[str, Any]) -> None:
        """Built again from the plan (a pickle of another version keeps other attributes)."""
        self.__init__(state["plan"])  # type: ignore[misc]

    def lookup(self, kb: KeyedBags, table_groups: Sequence[torch.Tensor], sparse: bool,
               tables: TableReader, read: dict[str, Bags] | None = None) -> torch.Tensor:
        """The ``(N, sum of dims)`` pooled outputs in feature order, each in its table's dtype
        (promoted where tables of several dtypes meet).

        Three ways: the usual batch (:meth:`_shifted`, its modes folded where its bags need
        it, :meth:`_folded`) of row-sparse gradients of one dtype as one lookup per group of
        that batch (:meth:`_written`), or of dense gradients as one ATen lookup per group
        (:meth:`_dense`); any other batch one lookup per group of its features' bags
        (:meth:`_per_group`). A graph that ``torch.compile`` or ``torch.export`` records takes
        the first two ways for one group whose tables share one mode; else it goes group by
        group of the features' bags (taking one group's part of the usual batch reads its
        offsets), after the usual batch's range check (its message names the feature's table),
        which the graph runs. ``read``: each feature's bags already sliced out of ``kb`` in
        this forward (for its ID maps), which the group-by-group way reads rather than slicing
        again (:meth:`TableReader.rows`)."""
        recording = torch.compiler.is_compiling()
        n = kb.batch_size
        exact = self._exact if kb.weights is None else None
        runs = self._runs if exact is None else exact.runs
        dense = not (sparse or self.stored) and (len(self.groups) == 1 or not recording)
        batch = None  # the usual batch: kb, or kb's shared features taken once per output
        if (sparse or recording or dense) and self.plan.plain and (
                kb.weights is None or kb._keys == self.inputs):  # (inline: a call costs)
            batch = kb if kb._keys == self.inputs else (  # the keys read, not copied
                self._per_output(kb) if self._shared else None)
        whole = None if batch is None else self._shifted(kb, batch, n, tables)
        starts = None
        if isinstance(whole, Bags) and not recording and (
                len(self.groups) > 1 or len(runs) > 1):
            # each output's first entry: the usual batch's bounds, kept on the host where
            # known (no read back), else read once
            assert batch is not None
            starts = batch._key_bounds()
        if isinstance(whole, Bags) and runs and (sparse or dense):
            whole = self._folded(whole, n, table_groups, starts, runs)
        if whole is not None and dense:
            return self._dense(whole, n, table_groups, starts, exact)
        if (whole is not None and sparse and len({w.dtype for w in table_groups}) == 1
                and (len(self.groups) == 1 or not recording) and _eager_op()):
            return self._written(whole, n, table_groups, tables, starts, exact)
        return self._per_group(kb, table_groups, sparse, tables, exact, read)

    def _on(self, host: torch.Tensor, device: torch.device) -> torch.Tensor:
        """``host``, a CPU tensor built from the plan in ``__init__`` (never replaced, so its
        ``id`` names it), on ``device``: copied once per device and kept (a copy from the host
        in every forward would wait for the device), except while a graph is recorded (its
        tensors are not the ones a later call runs on)."""
        if host.device == device:
            return host
        if torch.compiler.is_compiling():
            return host.to(device)
        key = (id(host), device)
        kept = self._copies.get(key)
        if kept is None or kept[0] is not host:
            kept = self._copies[key] = (host, host.to(device))
        return kept[1]

    def _divided(self, sums: torch.Tensor, offsets: torch.Tensor,
                 which: bool | torch.Tensor | None, n: int) -> torch.Tensor:
        """A group's lookup output ``sums`` (one bag a row, its features' ``n`` bags after one
        another; ``offsets``: their CSR offsets) with its exact means' rows (``which``: True
        for every feature's, a bool per feature, None for none: :class:`ExactMeans`) divided
        by their bag sizes, as ``nn.EmbeddingBag(mode="mean")`` divides, to the bit, forward
        and backward (:func:`~lookuplinear.modes.mean_of_sums`); other rows divided by 1,
        which leaves them and their gradient as they are."""
        if which is None:
            return sums
        sizes = offsets[1:] - offsets[:-1]
        if which is not True:
            assert isinstance(which, torch.Tensor)
            sizes = torch.where(self._on(which, sizes.device).unsqueeze(1),
                                sizes.view(which.numel(), n), 1).view(-1)
        return mean_of_sums(sums, sizes.to(sums.dtype).unsqueeze(1))

    def _folded(self, whole: Bags, n: int, table_groups: Sequence[torch.Tensor],
                starts: list[int] | None, runs: list[tuple[int, int, str]]) -> Bags | None:
        """The usual batch's bags ``whole`` with its ``mean``/``sqrtn`` outputs' factors
        folded into per-entry weights (times the batch's own weights, where it has them): the
        weights :meth:`_group_bags` folds, in the tables' dtype, by ``mode_weights`` over the
        whole batch for the first output's such mode, the other outputs' entries then written
        over (their weights as they are, or ones, for a sum; the other mode's factors).
        ``starts``: each output's first entry (None while a graph is recorded); ``runs``: the
        outputs' modes to fold (:attr:`_runs`, or for an unweighted batch whose means are
        divided, :attr:`ExactMeans.runs`). None where the fold cannot be the reference's:
        tables of several dtypes, weights that need a gradient or carry a forward-mode tangent
        (the factors carry neither), a mix of modes while a graph is recorded."""
        dtypes = {w.dtype for w in table_groups}
        weights = whole.weights
        if len(dtypes) > 1 or _needs_derivative(weights) or (
                len(runs) > 1 and starts is None):
            return None
        dtype = dtypes.pop()
        if weights is not None:  # rounded to the tables' dtype first, as lookup_linear's
            weights = weights.to(dtype)
        modes = [mode for _, _, mode in runs if mode != "sum"]
        factors = {mode: mode_weights(whole.offsets, weights, mode == "sqrtn", dtype, whole.nnz)
                   for mode in dict.fromkeys(modes)}
        folded = factors[modes[0]]
        for first, end, mode in runs:
            if mode == modes[0]:
                continue
            assert starts is not None
            part = folded[starts[first]:starts[end]]
            if mode != "sum":
                part.copy_(factors[mode][starts[first]:starts[end]])
            elif weights is not None:
                part.copy_(weights[starts[first]:starts[end]])
            else:
                part.fill_(1)
        return Bags.from_checked(whole.indices, whole.offsets, folded)

    def _dense(self, whole: torch.Tensor | Bags, n: int, table_groups: Sequence[torch.Tensor],
               starts: list[int] | None = None, exact: ExactMeans | None = None
               ) -> torch.Tensor:
        """The usual batch (``whole``: :meth:`_shifted`'s) with dense gradients
        (``sparse=False``, no table in a file): each group's part of it looked up by one ATen
        call on the group's parameter (``F.embedding`` of a one-ID batch's rows,
        ``F.embedding_bag`` of bags: their gradients dense, as ``nn.EmbeddingBag``'s), put in
        feature order by the operator ``lookuplinear::in_feature_order``. The same lookups as
        :meth:`_per_group`'s, without slicing the batch feature by feature. ``exact``: the
        exact means' bags (summed) divided by their sizes (:meth:`_divided`); a group of such
        means alone, unweighted, is ATen's own mean (``nn.EmbeddingBag``'s gradient too)."""
        outs: list[torch.Tensor] = []
        if isinstance(whole, torch.Tensor):  # each group's (N, F_g) rows
            for g, feats in self.groups:
                rows = self._group_rows(whole, g, len(feats), n)
                # reshape: a view of the lookup, but under vmap of a batch of tables a copy
                # where the batch's layout has no such view
                outs.append(torch.nn.functional.embedding(rows, table_groups[g]).reshape(
                    n, len(feats) * table_groups[g].shape[1]))
            features, segs = [0] * len(outs), self._written_segs[True]
        else:
            for (g, _), (indices, offsets, weights) in zip(
                    self.groups, self._split(whole, n, starts), strict=True):
                param = table_groups[g]
                which = None if exact is None else exact.groups[g]
                means = which is True and weights is None
                sums = torch.nn.functional.embedding_bag(
                    indices, param, offsets, mode="mean" if means else "sum",
                    include_last_offset=True,
                    per_sample_weights=None if weights is None else weights.to(param.dtype))
                outs.append(sums if means else self._divided(sums, offsets, which, n))
            features = [len(feats) for _, feats in self.groups]
            segs = self._written_segs[False]
        dtype = functools.reduce(torch.promote_types, (out.dtype for out in outs))
        out: torch.Tensor = _IN_FEATURE_ORDER([o.to(dtype) for o in outs], features, segs)
        return out

    def _per_group(self, kb: KeyedBags, table_groups: Sequence[torch.Tensor], sparse: bool,
                   tables: TableReader, exact: ExactMeans | None = None,
                   read: dict[str, Bags] | None = None) -> torch.Tensor:
        """One lookup per group of its features' bags (:meth:`_group_bags`), or per feature for
        a ``max`` table and for per-entry weights that need their gradient (one lookup of the
        group's bags where its row-sparse gradients could not be added: where autograd has no
        sparse add for the parameter, or while a graph is recorded, whose backward cannot add
        two row-sparse gradients of one parameter; :meth:`_one_weighted_lookup`), put in
        feature order by one copy (the operator
        ``lookuplinear::in_feature_order``). ``exact``: the exact means' bags summed and
        divided by their sizes (:meth:`_divided`)."""
        places, table_of = self.plan.places, self.plan.table_of
        weights_need_grad = _needs_derivative(kb.weights)
        n = kb.batch_size
        parts: list[tuple[torch.Tensor, list[str]]] = []
        if read is None:  # each feature's bags, read once for all its tables
            read = {}
        in_graph = capturing()
        for g, feats in self.groups:
            if (weights_need_grad and sparse and len(feats) > 1
                    and places[table_of[feats[0]]].config.mode != "max"
                    and (in_graph or not sums_sparse_gradients(table_groups[g]))):
                parts.extend(self._one_weighted_lookup(kb, g, feats, table_groups[g], tables,
                                                       read))
                continue
            if weights_need_grad or places[table_of[feats[0]]].config.mode == "max":
                # each reads the group's parameter at its table's rows (a row-sparse gradient
                # cannot flow back through a view); a max has no row-sparse gradient
                for f in feats:
                    _, off, cfg = places[table_of[f]]
                    mode = "sum" if cfg.hashing == "qr" else cfg.mode  # rows() folded it
                    bags = self._checked(kb, f, tables, read)
                    pad = None if cfg.padding_idx is None else off + cfg.padding_idx
                    parts.append((lookup_linear(
                        tables._drawn(g, Bags(bags.indices + off, bags.offsets, bags.weights)),
                        table_groups[g], None, mode=mode, padding_idx=pad,
                        sparse=tables._sparse(cfg)), [f]))
                continue
            bags, pad = self._group_bags(kb, g, feats, table_groups[g].dtype, tables, exact,
                                         read)
            if (exact is not None and exact.groups[g] is True and bags.weights is None
                    and not sparse and g not in self.stored):
                # ATen's own mean, as the eager :meth:`_dense` takes it: its dense backward
                # (an axpy by 1 / size, fused where the CPU's BLAS fuses) is not a product
                # then a sum on every machine
                parts.append((torch.nn.functional.embedding_bag(
                    bags.indices, table_groups[g], bags.offsets, mode="mean",
                    include_last_offset=True), feats))
                continue
            sums = lookup_linear(tables._drawn(g, bags), table_groups[g], None,
                                 padding_idx=pad, sparse=sparse)
            parts.append((sums if exact is None else self._divided(
                sums, bags.offsets, exact.groups[g], n), feats))
        dtype = functools.reduce(torch.promote_types, (out.dtype for out, _ in parts))
        out: torch.Tensor = _IN_FEATURE_ORDER(
            [out.to(dtype) for out, _ in parts], [len(feats) for _, feats in parts],
            self._segments_of([(feats, True) for _, feats in parts]))
        return out

    def _one_weighted_lookup(self, kb: KeyedBags, g: int, feats: list[str],
                             param: torch.Tensor, tables: TableReader, read: dict[str, Bags]
                             ) -> list[tuple[torch.Tensor, list[str]]]:
        """Group ``g``'s features' bags, whose per-entry weights need their gradient, as one
        row-sparse lookup of its parameter ``param`` (the group's one gradient, where autograd
        could not add one per feature: :func:`sums_sparse_gradients`, or a recorded graph's
        backward), each feature's ``N``
        sums then reduced by its table's mode: the outputs (each feature's, with it) of
        :meth:`_per_group`'s lookup per feature, to the bit, and their gradients. Padding
        entries are dropped (in a recorded graph kept with weight 0, as :meth:`_group_bags`
        keeps them)."""
        places, table_of = self.plan.places, self.plan.table_of
        in_graph = capturing()
        pieces: list[tuple[Bags, str, str]] = []  # each feature's bags, its mode, the feature
        for f in feats:
            _, off, cfg = places[table_of[f]]
            bags = self._checked(kb, f, tables, read)
            if cfg.padding_idx is not None:
                if in_graph:
                    keep = bags.indices != cfg.padding_idx
                    w = keep.to(param.dtype) if bags.weights is None else \
                        bags.weights.masked_fill(~keep, 0)
                    bags = Bags.from_checked(bags.indices, bags.offsets, w)
                else:
                    bags = bags.drop_index(cfg.padding_idx)
            mode = "sum" if cfg.hashing == "qr" else cfg.mode  # rows() folded it
            pieces.append((Bags.from_checked(bags.indices.long() + off, bags.offsets,
                                             bags.weights), mode, f))
        n = kb.batch_size
        offsets = torch.zeros(len(feats) * n + 1, dtype=torch.long, device=kb.device)
        torch.cumsum(torch.cat([b.lengths() for b, _, _ in pieces]), 0, out=offsets[1:])
        weights = [b.weights if b.weights is not None else
                   torch.ones(b.nnz, dtype=param.dtype, device=b.device) for b, _, _ in pieces]
        whole = Bags.from_checked(torch.cat([b.indices for b, _, _ in pieces]), offsets,
                                  torch.cat([w.to(param.dtype) for w in weights]))
        sums = lookup_linear(tables._drawn(g, whole), param, None, sparse=True)
        return [(reduce_sums(sums[i * n:(i + 1) * n], bags, mode, None), [f])
                for i, (bags, mode, f) in enumerate(pieces)]

    def _segments_of(self, layout: list[tuple[list[str], bool]]) -> tuple[int, ...]:
        """The segments (:func:`~lookuplinear.ops.segment_triples`) that put outputs of this
        ``layout`` (each output's features, and whether it is feature-major) in feature order."""
        key = tuple((tuple(feats), fm) for feats, fm in layout)
        segs = self._segments.get(key)
        if segs is None:
            dims = self.plan.dims
            block_of: dict[str, int] = {}
            widths: list[int] = []
            for feats, fm in layout:
                for f in feats:
                    if fm or f == feats[0]:
                        widths.append(0)
                    block_of[f] = len(widths) - 1
                    widths[-1] += dims[self._index[f]]
            segs = segment_triples([(block_of[f], d) for f, d in zip(
                self.plan.embedding_names, dims, strict=True)], widths)
            self._segments[key] = segs
        return segs

    def _group_rows(self, rows: torch.Tensor, g: int, n_feats: int, n: int) -> torch.Tensor:
        """Group ``g``'s ``(N, F_g)`` rows among a one-ID batch's rows (:meth:`_shifted`)."""
        first = self.plan.groups[g].first * n
        return rows[first:first + n * n_feats].view(n, n_feats)

    def _written(self, whole: torch.Tensor | Bags, n: int, table_groups: Sequence[torch.Tensor],
                 tables: TableReader, starts: list[int] | None = None,
                 exact: ExactMeans | None = None) -> torch.Tensor:
        """The usual batch (``whole``: :meth:`_shifted`'s) over one group or several, for
        row-sparse gradients (``sparse=True``) of one dtype: a one-ID batch over several groups
        by the operator ``lookuplinear::gather_groups`` (every group's ``(N, F_g)`` rows
        written into their columns by one kernel call; its gradient each group's index
        lookup's); else each group's part of it (its rows, or its features' bags with their
        weights: the batch's, or the modes' folded) looked up by the operator
        ``lookuplinear::bag_lookup``, the outputs put in feature order by the operator
        ``lookuplinear::in_feature_order`` (none needed for one group's rows). ``exact``: the
        exact means' bags (summed) divided by their sizes (:meth:`_divided`)."""
        if isinstance(whole, torch.Tensor):  # each group's (N, F_g) rows
            rows_of = []
            for g, feats in self.groups:
                rows = self._group_rows(whole, g, len(feats), n)
                rows_of.append(tables._drawn(g, rows) if self.stored else rows)
            if len(rows_of) > 1:  # gathered into their columns by one kernel call
                gathered: torch.Tensor = _GATHER_GROUPS(table_groups, rows_of,
                                                        self._all_columns, self.plan.width)
                return gathered
            g, feats = self.groups[0]
            rows_out = _BAG_LOOKUP(table_groups[g], rows_of[0]).view(
                n, len(feats) * table_groups[g].shape[1])
            segs = self._written_segs[True]
            if segs == (0, 0, rows_out.shape[1]):
                return rows_out  # one group's rows, its features in output order
            ordered: torch.Tensor = _IN_FEATURE_ORDER([rows_out], [0], segs)
            return ordered
        outs = []  # each group's F_g * N bags' sums, feature-major
        for (g, _), (indices, offsets, weights) in zip(
                self.groups, self._split(whole, n, starts), strict=True):
            if self.stored:
                bags = tables._drawn(g, Bags.from_checked(indices, offsets, weights))
                indices, offsets = bags.indices, bags.offsets
            which = None if exact is None else exact.groups[g]
            if which is True and weights is None:  # a group of means: the operator's mean
                outs.append(_BAG_LOOKUP(table_groups[g], indices, offsets, mode=1))
                continue
            sums = _BAG_LOOKUP(table_groups[g], indices, offsets, None if weights is None
                               else weights.to(table_groups[g].dtype))
            outs.append(sums if which is None else self._divided(sums, offsets, which, n))
        out: torch.Tensor = _IN_FEATURE_ORDER(outs, self._features, self._written_segs[False])
        return out

    def _split(self, whole: Bags, n: int, starts: list[int] | None = None
               ) -> list[tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]]:
        """Each group's bags of the usual batch ``whole`` (``n`` bags per feature,
        feature-major): its features' bags, feature after feature, as indices and weights and
        CSR offsets; ``whole``'s own for one group. The batch is put in group order by one
        pass (the operator ``lookuplinear::group_order``: the indices, and each group's offsets
        from 0) and its weights by one copy; each group's part is then slices of them.
        ``starts``: each feature's first entry and the end (:meth:`lookup` reads them, kept on
        the host where known)."""
        if len(self.groups) == 1:
            return [(whole.indices, whole.offsets, whole.weights)]
        assert starts is not None, "several groups: the caller reads the bounds"
        indices, own = _GROUP_ORDER(whole.indices, whole.offsets, len(self.feature_names),
                                    self._order, self._features)
        sizes = [b - a for a, b in itertools.pairwise(starts)]
        weights = None if whole.weights is None else torch.cat(  # each feature's: views,
            self._pick(whole.weights.split(sizes)))  # then one copy
        parts = []
        first = bag = 0  # the group's first entry and first offset
        for at in self._at:  # (a loop: no frame per group)
            end = first
            for f in at:
                end += sizes[f]
            bags = len(at) * n + 1
            parts.append((indices[first:end], own[bag:bag + bags],
                          None if weights is None else weights[first:end]))
            first, bag = end, bag + bags
        return parts

    def _checked(self, kb: KeyedBags, feature: str, tables: TableReader,
                 read: dict[str, Bags] | None = None) -> Bags:
        """``tables.rows(kb, feature, read)`` with every index checked against its table's
        rows."""
        bags = tables.rows(kb, feature, read)
        cfg = self.plan.places[self.plan.table_of[feature]].config
        if cfg.hashing is None:
            check_index_range(bags.indices, cfg.num_embeddings,
                              where=f"kb[{self.plan.feature_of[feature]!r}]")
        return bags

    def _group_bags(self, kb: KeyedBags, g: int, feats: list[str], dtype: torch.dtype,
                    tables: TableReader, exact: ExactMeans | None = None,
                    read: dict[str, Bags] | None = None) -> tuple[Bags, int | None]:
        """The ``F * N`` bags of group ``g``'s features as one lookup of its parameter (of
        ``dtype``): indices shifted by their table's first row, ``mean``/``sqrtn`` folded into
        per-entry weights (the same weights ``lookup_linear`` folds for one table); and the
        ``padding_idx`` to look them up with (None: their padding entries already dropped or
        weighed 0).

        On the CPU the padding entries are dropped (one C pass over the values), but for a
        bfloat16 group (ATen's CPU kernel rounds its sums otherwise without ``padding_idx``:
        ``nn.EmbeddingBag(padding_idx=...)``'s sums are the kernel's with it, as
        ``lookup_linear`` keeps them for one table). Off the CPU, and for such a group, they
        stay (dropping them would read how many there are back to the host): the lookup
        takes the group's padding row as its ``padding_idx`` (:attr:`_padding_rows`), a
        padding entry of the group's other padded tables is given that row, and where a mode
        is folded the padding entries weigh 0 in its factor. The kernel leaves padding entries
        out of the sums and the gradient, so the outputs, and the gradient's rows and values,
        are the dropped entries'.

        A graph recorded for such a group does the same (no count read). A graph of another
        CPU group keeps the padding entries with weight 0 (how many there are is a property of
        one batch, and a graph takes no branch on the values): the same sums and factors as
        the dropped entries' (the entries of weight 1 adding their rows as unweighted ones
        do), but for a padding row holding inf or NaN, which a weight of 0 makes NaN; the
        padding row gets a gradient of zeros."""
        places, table_of = self.plan.places, self.plan.table_of
        indices, lengths, weights = [], [], []
        in_graph = capturing()
        pad = None if on_host(kb.values) and dtype is not torch.bfloat16 \
            else self._padding_rows[g]
        zeroed = in_graph and pad is None  # padding entries weigh 0 (a graph on the CPU)
        kept = zeroed or pad is not None  # the padding entries stay in the batch
        folds = {f: places[table_of[f]].config.mode in ("mean", "sqrtn")
                 and not (exact is not None and exact.outputs[self._index[f]]) for f in feats}
        any_weights = kb.weights is not None or any(
            folds[f] or (zeroed and places[table_of[f]].config.padding_idx is not None)
            for f in feats)
        for f in feats:
            _, off, cfg = places[table_of[f]]
            bags = self._checked(kb, f, tables, read)
            padding = cfg.padding_idx
            if padding is not None and not kept:
                bags = bags.drop_index(padding)
            w = bags.weights
            rows = bags.indices.long() + off if off else bags.indices.long()
            if padding is not None and kept:
                keep = bags.indices != padding
                if zeroed or folds[f]:  # weight 0: no part in the sum or the factor
                    w = keep.to(dtype) if w is None else w.masked_fill(~keep, 0)
                if pad is not None and off + padding != pad:
                    rows = rows.masked_fill(~keep, pad)  # the row the lookup leaves out
            indices.append(rows)
            lengths.append(bags.lengths())
            if any_weights:
                if folds[f] and cfg.hashing != "qr":
                    weights.append(mode_weights(bags.offsets, None if w is None else w.to(dtype),
                                                cfg.mode == "sqrtn", dtype, bags.indices.numel()))
                elif w is not None:
                    weights.append(w.to(dtype))
                else:
                    weights.append(torch.ones(bags.nnz, dtype=dtype, device=bags.device))
        offsets = torch.zeros(sum(x.numel() for x in lengths) + 1, dtype=torch.long,
                              device=kb.device)
        torch.cumsum(torch.cat(lengths), 0, out=offsets[1:])
        # checked feature by feature: nothing to check again
        return Bags.from_checked(torch.cat(indices), offsets,
                                 torch.cat(weights) if any_weights else None), pad

    def _layout(self, device: torch.device, n: int
                ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
        """For a batch of every feature in order, of ``n`` examples on ``device``: each
        feature's first row in its group's parameter and its table's rows (int64), and where
        its rows go among a one-ID batch's (``one_id_rows``' ``place``; None for one group).
        Built once per device and batch size, kept in ``_layouts`` (which :meth:`_shifted`
        reads first), except while a graph is recorded (its batch size is symbolic, and its
        tensors are not the ones a later call runs on)."""
        plan = self.plan
        both = torch.tensor([[plan.place_of(f).offset, plan.place_of(f).config.num_embeddings]
                             for f in plan.embedding_names], device=device)
        place = None if len(plan.groups) == 1 else torch.stack(
            [self._place[:, 0] * n + self._place[:, 1], self._place[:, 2]], 1).to(device)
        found = (both[:, 0], both[:, 1], place)
        if not torch.compiler.is_compiling():
            if len(self._layouts) >= 8:  # batch sizes that change every call: keep a few
                self._layouts.clear()
            self._layouts[(device, n)] = found
        return found

    def _shifted(self, kb: KeyedBags, batch: KeyedBags, n: int, tables: TableReader
                 ) -> torch.Tensor | Bags | None:
        """The usual batch ``batch`` of ``kb`` (tables of sums, means or sqrtn without
        padding, hashed by ``hashing="mod"``, mapped or neither: ``plan.plain``; the batch's
        keys exactly the plan's features, ``kb`` itself, or a feature read by several tables
        taken once per table, :meth:`_per_output`, for an unweighted ``kb``) hashed or mapped
        where its tables do (:meth:`_table_rows`; not while a graph is recorded), checked and
        shifted to the rows of the groups' parameters in one pass: when every bag holds one
        ID (and the batch no weights: a mean of one row is that row), its rows, each group's
        ``(N, F_g)`` in example order, group after group (the ``(N, F)`` rows for one group);
        else the batch's bags with shifted indices and its weights (a batch of weights only
        with the plan's outputs as keys). None where a graph is recorded or traced over
        hashed or mapped tables."""
        feats = self.feature_names
        recording = torch.compiler.is_compiling()
        values, offsets = batch.values, batch.offsets
        if any(self._hashed) or self._mapped:  # their rows first (in a graph: by feature)
            if recording or torch.jit.is_tracing():
                return None
            values = self._table_rows(kb, batch, tables)
        device = kb.values.device
        layout = None if recording else self._layouts.get((device, n))
        shift, limit, place = layout or self._layout(device, n)
        found: torch.Tensor | int | None = None
        if (not recording and not torch.jit.is_tracing() and kb.weights is None
                and values.numel() == offsets.numel() - 1):
            # (a branch on the batch's sizes: not in a graph, which would keep it)
            found = one_id_rows(values, offsets, len(feats), shift, limit, place)
        if found is None:
            found = shifted_rows(values, offsets, len(feats), shift, limit)
            if not isinstance(found, int):  # a checked batch, shifted
                return Bags.from_checked(found, offsets, kb.weights)
        if isinstance(found, int):  # an ID outside its table: raise, naming its feature
            starts = batch._key_bounds()
            self._checked(kb, feats[next(f for f in range(len(feats))
                                         if found < starts[f + 1])], tables)
            raise AssertionError("unreachable: an ID out of range was not found again")
        return found

    def _table_rows(self, kb: KeyedBags, batch: KeyedBags, tables: TableReader
                    ) -> torch.Tensor:
        """The rows of ``batch``'s values (one key per output, in output order) in their tables:
        hashed where they hash (:meth:`_hashed_rows`), each mapped output's rows as the
        collection's maps gave them for this forward (``tables.rows``), the IDs themselves
        elsewhere; in the offsets' dtype."""
        values = self._hashed_rows(batch) if any(self._hashed) else batch.values
        if self._mapped:
            bounds = batch._key_bounds()
            pieces = [values[a:b] for a, b in itertools.pairwise(bounds)]
            for i in self._mapped:
                pieces[i] = tables._map_rows(kb, self.feature_names[i]).to(values.dtype)
            values = torch.cat(pieces)
        return values.to(batch.offsets.dtype)

    def _hashed_rows(self, batch: KeyedBags) -> torch.Tensor:
        """The rows of ``batch``'s values (one key per output, in output order) in their tables:
        ``hash_ids(id, num_embeddings)`` for the outputs of ``hashing="mod"`` tables (one hash
        of every value, then each output's modulus), the IDs themselves for the others."""
        values = batch.values
        device = values.device
        n = batch.batch_size  # each output's entries, from its bounds among the offsets
        counts = (torch.diff(batch.offsets[::n]) if n else  # (on the device: no host copy)
                  torch.zeros(len(self._hashed), dtype=torch.int64, device=device))
        rows = self._on(self._hashed_rows_of, device).repeat_interleave(
            counts, output_size=values.numel())  # each entry's table rows where it hashes
        hashed = signed_rows(murmur3_ids(values), rows.clamp(min=1))
        if all(self._hashed):  # every output hashes: no select (it shows in a small forward)
            return hashed
        return torch.where(rows > 0, hashed, values)

    def _per_output(self, kb: KeyedBags) -> KeyedBags | None:
        """A batch of exactly the plan's features, one of them read by several tables, as a
        batch of one key per output (the plan's (feature, table) pairs): each feature's bags
        once per table that reads it, one copy, its keys' bounds kept from ``kb``'s (known on
        the host for a batch moved from the CPU: none read back). None while a graph is
        recorded, or for a batch of other keys."""
        if torch.compiler.is_compiling() or kb.keys() != list(self.plan.feature_names):
            return None
        n = kb.batch_size
        position = {f: i for i, f in enumerate(kb.keys())}
        at = [position[f] for f in self.inputs]
        starts = kb._key_bounds()  # kept on the host where known: no read back
        values = torch.cat([kb.values[starts[p]:starts[p + 1]] for p in at])
        if n:  # each output's feature's lengths: views, then one copy (no index from the host)
            per_key = kb.lengths().view(-1, n)
            lengths = torch.cat([per_key[p] for p in at])
        else:
            lengths = kb.lengths()
        offsets = torch.zeros(lengths.numel() + 1, dtype=kb.offsets.dtype, device=kb.device)
        torch.cumsum(lengths, 0, out=offsets[1:])
        out = KeyedBags.from_checked(self.feature_names, values, offsets)  # parts of a checked
        # its keys' bounds, known on the host from kb's: none read back from its new offsets
        out._keep_bounds([0, *itertools.accumulate(starts[p + 1] - starts[p] for p in at)])
        return out


def sums_sparse_gradients(param: torch.Tensor) -> bool:
    """Whether autograd can add two row-sparse gradients of ``param``: not where PyTorch's sparse
    add has no kernel for its dtype on its device (float16 on the CPU: ``"cadd_sparse" not
    implemented for 'Half'``). Several lookups of such a parameter in one forward are then one
    lookup, whose row-sparse gradient is the parameter's only one."""
    return not (param.dtype is torch.float16 and param.device.type == "cpu")


def _runs_of(modes: Sequence[str]) -> list[tuple[int, int, str]]:
    """``modes`` as runs of consecutive outputs ``(first, end, mode)``; none where every one is
    a sum."""
    runs: list[tuple[int, int, str]] = []
    for i, mode in enumerate(modes):
        if runs and runs[-1][2] == mode:
            runs[-1] = (runs[-1][0], i + 1, mode)
        else:
            runs.append((i, i + 1, mode))
    return [] if set(modes) <= {"sum"} else runs
