"""Which rows of a table a backward pass gives a gradient: a :class:`RowTracker` follows them.

A :class:`~lookuplinear.Checkpoint` must know which rows of a table changed since its last save,
without reading the table. Every row-sparse update (``lookuplinear.optim``, fused or not,
``torch.optim.SparseAdam``, sparse ``SGD``/``Adagrad``) changes exactly the rows of a gradient.
A gradient that is stored reaches the parameter's gradient accumulation, which a tracker hooks:
the rows of a sparse one, all of them for a dense one. A gradient that a fused optimizer takes
inside the backward is never stored; the lookup's backward tells the event the kernel layer
offers (:func:`lookuplinear.ops._hooks.notify`) its rows instead, to which the trackers that
follow the table subscribe.

The checkpoint owns its tracker; each table is followed through a list, keyed weakly by the
table, of the trackers that follow it, held weakly (a copy of the table is followed by none).
"""

from __future__ import annotations

import weakref
from collections.abc import Mapping

import torch
from torch.utils.weak import WeakIdKeyDictionary

from ..ops._hooks import Subscription, after_accumulation, on_rows_updated

__all__ = ["RowTracker"]


class _Following:
    """The trackers that follow one table (held weakly: their owners hold them, and a tracker
    holds the table), the gradient hook that tells them, and their subscription to the rows a
    fused update changes."""

    __slots__ = ("hook", "subscription", "trackers")

    def __init__(self, param: torch.Tensor) -> None:
        self.trackers: dict[int, tuple[weakref.ref[RowTracker], str]] = {}
        self.hook: torch.utils.hooks.RemovableHandle | None = None
        self.subscription: Subscription = on_rows_updated(param, self.tell)

    def tell(self, rows: torch.Tensor | None) -> None:
        for ref, name in list(self.trackers.values()):
            tracker = ref()
            if tracker is not None:
                tracker.add(name, rows)


#: the trackers following each table (by parameter, held weakly)
_FOLLOWED: WeakIdKeyDictionary = WeakIdKeyDictionary()


def _accumulated(param: torch.Tensor) -> None:
    grad = param.grad
    following = _FOLLOWED.get(param)
    if grad is not None and following is not None:
        following.tell(grad._indices()[0] if grad.is_sparse else None)


class RowTracker:
    """The rows of each of ``tables`` that gradients named since the last :meth:`clear`.

    Parameters
    ----------
    tables : mapping of str to Tensor of shape (rows, dim)
        The tables to follow, by name.
    initial : mapping of str to Tensor, optional
        Rows each table starts with (int64), as if a gradient had named them.
    """

    def __init__(self, tables: Mapping[str, torch.Tensor],
                 initial: Mapping[str, torch.Tensor] | None = None) -> None:
        self.tables = dict(tables)
        # int64 tensors, duplicates allowed until touched() sorts them out
        self._pending: dict[str, list[torch.Tensor]] = {
            n: [] if initial is None else [initial[n]] for n in self.tables}
        for name, p in self.tables.items():
            following = _FOLLOWED.get(p)
            if following is None:
                following = _FOLLOWED[p] = _Following(p)
            if following.hook is None and p.is_leaf:  # also while frozen: trained later
                following.hook = after_accumulation(p, _accumulated)
            following.trackers[id(self)] = (weakref.ref(self), name)

    def add(self, name: str, rows: torch.Tensor | None) -> None:
        """Rows of table ``name`` a gradient named (int64, duplicates allowed); None: all."""
        pending, table = self._pending[name], self.tables[name]
        if rows is None:  # a dense gradient: any row may change
            pending[:] = [torch.arange(table.shape[0], device=table.device)]
            return
        pending.append(rows.detach().reshape(-1).to(torch.long, copy=True))
        if len(pending) > 64:  # many steps between saves: keep each row once
            pending[:] = [torch.unique(torch.cat(pending))]

    def touched(self, name: str) -> torch.Tensor:
        """The rows of table ``name`` named since the last :meth:`clear`, sorted, once each."""
        pending = self._pending[name]
        if not pending:
            return torch.zeros(0, dtype=torch.long, device=self.tables[name].device)
        return torch.unique(torch.cat(pending))

    def clear(self, name: str) -> None:
        """Forget the rows of table ``name`` named so far."""
        self._pending[name].clear()

    def close(self) -> None:
        """Stop following the tables."""
        for p in self.tables.values():
            following = _FOLLOWED.get(p)
            if following is None:
                continue
            following.trackers.pop(id(self), None)
            if not following.trackers:
                if following.hook is not None:
                    following.hook.remove()
                following.subscription.remove()
                del _FOLLOWED[p]
