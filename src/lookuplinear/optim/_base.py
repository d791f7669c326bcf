"""The shared step of the row-wise optimizers: sparse gradients update only their rows.

A parameter whose ``.grad`` is a sparse COO tensor (``LookupLinear(sparse=True)``,
``nn.Embedding(sparse=True)``) is updated row by row: only the rows the gradient names, and
only those rows of the optimizer state, are read and written, in one pass (numba on CPU, torch
ops elsewhere). Any other parameter gets the dense update of the ``torch.optim`` optimizer of the
same name, so one optimizer serves a whole model.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import torch

from .. import hugepages, rowgrad
from ..errors import InputValueError

__all__ = ["RowSparseOptimizer", "row_sparse_parts", "scalars", "zeros_like"]

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


def zeros_like(p: torch.Tensor, fill: float = 0.0) -> torch.Tensor:
    """A contiguous state tensor like ``p`` filled with ``fill``, on huge pages when large
    (:mod:`lookuplinear.hugepages`: the update reads its rows scattered, as it reads ``p``'s)."""
    return hugepages.empty(*p.shape, dtype=p.dtype, device=p.device).fill_(fill)


def scalars(w: Any, *values: float) -> tuple[Any, ...]:
    """``values`` as scalars of the numpy array ``w``'s dtype (float32 math for float32)."""
    cast = w.dtype.type
    return tuple(cast(v) for v in values)


def _bump_version(t: torch.Tensor) -> None:
    """Tell autograd ``t`` changed in place (numba writes through a numpy view)."""
    increment = getattr(torch.autograd.graph, "increment_version", None)
    if increment is not None:
        increment(t)


class RowSparseOptimizer(torch.optim.Optimizer):
    """Base class: ``step`` sends each parameter to ``_sparse_update`` or ``_dense_update``.

    Subclasses define ``_init_state(p, state, group)``, ``_dense_update(p, grad, state,
    group)`` (the ``torch.optim`` formula), ``_row_kernel(w, state, group, step)`` (the numba
    row kernel and its arguments after ``(weight, rows, values)``, on numpy views) and
    ``_rows_torch(w, rows, values, state, group, step)`` (the same with torch ops on gathered
    rows, for other devices and dtypes).

    ``fused=True``: a ``LookupLinear(sparse=True)`` table updates itself inside ``backward``
    (:meth:`fused_backward`): its rows are summed chunk by chunk and updated at once, no
    gradient is stored and ``step`` has nothing left to do for it. Same sums, same kernels:
    the same weights as ``fused=False``. Other parameters are stepped as usual.
    """

    def __init__(self, params: Params, defaults: dict[str, Any], *, fused: bool = False) -> None:
        for key, value in defaults.items():
            if key in ("lr", "eps", "weight_decay", "momentum", "dampening", "lr_decay") and (
                isinstance(value, bool) or not isinstance(value, int | float) or value < 0
            ):
                raise InputValueError(
                    f"{type(self).__name__}: {key} must be a number >= 0, got {value!r}."
                )
        self._views: dict[int, tuple[Any, ...]] = {}
        super().__init__(params, {**defaults, "fused": bool(fused)})

    def add_param_group(self, param_group: dict[str, Any]) -> None:
        """As ``torch.optim.Optimizer.add_param_group``; with ``fused=True`` the group's tables
        learn that this optimizer updates them in their backward."""
        super().add_param_group(param_group)
        self._register_fused(self.param_groups[-1])

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """As ``torch.optim.Optimizer.load_state_dict``; the numpy views kept from the old
        state (:meth:`_numpy_views`) are dropped with it."""
        self._views.clear()
        super().load_state_dict(state_dict)

    def __setstate__(self, state: dict[str, Any]) -> None:
        super().__setstate__(state)
        self._views = {}
        for group in self.param_groups:  # unpickled: tell the tables again
            self._register_fused(group)

    def _register_fused(self, group: dict[str, Any]) -> None:
        if group.get("fused"):
            for p in group["params"]:
                if p.dim() >= 2:
                    rowgrad.register_fused(p, self)

    @torch.no_grad()
    def fused_backward(
        self,
        p: torch.Tensor,
        indices: torch.Tensor,
        offsets: torch.Tensor | None,
        weights: torch.Tensor | None,
        grad_out: torch.Tensor,
        padding_idx: int | None,
    ) -> bool:
        """Apply this step's update to ``p`` straight from a bag lookup's ``grad_out``.

        Called by ``LookupLinear``'s backward when ``fused=True``; returns False (and does
        nothing) where the fused path does not apply (not a CPU float32/float64 table, or the
        parameter is not in this optimizer), and the gradient is then stored as usual.
        """
        from .. import _native, _numba

        group = next((g for g in self.param_groups if any(q is p for q in g["params"])), None)
        if group is None or not group.get("fused"):
            return False
        state = self.state[p]
        if not state:
            self._init_state(p, state, group)
        views = self._numpy_views(p, state) if rowgrad.USE_NUMBA else None
        if views is None or grad_out.dtype != p.dtype:
            return False
        state["step"] += 1
        wn, kernel, rest = self._numba_kernel(views, state, group)
        args = rowgrad.numpy_inputs(indices, offsets, weights, grad_out, padding_idx)
        if _native.fused_update(*args, p.shape[0], kernel, wn, *rest) is None:
            _numba.fused_rows(*args, p.shape[0], kernel, wn, *rest)
        _bump_version(p)
        return True

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
                state = self.state[p]
                if not state:
                    self._init_state(p, state, group)
                if grad.is_sparse:
                    rows, values = row_sparse_parts(grad)
                    self._sparse_update(p, rows, values, state, group)
                else:
                    self._dense_update(p, grad, state, group)
        return loss

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
        views = self._numpy_views(p, state) if rowgrad.USE_NUMBA else None
        if views is not None:
            from .. import _native, _numba

            wn, kernel, rest = self._numba_kernel(views, state, group)
            rn, vn = rows.long().numpy(), values.contiguous().numpy()
            if not _native.update(kernel, wn, rn, vn, *rest):
                _numba.over_rows(kernel, wn, rn, vn, *rest)
            _bump_version(p)
        else:
            self._rows_torch(
                p.view(p.shape[0], -1), rows.long(), values, state, group, state["step"]
            )

    def _numpy_views(
        self, p: torch.Tensor, state: dict[str, Any]
    ) -> tuple[Any, dict[str, Any]] | None:
        """``(p as rows, {state name: array})``, numpy views (no copies) the numba kernels
        update in place, or None where they cannot (:func:`_numba_ok`).

        Built once per parameter and kept while ``p``'s storage and its state tensors stay
        the same (a loaded state or ``p.data = ...`` builds them again): the checks and the
        conversions cost 10-40 microseconds a step otherwise.
        """
        tensors = [t for t in state.values() if isinstance(t, torch.Tensor)]
        hit = self._views.get(id(p))
        if (
            hit is not None
            and hit[0] is p
            and hit[1] == p.data_ptr()
            and len(hit[2]) == len(tensors)
            and all(a is b for a, b in zip(hit[2], tensors, strict=True))
        ):
            return hit[3]
        self._prepare_state(p, state)
        tensors = [t for t in state.values() if isinstance(t, torch.Tensor)]
        w = p.view(p.shape[0], -1)
        views = None
        if _numba_ok(w, state):
            arrays = {k: t.detach().numpy() for k, t in state.items()
                      if isinstance(t, torch.Tensor)}
            views = (w.detach().numpy(), arrays)
        self._views[id(p)] = (p, p.data_ptr(), tensors, views)
        return views

    def _numba_kernel(
        self, views: tuple[Any, dict[str, Any]], state: dict[str, Any], group: dict[str, Any]
    ) -> tuple[Any, Any, tuple[Any, ...]]:
        """``(w as numpy, row kernel, its arguments after (weight, rows, values))`` for this
        step, on the numpy views of :meth:`_numpy_views`."""
        wn, arrays = views
        kernel, rest = self._row_kernel(wn, arrays, group, state["step"])
        return wn, kernel, rest

    def _init_state(self, p: torch.Tensor, state: dict[str, Any], group: dict[str, Any]) -> None:
        raise NotImplementedError

    def _prepare_state(self, p: torch.Tensor, state: dict[str, Any]) -> None:
        """Bring ``p``'s state into the layout the row-wise update expects (a no-op here)."""

    def _dense_update(
        self, p: torch.Tensor, grad: torch.Tensor, state: dict[str, Any], group: dict[str, Any]
    ) -> None:
        raise NotImplementedError

    def _row_kernel(
        self, w: Any, state: dict[str, Any], group: dict[str, Any], step: int
    ) -> tuple[Any, tuple[Any, ...]]:
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


def _numba_ok(w: torch.Tensor, state: dict[str, Any]) -> bool:
    """Whether the numba kernels can update ``w`` and its state in place (CPU, float32/64,
    ``w`` contiguous, each state row contiguous: ``Adam``'s two moments are views into one
    block, a row of each next to each other)."""
    tensors = [w, *(t for t in state.values() if isinstance(t, torch.Tensor))]
    return (
        w.is_contiguous()
        and all(
            t.device.type == "cpu"
            and t.dtype in (torch.float32, torch.float64)
            and (t.is_contiguous() or (t.dim() >= 2 and t.shape[0] > 0 and t[0].is_contiguous()))
            for t in tensors
        )
    )
