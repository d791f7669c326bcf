"""What the kernel layer offers the layers above for a table, so that none of them is imported
from below: an event, *rows updated*, and the table's allocator of optimizer state.

* :func:`on_rows_updated` / :func:`notify`: a lookup's backward whose gradient a ``fused=True``
  optimizer takes (:mod:`lookuplinear._fusion`) stores none, so no gradient hook sees its rows;
  the optimizer's update calls :func:`notify` with them instead, and whoever follows the
  table's rows (a
  checkpoint's :class:`~lookuplinear.storage.rowwatch.RowTracker`) subscribed with
  :func:`on_rows_updated`.
* :func:`provide_state` / :func:`state_tensor`: a table that keeps its optimizer state
  somewhere of its own (a table in a file: a file beside it, :mod:`lookuplinear.storage.tables`)
  provides an allocator; an optimizer asks :func:`state_tensor` for its state tensors and makes
  them itself where the table provides none. A load that must be all or nothing places the
  state it loads inside :func:`staged_states`.

Both are keyed weakly by the table parameter; a view of a table is its base's (a copy is
neither followed nor provided for).
"""

from __future__ import annotations

import contextlib
import weakref
from collections.abc import Callable, Iterable, Iterator
from typing import Protocol

import torch
from torch.utils.weak import WeakIdKeyDictionary

__all__ = [
    "WATCHERS",
    "StateAllocator",
    "StateStaging",
    "Subscription",
    "after_accumulation",
    "notify",
    "on_rows_updated",
    "provide_state",
    "provides_state",
    "staged_states",
    "state_tensor",
]

#: each table's callbacks on rows updated, by subscription id (empty, false: nothing follows a
#: table, which a caller may ask before :func:`notify`)
WATCHERS: WeakIdKeyDictionary = WeakIdKeyDictionary()
#: each table's allocator of optimizer state and its staging (None: it has none)
_ALLOCATORS: WeakIdKeyDictionary = WeakIdKeyDictionary()
_next_id = 0


def _base(param: torch.Tensor) -> torch.Tensor:
    return param._base if param._base is not None else param


class Subscription:
    """The handle :func:`on_rows_updated` returns: :meth:`remove` ends the subscription."""

    __slots__ = ("_id", "_param")

    def __init__(self, param: torch.Tensor, id: int) -> None:
        self._param = weakref.ref(param)  # the subscriber may live as long as the table
        self._id = id

    def remove(self) -> None:
        """Stop calling the callback (once is enough; again does nothing)."""
        param = self._param()
        callbacks = None if param is None else WATCHERS.get(param)
        if callbacks is None:
            return
        callbacks.pop(self._id, None)
        if not callbacks:
            del WATCHERS[param]


def on_rows_updated(param: torch.Tensor,
                    callback: Callable[[torch.Tensor], None]) -> Subscription:
    """Call ``callback(rows)`` whenever an update that stores no gradient changes ``rows`` (int64,
    duplicates allowed) of table ``param`` (or of a view of it: its base's rows)."""
    global _next_id
    _next_id += 1
    base = _base(param)
    callbacks = WATCHERS.get(base)
    if callbacks is None:
        callbacks = WATCHERS[base] = {}
    callbacks[_next_id] = callback
    return Subscription(base, _next_id)


def notify(param: torch.Tensor, rows: torch.Tensor) -> None:
    """Tell the subscribers of ``param`` that ``rows`` of it change without a stored gradient
    (a view's rows are its base's)."""
    if not WATCHERS:  # the usual case: nothing follows any table
        return
    base = _base(param)
    callbacks = WATCHERS.get(base)
    if not callbacks:
        return
    if base is not param and base.dim() == 2 and param.dim() == 2:
        rows = rows + (param.storage_offset() - base.storage_offset()) // base.stride(0)
    for callback in list(callbacks.values()):
        callback(rows)


