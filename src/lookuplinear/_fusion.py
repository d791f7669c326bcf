"""The binding between a table and the ``fused=True`` optimizer that updates it in its backward.

A parameter carries one marker, the attribute ``_lookuplinear_in_backward`` (as TorchRec's
``apply_optimizer_in_backward`` marks its parameters with ``_in_backward_optimizers``): a
:class:`FusedBinding` naming the optimizer that updates it inside its backward, or a
:class:`Reserved` one where another owner handles its gradient in the backward
(``lookuplinear.parallel``). Everything else belongs to an owner object: the backward passes
an optimizer has open are its :class:`BackwardQueue`. :func:`bind` sets the marker and names
the table to the operators (``lookuplinear::fused_bind``); in a backward that accumulates into
the table, the C++ backward of a lookup operator (``bag_lookup``, ``gather_groups``:
:mod:`lookuplinear.ops.library`) hands its ``grad_out`` to :func:`defer` (the
operator ``lookuplinear::fused_defer``) instead of returning the gradient. The update is
deferred to the end of the backward pass
(``queue_callback`` on autograd's engine), so that

* a table used several times in one forward is updated once, with the summed gradient, after
  every use's backward has read the table;
* all the tables an optimizer updates in one backward are updated by one call (one C pass for
  the tables of a dtype, whatever their widths);
* nothing is updated when the backward fails part way (the callback never runs).

A gradient that reaches the table's gradient accumulation in such a backward is taken too (the
binding's ``register_post_accumulate_grad_hook``), at the same end of the backward and in the
same update: a row-sparse one (the lookups of a graph that ``torch.compile`` or
``torch.export`` recorded, whose operators' backward accumulates the gradient: they are
updated in their backward as eager lookups are), and any other in a backward that also
handed the table a lookup's gradient (a penalty on the table's values: one update with the
summed gradient, as ``torch.optim`` applies it). A dense gradient on its own (a parameter with
rows that no lookup reads, such as a ``nn.Linear`` weight) stays in ``.grad`` for ``step()``,
and so does a gradient with a graph (``create_graph=True``).

Only a backward that accumulates into the table hands its gradient over: ``loss.backward()``,
or ``backward(inputs=...)`` naming the table. ``torch.autograd.grad`` (which returns gradients
and accumulates none) and ``backward(inputs=...)`` without the table get the ordinary row-sparse
gradient, as without the optimizer, and nothing moves. The optimizer's queue counts the
outermost backward passes that updated its tables since its last ``step()`` or ``zero_grad()``
and warns (:class:`~lookuplinear.errors.FusedAccumulationWarning`) at the second: that loop
accumulates gradients, which an update in every backward does not.

A table has at most one such optimizer: :func:`bind` refuses a second while the first is alive
(an optimizer that is garbage-collected, or whose ``unbind()`` ran, lets another bind).
A binding refers to the optimizer and the parameter weakly. It does not survive ``deepcopy``
(PyTorch copies a ``Parameter`` without its attributes) and pickles as unbound; an optimizer
binds its parameters again when it is copied or unpickled itself.
"""

from __future__ import annotations

import functools
import os
import sys
import warnings
import weakref
from collections.abc import Iterable
from typing import Any, Protocol

import torch

from .errors import FusedAccumulationWarning, InputValueError

__all__ = ["BackwardQueue", "FusedBinding", "FusedOptimizer", "Reserved", "Updates", "bind",
           "binding", "bound_to", "caller_level", "check_free", "defer", "reserve", "unbind"]

#: the one attribute the library sets on a parameter: its in-backward owner
_ATTR = "_lookuplinear_in_backward"


#: one backward's gradients of one optimizer's tables: ``(param, [(lookup, grad_out), ...],
#: stored)``, ``lookup`` the input as ``ops.group_rows`` takes it: ``(indices, offsets,
#: per_sample_weights, padding_idx)``, ``stored``: whether the gradient accumulated in
#: ``param.grad`` in this backward is taken too
Updates = list[tuple[torch.Tensor, list[tuple[Any, torch.Tensor]], bool]]


class FusedOptimizer(Protocol):
    """What a binding calls: the optimizer's queue of open backward passes, and the update of
    one backward's gradients of the optimizer's tables at once."""

    _backward_queue: BackwardQueue

    def _apply_fused(self, updates: Updates) -> bool:
        """Apply ``updates``; whether a table was updated (not one unbound since, whose
        gradient is stored instead)."""
        ...


