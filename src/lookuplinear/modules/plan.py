"""How a ``LookupCollection`` computes what its tables say: the plan, plain data.

The tables of one width and dtype share one ``(total rows, dim)`` parameter, table after table,
as FBGEMM's table-batched embedding keeps them; a ``mode="max"`` table (no row-sparse gradient)
and a table in a file (its own files) each get a parameter of their own::

    tables   user (4 rows, dim 2, features [user]), item (3 rows, dim 2, [item, last]),
             tag (5 rows, dim 8, [tag])
    groups   0: dim 2, rows [u0..u3, i0..i2]   tables user at row 0, item at row 4
             1: dim 8, rows [t0..t4]           table tag at row 0
    output   columns [user 0:2 | item 2:4 | last 4:6 | tag 6:14]

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
    #: the group's features in output order, their positions in it and first output columns
    features: tuple[str, ...]
    positions: tuple[int, ...]
    columns: tuple[int, ...]
    #: the features of the groups before this one (where its block starts in a one-ID batch's
    #: rows, group after group)
    first: int


@dataclass(frozen=True)
class CollectionPlan:
    """A collection's tables laid out: groups, the place of each table, the output columns."""

    #: the output order: every table's features, table after table
    feature_names: tuple[str, ...]
    #: each feature's width and first output column; ``width`` the output's
    dims: tuple[int, ...]
    columns: tuple[int, ...]
    width: int
    table_of: Mapping[str, str]
    places: Mapping[str, TablePlace]
    groups: tuple[GroupPlan, ...]
    #: each feature's group
    feature_group: tuple[int, ...]
    #: every table a plain sum (no padding, no hashing): a batch's IDs are its rows
    plain: bool

    def place_of(self, feature: str) -> TablePlace:
        """The place of the table that ``feature`` reads."""
        return self.places[self.table_of[feature]]

    def one_id_place(self) -> list[tuple[int, int, int]]:
        """For each feature, ``(first, j, F_g)``: in a one-ID batch's rows (each group's
        ``(N, F_g)`` rows in example order, group after group), feature ``j`` of its group
        starts at row ``N * first + j`` and steps by ``F_g``."""
        return [(self.groups[g].first, self.groups[g].features.index(f),
                 len(self.groups[g].features))
                for f, g in zip(self.feature_names, self.feature_group, strict=True)]


def plan_collection(tables: Sequence[TableConfig]) -> CollectionPlan:
    """The plan of a collection of ``tables``: tables of one width and dtype grouped in one
    parameter (a ``max`` table or a table in a file alone), the features in table order.

    Raises
    ------
    InputValueError
        No tables, table names repeated, a feature in two tables.
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
    """
    tables = distinct_tables(tuple(tables))
    owner: dict[str, str] = {}
    for t in tables:
        for f in t.feature_names:
            if f in owner:
                raise InputValueError(
                    f"LookupCollection: feature {f!r} is in tables {owner[f]!r} and "
                    f"{t.name!r}; a feature reads one table."
                )
            owner[f] = t.name
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
    features = tuple(owner)
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
    return CollectionPlan(
        feature_names=features, dims=dims, columns=columns, width=sum(dims), table_of=owner,
        places=places, groups=tuple(groups), feature_group=feature_group,
        plain=all(t.mode == "sum" and t.padding_idx is None and t.hashing is None
                  for t in tables),
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
