"""The shared step of the row-wise optimizers: sparse gradients update only their rows.

A parameter whose ``.grad`` is a sparse COO tensor (``LookupLinear(sparse=True)``,
``nn.Embedding(sparse=True)``) is updated row by row: only the rows the gradient names, and
only those rows of the optimizer state, are read and written, in one pass (the C kernels on
CPU, torch ops elsewhere). The other parameters of a group are updated together by the
``torch.optim`` optimizer of the same name: its functional update, multi-tensor (``foreach``)
where that is faster, so one optimizer serves a whole model.

Each optimizer states its update once, its variants side by side (as ``torch.optim.adam`` keeps
its single-tensor, multi-tensor and fused variants together): ``_dense_step`` (the
``torch.optim`` update of a group's dense parameters), ``_kernel`` (its row update, a C kernel
with its torch-op twin, :mod:`lookuplinear.ops._updates`), ``_scalars`` (that update's
scalars), ``_kernel_states`` (the state in the C kernel's layout) and ``_state_rows`` (the
state as the twin takes it, which runs the rows the C kernel does not take). The scalars and
states are asked for many tables at once: a fused update asks once per group, however many
tables it updates.
"""

from __future__ import annotations

import math
import numbers
import warnings
from collections.abc import Callable, Iterable
from typing import Any, ClassVar

import torch

from .. import _fusion, hugepages
from .._fusion import BackwardQueue, Updates, caller_level
from .._rowreset import RESETS
from ..errors import InputValueError
from ..ops import FusedTable, fused_rows, grouped_rows, update_rows, use_c
from ..ops._clib import scalars as c_scalars
from ..ops._hooks import WATCHERS, notify, staged_states, state_tensor
from ..ops._updates import ROW_UPDATES, check_rows
from ..ops.library import sum_weight_grad

__all__ = ["IN_BACKWARD", "LOW_PRECISION", "RowSparseOptimizer", "row_sparse_parts",
           "step_tensors", "zeros_like"]

Params = Iterable[torch.Tensor] | Iterable[dict[str, Any]]

#: the parameter-group key of ``fused=True``: the optimizer updates the group's tables inside
#: their backward. Not ``"fused"``, which a ``torch.optim`` state dict uses for PyTorch's fused
#: kernels: each meaning keeps its own key, so state dicts go both ways unchanged.
IN_BACKWARD = "in_backward"

#: the group keys of ``torch.optim.SGD``, ``Adagrad``, ``Adam`` and ``AdamW`` that say what an
#: update computes (the others, ``foreach``, ``fused``, ``capturable``, ``differentiable``, say
#: how; a scheduler's ``initial_lr`` is not the optimizer's)
_TORCH_KEYS = frozenset({"lr", "momentum", "dampening", "weight_decay", "nesterov", "maximize",
                         "betas", "eps", "amsgrad", "decoupled_weight_decay", "lr_decay",
                         "initial_accumulator_value"})
#: the group keys that say how ``torch.optim`` runs an update, which
#: ``torch.optim.Optimizer.__setstate__`` adds to an optimizer's defaults when it loads a state
#: dict, is copied or unpickled: never one a state dict must hold
_HOW_KEYS = frozenset({"foreach", "fused", "capturable", "differentiable"})
#: the group values that are numbers >= 0 (a rate, epsilon, decay, momentum or Adagrad's
#: starting sum)
_NUMBER_KEYS = ("lr", "eps", "weight_decay", "momentum", "dampening", "lr_decay",
                "initial_accumulator_value")


def row_sparse_parts(grad: torch.Tensor, *, sum_runs: bool = True
                     ) -> tuple[torch.Tensor, torch.Tensor]:
    """``(rows, values)`` of a sparse gradient: unique sorted rows, one value row each.

    A bag lookup's gradient (``LookupLinear(sparse=True)``'s backward on bags) is coalesced:
    one row per distinct row, sorted, its sum; it is used as it is. Rows that never decrease
    have each run summed here without a sort; strictly increasing rows are used as they are.
    Any other gradient (an index tensor's, ``nn.Embedding(sparse=True)``'s: one row per entry in
    entry order; several lookups' gradients summed by autograd: one after the other) has each
    row's values summed in the order they come (:func:`~lookuplinear.ops.group_rows`), as the
    fused update sums them.

    A gradient that is not row-sparse (``sparse_dim`` other than 1, as ``w.grad.to_sparse()``
    makes, or of a 0-D parameter) is taken as the row-sparse gradient of the same values, as
    ``torch.optim`` takes it: coalesced, each row it names once, zeros where it has no entry
    (``sparse_dim=0``: every row). The rows of a 1-D gradient are its elements.

    ``sum_runs=False`` leaves the rows as they are, in any order (what
    :func:`lookuplinear.ops.update_rows` reads, summing each row's entries as it updates it).

    Examples
    --------
    >>> g = torch.sparse_coo_tensor(torch.tensor([[1, 3, 3]]), torch.tensor(
    ...     [[1.0, 1.0], [2.0, 2.0], [-0.0, -0.0]]), (5, 2))
    >>> row_sparse_parts(g)
    (tensor([1, 3]), tensor([[1., 1.],
            [2., 2.]]))
    >>> row_sparse_parts(g, sum_runs=False)[0]
    tensor([1, 3, 3])
    >>> row_sparse_parts(torch.sparse_coo_tensor(torch.tensor([[3, 1, 3]]), torch.ones(3, 2),
    ...                                          (5, 2)))      # coalesced
    (tensor([1, 3]), tensor([[1., 1.],
            [2., 2.]]))
    >>> row_sparse_parts(torch.tensor([[0.0, 0.0], [0.0, 5.0]]).to_sparse())   # sparse_dim=2
    (tensor([1]), tensor([[0., 5.]]))
    """
    if grad.sparse_dim() != 1:
        return _as_row_sparse(grad)
    rows, values = grad._indices()[0], grad._values()
    if grad.is_coalesced() or not sum_runs:
        return rows, values
    return grouped_rows(rows, values, grad.shape[0])


