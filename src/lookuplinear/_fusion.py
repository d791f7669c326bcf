"""The binding between a table and the ``fused=True`` optimizer that updates it in its backward.

A parameter carries one marker, the attribute ``_lookuplinear_in_backward`` (as TorchRec's
``apply_optimizer_in_backward`` marks its parameters with ``_in_backward_optimizers``): a
:class:`FusedBinding` naming the optimizer that updates it inside its backward, or a
:class:`Reserved` one where another owner handles its gradient in the backward
(``lookuplinear.parallel``). Everything else belongs to an owner object: the backward passes
an optimizer has open are its :class:`BackwardQueue`. :func:`bind` sets the marker, and the
row-sparse backward of a lookup (:mod:`lookuplinear.ops.autograd`) asks it to take the gradient
instead of storing it. The update is deferred to the end of the backward pass
(``queue_callback`` on autograd's engine), so that

* a table used several times in one forward is updated once, with the summed gradient, after
  every use's backward has read the table;
* all the tables an optimizer updates in one backward are updated by one call (one C pass for
  the tables of a dtype, whatever their widths);
* nothing is updated when the backward fails part way (the callback never runs).

A table has at most one such optimizer: :func:`bind` refuses a second while the first is alive
(an optimizer that is garbage-collected, or whose ``unbind()`` ran, lets another bind).
A binding refers to the optimizer and the parameter weakly. It does not survive ``deepcopy``
(PyTorch copies a ``Parameter`` without its attributes) and pickles as unbound; an optimizer
binds its parameters again when it is copied or unpickled itself.
"""

from __future__ import annotations

import functools
import weakref
from collections.abc import Iterable
from typing import Any, Protocol

import torch

from .errors import InputValueError

__all__ = ["BackwardQueue", "FusedBinding", "FusedOptimizer", "Reserved", "Updates", "bind",
           "binding", "bound_to", "check_free", "reserve", "unbind"]

#: the one attribute the library sets on a parameter: its in-backward owner
_ATTR = "_lookuplinear_in_backward"


#: one backward's gradients of one optimizer's tables: ``(param, [(lookup, grad_out), ...])``,
#: ``lookup`` the input as ``ops.group_rows`` takes it: ``(indices, offsets,
#: per_sample_weights, padding_idx)``
Updates = list[tuple[torch.Tensor, list[tuple[Any, torch.Tensor]]]]


class FusedOptimizer(Protocol):
    """What a binding calls: the optimizer's queue of open backward passes, and the update of
    one backward's gradients of the optimizer's tables at once."""

    _backward_queue: BackwardQueue

    def _apply_fused(self, updates: Updates) -> None:
        ...


class _Backward:
    """The gradients one optimizer's tables received in one backward pass. Only the callback
    queued on that backward holds it: a backward that fails drops it with its callbacks."""

    __slots__ = ("__weakref__", "updates")

    def __init__(self) -> None:
        self.updates: dict[int, tuple[torch.Tensor, list[tuple[Any, torch.Tensor]]]] = {}


class BackwardQueue:
    """An optimizer's open backward passes (a backward may run inside another, as a reentrant
    checkpoint's does), each flushed by one call to the optimizer at its end. The optimizer
    owns it (``_backward_queue``)."""

    __slots__ = ("_open", "_optimizer")

    def __init__(self, optimizer: FusedOptimizer) -> None:
        self._optimizer = weakref.ref(optimizer)
        self._open: weakref.WeakValueDictionary[int, _Backward] = weakref.WeakValueDictionary()

    def add(self, task: int, param: torch.Tensor, lookup: Any, grad_out: torch.Tensor) -> None:
        pending = self._open.get(task)
        if pending is None:
            pending = self._open[task] = _Backward()
            torch.autograd.Variable._execution_engine.queue_callback(
                functools.partial(self._flush, task, pending))
        pending.updates.setdefault(id(param), (param, []))[1].append((lookup, grad_out))

    def _flush(self, task: int, pending: _Backward) -> None:
        self._open.pop(task, None)
        opt = self._optimizer()
        if opt is not None and pending.updates:
            opt._apply_fused(list(pending.updates.values()))


