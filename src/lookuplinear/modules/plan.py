"""How a ``LookupCollection`` computes what its tables say: the plan, plain data.

The tables of one width and dtype share one ``(total rows, dim)`` parameter, table after table,
as FBGEMM's table-batched embedding keeps them; a ``mode="max"`` table (no row-sparse gradient)
and a table in a file (its own files) each get a parameter of their own::

    tables   user (4 rows, dim 2, features [user]), item (3 rows, dim 2, [item, last]),
             tag (5 rows, dim 8, [tag])
    groups   0: dim 2, rows [u0..u3, i0..i2]   tables user at row 0, item at row 4
             1: dim 8, rows [t0..t4]           table tag at row 0
    output   columns [user 0:2 | item 2:4 | last 4:6 | tag 6:14]

The plan's unit is a (feature, table) pair, one output block each: a feature read by several
tables (TorchRec's shared feature) is one block per table, keyed ``feature@table`` as TorchRec
keys it; a feature read by one table keeps its name::

    tables   t1 (dim 3, features [f1]), t2 (dim 4, features [f1])
    output   columns [f1@t1 0:3 | f1@t2 3:7]      # both read the batch's key f1

:func:`plan_collection` builds it from the table configs alone, as TorchRec's
``group_tables`` plans a sharded collection; :class:`CollectionPlan` is what the collection's
forward and ``state_dict`` read.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import NamedTuple

import torch

from ..errors import InputTypeError, InputValueError
from .table_config import TableConfig

__all__ = ["CollectionPlan", "GroupPlan", "TablePlace", "plan_collection"]


class TablePlace(NamedTuple):
    """Where a table lives: its group (the parameter), its first row there, its config."""

    group: int
    offset: int
    config: TableConfig


@dataclass(frozen=True)
class GroupPlan:
    """One parameter of the collection: tables of one width and dtype, row after row.

    ``kernel`` says how its features are looked up: ``"sum"`` (row-sparse gradients, batched
    with the other ``"sum"`` groups), ``"max"`` (a ``mode="max"`` table: a dense gradient) or
    ``"file"`` (a table in a file, whose rows are drawn before the lookup).
    """

    dim: int
    dtype: torch.dtype
    rows: int
    kernel: str
    tables: tuple[str, ...]
    #: the group's outputs (embedding names) in output order, their positions in it and first
    #: output columns
    features: tuple[str, ...]
    positions: tuple[int, ...]
    columns: tuple[int, ...]
    #: the outputs of the groups before this one (where its block starts in a one-ID batch's
    #: rows, group after group)
    first: int


@dataclass(frozen=True)
class CollectionPlan:
    """A collection's tables laid out: groups, the place of each table, the output columns.

    An *output* is one (feature, table) pair: every table's features, table after table.
    """

    #: the outputs' names in output order: the feature's name, or ``feature@table`` for a
    #: feature that several tables read (TorchRec's embedding names)
    embedding_names: tuple[str, ...]
    #: the batch key each output reads
    inputs: tuple[str, ...]
    #: the batch keys the tables read, each once, in output order
    feature_names: tuple[str, ...]
    #: each output's width and first output column; ``width`` the output's
    dims: tuple[int, ...]
    columns: tuple[int, ...]
    width: int
    #: each output's table, and the batch key it reads
    table_of: Mapping[str, str]
    feature_of: Mapping[str, str]
    places: Mapping[str, TablePlace]
    groups: tuple[GroupPlan, ...]
    #: each output's group
    feature_group: tuple[int, ...]
    #: every table pooled by a sum, mean or sqrtn, without padding, its IDs its rows, hashed to
    #: them (``hashing="mod"``) or mapped (``"map"``): a batch is turned into rows and looked
    #: up in one pass, its tables' modes per-entry weights
    plain: bool

    def outputs_of(self, feature: str) -> list[str]:
        """The outputs that read batch key ``feature`` (one per table that reads it)."""
        return [n for n, f in zip(self.embedding_names, self.inputs, strict=True)
                if f == feature]

    def outputs_of_table(self, table: str) -> list[str]:
        """The outputs of table ``table`` (one per feature it reads), in output order."""
        return [n for n in self.embedding_names if self.table_of[n] == table]

    def place_of(self, name: str) -> TablePlace:
        """The place of the table that output ``name`` reads."""
        return self.places[self.table_of[name]]

    def one_id_place(self) -> list[tuple[int, int, int]]:
        """For each output, ``(first, j, F_g)``: in a one-ID batch's rows (each group's
        ``(N, F_g)`` rows in example order, group after group), output ``j`` of its group
        starts at row ``N * first + j`` and steps by ``F_g``."""
        return [(self.groups[g].first, self.groups[g].features.index(f),
                 len(self.groups[g].features))
                for f, g in zip(self.embedding_names, self.feature_group, strict=True)]


def plan_collection(tables: Sequence[TableConfig]) -> CollectionPlan:
    """The plan of a collection of ``tables``: tables of one width and dtype grouped in one
    parameter (a ``max`` table or a table in a file alone), the (feature, table) outputs in
    table order.

    Raises
    ------
    InputValueError
        No tables, table names repeated, a feature listed twice in one table, or two outputs
        of one name (a feature named ``f@t`` beside feature ``f`` shared by table ``t``).
    InputTypeError
        A table that is not a :class:`TableConfig`.

    Examples
    --------
    >>> plan = plan_collection([TableConfig("user", 4, 2, ["user"]),
    ...                         TableConfig("item", 3, 2, ["item", "last"]),
    ...                         TableConfig("tag", 5, 8, ["tag"])])
    >>> [(g.rows, g.dim, g.tables) for g in plan.groups]
    [(7, 2, ('user', 'item')), (5, 8, ('tag',))]
    >>> plan.places["item"].offset, plan.columns, plan.width
    (4, (0, 2, 4, 6), 14)
    >>> shared = plan_collection([TableConfig("t1", 10, 3, ["f1"]),
    ...                           TableConfig("t2", 10, 4, ["f1"])])
    >>> shared.embedding_names, shared.inputs, shared.feature_names
    (('f1@t1', 'f1@t2'), ('f1', 'f1'), ('f1',))
    """
    tables = distinct_tables(tuple(tables))
    pairs = [(f, t.name) for t in tables for f in t.feature_names]
    readers: dict[str, list[str]] = {}
    for f, name in pairs:
        if name in readers.get(f, ()):
            raise InputValueError(
                f"LookupCollection: table {name!r} lists feature {f!r} twice "
                f"(feature_names={list(next(t for t in tables if t.name == name).feature_names)}"
                "); list each feature once per table (a feature may read several tables)."
            )
        readers.setdefault(f, []).append(name)
    # TorchRec's embedding names: a feature read by several tables is "feature@table" in each
    names = [f if len(readers[f]) == 1 else f"{f}@{name}" for f, name in pairs]
    if len(set(names)) != len(names):
        repeated = sorted({n for n in names if names.count(n) > 1})
        raise InputValueError(
            f"LookupCollection: the outputs {repeated} would have one name twice: a feature "
            "read by several tables is named 'feature@table' in each, and another feature "
            "has that name. Rename that feature."
        )
    owner = {n: name for n, (_, name) in zip(names, pairs, strict=True)}
    keys: dict[tuple[object, ...], int] = {}
    places: dict[str, TablePlace] = {}
    sizes: list[tuple[int, int, torch.dtype, str]] = []
    members: list[list[str]] = []
    for t in tables:
        dtype = t.dtype or torch.get_default_dtype()
        kernel = "file" if t.storage is not None else "max" if t.mode == "max" else "sum"
        key = (t.embedding_dim, dtype, t.name if kernel != "sum" else None)
        if key not in keys:
            keys[key] = len(sizes)
            sizes.append((0, t.embedding_dim, dtype, kernel))
            members.append([])
        g = keys[key]
        rows, dim, dt, kind = sizes[g]
        places[t.name] = TablePlace(g, rows, t)
        sizes[g] = (rows + t.stored_rows, dim, dt, kind)
        members[g].append(t.name)
    features = tuple(names)
    dims = tuple(places[owner[f]].config.embedding_dim for f in features)
    columns = tuple(sum(dims[:i]) for i in range(len(dims)))
    feature_group = tuple(places[owner[f]].group for f in features)
    groups = []
    first = 0
    for g, (rows, dim, dt, kind) in enumerate(sizes):
        at = tuple(i for i, h in enumerate(feature_group) if h == g)
        groups.append(GroupPlan(dim, dt, rows, kind, tuple(members[g]),
                                tuple(features[i] for i in at), at,
                                tuple(columns[i] for i in at), first))
        first += len(at)
    inputs = tuple(f for f, _ in pairs)
    return CollectionPlan(
        embedding_names=features, inputs=inputs, feature_names=tuple(dict.fromkeys(inputs)),
        dims=dims, columns=columns, width=sum(dims), table_of=owner,
        feature_of=dict(zip(features, inputs, strict=True)),
        places=places, groups=tuple(groups), feature_group=feature_group,
        plain=all(t.mode != "max" and t.padding_idx is None
                  and t.hashing in (None, "mod", "map") for t in tables),
    )


def distinct_tables(tables: tuple[TableConfig, ...]) -> tuple[TableConfig, ...]:
    """``tables``, checked: at least one, all :class:`TableConfig`, names distinct."""
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
