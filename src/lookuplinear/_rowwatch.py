"""Watchers of a table's rows: who is told which rows a backward pass gives a gradient.

A :class:`~lookuplinear.Checkpoint` must know which rows of a table changed since its last save,
without reading the table. Every row-sparse update (``lookuplinear.optim``, fused or not,
``torch.optim.SparseAdam``, sparse ``SGD``/``Adagrad``) changes exactly the rows of a gradient.
A gradient that is stored reaches the parameter's gradient accumulation, which :func:`watch`
hooks: the rows of a sparse one, ``rows=None`` (all of them) for a dense one. A gradient that a
fused optimizer takes inside the backward is never stored; the lookup's backward
(:mod:`lookuplinear._rowgrad`) calls :func:`notify` with its rows instead.

Watchers live with the parameter (as the fused optimizer's binding does) and are dropped by
``deepcopy`` and pickling.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

__all__ = ["Watcher", "notify", "unwatch", "watch"]

_ATTR = "_lookuplinear_watchers"

#: called with the rows of a gradient (a 1-D int64 tensor, duplicates allowed) or None (all)
Watcher = Callable[[torch.Tensor | None], None]


def _accumulated(param: torch.Tensor) -> None:
    grad = param.grad
    if grad is not None:
        rows = grad._indices()[0] if grad.is_sparse else None
        for fn in list(param.__dict__.get(_ATTR, {}).values()):
            fn(rows)


def watch(param: torch.Tensor, key: Any, fn: Watcher) -> None:
    """Tell ``fn`` the rows of every gradient of ``param`` from now on (``key`` names it)."""
    watchers = param.__dict__.setdefault(_ATTR, {})
    if not watchers and param.requires_grad:
        param.__dict__[_ATTR + "_hook"] = param.register_post_accumulate_grad_hook(_accumulated)
    watchers[key] = fn


def unwatch(param: torch.Tensor, key: Any) -> None:
    """Stop telling the watcher ``key``."""
    watchers = param.__dict__.get(_ATTR, {})
    watchers.pop(key, None)
    if not watchers:
        hook = param.__dict__.pop(_ATTR + "_hook", None)
        if hook is not None:
            hook.remove()


def notify(param: torch.Tensor, rows: torch.Tensor) -> None:
    """Tell ``param``'s watchers that a gradient names ``rows`` (a view's rows are its base's)."""
    base = param._base if param._base is not None else param
    watchers = base.__dict__.get(_ATTR)
    if not watchers:
        return
    if base is not param and base.dim() == 2 and param.dim() == 2:
        rows = rows + (param.storage_offset() - base.storage_offset()) // base.stride(0)
    for fn in list(watchers.values()):
        fn(rows)
