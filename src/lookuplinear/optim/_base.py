"""The shared step of the row-wise optimizers: sparse gradients update only their rows.

A parameter whose ``.grad`` is a sparse COO tensor (``LookupLinear(sparse=True)``,
``nn.Embedding(sparse=True)``) is updated row by row: only the rows the gradient names, and
only those rows of the optimizer state, are read and written, in one pass (the C kernels on
CPU, torch ops elsewhere). Any other parameter gets the dense update of the ``torch.optim``
optimizer of the same name, so one optimizer serves a whole model.

Each optimizer states its update once, its variants side by side (as ``torch.optim.adam`` keeps
its single-tensor, multi-tensor and fused variants together): ``_dense_update`` (the
``torch.optim`` formula), ``_kernel`` and ``_kernel_args`` (its C entry point and operands) and
``_rows_torch`` (the same row update in torch ops).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable
from typing import Any

import torch

from .. import hugepages
from .._fusion import RESET_ROWS, Updates, bind
from .._kernels import FusedTable, Lookup, fused_rows, group_rows, update_rows, use_c
from .._rowgrad import row_sparse_grad
from .._storage import storage_of
from ..errors import InputValueError

__all__ = ["RowSparseOptimizer", "row_sparse_parts", "zeros_like"]

Params = Iterable[torch.Tensor] | Iterable[dict[str, Any]]


def row_sparse_parts(grad: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``(rows, values)`` of a row-sparse gradient: unique sorted rows, one value row each.

    A gradient whose rows are already strictly increasing (``LookupLinear``'s backward) is used
    as it is; any other is coalesced first (duplicates summed).

    Examples
    --------
    >>> g = torch.sparse_coo_tensor(torch.tensor([[3, 1, 3]]), torch.ones(3, 2), (5, 2))
    >>> row_sparse_parts(g)
    (tensor([1, 3]), tensor([[1., 1.],
            [2., 2.]]))
    """
    if grad.sparse_dim() != 1:
        raise InputValueError(
            f"lookuplinear.optim updates row-sparse gradients (sparse_dim=1, one value row per "
            f"index, as LookupLinear/nn.Embedding(sparse=True) produce); got sparse_dim="
            f"{grad.sparse_dim()} for a gradient of shape {tuple(grad.shape)}. Convert it with "
            "grad.to_dense(), or use a layer with sparse=True."
        )
    if not grad.is_coalesced():
        rows = grad._indices()[0]
        if rows.numel() > 1 and not bool((rows[1:] > rows[:-1]).all()):
            grad = grad.coalesce()
    return grad._indices()[0], grad._values()


def zeros_like(p: torch.Tensor, fill: float = 0.0, *, name: str = "state") -> torch.Tensor:
    """A contiguous state tensor like ``p`` filled with ``fill``, placed as the table is
    (:mod:`lookuplinear.hugepages`: the update reads its rows scattered, as it reads ``p``'s;
    a table in a file, :class:`lookuplinear.TableStorage`: a file ``state-<name>.bin`` beside
    it)."""
    storage = storage_of(p)
    if storage is not None:
        return storage.state(name, tuple(p.shape), fill)
    return hugepages.empty(*p.shape, dtype=p.dtype, device=p.device).fill_(fill)


def _undecorated(method: Callable[..., Any]) -> Callable[..., Any]:
    """``torch.optim.Optimizer``'s own ``method`` without its ``torch._disable_dynamo`` wrapper,
    which imports ``torch._dynamo`` on its first call: 1-3 s of a command line's start, for an
    optimizer whose steps are not traced (its kernels are C or eager torch ops)."""
    return getattr(method, "__wrapped__", method)


def _bump_version(t: torch.Tensor) -> None:
    """Tell autograd ``t`` changed in place (the C kernels write through its pointer)."""
    torch.autograd.graph.increment_version(t)