class _Backward:
    """The gradients one optimizer's tables received in one backward pass, and whether a
    backward run inside it (a reentrant checkpoint's) updated them. Only the callback queued on
    that backward holds it: a backward that fails drops it with its callbacks."""

    __slots__ = ("__weakref__", "inner", "stored", "updates")

    def __init__(self) -> None:
        self.updates: dict[int, tuple[torch.Tensor, list[tuple[Any, torch.Tensor]]]] = {}
        #: the parameters whose accumulated ``.grad`` the update takes
        self.stored: set[int] = set()
        self.inner = False


class BackwardQueue:
    """An optimizer's open backward passes (a backward may run inside another, as a reentrant
    checkpoint's does), each flushed by one call to the optimizer at its end, and the number of
    outermost backward passes that updated its tables since :meth:`reset` (the optimizer's
    ``step()`` and ``zero_grad()``). The optimizer owns it (``_backward_queue``)."""

    __slots__ = ("_open", "_optimizer", "updated")

    def __init__(self, optimizer: FusedOptimizer) -> None:
        self._optimizer = weakref.ref(optimizer)
        self._open: weakref.WeakValueDictionary[int, _Backward] = weakref.WeakValueDictionary()
        #: outermost backward passes that updated a table since the last reset
        self.updated = 0

    def take(self, task: int, param: torch.Tensor, grad: torch.Tensor) -> None:
        """Take ``param``'s accumulated gradient ``grad`` into the update at the end of the
        backward pass ``task``: a row-sparse one always, any other where a lookup of
        ``param`` handed its gradient over in the same backward (:func:`defer`)."""
        pending = self._open.get(task)
        if not grad.is_sparse and (pending is None or id(param) not in pending.updates):
            return
        if pending is None:
            pending = self._pending(task)
        pending.updates.setdefault(id(param), (param, []))
        pending.stored.add(id(param))

    def reset(self) -> None:
        """A ``step()`` or ``zero_grad()``: the next backward's update is the first again."""
        self.updated = 0

    def _pending(self, task: int) -> _Backward:
        """The backward pass ``task``'s entry, opened (its flush queued) on first use."""
        pending = self._open.get(task)
        if pending is None:
            pending = self._open[task] = _Backward()
            torch.autograd.Variable._execution_engine.queue_callback(
                functools.partial(self._flush, task, pending))
        return pending

    def _flush(self, task: int, pending: _Backward) -> None:
        self._open.pop(task, None)
        opt = self._optimizer()
        if opt is None:
            return
        updates: Updates = []
        for key, (p, lookups) in pending.updates.items():
            updates.append((p, lookups, key in pending.stored))
        updated = bool(updates) and opt._apply_fused(updates)
        if updated or pending.inner:
            self._count(opt)

    def _count(self, opt: FusedOptimizer) -> None:
        """Count a backward pass that updated a table: the outermost one. A backward that runs
        inside another's node (a reentrant checkpoint's) marks the enclosing backward instead,
        once that node is done, so one ``loss.backward()`` counts once however many such
        backward passes it runs."""
        node = torch._C._current_autograd_node()
        if node is not None:
            done: list[bool] = []

            def mark(*_: Any) -> None:  # runs in the enclosing backward, as its node ends
                if not done:
                    done.append(True)
                    self._pending(torch._C._current_graph_task_id()).inner = True

            node.register_hook(mark)
            return
        self.updated += 1
        if self.updated == 2:
            warnings.warn(
                f"{_name(opt)}, a fused=True optimizer, updated its tables in a second "
                "backward since its last step() or zero_grad(): a fused=True optimizer "
                "updates its tables in every backward, so gradients are not accumulated "
                "(torch.optim would apply their sum once, in step()). Call opt.zero_grad() "
                "or opt.step() between backwards, or use fused=False to accumulate gradients.",
                FusedAccumulationWarning, stacklevel=caller_level())


#: the files whose frames a warning skips to name the line that called backward()
_INTERNAL = (os.path.dirname(torch.__file__) + os.sep, os.path.dirname(__file__) + os.sep)


