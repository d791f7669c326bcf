"""Rows of a table given to a new ID, whose optimizer state starts afresh.

An ``IdMap`` that evicts gives a row to a new ID, and its collection draws the row again
(:meth:`LookupCollection._renew`). The optimizer state of that row (momentum, squared sums,
moments) belongs to the old ID: the next update of the table by a :mod:`lookuplinear.optim`
optimizer, fused or not, zeroes it before it reads it, and a :class:`~lookuplinear.Checkpoint`
saves the zeroed state. The rows are held here, by table, until then: the collection that
renews them tells :data:`RESETS`, and an optimizer :meth:`~RowResets.take` s them (a fused
update asks once for all its tables: :meth:`~RowResets.take_all`). A table
that is garbage-collected drops its rows; a copy of a table has none.
"""

from __future__ import annotations

from collections.abc import Iterable

import torch
from torch.utils.weak import WeakIdKeyDictionary

__all__ = ["RESETS", "RowResets"]


class RowResets:
    """The rows of each table whose optimizer state the next update starts afresh."""

    __slots__ = ("rows",)

    def __init__(self) -> None:
        #: the marked rows by table (empty in the usual case: a caller may test it before
        #: asking for them)
        self.rows: WeakIdKeyDictionary = WeakIdKeyDictionary()

    def add(self, param: torch.Tensor, rows: torch.Tensor) -> None:
        """Mark ``rows`` (a 1-D int64 tensor) of ``param`` as given to new IDs."""
        old = self.rows.get(param)
        self.rows[param] = rows if old is None else torch.cat([old, rows])

    def pending(self, param: torch.Tensor) -> torch.Tensor | None:
        """The rows of ``param`` marked since the last :meth:`take`, or None."""
        if not self.rows:
            return None
        found: torch.Tensor | None = self.rows.get(param)
        return found

    def take(self, param: torch.Tensor) -> torch.Tensor | None:
        """The rows of ``param`` marked since the last call, which are then forgotten."""
        if not self.rows:  # the usual case: no table renews rows
            return None
        found: torch.Tensor | None = self.rows.pop(param, None)
        return found

    def take_all(self, params: Iterable[torch.Tensor]) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """``(param, rows)`` for each of ``params`` with rows marked since the last take (those
        rows are then forgotten), in the order of ``params``: :meth:`take` of many tables in
        one call (which its caller makes only where :attr:`rows` holds some)."""
        taken = []
        for param in params:
            found = self.rows.pop(param, None)
            if found is not None:
                taken.append((param, found))
        return taken


#: the rows every table has given to new IDs and no optimizer has started afresh yet
RESETS = RowResets()
