"""The estimators' optimizers: ``lookuplinear.optim`` when it is there, ``torch.optim`` if not.

The sparse table of ``LookupLinear(sparse=True)`` gets sparse COO gradients. The optimizers of
``lookuplinear.optim`` take those and dense parameters in one optimizer. Without that module the
fallback is ``torch.optim``:

==================  ===========================================================================
solver              torch fallback
==================  ===========================================================================
``sgd``             ``SGD`` (takes sparse gradients)
``adagrad``         ``Adagrad`` (takes sparse gradients)
``rowwise_adagrad`` ``Adagrad`` (element-wise: torch has no row-wise Adagrad)
``adam``            ``SparseAdam`` for the table + ``Adam`` for the dense parameters
``adamw``           ``SparseAdam`` for the table + ``AdamW`` for the dense parameters
==================  ===========================================================================

Weight decay of the table is applied lazily by the estimator (an L2 term on the rows a batch
touches, added to the sparse gradient); the dense parameters get the optimizer's
``weight_decay``.
"""

from __future__ import annotations

import importlib
from collections.abc import Sequence
from typing import Any

import torch
from torch.optim import Optimizer
from torch.optim.lr_scheduler import LambdaLR, LRScheduler

__all__ = ["SOLVERS", "make_optimizers", "make_schedulers", "optimizer_class"]

#: solver name -> class name in lookuplinear.optim and torch.optim
SOLVERS: dict[str, str] = {
    "sgd": "SGD",
    "adagrad": "Adagrad",
    "rowwise_adagrad": "RowWiseAdagrad",
    "adam": "Adam",
    "adamw": "AdamW",
}

_TORCH_FALLBACK: dict[str, str] = {"rowwise_adagrad": "Adagrad"}


def optimizer_class(solver: str) -> type[Optimizer] | None:
    """``lookuplinear.optim.<Class>`` for ``solver`` if that module exists and has it, else None.

    Examples
    --------
    >>> optimizer_class("sgd") is None or issubclass(optimizer_class("sgd"), Optimizer)
    True
    """
    try:
        module = importlib.import_module("lookuplinear.optim")
    except ImportError:
        return None
    cls = getattr(module, SOLVERS[solver], None)
    return cls if isinstance(cls, type) and issubclass(cls, Optimizer) else None


def make_optimizers(
    solver: str,
    sparse_params: Sequence[torch.nn.Parameter],
    dense_params: Sequence[torch.nn.Parameter],
    *,
    lr: float,
    weight_decay: float,
) -> list[Optimizer]:
    """The optimizers that together update ``sparse_params`` (sparse gradients) and the rest.

    ``weight_decay`` goes to the dense parameters only; see the module docstring.

    Examples
    --------
    >>> table = torch.nn.Parameter(torch.zeros(10, 2)); bias = torch.nn.Parameter(torch.zeros(2))
    >>> [type(o).__name__ for o in make_optimizers("adagrad", [table], [bias], lr=0.1,
    ...                                            weight_decay=0.0)]
    ['Adagrad']
    """
    sparse, dense = list(sparse_params), list(dense_params)
    groups = [g for g in ({"params": sparse, "weight_decay": 0.0},
                          {"params": dense, "weight_decay": weight_decay}) if g["params"]]
    cls: Any = optimizer_class(solver)  # torch's constructor signature (params, lr=...)
    if cls is not None:
        return [cls(groups, lr=lr)]
    name = _TORCH_FALLBACK.get(solver, SOLVERS[solver])
    if name in ("Adam", "AdamW"):
        opts: list[Optimizer] = []
        if sparse:
            opts.append(torch.optim.SparseAdam(sparse, lr=lr))
        if dense:
            opts.append(getattr(torch.optim, name)(dense, lr=lr, weight_decay=weight_decay))
        return opts
    return [getattr(torch.optim, name)(groups, lr=lr)]


def make_schedulers(
    optimizers: Sequence[Optimizer], schedule: str, total_steps: int
) -> list[LRScheduler]:
    """fastText's linear decay to zero over ``total_steps`` (``"linear"``), or none.

    Examples
    --------
    >>> p = torch.nn.Parameter(torch.zeros(2))
    >>> opt = torch.optim.SGD([p], lr=1.0)
    >>> sched = make_schedulers([opt], "linear", total_steps=4)[0]
    >>> for _ in range(3):
    ...     opt.step(); sched.step()
    >>> opt.param_groups[0]["lr"]
    0.25
    """
    if schedule != "linear":
        return []
    steps = max(1, total_steps)
    return [LambdaLR(o, lambda t: max(0.0, 1.0 - t / steps)) for o in optimizers]
