"""The binding between a table and the ``fused=True`` optimizer that updates it in its backward.

The binding lives with the parameter (as TorchRec's ``apply_optimizer_in_backward`` marks its
parameters): :func:`bind` sets it, and the row-sparse backward of a lookup
(:mod:`lookuplinear._rowgrad`) asks it to take the gradient instead of storing it. The update is
deferred to the end of the backward pass (``queue_callback`` on autograd's engine), so that

* a table used several times in one forward is updated once, with the summed gradient, after
  every use's backward has read the table;
* nothing is updated when the backward fails part way (the callback never runs).

A binding refers to the optimizer and the parameter weakly. It does not survive ``deepcopy``
(PyTorch copies a ``Parameter`` without its attributes) and pickles as unbound; an optimizer
binds its parameters again when it is copied or unpickled itself.
"""

from __future__ import annotations

import weakref
from typing import Any, Protocol

import torch

from .errors import InputValueError

__all__ = ["DISTRIBUTED", "RESET_ROWS", "FusedBinding", "FusedOptimizer", "bind", "binding",
           "reset_rows"]

_ATTR = "_lookuplinear_fused"

#: attribute of a table parameter: rows re-initialised (given to a new ID by an ``IdMap``)
#: whose optimizer state the next ``lookuplinear.optim`` update of the table starts afresh
RESET_ROWS = "_lookuplinear_reset_rows"


#: attribute of a table parameter whose gradients ``lookuplinear.parallel`` reduces across
#: processes: an update inside its backward would come before the other processes' gradients
DISTRIBUTED = "_lookuplinear_distributed"


def reset_rows(param: torch.Tensor, rows: torch.Tensor) -> None:
    """Mark ``rows`` of ``param`` as new: the next update by a :mod:`lookuplinear.optim`
    optimizer zeroes their state (momentum, squared sums, moments) before it reads it."""
    old = param.__dict__.get(RESET_ROWS)
    param.__dict__[RESET_ROWS] = rows if old is None else torch.cat([old, rows])


class FusedOptimizer(Protocol):
    """What a binding calls: apply one backward's gradients of ``param`` at once."""

    def _apply_fused(self, param: torch.Tensor, pending: list[tuple[Any, torch.Tensor]]) -> None:
        ...


class FusedBinding:
    """The ``fused=True`` optimizer of one parameter and the gradients of the running backward."""

    __slots__ = ("_optimizer", "_param", "_pending", "_task")

    def __init__(self, param: torch.Tensor | None, optimizer: FusedOptimizer | None) -> None:
        self._param = None if param is None else weakref.ref(param)
        self._optimizer = None if optimizer is None else weakref.ref(optimizer)
        self._pending: list[tuple[Any, torch.Tensor]] = []
        self._task = -1

    def __reduce__(self) -> tuple[Any, ...]:
        return (FusedBinding, (None, None))  # unbound: the optimizer binds again when loaded

    def defer(self, lookup: Any, grad_out: torch.Tensor) -> bool:
        """Keep ``(lookup, grad_out)`` for the update at the end of this backward; False (nothing
        kept) if the optimizer or the parameter is gone or no backward is running."""
        opt = None if self._optimizer is None else self._optimizer()
        param = None if self._param is None else self._param()
        task = torch._C._current_graph_task_id()
        if opt is None or param is None or task < 0:
            return False
        if task != self._task:  # a new backward; one that failed left its gradients here
            self._pending, self._task = [], task
        if not self._pending:
            torch.autograd.Variable._execution_engine.queue_callback(self._flush)
        self._pending.append((lookup, grad_out))
        return True

    def _flush(self) -> None:
        pending, self._pending, self._task = self._pending, [], -1
        opt = None if self._optimizer is None else self._optimizer()
        param = None if self._param is None else self._param()
        if opt is not None and param is not None and pending:
            opt._apply_fused(param, pending)


def bind(param: torch.Tensor, optimizer: FusedOptimizer | None) -> None:
    """Make ``optimizer`` update ``param`` in its backward (``None``: unbind)."""
    if optimizer is None:
        param.__dict__.pop(_ATTR, None)
    elif param.__dict__.get(DISTRIBUTED):
        raise InputValueError(
            "this table trains under lookuplinear.parallel.DistributedDataParallel, whose "
            "gradients are all-reduced at the end of the backward; a fused=True optimizer would "
            "update it inside the backward, before the other processes' gradients arrive. "
            "Build the optimizer with fused=False."
        )
    else:
        setattr(param, _ATTR, FusedBinding(param, optimizer))


def binding(param: torch.Tensor) -> FusedBinding | None:
    """The binding of ``param``, if an optimizer bound it."""
    found: FusedBinding | None = param.__dict__.get(_ATTR)
    return found
