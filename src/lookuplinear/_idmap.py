"""``IdMap``: unbounded IDs to the rows of a table, without collisions, as IDs keep arriving."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from ._hashing import hash_ids
from ._kernels import _idmap as table_ops
from ._sizes import as_size
from .errors import InputTypeError, InputValueError

__all__ = ["IdMap"]


class IdMap(nn.Module):
    """A managed, collision-free map from int64 IDs to the rows of a ``num_embeddings``-row table.

    Rows ``[0, fallback_rows)`` are shared fallback rows; the other ``capacity = num_embeddings -
    fallback_rows`` rows are each given to one ID. In training mode a call:

    1. looks every ID up; an ID with a row reads its row;
    2. counts the IDs without one; an ID seen ``admit_after`` times in all (this call included)
       is admitted: it gets a free row (in order of first appearance in the call, or of ID
       value with ``admit_after > 1``), or, when every row is taken, the row of the least
       recently used ID (LRU: the one whose last call is the oldest, ties to the lower row),
       which is then forgotten; rows used in this call are never taken;
    3. maps every other ID to a fallback row, ``hash_ids(id, fallback_rows)``.

    Below ``capacity`` distinct admitted IDs, no two IDs share a row. :attr:`evicted` lists the
    rows the last call gave to new IDs after taking them from others (their values and optimizer
    state belong to the old ID: a :class:`~lookuplinear.LookupCollection` re-initialises them).
    In eval mode a call only looks up (unknown IDs read their fallback row) and changes nothing.
    The map is deterministic for a given sequence of calls, and its state (``state_dict``:
    the hash table, each row's ID and last use, the admission counts) is saved and loaded with
    the model.

    As a matrix the map is, at any moment, a 0/1 matrix ``M`` with one 1 per ID, so a table
    read through it is ``nn.Linear`` on ``one_hot(id) @ M``.

    Parameters
    ----------
    num_embeddings : int
        Rows of the table the map indexes.
    fallback_rows : int, default 1
        Rows shared by IDs not (yet) admitted; ``1 <= fallback_rows < num_embeddings``.
    admit_after : int, default 1
        Calls-worth of sightings an ID needs before it gets a row (frequency admission: rare IDs
        never take a row from frequent ones). Counts of IDs not yet admitted are kept in a table
        of ``2 * capacity`` entries, cleared when it fills.

    Raises
    ------
    InputValueError
        ``num_embeddings <= fallback_rows`` (no capacity), or a count below 1.
    InputTypeError
        IDs that are not an integer tensor.

    Examples
    --------
    >>> ids = IdMap(6, fallback_rows=2)              # 4 rows for IDs, 2 fallback rows
    >>> ids(torch.tensor([10**12, -7, 10**12]))      # first sight: rows 2 and 3
    tensor([2, 3, 2])
    >>> ids(torch.tensor([-7, 55]))
    tensor([3, 4])
    """

    table: torch.Tensor  # the hash table: ID -> row among the capacity (_kernels/_idmap.py)
    row_id: torch.Tensor  # (capacity,) the ID holding each row
    last_used: torch.Tensor  # (capacity,) the call that last read each row (-1: never)
    assigned: torch.Tensor  # rows given out so far (never-used rows come first)
    clock: torch.Tensor  # calls in training mode so far
    pending: torch.Tensor  # admission counts of IDs without a row (a hash table)
    pending_used: torch.Tensor  # IDs in ``pending``

    def __init__(self, num_embeddings: int, *, fallback_rows: int = 1,
                 admit_after: int = 1) -> None:
        super().__init__()
        num_embeddings = as_size(num_embeddings, "num_embeddings", where="IdMap")
        fallback_rows = as_size(fallback_rows, "fallback_rows", where="IdMap")
        admit_after = as_size(admit_after, "admit_after", where="IdMap")
        if num_embeddings <= fallback_rows:
            raise InputValueError(
                f"IdMap: num_embeddings={num_embeddings} leaves no row for IDs after "
                f"fallback_rows={fallback_rows}; the capacity is num_embeddings - fallback_rows. "
                "Give the table more rows than fallback rows."
            )
        self.num_embeddings = num_embeddings
        self.fallback_rows = fallback_rows
        self.admit_after = admit_after
        capacity = num_embeddings - fallback_rows
        size = 16
        while size < 2 * capacity:  # load at most one half
            size *= 2
        self.register_buffer("table", table_ops.empty_table(size))
        self.register_buffer("row_id", torch.zeros(capacity, dtype=torch.int64))
        self.register_buffer("last_used", torch.full((capacity,), -1, dtype=torch.int64))
        self.register_buffer("assigned", torch.zeros((), dtype=torch.int64))
        self.register_buffer("clock", torch.zeros((), dtype=torch.int64))
        self.register_buffer("pending", table_ops.empty_table(size if admit_after > 1 else 16))
        self.register_buffer("pending_used", torch.zeros((), dtype=torch.int64))
        self.evicted = torch.zeros(0, dtype=torch.int64)

    @property
    def capacity(self) -> int:
        """Rows for IDs: ``num_embeddings - fallback_rows``."""
        return self.num_embeddings - self.fallback_rows

    def __len__(self) -> int:
        """IDs that hold a row."""
        return int(self.assigned)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        """The row of every ID, int64, the shape and device of ``ids``."""
        if not isinstance(ids, torch.Tensor) or ids.dtype.is_floating_point or ids.dtype in (
            torch.bool, torch.complex64, torch.complex128
        ):
            raise InputTypeError(
                "IdMap takes an integer tensor of IDs, got "
                f"{getattr(ids, 'dtype', type(ids).__name__)}. Hash string IDs with hash_ids."
            )
        flat = ids.reshape(-1).to("cpu", torch.int64).contiguous()
        self.evicted = torch.zeros(0, dtype=torch.int64)
        if not self.training:
            found = table_ops.find(self.table, flat)
        elif self.admit_after == 1:  # one pass: new IDs numbered as they first appear
            found, nxt = table_ops.assign(self.table, flat, int(self.assigned), self.capacity)
            new_rows = torch.arange(int(self.assigned), nxt)
            self.row_id[new_rows] = self._ids_of_new_rows(new_rows, flat, found)
            self.assigned.fill_(nxt)
            found = self._admit(flat, found)
        else:
            found = self._admit(flat, table_ops.find(self.table, flat))
        rows = found + self.fallback_rows
        miss = found < 0
        if bool(miss.any()):
            rows[miss] = hash_ids(flat[miss], self.fallback_rows)
        return rows.reshape(ids.shape).to(ids.device)

    @staticmethod
    def _ids_of_new_rows(rows: torch.Tensor, flat: torch.Tensor,
                          found: torch.Tensor) -> torch.Tensor:
        """The ID that got each of ``rows`` (new rows, each given to one ID of ``flat``)."""
        if rows.numel() == 0:
            return rows
        first = torch.full((int(rows.max()) + 1 - int(rows.min()),), -1, dtype=torch.int64)
        sel = (found >= int(rows.min())) & (found <= int(rows.max()))
        first[found[sel] - int(rows.min())] = flat[sel]
        return first

    @torch.no_grad()
    def _admit(self, flat: torch.Tensor, found: torch.Tensor) -> torch.Tensor:
        now = int(self.clock)
        self.clock += 1
        hit = found >= 0
        self.last_used[found[hit]] = now  # rows read in this call are never taken
        missing = flat[~hit]
        if missing.numel() == 0:
            return found
        new, seen = torch.unique(missing, return_counts=True)  # sorted: deterministic
        if self.admit_after > 1:
            new = self._count(new, seen)
        if new.numel() == 0:
            return found
        rows = self._free_rows(new.numel(), now)
        new = new[: rows.numel()]  # the rest stays unmapped (every row was used in this call)
        if new.numel():
            table_ops.set_values(self.table, new, rows)
            self.row_id[rows] = new
            self.last_used[rows] = now
        return table_ops.find(self.table, flat)

    def _count(self, new: torch.Tensor, seen: torch.Tensor) -> torch.Tensor:
        """Add this call's sightings to the pending counts; the IDs now admitted. The counts
        live in a table of at most half load: when this call's IDs would pass it, the counts
        so far are forgotten, and IDs past it in this call are not counted."""
        room = self.pending.numel() // 4  # half of the slots
        if int(self.pending_used) + new.numel() > room:
            self.pending.copy_(table_ops.empty_table(self.pending.numel() // 2))
            self.pending_used.zero_()
            new, seen = new[:room], seen[:room]
        counts, added = table_ops.add(self.pending, new, seen)
        self.pending_used += added
        admitted = new[counts >= self.admit_after]
        self.pending_used -= table_ops.erase(self.pending, admitted)
        return admitted

    def _free_rows(self, n: int, now: int) -> torch.Tensor:
        """``n`` rows for new IDs: never-used rows first, then the least recently used ones."""
        start = int(self.assigned)
        fresh = torch.arange(start, min(start + n, self.capacity), dtype=torch.int64)
        self.assigned += fresh.numel()
        if fresh.numel() == n:
            return fresh
        # LRU: the oldest last use first, ties to the lower row; never a row used now
        order = torch.argsort(self.last_used[:start], stable=True)
        order = order[self.last_used[order] < now][: n - fresh.numel()]
        if order.numel():
            table_ops.erase(self.table, self.row_id[order])
            self.evicted = order + self.fallback_rows
        return torch.cat([fresh, order])

    def extra_repr(self) -> str:
        return (f"{self.num_embeddings}, fallback_rows={self.fallback_rows}, "
                f"admit_after={self.admit_after}, ids={len(self)}")

    def _load_from_state_dict(self, state_dict: dict[str, Any], prefix: str, *args: Any) -> None:
        super()._load_from_state_dict(state_dict, prefix, *args)
        self.evicted = torch.zeros(0, dtype=torch.int64)
