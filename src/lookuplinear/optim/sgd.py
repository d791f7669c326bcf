"""``SGD`` with lazy momentum: sparse gradients move only the rows they name."""

from __future__ import annotations

import functools
from typing import Any

import torch
from torch.optim.sgd import sgd as sgd_functional

from ..errors import InputValueError
from ._base import Params, RowSparseOptimizer, zeros_like

__all__ = ["SGD"]


@functools.cache
def _no_state(dtype: torch.dtype) -> torch.Tensor:
    """The state of the row kernel without momentum, which it does not read: empty."""
    return torch.empty(0, dtype=dtype)


class SGD(RowSparseOptimizer):
    r"""Stochastic gradient descent (optionally with momentum), row-sparse where gradients are.

    Dense equivalent: ``torch.optim.SGD``. A group's dense gradients get its update exactly
    (``torch.optim.sgd.sgd``, multi-tensor for small parameters together: the values of
    ``torch.optim.SGD``'s default); for
    a sparse gradient (``LookupLinear(sparse=True)``) only the touched rows change:

    .. code-block:: text

        g = grad[i] + weight_decay * w[i]                   for each touched row i
        b[i] = momentum * b[i] + (1 - dampening) * g        (momentum > 0)
        w[i] -= lr * (g + momentum * b[i] if nesterov else b[i])

    Without momentum and weight decay this gives the same weights as ``torch.optim.SGD`` on the
    dense gradient (untouched rows have a zero gradient there). With momentum it is *lazy*: a
    row's buffer decays only when the row is touched, while dense momentum keeps moving every
    row. Buffers start at zero, so with ``dampening > 0`` a row's first step is
    ``(1 - dampening) * g`` where ``torch.optim.SGD`` takes ``g``.

    Parameters
    ----------
    params : iterable of Tensor or dict
        Parameters or parameter groups, as for any ``torch.optim.Optimizer``.
    lr : float or one-element Tensor, default 1e-3
    momentum, dampening, weight_decay : float, default 0
    nesterov : bool, default False
    maximize, foreach, differentiable
        ``torch.optim.SGD``'s, taken at its defaults (``foreach`` at any value: the update is
        multi-tensor or not per parameter); ``maximize=True`` or ``differentiable=True`` is an
        :class:`~lookuplinear.InputValueError`.

    State per parameter: ``momentum_buffer`` of the parameter's shape when ``momentum > 0``.

    Examples
    --------
    >>> from lookuplinear import LookupLinear
    >>> layer = LookupLinear(1_000, 4, sparse=True)
    >>> opt = SGD(layer.parameters(), lr=0.1)
    >>> before = layer.weight.detach().clone()
    >>> layer(torch.tensor([3, 3, 7])).sum().backward()
    >>> opt.step()
    >>> changed = (layer.weight != before).any(1).nonzero().flatten()
    >>> changed
    tensor([3, 7])
    """

    def __init__(
        self,
        params: Params,
        lr: float | torch.Tensor = 1e-3,
        momentum: float = 0.0,
        dampening: float = 0.0,
        weight_decay: float = 0.0,
        nesterov: bool = False,
        *,
        maximize: bool = False,
        foreach: bool | None = None,
        differentiable: bool = False,
        fused: bool = False,
    ) -> None:
        if nesterov and (momentum <= 0 or dampening != 0):
            raise InputValueError(
                f"SGD: nesterov needs momentum > 0 and dampening = 0, got momentum={momentum}, "
                f"dampening={dampening}. Set momentum (e.g. 0.9), or nesterov=False."
            )
        defaults = {"lr": lr, "momentum": momentum, "dampening": dampening,
                    "weight_decay": weight_decay, "nesterov": nesterov}
        self._check_torch_options(defaults, maximize=maximize, foreach=foreach,
                                  differentiable=differentiable)
        super().__init__(params, defaults, fused=fused)

    def _init_state(self, p: torch.Tensor, state: dict[str, Any], group: dict[str, Any]) -> None:
        state["step"] = 0
        self._complete_state(p, state, group)

    def _complete_state(self, p: torch.Tensor, state: dict[str, Any],
                        group: dict[str, Any]) -> None:
        """A momentum buffer, zero, where momentum is on (also where it was raised from 0
        since the state was made: ``torch.optim.SGD`` starts one then too)."""
        if group["momentum"] != 0 and "momentum_buffer" not in state:
            state["momentum_buffer"] = zeros_like(p, name="momentum_buffer")

    def _state_shapes(self, p: torch.Tensor) -> dict[str, tuple[int, ...]]:
        return {"momentum_buffer": tuple(p.shape)}

    def _required_state(self, p: torch.Tensor, group: dict[str, Any]) -> list[str]:
        return ["momentum_buffer"] if group["momentum"] != 0 else []

    def _dense_step(self, params: list[torch.Tensor], grads: list[torch.Tensor],
                    states: list[dict[str, Any]], group: dict[str, Any], *,
                    foreach: bool) -> None:
        momentum = group["momentum"]
        # torch.optim.SGD starts a buffer at the first gradient (None: the functional clones
        # it); a buffer a sparse step has used decays from there
        bufs: list[torch.Tensor | None] = [
            s.get("momentum_buffer") if momentum != 0 and s["step"] else None for s in states]
        sgd_functional(params, grads, bufs, foreach=foreach,
                            weight_decay=group["weight_decay"], momentum=momentum,
                            lr=group["lr"], dampening=group["dampening"],
                            nesterov=group["nesterov"], maximize=False)
        for s, buf in zip(states, bufs, strict=True):
            s["step"] += 1
            if momentum != 0 and buf is not s.get("momentum_buffer"):
                if "momentum_buffer" in s:  # allocated where the table's state lives
                    s["momentum_buffer"].copy_(buf)
                else:
                    s["momentum_buffer"] = buf

    _kernel = "sgd"

    def _scalars(self, group: dict[str, Any], at: list[tuple[int, int]]
                 ) -> list[dict[str, float]]:
        named = {"lr": float(group["lr"]), "weight_decay": group["weight_decay"],
                 "momentum": group["momentum"], "one_minus_dampening": 1 - group["dampening"],
                 "nesterov": float(group["nesterov"])}
        return [named] * len(at)  # the same for every table and step

    def _kernel_states(self, tables: list[tuple[torch.Tensor, dict[str, Any]]]
                       ) -> list[torch.Tensor | None]:
        out: list[torch.Tensor | None] = []
        for w, state in tables:
            buf = state.get("momentum_buffer")
            if buf is None:
                out.append(_no_state(w.dtype))
            else:
                out.append(buf if buf.is_contiguous() and buf.shape == w.shape else None)
        return out

    def _state_rows(self, w: torch.Tensor, state: dict[str, Any]
                    ) -> tuple[torch.Tensor | None, ...]:
        buf = state.get("momentum_buffer")
        return (None if buf is None else buf.view(w.shape),)