class RowSparseOptimizer(torch.optim.Optimizer):
    """Base class: ``step`` sends each parameter to ``_sparse_update`` or ``_dense_update``.

    Subclasses define ``_init_state(p, state, group)``, ``_dense_update(p, grad, state,
    group)`` (the ``torch.optim`` formula), ``_kernel`` (the name of the C row kernel,
    ``lookuplinear._kernels.KERNELS``), ``_kernel_args(w, state, group, step)`` (its state
    tensor and scalars, or None where the state's layout is not the kernel's) and
    ``_rows_torch(w, rows, values, state, group, step)`` (the same update with torch ops).

    ``fused=True``: a ``LookupLinear(sparse=True)`` table is bound to the optimizer
    (:mod:`lookuplinear._fusion`) and updated at the end of ``backward``: no gradient is
    stored and ``step`` has nothing left to do for it. Same sums, same kernels: the same
    weights as ``fused=False``. A table used several times in one forward is updated once,
    with the summed gradient. Other parameters are stepped as usual.
    """

    _kernel = ""

    def __init__(self, params: Params, defaults: dict[str, Any], *, fused: bool = False) -> None:
        for key, value in defaults.items():
            if key in ("lr", "eps", "weight_decay", "momentum", "dampening", "lr_decay") and (
                isinstance(value, bool) or not isinstance(value, int | float) or value < 0
            ):
                raise InputValueError(
                    f"{type(self).__name__}: {key} must be a number >= 0, got {value!r}."
                )
        super().__init__(params, {**defaults, "fused": bool(fused)})

    def add_param_group(self, param_group: dict[str, Any]) -> None:
        """As ``torch.optim.Optimizer.add_param_group``; with ``fused=True`` the group's tables
        are bound to this optimizer, which updates them in their backward."""
        _undecorated(torch.optim.Optimizer.add_param_group)(self, param_group)
        self._bind(self.param_groups[-1])

    def zero_grad(self, set_to_none: bool = True) -> None:
        """As ``torch.optim.Optimizer.zero_grad``."""
        _undecorated(torch.optim.Optimizer.zero_grad)(self, set_to_none)

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """As ``torch.optim.Optimizer.load_state_dict``; large CPU state tensors are placed as
        the state this optimizer allocates (:func:`lookuplinear.hugepages.place`)."""
        super().load_state_dict(state_dict)
        for state in self.state.values():
            for key, value in state.items():
                if isinstance(value, torch.Tensor):
                    state[key] = hugepages.place(value)

    def __setstate__(self, state: dict[str, Any]) -> None:
        super().__setstate__(state)
        for group in self.param_groups:  # copied or unpickled: bind the tables again
            self._bind(group)

    def _bind(self, group: dict[str, Any]) -> None:
        if group.get("fused"):
            for p in group["params"]:
                if p.dim() >= 2:
                    bind(p, self)

    def _group(self, p: torch.Tensor) -> dict[str, Any] | None:
        return next((g for g in self.param_groups if any(q is p for q in g["params"])), None)

    def _state(self, p: torch.Tensor, group: dict[str, Any]) -> dict[str, Any]:
        state: dict[str, Any] = self.state[p]
        if not state:
            self._init_state(p, state, group)
        rows = p.__dict__.pop(RESET_ROWS, None)
        if rows is not None:  # rows re-initialised since the last update: fresh state there
            for value in state.values():
                if isinstance(value, torch.Tensor) and value.dim() and value.shape[0] == len(p):
                    value[rows.to(value.device)] = 0
        return state

    @torch.no_grad()
    def _apply_fused(self, updates: Updates) -> None:
        """Update each table of ``updates`` from the ``(lookup, grad_out)`` of every use of it
        in one backward.

        A table used once: the C kernel groups its rows and updates each as soon as its
        gradient is summed, all such tables of a dtype in one call. Used several times: each
        use's row-sparse gradient, summed as autograd would sum them, then the stored-gradient
        update. Either way the weights ``fused=False`` gives.
        """
        tables: list[tuple[torch.Tensor, dict[str, Any], FusedTable]] = []
        rest: list[tuple[torch.Tensor, list[tuple[Lookup, torch.Tensor]]]] = []
        for p, pending in updates:
            group = self._group(p)
            if group is None or not group.get("fused"):  # unbound since: store the gradient
                grad = self._summed_grad(p, pending)
                p.grad = grad if p.grad is None else p.grad + grad
                continue
            state = self._state(p, group)
            args = self._c_args(p, state, group, state["step"] + 1) if len(pending) == 1 else None
            if args is not None:
                tables.append((p, state, FusedTable(*pending[0], p, *args)))
            else:
                rest.append((p, pending))
        taken = fused_rows(self._kernel, [t for _, _, t in tables]) if tables else []
        for (p, state, t), done in zip(tables, taken, strict=True):
            if done:
                state["step"] += 1
                _bump_version(p)
            else:
                rest.append((p, [(t.lookup, t.grad_out)]))
        for p, pending in rest:
            group = self._group(p)
            assert group is not None
            rows, values = row_sparse_parts(self._summed_grad(p, pending))
            self._sparse_update(p, rows, values, self.state[p], group)

    @staticmethod
    def _summed_grad(p: torch.Tensor, pending: list[tuple[Lookup, torch.Tensor]]) -> torch.Tensor:
        total: torch.Tensor | None = None
        for lk, g in pending:
            rows, values = group_rows(lk, g, p.shape[0])
            grad = row_sparse_grad(rows, values.to(p.dtype), tuple(p.shape))
            total = grad if total is None else total + grad
        assert total is not None
        return total

    def _c_args(
        self, p: torch.Tensor, state: dict[str, Any], group: dict[str, Any], step: int
    ) -> tuple[torch.Tensor, tuple[float, ...]] | None:
        """The C kernel's ``(state, scalars)`` for ``p``, or None where it cannot run."""
        if not (use_c(p) and p.dim() == 2 and p.is_contiguous()):
            return None
        return self._kernel_args(p, state, group, step)

    @torch.no_grad()
    def step(self, closure: Callable[[], float] | None = None) -> float | None:  # type: ignore[override]
        """One update of every parameter that has a gradient; returns ``closure()``'s loss."""
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            for p in group["params"]:
                grad = p.grad
                if grad is None:
                    continue
                state = self._state(p, group)
                if grad.is_sparse:
                    rows, values = row_sparse_parts(grad)
                    self._sparse_update(p, rows, values, state, group)
                elif not self._dense_rows(p, grad, state, group):
                    self._dense_update(p, grad, state, group)
        return loss

    #: whether the row kernel on every row is the dense update (SGD's first momentum step is
    #: not: torch.optim.SGD starts its buffer at the gradient, undamped)
    _dense_by_rows = True

    def _rows_view(self, p: torch.Tensor) -> torch.Tensor | None:
        """``p`` as the kernel's ``(rows, dim)`` table for a dense update, or None."""
        return p if p.dim() == 2 else None

    def _dense_rows(
        self, p: torch.Tensor, grad: torch.Tensor, state: dict[str, Any], group: dict[str, Any]
    ) -> bool:
        """The dense update as the C row kernel on every row: one call where ``_dense_update``
        makes five to ten small torch ops (most of a small parameter's step). False (nothing
        done) where the kernel does not apply."""
        if not self._dense_by_rows or grad.layout != torch.strided:
            return False
        w = self._rows_view(p)
        if w is None:
            return False
        args = self._c_args(w, state, group, state["step"] + 1)
        if args is None:
            return False
        g = grad if grad.shape == w.shape else grad.reshape(w.shape)
        if not update_rows(self._kernel, w, args[0], _all_rows(w.shape[0]), g, args[1]):
            return False
        state["step"] += 1
        _bump_version(p)
        return True

    def _sparse_update(
        self,
        p: torch.Tensor,
        rows: torch.Tensor,
        values: torch.Tensor,
        state: dict[str, Any],
        group: dict[str, Any],
    ) -> None:
        state["step"] += 1
        if rows.numel() == 0:
            return
        if p.dim() < 2:
            raise InputValueError(
                f"{type(self).__name__}: a sparse gradient needs a parameter with rows (2-D or "
                f"more), got shape {tuple(p.shape)}. Give 1-D parameters dense gradients."
            )
        values = values.reshape(values.shape[0], -1).to(p.dtype)
        args = self._c_args(p, state, group, state["step"])
        if args is not None and update_rows(self._kernel, p, args[0], rows, values, args[1]):
            _bump_version(p)
        else:
            self._rows_torch(
                p.view(p.shape[0], -1), rows.long(), values, state, group, state["step"]
            )

    def _init_state(self, p: torch.Tensor, state: dict[str, Any], group: dict[str, Any]) -> None:
        raise NotImplementedError

    def _dense_update(
        self, p: torch.Tensor, grad: torch.Tensor, state: dict[str, Any], group: dict[str, Any]
    ) -> None:
        raise NotImplementedError

    def _kernel_args(
        self, w: torch.Tensor, state: dict[str, Any], group: dict[str, Any], step: int
    ) -> tuple[torch.Tensor, tuple[float, ...]] | None:
        raise NotImplementedError

    def _rows_torch(
        self,
        w: torch.Tensor,
        rows: torch.Tensor,
        values: torch.Tensor,
        state: dict[str, Any],
        group: dict[str, Any],
        step: int,
    ) -> None:
        raise NotImplementedError


@functools.lru_cache(maxsize=64)
def _all_rows(n: int) -> torch.Tensor:
    """``arange(n)`` (int64, CPU), made once per size: the rows of a dense update."""
    return torch.arange(n)