class StateAllocator(Protocol):
    """``allocator(name, shape, fill, dtype)``: a new state tensor ``name`` of ``shape`` in
    ``dtype`` (None: the table's), filled with ``fill``."""

    def __call__(self, name: str, shape: tuple[int, ...], fill: float = 0.0,
                 dtype: torch.dtype | None = None) -> torch.Tensor:
        ...


class StateStaging(Protocol):
    """What a table whose allocator makes its state in files (a table in a file) offers a load
    that must be all or nothing: after :meth:`stage_states` the allocator makes new state
    beside the state in use, which stays as it is; :meth:`commit_states` puts the new state in
    its place and keeps the old, which :meth:`finish_states` drops; :meth:`abort_states`, before
    or after a commit (whole or part way), puts back the state as it was at
    :meth:`stage_states`."""

    def stage_states(self) -> None:
        ...

    def commit_states(self) -> None:
        ...

    def finish_states(self) -> None:
        ...

    def abort_states(self) -> None:
        ...


def provide_state(param: torch.Tensor, allocator: StateAllocator,
                  staging: StateStaging | None = None) -> None:
    """Make ``allocator`` the maker of every optimizer state tensor of table ``param``, for as
    long as ``param`` lives; ``staging``: how a load stages what ``allocator`` makes
    (:func:`staged_states`), None where it need not (the state is in memory)."""
    _ALLOCATORS[param] = (allocator, staging)


def provides_state(param: torch.Tensor) -> bool:
    """Whether table ``param`` (or the table it is a view of) provides its optimizer state
    (:func:`provide_state`)."""
    return bool(_ALLOCATORS) and _base(param) in _ALLOCATORS


def state_tensor(param: torch.Tensor, name: str, shape: tuple[int, ...],
                 fill: float = 0.0, dtype: torch.dtype | None = None) -> torch.Tensor | None:
    """The state tensor ``name`` of ``shape`` in ``dtype`` (None: the table's) filled with
    ``fill`` that table ``param`` (or the table it is a view of) provides, or None where it
    provides none (the optimizer makes it)."""
    if not _ALLOCATORS:  # the usual case: no table provides its state
        return None
    provided = _ALLOCATORS.get(_base(param))
    if provided is None:
        return None
    allocator: StateAllocator = provided[0]
    return allocator(name, shape, fill, dtype)


@contextlib.contextmanager
def staged_states(params: Iterable[torch.Tensor]) -> Iterator[None]:
    """All or nothing for the state the tables of ``params`` provide: inside the block,
    :func:`state_tensor` makes new state beside the state in use (a table in a file: new
    files beside its ``state-<name>.bin``, which stay as they are); when the block ends the
    new state takes the place of the old in every table, and when it raises (a full disk at
    the second file) or putting the new state in place fails (at the second table's file),
    the new state is dropped and every table's state files are as they were."""
    stagings: dict[int, StateStaging] = {}
    if _ALLOCATORS:
        for p in params:
            provided = _ALLOCATORS.get(_base(p))
            if provided is not None and provided[1] is not None:
                stagings[id(provided[1])] = provided[1]
    for staging in stagings.values():
        staging.stage_states()
    try:
        yield
        for staging in stagings.values():
            staging.commit_states()
    except BaseException as original:
        failed: OSError | None = None
        for staging in stagings.values():  # each one, whatever another's raises
            try:
                staging.abort_states()
            except OSError as e:
                failed = failed or e
        if failed is not None:  # a file could not be put back: that is what to fix now
            raise failed from original
        raise
    for staging in stagings.values():
        staging.finish_states()


def after_accumulation(param: torch.Tensor, hook: Callable[[torch.Tensor], None]
                       ) -> torch.utils.hooks.RemovableHandle:
    """``param.register_post_accumulate_grad_hook(hook)``, also while ``param`` is frozen
    (``requires_grad=False``, which PyTorch refuses a hook): the hook is there once it is
    trained."""
    frozen = not param.requires_grad
    if frozen:
        param.requires_grad_(True)
    try:
        return param.register_post_accumulate_grad_hook(hook)
    finally:
        if frozen:
            param.requires_grad_(False)