def caller_level() -> int:
    """``warnings.warn``'s ``stacklevel`` for the first frame outside torch and lookuplinear
    (the ``backward()`` call) from the function that calls this one."""
    frame, level = sys._getframe(1), 1
    while frame.f_back is not None and frame.f_code.co_filename.startswith(_INTERNAL):
        frame, level = frame.f_back, level + 1
    return level


class FusedBinding:
    """The ``fused=True`` optimizer of one parameter."""

    __slots__ = ("_optimizer", "_param", "hook")

    def __init__(self, param: torch.Tensor | None, optimizer: FusedOptimizer | None) -> None:
        self._param = None if param is None else weakref.ref(param)
        self._optimizer = None if optimizer is None else weakref.ref(optimizer)
        #: the parameter's post-accumulate-grad hook (:meth:`accumulated`), while bound
        self.hook: torch.utils.hooks.RemovableHandle | None = None

    def __reduce__(self) -> tuple[Any, ...]:
        return (FusedBinding, (None, None))  # unbound: the optimizer binds again when loaded

    @property
    def optimizer(self) -> FusedOptimizer | None:
        """The optimizer, or None once it is gone."""
        return None if self._optimizer is None else self._optimizer()

    def accumulated(self, param: torch.Tensor) -> None:
        """``param``'s post-accumulate-grad hook: its gradient, accumulated in a backward,
        taken by the update at the end of it (:meth:`BackwardQueue.take`); a gradient with a
        graph (``create_graph=True``) is left in ``.grad``."""
        grad = param.grad
        if grad is None or grad.requires_grad or self._optimizer is None:
            return
        opt = self._optimizer()
        if opt is not None:
            opt._backward_queue.take(torch._C._current_graph_task_id(), param, grad)


class Reserved(FusedBinding):
    """The marker of a parameter whose gradient another owner handles in the backward (``by``,
    e.g. ``lookuplinear.parallel.DistributedDataParallel``): no optimizer may bind it."""

    __slots__ = ("by",)

    def __init__(self, by: str) -> None:
        super().__init__(None, None)
        self.by = by

    def __reduce__(self) -> tuple[Any, ...]:
        return (Reserved, (self.by,))


def defer(table: torch.Tensor, grad_out: torch.Tensor, indices: torch.Tensor,
          offsets: torch.Tensor | None = None, weights: torch.Tensor | None = None,
          padding_idx: int | None = None) -> bool:
    """The operator ``lookuplinear::fused_defer`` (:mod:`lookuplinear.ops.library`), which the
    operators' backward calls in a backward that accumulates into ``table``: keep the gradient
    ``grad_out`` of a lookup of ``table`` (``indices``, ``offsets``, ``weights``,
    ``padding_idx``: as :func:`~lookuplinear.ops.group_rows` takes them) for the update at the
    end of the running backward by the ``fused=True`` optimizer bound to ``table``; False
    (nothing kept: the caller returns the gradient) if none is bound, or the optimizer or the
    table is gone."""
    # written out (the binding, the optimizer, the queue's entry): this runs per lookup per
    # backward
    found: FusedBinding | None = table.__dict__.get(_ATTR)
    if found is None or found._optimizer is None or found._param is None:
        return False
    opt = found._optimizer()
    param = found._param()
    if opt is None or param is None:
        return False
    queue = opt._backward_queue
    task = torch._C._current_graph_task_id()
    pending = queue._open.get(task) or queue._pending(task)
    uses = pending.updates.get(id(param))
    lookup = (indices, offsets, weights, padding_idx)
    if uses is None:
        pending.updates[id(param)] = (param, [(lookup, grad_out)])
    else:
        uses[1].append((lookup, grad_out))
    return True


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
        found = FusedBinding(param, optimizer)
        if param.requires_grad:
            found.hook = param.register_post_accumulate_grad_hook(found.accumulated)
        setattr(param, _ATTR, found)
        torch.ops.lookuplinear.fused_bind(param, True)  # the operators' backward asks


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
            found = param.__dict__.pop(_ATTR)
            if found.hook is not None:
                found.hook.remove()
            torch.ops.lookuplinear.fused_bind(param, False)


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
    # getattr, not param.__dict__: torch.compile (a frame it records after a graph break)
    # reads a tensor's attribute, and fails on its __dict__
    found: FusedBinding | None = getattr(param, _ATTR, None)
    return found