class FusedBinding:
    """The ``fused=True`` optimizer of one parameter."""

    __slots__ = ("_optimizer", "_param")

    def __init__(self, param: torch.Tensor | None, optimizer: FusedOptimizer | None) -> None:
        self._param = None if param is None else weakref.ref(param)
        self._optimizer = None if optimizer is None else weakref.ref(optimizer)

    def __reduce__(self) -> tuple[Any, ...]:
        return (FusedBinding, (None, None))  # unbound: the optimizer binds again when loaded

    @property
    def optimizer(self) -> FusedOptimizer | None:
        """The optimizer, or None once it is gone."""
        return None if self._optimizer is None else self._optimizer()

    def defer(self, lookup: Any, grad_out: torch.Tensor) -> bool:
        """Keep ``(lookup, grad_out)`` for the update at the end of this backward; False (nothing
        kept) if the optimizer or the parameter is gone or no backward is running."""
        opt = self.optimizer
        param = None if self._param is None else self._param()
        task = torch._C._current_graph_task_id()
        if opt is None or param is None or task < 0:
            return False
        opt._backward_queue.add(task, param, lookup, grad_out)
        return True


class Reserved(FusedBinding):
    """The marker of a parameter whose gradient another owner handles in the backward (``by``,
    e.g. ``lookuplinear.parallel.DistributedDataParallel``): no optimizer may bind it."""

    __slots__ = ("by",)

    def __init__(self, by: str) -> None:
        super().__init__(None, None)
        self.by = by

    def __reduce__(self) -> tuple[Any, ...]:
        return (Reserved, (self.by,))


def reserve(params: Iterable[torch.Tensor], by: str) -> None:
    """Mark each of ``params`` as handled in its backward by ``by``: a ``fused=True`` optimizer
    made later refuses it (its update would come before ``by`` is done with the gradient)."""
    for param in params:
        setattr(param, _ATTR, Reserved(by))


def bind(params: Iterable[torch.Tensor], optimizer: FusedOptimizer) -> None:
    """Make ``optimizer`` update each of ``params`` in its backward: all of them, or none.

    Raises
    ------
    InputValueError
        A parameter is bound to another optimizer that is still alive (a second fused optimizer
        would take the table's gradients over silently), or trains under
        ``lookuplinear.parallel.DistributedDataParallel``. Nothing is bound then.
    """
    params = list(params)
    for param in params:
        found = binding(param)
        if isinstance(found, Reserved):
            raise InputValueError(
                f"this table trains under {found.by}, whose gradients are all-reduced at the "
                "end of the backward; a fused=True optimizer would update it inside the "
                "backward, before the other processes' gradients arrive. Build the optimizer "
                "with fused=False."
            )
        _refuse_taken(param, optimizer, "a second one would take its gradients over")
    for param in params:
        setattr(param, _ATTR, FusedBinding(param, optimizer))


def check_free(params: Iterable[torch.Tensor], optimizer: Any) -> None:
    """Refuse ``params`` to an optimizer that steps them (``fused=False``) when a live fused
    optimizer updates one of them inside its backward: no gradient would ever reach it."""
    for param in params:
        _refuse_taken(param, optimizer, "an optimizer with fused=False would never see its "
                      "gradients (its step() would leave the table as it is)")


def _refuse_taken(param: torch.Tensor, optimizer: Any, why: str) -> None:
    first = bound_to(param)
    if first is not None and first is not optimizer:
        raise InputValueError(
            f"a table of shape {tuple(param.shape)} is already bound to {_name(first)}, a "
            f"fused=True optimizer that updates it inside its backward; {why}. The first keeps "
            "the table (nothing was bound). Put the table in one optimizer's parameter groups, "
            f"or call unbind() on the {type(first).__name__} first."
        )


def unbind(params: Iterable[torch.Tensor], optimizer: FusedOptimizer) -> None:
    """Undo :func:`bind` for each of ``params`` that is bound to ``optimizer``."""
    for param in params:
        if bound_to(param) is optimizer:
            param.__dict__.pop(_ATTR, None)


def bound_to(param: torch.Tensor) -> FusedOptimizer | None:
    """The live optimizer ``param`` is bound to, if any."""
    found = binding(param)
    return None if found is None else found.optimizer


def _name(optimizer: FusedOptimizer) -> str:
    groups: list[dict[str, Any]] = getattr(optimizer, "param_groups", [])
    lr = groups[0].get("lr") if groups else None
    return f"{type(optimizer).__name__}(lr={lr}) at {id(optimizer):#x}"


def binding(param: torch.Tensor) -> FusedBinding | None:
    """The binding of ``param``, if an optimizer bound it."""
    found: FusedBinding | None = param.__dict__.get(_ATTR)
    return found