def _as_row_sparse(grad: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`row_sparse_parts` of a gradient whose ``sparse_dim`` is not 1: coalesced (as
    ``torch.optim`` coalesces it), each row it names once with the entries of that row placed
    in a zero row; ``sparse_dim=0`` (one entry: the whole tensor) names every row, a 0-D
    gradient its one row of one element."""
    grad = grad.coalesce()
    indices, values = grad._indices(), grad._values()
    shape, dims = grad.shape, grad.sparse_dim()
    if dims == 0:
        n = shape[0] if shape else 1
        rows = torch.arange(n, device=indices.device).repeat(values.shape[0])
        return rows, values.reshape(rows.shape[0], *shape[1:])
    rows, at = torch.unique_consecutive(indices[0], return_inverse=True)  # sorted: coalesced
    column = indices[1]
    for k in range(2, dims):  # the entry's place in its row's sparse dimensions
        column = column * shape[k] + indices[k]
    placed = values.new_zeros(rows.shape[0], math.prod(shape[1:dims]), *shape[dims:])
    placed[at, column] = values  # one entry per place: coalesced
    return rows, placed.view(rows.shape[0], *shape[1:])


def zeros_like(p: torch.Tensor, fill: float = 0.0, *, name: str = "state") -> torch.Tensor:
    """A contiguous state tensor like ``p`` filled with ``fill``, placed as the table is
    (:mod:`lookuplinear.hugepages`: the update reads its rows scattered, as it reads ``p``'s;
    a table in a file, :class:`lookuplinear.TableStorage`: a file ``state-<name>.bin`` beside
    it)."""
    provided = state_tensor(p, name, tuple(p.shape), fill)
    if provided is not None:
        return provided
    return hugepages.empty(*p.shape, dtype=p.dtype, device=p.device).fill_(fill)


def _undecorated(method: Callable[..., Any]) -> Callable[..., Any]:
    """``torch.optim.Optimizer``'s own ``method`` without its ``torch._disable_dynamo`` wrapper,
    which imports ``torch._dynamo`` on its first call (seconds of a command line's start), for an
    optimizer whose steps are not traced (its kernels are C or eager torch ops)."""
    return getattr(method, "__wrapped__", method)


class RowSparseOptimizer(torch.optim.Optimizer):
    """Base class: ``step`` sends each sparse gradient to ``_sparse_update`` and a group's dense
    ones to ``_dense_step``, together.

    Subclasses define ``_init_state(p, state, group)``, ``_dense_step(params, grads, states,
    group)`` (the ``torch.optim`` update, multi-tensor), ``_kernel`` (the name of the C row kernel,
    ``lookuplinear.ops.KERNELS``), ``_scalars(group, at)`` (its scalars by name, for tables
    of each ``(width, step)`` of ``at``), ``_kernel_states(tables)`` (each ``(w, state)``'s
    state tensor in the kernel's layout, or None where it is not laid out so) and
    ``_state_rows(w, state)`` (the state tensors as
    the kernel's torch-op twin takes them, each with a row per row of ``w``: what runs on
    another device, dtype or layout, and with the ``torch`` backend).

    ``fused=True``: a ``LookupLinear(sparse=True)`` table is bound to the optimizer
    (:mod:`lookuplinear._fusion`) and updated at the end of ``backward``: no gradient is
    stored and ``step`` has nothing left to do for it. Same sums, same kernels: the same
    weights as ``fused=False``. A table used several times in one forward is updated once,
    with the summed gradient. Other parameters are stepped as usual. A table has one such
    optimizer at a time: another is refused while this one lives, until :meth:`unbind`, and
    so is a ``fused=False`` one (whose ``step`` would never see the table's gradients). The
    flag is kept in each group as ``"in_backward"`` (:data:`IN_BACKWARD`). A table listed twice
    in a group (which ``torch.optim`` and ``fused=False`` step twice) is refused.
    """

    _kernel = ""
    #: whether a row's update by a gradient row with zeros where a gradient of ``sparse_dim``
    #: 2 or more has no entry leaves those elements as they are, as ``torch.optim`` updates
    #: only the entries (SGD, Adagrad: a zero moves nothing); Adam's moments move them
    _zeros_stay = True

    #: group values this optimizer computes with and no other (a ``torch.optim`` state dict
    #: that sets another is refused by :meth:`load_state_dict`)
    _fixed: ClassVar[dict[str, Any]] = {"maximize": False}

    def __init__(self, params: Params, defaults: dict[str, Any], *, fused: bool = False) -> None:
        self._check_options(defaults, type(self).__name__, defaults)
        #: the backward passes whose gradients this optimizer takes (``fused=True``)
        self._backward_queue = BackwardQueue(self)
        #: since the last step: the group values each fused update used (by group), the
        #: tables it updated, and whether the last ``zero_grad`` kept gradients as zeros
        self._fused_values: dict[int, dict[str, Any]] = {}
        self._fused_updated: set[int] = set()
        self._zeros_kept = False
        #: the tables a fused update reached since the last ``zero_grad(set_to_none=True)``:
        #: those whose gradient ``fused=False`` would hold now (kept as zeros by
        #: ``zero_grad(set_to_none=False)``, and counted a step by ``step``)
        self._grads_held: set[int] = set()
        try:
            super().__init__(params, {**defaults, IN_BACKWARD: bool(fused)})
        except Exception:  # a group refused: the groups before it are not left bound
            for group in getattr(self, "param_groups", []):
                _fusion.unbind(group["params"], self)
            raise

    def add_param_group(self, param_group: dict[str, Any]) -> None:
        """As ``torch.optim.Optimizer.add_param_group``; with ``fused=True`` the group's tables
        are bound to this optimizer, which updates them in their backward.

        Raises
        ------
        InputValueError
            A value of the group is one no update can compute with (as the constructor's:
            a negative or NaN ``lr``, say), the group sets an option this class does not
            implement (``maximize=True``, Adam's ``amsgrad=True``: :attr:`_fixed`), or, with
            ``fused=True``, a table of the group is bound to another live ``fused=True``
            optimizer or is listed twice in it. The group is not added and nothing is bound.
        """
        if isinstance(param_group, dict):  # torch.optim names any other type
            self._check_options(param_group, f"{type(self).__name__}.add_param_group",
                                self.defaults)
        _undecorated(torch.optim.Optimizer.add_param_group)(self, param_group)
        try:
            self._bind(self.param_groups[-1])
        except Exception:
            self.param_groups.pop()
            raise

    def unbind(self) -> None:
        """Stop updating tables inside their backward: ``fused=True`` undone, for every group.

        Each table this optimizer was bound to is released (another ``fused=True`` optimizer
        may bind it); its gradients are stored again and :meth:`step` applies them. A fused
        optimizer that is garbage-collected releases its tables too.

        Examples
        --------
        >>> from lookuplinear import LookupLinear
        >>> from lookuplinear.optim import SGD
        >>> layer = LookupLinear(10, 2, sparse=True)
        >>> first = SGD(layer.parameters(), lr=1.0, fused=True)
        >>> first.unbind()
        >>> second = SGD(layer.parameters(), lr=0.1, fused=True)   # now the table's optimizer
        """
        for group in self.param_groups:
            group[IN_BACKWARD] = False
            _fusion.unbind(group["params"], self)

    def zero_grad(self, set_to_none: bool = True) -> None:
        """As ``torch.optim.Optimizer.zero_grad``. With ``fused=True`` the next backward's
        update is the first again (a second one before ``step()`` or ``zero_grad()`` warns:
        :class:`~lookuplinear.FusedAccumulationWarning`)."""
        self._backward_queue.reset()
        self._zeros_kept = not set_to_none
        if set_to_none:
            self._grads_held.clear()
        _undecorated(torch.optim.Optimizer.zero_grad)(self, set_to_none)

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """As ``torch.optim.Optimizer.load_state_dict``, from this class's state dict or from
        the ``torch.optim`` optimizer of the same name (``SGD``, ``Adagrad``, ``Adam``,
        ``AdamW``), whose ``state_dict()`` loads this one's in turn.

        The optimizer stays bound as it was built (``fused=``): a state dict carries values,
        not bindings. A tensor ``lr`` stays a tensor, as ``torch.optim`` keeps it (and is
        stepped as one). A ``step`` held as a tensor (``torch.optim``'s) becomes an ``int``;
        ``torch.optim.SGD``'s state, which counts no steps, resumes as after a first step.
        A state entry under an index that no group lists is left out (``torch.optim`` keeps
        it, and no parameter steps with it).
        State tensors are placed as the state this optimizer allocates: a table in a file's in
        its ``state-<name>.bin`` files beside it (:class:`lookuplinear.TableStorage`), other
        large CPU ones by :func:`lookuplinear.hugepages.place`.

        Raises
        ------
        InputValueError
            The state dict would change what training computes: a group sets an option this
            class does not implement (``maximize=True``, ``amsgrad=True``, Adam's
            ``decoupled_weight_decay`` into the other class, ``torch.optim.Adagrad``'s
            ``lr_decay`` into ``RowWiseAdagrad``), or a state tensor has another shape than
            this class keeps (``torch.optim.Adagrad``'s per-element ``sum`` into
            ``RowWiseAdagrad``'s per-row one). Or a table in a file opened read-only has no
            state files to hold the loaded state. Nothing is loaded then.
        OSError
            A table's state file could not be written (a full disk) or put in place. The
            state files are written beside the ones in use and put in their place only once
            all are written, the ones in use put back should that fail: nothing is loaded
            then, the optimizer and every state file are as they were.
        """
        # the load pre-hooks first, as torch.optim runs them: a hook may mend an old state
        # dict, and the checks read what the load takes (the hooks are not run again below)
        state_dict = dict(state_dict)
        hooks = self._optimizer_load_state_dict_pre_hooks
        for hook in list(hooks.values()):
            mended = hook(self, state_dict)
            if mended is not None:
                state_dict = dict(mended)
        state_dict["param_groups"] = self._loadable_groups(state_dict.get("param_groups"))
        self._check_state(state_dict)
        # torch.optim builds a new state and new groups; the old ones come back if placing the
        # loaded state fails (a table opened read-only has no state files to give, a full disk
        # no room for the second): the tables' state files are staged, put in place only once
        # every one is written
        before = dict(self.__dict__)
        params = [p for group in self.param_groups for p in group["params"]]
        try:
            with staged_states(params):
                self._optimizer_load_state_dict_pre_hooks = type(hooks)()  # run above
                try:
                    super().load_state_dict(state_dict)  # (its __setstate__ starts a copy's
                finally:                                 # records)
                    self._optimizer_load_state_dict_pre_hooks = hooks
                # the tables that hold a kept gradient still hold it: a load leaves .grad alone
                self._grads_held = set(before["_grads_held"])
                self._own_dtypes(state_dict)
                for key in [k for k in self.state if not isinstance(k, torch.Tensor)]:
                    del self.state[key]  # an index no group lists: no parameter steps with it
                for p, state in self.state.items():
                    self._loaded_state(p, state)
        except BaseException as e:
            self.__dict__.clear()
            self.__dict__.update(before)
            for group in self.param_groups:
                self._bind(group)
            if isinstance(e, OSError):  # the system's own message names what failed
                e.add_note(
                    f"{type(self).__name__}.load_state_dict: placing the loaded state in a "
                    "table's state files failed. Nothing was loaded: the optimizer and its "
                    "state files are as they were. Free space (or fix what the error names) "
                    "and load again."
                )
            raise

    def _own_dtypes(self, state_dict: dict[str, Any]) -> None:
        """Each loaded state tensor in the dtype this class keeps it in (:meth:`_state_dtype`),
        from the state dict's own values: ``torch.optim`` casts every floating state tensor to
        its parameter's dtype, which would round a float32 row-wise ``sum`` of a float16 table
        to float16 (and a state saved in the parameter's dtype is cast up)."""
        saved = state_dict.get("state", {})
        for group, own in zip(state_dict["param_groups"], self.param_groups, strict=True):
            for i, p in zip(group["params"], own["params"], strict=True):
                state = self.state.get(p)
                if not state or i not in saved:
                    continue
                for key, value in saved[i].items():
                    if not isinstance(value, torch.Tensor) or key == "step" \
                            or not value.is_floating_point():
                        continue
                    dtype = self._state_dtype(p, key)
                    if state[key].dtype != dtype:
                        state[key] = value.to(dtype=dtype, device=p.device)

    def _state_dtype(self, p: torch.Tensor, key: str) -> torch.dtype:
        """The dtype of ``p``'s state tensor ``key``: ``p``'s, as ``torch.optim`` keeps it (row-wise
        Adagrad keeps a float16/bfloat16 table's in float32, as FBGEMM does)."""
        return p.dtype

    def _loadable_groups(self, saved: Any) -> list[dict[str, Any]]:
        """A state dict's groups as this optimizer adopts them, or an error naming what does
        not fit: their number, each one's number of parameters, its options."""
        name = type(self).__name__
        if not isinstance(saved, list | tuple) or not all(isinstance(g, dict) for g in saved):
            raise InputValueError(
                f"{name}.load_state_dict: the state dict's param_groups is "
                f"{type(saved).__name__}, not a list of groups: it is not an optimizer's state "
                "dict. Pass what optimizer.state_dict() returned. Nothing was loaded."
            )
        if len(saved) != len(self.param_groups):
            raise InputValueError(
                f"{name}.load_state_dict: the state dict has {len(saved)} parameter groups, "
                f"this optimizer {len(self.param_groups)}: it is another optimizer's state. "
                "Build the optimizer with the groups it was saved with. Nothing was loaded."
            )
        for i, (group, own) in enumerate(zip(saved, self.param_groups, strict=True)):
            n = len(group.get("params", ()))
            if n != len(own["params"]):
                raise InputValueError(
                    f"{name}.load_state_dict: the state dict's parameter group {i} has {n} "
                    f"parameters, this optimizer's {len(own['params'])}: it is another "
                    "model's or optimizer's state. Build the optimizer over the parameters it "
                    "was saved with. Nothing was loaded."
                )
        return [self._loadable_group(group, own)
                for group, own in zip(saved, self.param_groups, strict=True)]

    def _unimplemented(self, options: dict[str, Any], defaults: dict[str, Any]
                       ) -> tuple[str, Any, str] | None:
        """``(key, value, what this class has)`` for the first ``torch.optim`` option of
        ``options`` that would change the update and that this class does not compute with
        (``defaults``: its own options), or None: ``maximize=True``, Adam's ``amsgrad=True``,
        another ``decoupled_weight_decay`` than the class's (:attr:`_fixed`),
        ``torch.optim.Adagrad``'s ``lr_decay`` in ``RowWiseAdagrad``."""
        for key, value in options.items():
            if key not in _TORCH_KEYS or (key in defaults and key not in self._fixed):
                continue  # this class's own option, or none that changes the update
            fixed = self._fixed.get(key)
            if value != fixed and (key in self._fixed or value):
                has = f"computes with {key}={fixed!r}" if key in self._fixed else f"has no {key}"
                return key, value, has
        return None

    def _refuse_unimplemented(self, options: dict[str, Any], where: str,
                              defaults: dict[str, Any] | None = None) -> None:
        """Raise :class:`InputValueError` for an option of ``options`` (a group, or options
        for one) that this class does not implement (:meth:`_unimplemented`; ``defaults``: its
        own options, the optimizer's by default), which its update would ignore: asked when a
        group is made or loaded, and at each update, as a group's values may be set by hand
        between steps."""
        unimplemented = self._unimplemented(options, self.defaults if defaults is None
                                            else defaults)
        if unimplemented is not None:
            key, value, has = unimplemented
            name = type(self).__name__
            raise InputValueError(
                f"{where}: a parameter group sets {key}={value!r}, and {name} {has}: its "
                "update would ignore it. Leave it out of the group, or step those parameters "
                "with an optimizer that has the option (the torch.optim class of that name)."
            )

    def _check_torch_options(self, defaults: dict[str, Any], **options: Any) -> None:
        """Take the constructor options of the ``torch.optim`` class of this name that this
        class does not compute with, at the values it computes with: ``foreach`` at any value
        (the update is multi-tensor or not per parameter, as ``torch.optim``'s default picks
        it), ``maximize`` and ``amsgrad`` False, ``decoupled_weight_decay`` the class's
        (:meth:`_check_options`), ``capturable`` and ``differentiable`` False; another value is
        an :class:`InputValueError`, as the update would ignore it."""
        name = type(self).__name__
        for key in ("capturable", "differentiable"):
            if options.get(key):
                raise InputValueError(
                    f"{name}: {key}=True asks for torch.optim.{name}'s {key} update, which "
                    f"{name} does not have: its update would ignore it. Leave {key}=False, "
                    f"or use torch.optim.{name}."
                )
        self._check_options({k: v for k, v in options.items() if k in _TORCH_KEYS}, name,
                            defaults)

    def _check_options(self, options: dict[str, Any], where: str,
                       defaults: dict[str, Any]) -> None:
        """Raise :class:`InputValueError` for an option no update can compute with: a rate,
        epsilon, decay, momentum or starting sum that is not a number >= 0 (NaN is not),
        ``betas`` not two numbers in ``[0, 1)`` (what the constructor, :meth:`add_param_group`
        and :meth:`load_state_dict` accept: all that ``torch.optim`` refuses, and NaN for
        ``SGD`` too), or an option this class does not implement (:meth:`_unimplemented`,
        ``defaults`` its own options), which its update would ignore. ``lr`` may be a
        one-element tensor, as ``torch.optim`` takes it."""
        self._refuse_unimplemented(options, where, defaults)
        for key, value in options.items():
            if key == "lr" and isinstance(value, torch.Tensor):
                if value.numel() != 1 or value.is_complex() or not float(value) >= 0:
                    raise InputValueError(
                        f"{where}: a tensor lr must be one number >= 0, got shape "
                        f"{tuple(value.shape)} ({value.flatten()[:4].tolist()}). Pass e.g. "
                        "lr=torch.tensor(0.01), or a float."
                    )
                continue
            if key in _NUMBER_KEYS and (
                isinstance(value, bool) or not isinstance(value, numbers.Real)
                or not float(value) >= 0  # NaN too
            ):
                raise InputValueError(f"{where}: {key} must be a number >= 0, got {value!r}. "
                                      "Pass a value >= 0 (not NaN).")
        betas = options.get("betas")
        if isinstance(betas, tuple | list) and any(isinstance(b, torch.Tensor) for b in betas):
            raise InputValueError(
                f"{where}: betas must be two numbers, got tensors ({betas}): the row updates "
                "take numbers. Pass e.g. betas=(0.9, 0.999), or float() of each."
            )
        if betas is not None and not (
                isinstance(betas, tuple | list) and len(betas) == 2
                and all(isinstance(b, numbers.Real) and not isinstance(b, bool)
                        and 0 <= float(b) < 1 for b in betas)):
            raise InputValueError(f"{where}: betas must both be in [0, 1), got {betas}. "
                                  "Pass e.g. betas=(0.9, 0.999).")

    def _loadable_group(self, saved: dict[str, Any], group: dict[str, Any]) -> dict[str, Any]:
        """``saved`` (a state dict's group) as this optimizer adopts it, or an error if it would
        change what training computes."""
        saved = _upgraded_group(saved)
        unimplemented = self._unimplemented(saved, self.defaults)
        if unimplemented is not None:
            key, value, has = unimplemented
            raise InputValueError(
                f"{type(self).__name__}.load_state_dict: the state dict's parameter group "
                f"sets {key}={value!r}, and {type(self).__name__} {has}: loading it would "
                "change what each update computes. Load it into the optimizer it comes "
                "from (the torch.optim class of that name, with that option). Nothing was "
                "loaded."
            )
        own = {k: v for k, v in self._fixed.items() if k in self.defaults}
        missing = sorted(set(self.defaults) - set(saved) - set(own) - {IN_BACKWARD} - _HOW_KEYS)
        if missing:
            raise InputValueError(
                f"{type(self).__name__}.load_state_dict: the state dict's parameter group has "
                f"no {', '.join(missing)}: it is another optimizer's state dict (its keys: "
                f"{', '.join(sorted(k for k in saved if k != 'params'))}). Load it into the "
                "optimizer it comes from. Nothing was loaded."
            )
        loaded = {**saved, **own, IN_BACKWARD: group[IN_BACKWARD]}
        for key in _NUMBER_KEYS:
            value = loaded.get(key)
            if key != "lr" and isinstance(value, torch.Tensor) and value.numel() == 1:
                loaded[key] = value.item()  # a tensor lr stays one, as torch.optim keeps it
        try:
            self._check_options(loaded, f"{type(self).__name__}.load_state_dict",
                                self.defaults)
        except InputValueError as e:
            raise InputValueError(f"{e} The state dict's parameter group holds it: it is "
                                  "damaged. Nothing was loaded.") from None
        return loaded

    def _check_state(self, state_dict: dict[str, Any]) -> None:
        """Refuse a state tensor of another shape than the one this class keeps for it, a
        state without a tensor this class needs, or a step that is not a count."""
        name = type(self).__name__
        saved = state_dict.get("state", {})
        for group, own in zip(state_dict["param_groups"], self.param_groups, strict=True):
            for i, p in zip(group["params"], own["params"], strict=True):
                state = saved.get(i, {})
                if not state:
                    continue
                for key, shape in self._state_shapes(p).items():
                    value = state.get(key)
                    if isinstance(value, torch.Tensor) and tuple(value.shape) != shape:
                        raise InputValueError(
                            f"{name}.load_state_dict: the state {key!r} of a parameter of "
                            f"shape {tuple(p.shape)} has shape {tuple(value.shape)}; {name} "
                            f"keeps {shape}. It is another optimizer's or another model's "
                            "state (torch.optim.Adagrad, for one, keeps a sum per element, "
                            "RowWiseAdagrad one per row): load it into the optimizer and model "
                            "it comes from. Nothing was loaded."
                        )
                lacking = [k for k in self._required_state(p, group)
                           if not isinstance(state.get(k), torch.Tensor) or state[k].is_meta]
                step = state.get("step")
                if isinstance(step, torch.Tensor) and step.numel() == 1:
                    step = step.item()  # torch.optim's: a float tensor holding a count
                if lacking or not (step is None or (
                        isinstance(step, int | float) and not isinstance(step, bool)
                        and step >= 0 and float(step).is_integer())):
                    what = (f"has no {', '.join(lacking)} with values" if lacking
                            else f"has a step of {step!r}, not a count")
                    raise InputValueError(
                        f"{name}.load_state_dict: the state of a parameter of shape "
                        f"{tuple(p.shape)} {what} (its keys: {', '.join(map(str, state))}); "
                        f"{name} with this group's options keeps "
                        f"{', '.join(['step', *self._required_state(p, group)])}. It is "
                        "another optimizer's state, or damaged: load it into the optimizer it "
                        "comes from. Nothing was loaded."
                    )

    def _required_state(self, p: torch.Tensor, group: dict[str, Any]) -> list[str]:
        """The state tensors a started state of ``p`` holds under ``group``'s options."""
        return list(self._state_shapes(p))

    def _loaded_state(self, p: torch.Tensor, state: dict[str, Any]) -> None:
        """One parameter's loaded state in this class's terms: an ``int`` step, no ``None``
        entries, dense tensors (``torch.optim.SGD`` keeps a sparse table's momentum buffer
        sparse: the same values, which the row update reads and writes in place), large CPU
        tensors placed as allocated ones (a table in a file's in its state files)."""
        for key in [k for k, v in state.items() if v is None]:
            del state[key]
        step = state.get("step")
        if isinstance(step, torch.Tensor | float):
            state["step"] = int(step)
        elif step is None and state:  # torch.optim.SGD's: its buffer exists after one step
            state["step"] = 1
        for key, value in state.items():
            if isinstance(value, torch.Tensor):
                if value.layout != torch.strided:
                    value = value.to_dense()
                # a table in a file keeps it in its state file, as an allocated state
                kept = state_tensor(p, self._state_file(key), tuple(value.shape),
                                    dtype=value.dtype)
                state[key] = hugepages.place(value) if kept is None else kept.copy_(value)

    def _state_file(self, key: str) -> str:
        """The name a table in a file keeps state ``key`` under (``state-<name>.bin``, the
        ``name`` :func:`zeros_like` is given)."""
        return key

    def __setstate__(self, state: dict[str, Any]) -> None:
        super().__setstate__(state)
        self._backward_queue = BackwardQueue(self)
        self._fused_values, self._fused_updated, self._grads_held = {}, set(), set()
        self.__dict__.setdefault("_zeros_kept", False)
        for group in self.param_groups:  # copied or unpickled: bind the tables again
            if IN_BACKWARD not in group:
                group.update(_upgraded_group(group))
            self._bind(group)

    def _bind(self, group: dict[str, Any]) -> None:
        if group.get(IN_BACKWARD):
            tables = [p for p in group["params"] if p.dim() >= 2]
            seen: set[int] = set()
            for p in tables:
                if id(p) in seen:
                    raise InputValueError(
                        f"{type(self).__name__}(fused=True): a parameter group lists a table "
                        f"of shape {tuple(p.shape)} more than once; its update in the backward "
                        "applies each gradient once, where torch.optim and fused=False step it "
                        "once per listing. List each table once (torch.optim warns that "
                        "duplicates will be refused). Nothing was bound."
                    )
                seen.add(id(p))
            _fusion.bind(tables, self)
        else:
            _fusion.unbind(group["params"], self)
            _fusion.check_free(group["params"], self)

    def _state_shapes(self, p: torch.Tensor) -> dict[str, tuple[int, ...]]:
        """The shape of each state tensor this class keeps for ``p``. For a parameter with rows
        (2-D or more), each holds one entry per row of ``p``, row ``i``'s first: what a
        :class:`~lookuplinear.Checkpoint` saves by rows and a re-initialised row starts
        afresh."""
        raise NotImplementedError

    def _row_state(self, p: torch.Tensor, state: dict[str, Any] | None = None) -> list[str]:
        """The keys of ``p``'s state (``state``, or the one this optimizer holds) held row by
        row (:meth:`_state_shapes`)."""
        if p.dim() < 2:
            return []
        if state is None:
            state = self.state.get(p, {})
        return [key for key in self._state_shapes(p) if isinstance(state.get(key), torch.Tensor)]

    def _layout(self, p: torch.Tensor) -> dict[str, Any]:
        """How ``p``'s state is laid out in memory beyond its values (JSON values), for
        :meth:`_set_layout` to lay a restored state out the same: the update a state takes may
        depend on its layout, and a restored run must take the one the saved run took."""
        return {}

    def _set_layout(self, p: torch.Tensor, layout: dict[str, Any] | None) -> None:
        """Lay ``p``'s state out as :meth:`_layout` described it (same values); ``None``: as
        ``torch.optim`` lays it out, which is what :meth:`load_state_dict` gives."""
        if p in self.state:
            self._lay_out(p, self.state[p], layout)

    def _lay_out(self, p: torch.Tensor, state: dict[str, Any],
                 layout: dict[str, Any] | None) -> None:
        """:meth:`_set_layout` of ``state``, a state of ``p`` this optimizer may not hold yet
        (a :class:`~lookuplinear.Checkpoint` builds the restored state beside the old one)."""

    def _new_state(self, p: torch.Tensor, group: dict[str, Any]) -> dict[str, Any]:
        """``p``'s state started (:meth:`_init_state`), held by the optimizer only once it is
        complete: a start that fails part way (a table in a file whose state file cannot be
        written, a full disk) leaves ``p`` without state, and the next step starts it again."""
        state: dict[str, Any] = {}
        self._init_state(p, state, group)
        self.state[p] = state
        return state

    def _state(self, p: torch.Tensor, group: dict[str, Any]) -> dict[str, Any]:
        state: dict[str, Any] = self.state[p]
        if not state:
            state = self._new_state(p, group)
        else:
            self._state_in_dtype(p, state)
        rows = RESETS.take(p)
        if rows is not None:
            self._fresh_rows(p, state, rows, group)
        return state

    def _state_in_dtype(self, p: torch.Tensor, state: dict[str, Any]) -> None:
        """``p``'s started ``state`` in the dtypes this class allocates for ``p`` now
        (:meth:`_state_dtype`): a state tensor made before ``p`` changed dtype (a
        ``model.double()`` or ``.half()`` after a step) is converted, as ``torch.optim``'s
        ``load_state_dict`` casts a state to its parameter's dtype, and placed as loaded state
        is (:func:`lookuplinear.hugepages.place`). A table in a file keeps its dtype (the layer
        refuses a conversion), so its state stays in its files."""
        for key, value in state.items():
            if isinstance(value, torch.Tensor) and value.dtype != p.dtype \
                    and value.is_floating_point():
                dtype = self._state_dtype(p, key)
                if value.dtype != dtype:  # an existing key: the dict keeps its size
                    state[key] = hugepages.place(value.to(dtype))

    def _fresh_rows(self, p: torch.Tensor, state: dict[str, Any], rows: torch.Tensor,
                    group: dict[str, Any]) -> None:
        """``p``'s state in ``rows``, re-initialised since the last update
        (:mod:`lookuplinear._rowreset`), as a new state starts (:meth:`_state_fill`)."""
        for key in self._row_state(p, state):
            state[key][rows.to(state[key].device)] = self._state_fill(key, group)

    def _state_fill(self, key: str, group: dict[str, Any]) -> float:
        """The value state ``key`` starts at under ``group``'s options (0 but for Adagrad's
        ``initial_accumulator_value``)."""
        return 0.0

    def _starts(self) -> dict[str, Any]:
        """The options a new state starts from that no parameter group holds (JSON values;
        none but Adagrad's constructor ``initial_accumulator_value``). A
        :class:`~lookuplinear.Checkpoint` records them, and a restore into an optimizer of
        other ones is refused: the rows it does not hold (a table in a file's rows never
        drawn) and the rows an ``IdMap`` gives new IDs start from them."""
        return {}

    @torch.no_grad()
    def _apply_fused(self, updates: Updates) -> bool:
        """Update each table of ``updates`` from the ``(lookup, grad_out)`` of every use of it
        in one backward and, where taken, the gradient accumulated in its ``.grad`` (which is
        then cleared); whether one was updated (a table unbound since stores its gradient).

        A table used once, nothing accumulated: the C kernel groups its rows and updates each
        as soon as its gradient is summed, all such tables of a dtype in one call. Otherwise
        the uses' row-sparse gradients and the accumulated one, summed as autograd would sum
        them, then the stored-gradient update of :meth:`step`. Either way the weights
        ``fused=False`` gives.

        The backend, the rows to start afresh (:meth:`_fresh_rows`) and the kernel's state and
        scalars (:meth:`_kernel_args`, from the group's values as they are now: a scheduler
        changes them between steps) are asked once per update or per group, not per table.
        """
        group_of: dict[int, dict[str, Any]] = {}  # one pass, not one per table
        for group in self.param_groups:
            for q in group["params"]:
                group_of[id(q)] = group
        c = use_c()
        # asked only of a class that completes states (a call per table saved for the others)
        completes = type(self)._complete_state is not RowSparseOptimizer._complete_state
        bound: list[torch.Tensor] = []
        # the tables the C kernel may take, by group: (p, state, (lookup, grad_out))
        by_group: dict[int, tuple[dict[str, Any], list[tuple[torch.Tensor, dict[str, Any],
                                                             Any]]]] = {}
        rest: list[tuple[torch.Tensor, torch.Tensor]] = []
        watched = bool(WATCHERS)
        for p, pending, stored in updates:
            if watched:  # no gradient hook sees the rows the lookups' gradients change
                for lookup, _ in pending:
                    notify(p, lookup[0])
            grad = None
            if stored:
                grad, p.grad = p.grad, None
                if grad is None and not pending:  # cleared since it was taken: nothing to do
                    continue
            found = group_of.get(id(p))
            if found is None or not found.get(IN_BACKWARD):  # unbound since: store the gradient
                p.grad = self._total_grad(p, pending, grad)
                continue
            group = found
            if id(group) not in self._fused_values:  # the values this backward's update uses
                if self._unimplemented(group, self.defaults) is not None:  # set by hand
                    self._refuse_unimplemented(group, f"{type(self).__name__} (fused=True), "
                                               "updating its tables in the backward")
                used = self._fused_values[id(group)] = {}
                for k in self.defaults:  # a loop, not a comprehension: one call fewer
                    if k != IN_BACKWARD and k not in _HOW_KEYS:
                        v = group.get(k)  # a tensor (an lr a scheduler fill_s) copied
                        used[k] = v.detach().clone() if isinstance(v, torch.Tensor) else v
            self._fused_updated.add(id(p))
            self._grads_held.add(id(p))
            state = self.state[p]
            if not state:
                state = self._new_state(p, group)
            else:
                for value in state.values():  # (a loop, no call, per table: the usual case)
                    if isinstance(value, torch.Tensor) and value.dtype != p.dtype:
                        self._state_in_dtype(p, state)
                        break
            bound.append(p)
            if c and grad is None and len(pending) == 1 and p.is_cpu and p.dim() == 2 \
                    and p.is_contiguous():
                if completes:
                    self._complete_state(p, state, group)  # the row kernel reads all of it
                by_group.setdefault(id(group), (group, []))[1].append((p, state, pending[0]))
            else:
                rest.append((p, self._total_grad(p, pending, grad)))
        for p, rows in RESETS.take_all(bound) if RESETS.rows else ():  # before updates read it
            self._fresh_rows(p, self.state[p], rows, group_of[id(p)])
        tables: list[FusedTable] = []
        done_states: list[tuple[torch.Tensor, dict[str, Any]]] = []
        for group, items in by_group.values():
            asked = []
            for p, state, _ in items:
                asked.append((p, state, state["step"] + 1))
            for (p, state, (lookup, grad_out)), args in zip(
                    items, self._kernel_args(group, asked), strict=True):
                if args is None:  # the state's layout is not the kernel's
                    rest.append((p, self._total_grad(p, [(lookup, grad_out)], None)))
                else:
                    tables.append(FusedTable(grad_out, p, *args, *lookup))
                    done_states.append((p, state))
        taken = fused_rows(self._kernel, tables, c=True) if tables else []
        for (p, state), table, done in zip(done_states, tables, taken, strict=True):
            if done:
                state["step"] += 1
                torch.autograd.graph.increment_version(p)  # the C kernel wrote through its data
            else:
                rest.append((p, self._total_grad(p, [(table[-4:], table.grad_out)], None)))
        for p, grad in rest:
            group = group_of[id(p)]
            state = self.state[p]
            if grad.is_sparse:
                self._sparse_step(p, grad, state, group)
            else:
                ((foreach, _),) = _runs([p], self._foreach_ok(group))
                self._dense_step([p], [grad], [state], group, foreach=foreach)
        return bool(tables or rest)

    def _total_grad(self, p: torch.Tensor, pending: list[tuple[Any, torch.Tensor]],
                    grad: torch.Tensor | None) -> torch.Tensor:
        """The uses' gradients and ``grad``, the one accumulated in ``p.grad``, summed as
        autograd sums them. A dense ``grad`` first, each use's gradient added to it in the
        order the uses' backward ran: autograd adds each sparse gradient to the dense one it
        holds as it comes, so this is its sum where at most one use's gradient reached the
        table before the dense one (the dense use made after all uses but the last in the
        forward, as a penalty added to the loss after it is). A sparse ``grad`` before the
        uses' sum (:meth:`_summed_grad`)."""
        if not pending:
            assert grad is not None
            return grad
        if grad is None or grad.is_sparse:
            total = self._summed_grad(p, pending)
            return total if grad is None else grad + total
        for lookup, g in pending:
            grad = grad + self._use_grad(p, lookup, g)
        return grad

    @classmethod
    def _summed_grad(cls, p: torch.Tensor, pending: list[tuple[Any, torch.Tensor]]
                     ) -> torch.Tensor:
        """The uses' gradients (:meth:`_use_grad`) summed as autograd sums them (its buffer of
        a node's inputs puts a sparse gradient that comes later first): the gradient
        ``fused=False`` stores, to the bit, on either backend."""
        total: torch.Tensor | None = None
        for lookup, g in pending:
            grad = cls._use_grad(p, lookup, g)
            total = grad if total is None else grad + total
        assert total is not None
        return total

    @staticmethod
    def _use_grad(p: torch.Tensor, lookup: Any, g: torch.Tensor) -> torch.Tensor:
        """One use's gradient of ``p`` as the lookup operator's backward gives it from its
        output's gradient ``g`` (``bag_lookup``'s, :func:`~lookuplinear.ops.library.
        sum_weight_grad`: an index tensor's, and off the CPU a bag lookup's, one row per entry
        in entry order; on the CPU a bag lookup's one row per distinct row, sorted, its
        sum), in ``p``'s dtype, as autograd casts it."""
        indices, offsets, weights, padding_idx = lookup
        g = g.detach().reshape(-1, p.shape[1])
        grad = sum_weight_grad(g, indices.reshape(-1), offsets, weights, padding_idx,
                               tuple(p.shape))
        return grad if grad.dtype == p.dtype else grad.to(p.dtype)

    def _c_args(
        self, p: torch.Tensor, state: dict[str, Any], group: dict[str, Any], step: int
    ) -> tuple[torch.Tensor, dict[str, float]] | None:
        """The C kernel's ``(state, scalars)`` for ``p``, or None where it cannot run."""
        if not (use_c(p) and p.dim() == 2 and p.is_contiguous()):
            return None
        return self._kernel_args(group, [(p, state, step)])[0]

    def _kernel_args(
        self, group: dict[str, Any], tables: list[tuple[torch.Tensor, dict[str, Any], int]]
    ) -> list[tuple[torch.Tensor, dict[str, float]] | None]:
        """The C kernel's ``(state, scalars)`` for each ``(w, state, step)`` of ``tables``
        (``w`` a 2-D table of ``group``), or None where the state's layout is not the
        kernel's: :meth:`_kernel_states` and :meth:`_scalars`, each asked once for them all."""
        layouts: list[tuple[torch.Tensor, dict[str, Any]]] = []
        at: list[tuple[int, int]] = []
        for w, state, step in tables:
            layouts.append((w, state))
            at.append((w.shape[1], step))
        args: list[tuple[torch.Tensor, dict[str, float]] | None] = []
        for s, named in zip(self._kernel_states(layouts), self._scalars(group, at),
                            strict=True):
            args.append(None if s is None else (s, named))
        return args

    @torch.no_grad()
    def step(self, closure: Callable[[], float] | None = None) -> float | None:  # type: ignore[override]
        """One update of every parameter that has a gradient; returns ``closure()``'s loss.

        With ``fused=True`` the tables were updated in the backward: a ``torch.amp.GradScaler``
        driving this step is refused (the tables took the scaled gradient), a group value
        changed since that update (an lr set between ``backward()`` and ``step()``) warns, and
        after ``zero_grad(set_to_none=False)`` each table with a state that no backward reached
        since it was updated in one counts a step, as its kept zero gradient counts one with
        ``fused=False`` (a table no backward reached since ``zero_grad(set_to_none=True)``, or
        since the optimizer was built, has no gradient to keep there, and counts none).

        Every gradient is checked before any parameter is updated: a step refused for one
        changes no parameter and no state. A sparse gradient that is not row-sparse is taken
        as its row-sparse form (:func:`row_sparse_parts`)."""
        if "grad_scale" in self.__dict__ or "found_inf" in self.__dict__:
            self._refuse_grad_scaler()
        if self._fused_values:
            self._check_fused_values()
        self._backward_queue.reset()
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:  # metadata only: no value is read, nothing waits
            steps = False
            for p in group["params"]:
                grad = p.grad
                if grad is None:
                    continue
                steps = True
                if grad.shape != p.shape or grad.dtype != p.dtype or grad.device != p.device:
                    self._refuse_grad(p, grad)
                if not self._zeros_stay and grad.is_sparse and grad.sparse_dim() > 1:
                    self._refuse_part_rows(grad)
            # a group's values may be set by hand between steps (a fused group's tables were
            # checked by their update in the backward)
            if steps and self._unimplemented(group, self.defaults) is not None:
                self._refuse_unimplemented(group, f"{type(self).__name__}.step")
        for group in self.param_groups:
            params, grads, states = [], [], []
            for p in group["params"]:
                grad = p.grad
                if grad is None:
                    continue
                state = self._state(p, group)
                if grad.is_sparse:
                    self._sparse_step(p, grad, state, group)
                else:
                    params.append(p)
                    grads.append(grad)
                    states.append(state)
            if not params:  # every gradient sparse, or none (a fused=True group's tables)
                continue
            for foreach, run in _runs(params, self._foreach_ok(group)):
                self._dense_step([params[i] for i in run], [grads[i] for i in run],
                                 [states[i] for i in run], group, foreach=foreach)
        if self._zeros_kept:
            for group in self.param_groups:
                if not group.get(IN_BACKWARD):
                    continue
                for p in group["params"]:
                    kept = self.state.get(p)
                    if kept and id(p) in self._grads_held and id(p) not in self._fused_updated \
                            and p.grad is None:
                        kept["step"] += 1  # a kept zero gradient's step (fused=False)
        self._fused_updated.clear()
        return loss

    def _refuse_grad(self, p: torch.Tensor, grad: torch.Tensor) -> None:
        """Refuse a step over a gradient that does not fit its parameter (set through
        ``.grad.data``, which skips the checks of ``.grad =``)."""
        raise InputValueError(
            f"{type(self).__name__}.step: a parameter of shape {tuple(p.shape)}, {p.dtype} on "
            f"{p.device} has a gradient of shape {tuple(grad.shape)}, {grad.dtype} on "
            f"{grad.device}; a gradient has its parameter's shape, dtype and device (what "
            "assigning .grad checks). Set .grad to such a tensor (not .grad.data). Nothing was "
            "stepped."
        )

    def _refuse_part_rows(self, grad: torch.Tensor) -> None:
        """Refuse a gradient of ``sparse_dim`` 2 or more without every entry of each row it
        names: this optimizer updates whole rows (their state moves the elements without an
        entry), where ``torch.optim`` moves only the entries."""
        grad = grad.coalesce()
        rows = torch.unique(grad._indices()[0]).numel()
        per_row = math.prod(grad.shape[1:grad.sparse_dim()])
        if grad._nnz() == rows * per_row:
            return
        raise InputValueError(
            f"{type(self).__name__}.step: a sparse gradient of shape {tuple(grad.shape)} with "
            f"sparse_dim={grad.sparse_dim()} has {grad._nnz()} entries in {rows} rows of "
            f"{per_row}: {type(self).__name__} updates whole rows, whose moments would move "
            "the elements without an entry, which torch.optim.SparseAdam leaves as they are. "
            "Give a row-sparse gradient (grad.to_sparse(1)) or a dense one. Nothing was "
            "stepped."
        )

    @property
    def _step_supports_amp_scaling(self) -> bool:
        """``torch.amp.GradScaler`` hands a ``fused=True`` optimizer its scale (``grad_scale``,
        ``found_inf``) instead of unscaling its gradients: :meth:`step` refuses it."""
        return any(group.get(IN_BACKWARD) for group in self.param_groups)

    def _refuse_grad_scaler(self) -> None:
        """Refuse a step that ``torch.amp.GradScaler`` drives (it set ``grad_scale`` or
        ``found_inf``, as it does for an optimizer that takes its scale)."""
        self.__dict__.pop("grad_scale", None)
        self.__dict__.pop("found_inf", None)
        raise InputValueError(
            f"{type(self).__name__}(fused=True) under torch.amp.GradScaler: the tables are "
            "updated inside the backward, with the scaled gradient, before GradScaler can "
            "unscale it or skip a step with an inf (the last backward's update of the fused "
            "tables took it). Build the optimizer with fused=False to train with GradScaler; "
            "nothing was stepped now."
        )

    def _check_fused_values(self) -> None:
        """Warn where a fused group's values changed between its tables' update in the
        backward and this step: the tables took the old ones, the other parameters take the
        new."""
        used, self._fused_values = self._fused_values, {}
        for group in self.param_groups:
            before = used.get(id(group))
            if before is None:
                continue
            changed = []
            for k, v in before.items():  # a loop, not a generator: one call fewer a step
                now = group.get(k)
                if (_tensor_changed(v, now) if isinstance(v, torch.Tensor)
                        or isinstance(now, torch.Tensor) else v != now):
                    changed.append(k)
            changed.sort()
            if changed:
                warnings.warn(
                    f"{type(self).__name__}(fused=True): {', '.join(changed)} changed between "
                    "backward() and step(); the tables were updated in the backward with "
                    f"{', '.join(f'{k}={before[k]!r}' for k in changed)}, the other parameters "
                    "step with the new values. Change group values after step() (a scheduler's "
                    "step() after optimizer.step(), as PyTorch orders them).",
                    UserWarning, stacklevel=caller_level())

    def _dense_step(self, params: list[torch.Tensor], grads: list[torch.Tensor],
                    states: list[dict[str, Any]], group: dict[str, Any], *,
                    foreach: bool) -> None:
        """The dense update of ``params`` together: ``torch.optim``'s functional update of the
        same name, multi-tensor (``foreach=True``) or single-tensor, each state's ``step``
        counted."""
        raise NotImplementedError

    def _sparse_step(self, p: torch.Tensor, grad: torch.Tensor, state: dict[str, Any],
                     group: dict[str, Any]) -> None:
        """One step of ``p`` by its sparse gradient ``grad``: its rows as they come
        (:func:`row_sparse_parts` with ``sum_runs=False``), grouped by the update unless they
        are unique off the CPU, as a gradient flagged coalesced has them (``torch.optim``'s
        ``coalesce()`` returns it as it is) and a gradient of another form is made. On the
        CPU, where reading the rows costs nothing, they are grouped whatever the flag says
        (one built by hand may call duplicates coalesced; the C kernel and ``torch.optim``
        sum them)."""
        rows, values = row_sparse_parts(grad, sum_runs=False)
        self._sparse_update(p, rows, values, state, group, unique=not rows.is_cpu and (
            grad.sparse_dim() != 1 or grad.is_coalesced()))

    def _sparse_update(
        self,
        p: torch.Tensor,
        rows: torch.Tensor,
        values: torch.Tensor,
        state: dict[str, Any],
        group: dict[str, Any],
        *,
        unique: bool = False,
    ) -> None:
        """One step of ``p``'s ``rows`` by the gradient rows ``values`` (rows in any order:
        :func:`row_sparse_parts` with ``sum_runs=False``), each row's entries summed in entry
        order and the row updated once; ``unique``: each row comes once (nothing to sum:
        the rows are not grouped, which off the CPU reads them back). A parameter of fewer
        than 2 dimensions is a table of ``values``' width (a row per element of a 1-D
        parameter). The step is counted once the update is done (an update that raises counts
        none)."""
        self._complete_state(p, state, group)  # the row update reads all of it
        step = state["step"] + 1  # counted once the rows are updated
        if rows.numel() == 0:
            state["step"] = step
            return
        values = values.reshape(values.shape[0], -1)
        n_rows = p.shape[0] if p.dim() >= 2 else p.numel() // values.shape[1]
        if values.dtype != p.dtype:  # summed in the gradient's dtype, as a coalesce sums
            if not unique:
                rows, values = grouped_rows(rows, values, n_rows)
            values = values.to(p.dtype)
        args = self._c_args(p, state, group, step)
        if args is not None and update_rows(self._kernel, p, args[0], rows, values, args[1]):
            torch.autograd.graph.increment_version(p)  # the C kernel wrote through its data
        else:  # the C kernel does not take it (device, dtype, layout, backend): its twin,
            # which updates unique rows. On the CPU, where a read costs nothing, the rows are
            # checked first (the C kernel's LookupIndexError)
            w = p.reshape(n_rows, -1)  # a copy where p's strides have no such view
            if rows.is_cpu:
                check_rows("rows_update_", rows, values, w)
            if not unique:
                rows, values = grouped_rows(rows, values, n_rows)
            named = self._scalars(group, [(w.shape[1], step)])[0]
            ROW_UPDATES[self._kernel](w, *self._state_rows(w, state), rows.long(), values,
                                      c_scalars(self._kernel, named, False))
            if w.data_ptr() != p.data_ptr():
                p.copy_(w.view(p.shape))
        state["step"] = step

    def _init_state(self, p: torch.Tensor, state: dict[str, Any], group: dict[str, Any]) -> None:
        raise NotImplementedError

    def _complete_state(self, p: torch.Tensor, state: dict[str, Any],
                        group: dict[str, Any]) -> None:
        """Add to ``p``'s started ``state`` what ``group``'s options now need and it lacks
        (an option a schedule changed since the state was made), before any update."""

    def _kernel_states(self, tables: list[tuple[torch.Tensor, dict[str, Any]]]
                       ) -> list[torch.Tensor | None]:
        """The state of each ``(w, state)`` of ``tables`` (``w`` 2-D) in the C kernel's layout
        (``lookuplinear::rows_update_``), or None where ``state`` is not laid out so."""
        raise NotImplementedError

    def _scalars(self, group: dict[str, Any], at: list[tuple[int, int]]
                 ) -> list[dict[str, float]]:
        """The row update's scalars by name (:data:`lookuplinear.ops._clib.SCALARS`), from
        ``group``'s values, for a table of each ``(width, step)`` of ``at`` (``width``: the
        columns of the table as a 2-D ``w``). Tables with the same scalars may share a dict."""
        raise NotImplementedError

    #: whether ``torch.optim``'s multi-tensor update of this class takes a tensor ``lr``
    #: (``torch.optim.Adam``'s refuses it unless ``capturable=True``)
    _foreach_takes_tensor_lr = True

    def _foreach_ok(self, group: dict[str, Any]) -> bool:
        """Whether ``group``'s dense parameters may be stepped multi-tensor: with a tensor
        ``lr``, only off the CPU and where ``torch.optim``'s multi-tensor update takes one,
        as ``torch.optim`` decides by default (on the CPU it steps single-tensor, whose
        rounding with a tensor ``lr`` differs from the multi-tensor one's)."""
        lr = group["lr"]
        if not isinstance(lr, torch.Tensor):
            return True
        params = group["params"]
        return (self._foreach_takes_tensor_lr and bool(params)
                and params[0].device.type != "cpu")

    def _state_rows(self, w: torch.Tensor, state: dict[str, Any]
                    ) -> tuple[torch.Tensor | None, ...]:
        """``state``'s tensors as the row update's torch-op twin takes them
        (:data:`lookuplinear.ops._updates.ROW_UPDATES`): views with a row per row of ``w``, in
        whatever layout the state has."""
        raise NotImplementedError


#: on the CPU, a parameter of this many bytes or more is stepped by ``torch.optim``'s
#: single-tensor update (its default there), the smaller ones by its multi-tensor update in
#: runs of at most :data:`CPU_RUN_BYTES`: a ``torch._foreach_*`` op goes over every tensor of
#: its list before the next op starts, so a list larger than the L2 cache is read from memory
#: once per op, where the single-tensor update keeps a parameter in cache through all its ops.
#: Timed on 20 square layers (the functional updates alone): at widths 64-128 multi-tensor runs
#: take 0.6-1.0x the single-tensor time, at width 256 (256 KiB weights) 1.25-1.35x (Adam,
#: Adagrad; docs/performance.md, "Many small dense parameters").
CPU_LARGE_BYTES = 1 << 18
CPU_RUN_BYTES = 1 << 19


#: dtypes whose multi-tensor update on the CPU rounds otherwise than the single-tensor one
#: (``torch.optim``'s default there): stepped single-tensor; row-wise Adagrad keeps their sums
#: in float32
LOW_PRECISION = (torch.bfloat16, torch.float16)


def _runs(params: list[torch.Tensor], foreach_ok: bool = True
          ) -> list[tuple[bool, list[int]]]:
    """``(foreach, positions)``: how ``params`` are stepped, in calls of ``torch.optim``'s
    functional update. Off the CPU one multi-tensor call (a fused kernel per op there, and
    ``torch.optim``'s default); on the CPU the large parameters and the bfloat16 and float16
    ones in one single-tensor call and the others in multi-tensor runs
    (:data:`CPU_LARGE_BYTES`). Elementwise updates: the same values however they are cut,
    and the same as ``torch.optim``'s default. ``foreach_ok=False`` (a group whose ``lr`` is
    a tensor: :meth:`RowSparseOptimizer._foreach_ok`): one single-tensor call."""
    if not params:
        return []
    if not foreach_ok:
        return [(False, list(range(len(params))))]
    if params[0].device.type != "cpu":
        return [(True, list(range(len(params))))]
    large: list[int] = []
    runs: list[list[int]] = [[]]
    size = 0
    for i, p in enumerate(params):
        n = p.numel() * p.element_size()
        if n >= CPU_LARGE_BYTES or p.dtype in LOW_PRECISION:
            large.append(i)
            continue
        if runs[-1] and size + n > CPU_RUN_BYTES:
            runs.append([])
            size = 0
        runs[-1].append(i)
        size += n
    return [(False, large)] * bool(large) + [(True, run) for run in runs if run]


def _tensor_changed(before: Any, now: Any) -> bool:
    """Whether a group value, one of the two a tensor, differs from the copy the fused update
    took: a tensor compared by its values; a tensor replaced by a number, or the reverse, is a
    change."""
    return not (isinstance(before, torch.Tensor) and isinstance(now, torch.Tensor)
                and before.device == now.device and torch.equal(before, now))


def step_tensors(states: list[dict[str, Any]]) -> list[torch.Tensor]:
    """Each state's step count as the tensor ``torch.optim``'s functional updates take (and
    advance: the counts kept in ``states`` are advanced by the caller)."""
    return [torch.tensor(float(s["step"])) for s in states]


def _upgraded_group(saved: dict[str, Any]) -> dict[str, Any]:
    """A group as lookuplinear saved it before ``fused=True`` had its own key (it used
    ``"fused"``, ``torch.optim``'s key for its fused kernels), in today's keys. A
    ``torch.optim`` group (which always has ``"maximize"``) is left as it is."""
    if IN_BACKWARD in saved or "fused" not in saved or "maximize" in saved:
        return saved
    upgraded = {k: v for k, v in saved.items() if k != "fused"}
    upgraded[IN_BACKWARD] = bool(saved["fused"])
    return upgraded
