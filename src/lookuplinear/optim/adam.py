"""``Adam`` and ``AdamW``, lazy on sparse gradients: only touched rows and their moments move."""

from __future__ import annotations

import math
from typing import Any, ClassVar

import torch
from torch.optim.adam import adam as adam_functional

from .. import hugepages
from ..ops._hooks import provides_state, state_tensor
from ._base import Params, RowSparseOptimizer, step_tensors, zeros_like

__all__ = ["Adam", "AdamW", "paired_moments"]


def paired_moments(p: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``(exp_avg, exp_avg_sq)``: zeros shaped like ``p``, views into one ``(rows, 2, n)``
    block (``n`` values per row of ``p``) so that a row's two moments are adjacent in memory.

    A row-wise step reads and writes a touched row's ``m`` and ``v`` together; adjacent, they
    are one contiguous read (512 B at 64 float32 per row) instead of two scattered ones
    (benchmarks/bench_optim.py times the row update). Each view holds the
    values ``torch.optim.Adam``'s state of that name would hold.

    Examples
    --------
    >>> m, v = paired_moments(torch.empty(3, 2))
    >>> m.shape, v.shape, v.data_ptr() - m.data_ptr() == 2 * m.element_size()
    (torch.Size([3, 2]), torch.Size([3, 2]), True)
    """
    rows = p.shape[0]
    n = p[0].numel() if rows else 0
    # a table in a file provides its moments in a file beside it
    block = state_tensor(p, "moments", (rows, 2, n))
    if block is None:
        block = hugepages.empty(rows, 2, n, dtype=p.dtype, device=p.device).zero_()
    return block[:, 0].view(p.shape), block[:, 1].view(p.shape)


def _is_paired(m: torch.Tensor, v: torch.Tensor) -> bool:
    """Whether ``m`` and ``v`` are the two halves of one block as :func:`paired_moments`
    lays them out (a state loaded from elsewhere may not be)."""
    if m.dim() < 2 or m.shape != v.shape or m.dtype != v.dtype or m.shape[0] == 0:
        return False
    n = m[0].numel()
    return (
        m.untyped_storage().data_ptr() == v.untyped_storage().data_ptr()
        and v.data_ptr() == m.data_ptr() + n * m.element_size()
        and m.stride(0) == v.stride(0) == 2 * n
        and m[0].is_contiguous()
        and v[0].is_contiguous()
    )


class Adam(RowSparseOptimizer):
    r"""Adam, lazy on row-sparse gradients: ``torch.optim.SparseAdam``'s update, one pass.

    For a sparse gradient (``LookupLinear(sparse=True)``), on each touched row ``i`` only:

    .. code-block:: text

        g = grad[i] + weight_decay * w[i]        (L2; AdamW decays w[i] instead)
        m[i] = beta1 * m[i] + (1 - beta1) * g
        v[i] = beta2 * v[i] + (1 - beta2) * g * g
        w[i] -= lr * sqrt(1 - beta2**t) / (1 - beta1**t) * m[i] / (sqrt(v[i]) + eps)

    with ``t`` the parameter's step count. That is ``torch.optim.SparseAdam`` exactly (which
    has no weight decay), computed in one pass over the touched rows. A dense gradient gets
    ``torch.optim.Adam``'s update (``torch.optim.adam.adam``, multi-tensor for a group's small
    parameters together: the values of ``torch.optim.Adam``'s default), so one optimizer
    serves the table and the dense layers.

    Lazy vs dense: dense ``torch.optim.Adam`` keeps moving a row the batch did not touch (its
    momentum ``m`` decays towards 0 but is not 0, so ``w`` keeps changing), which costs a pass
    over the whole table every step. Here untouched rows and their moments stay as they are.
    TensorFlow's ``LazyAdam`` makes the same choice with the same formula.

    The constructor takes ``torch.optim.Adam``'s arguments (``AdamW``: ``torch.optim.AdamW``'s):
    ``amsgrad``, ``maximize``, ``capturable`` and ``differentiable`` at their defaults,
    ``decoupled_weight_decay`` at the class's (another value is an
    :class:`~lookuplinear.InputValueError`), ``foreach`` at any value (the update is
    multi-tensor or not per parameter).

    State per parameter: ``exp_avg`` and ``exp_avg_sq`` of the parameter's shape (two values
    per element), ``step``. For a CPU table updated row by row the two are views into one
    block, a row's ``m`` next to its ``v`` (:func:`paired_moments`); a state loaded with them
    apart is paired again on the first row-wise step (one copy, same values).

    Examples
    --------
    >>> from lookuplinear import LookupLinear
    >>> model = nn.Sequential(LookupLinear(1_000, 8, sparse=True), nn.ReLU(), nn.Linear(8, 2))
    >>> opt = Adam(model.parameters(), lr=1e-3)
    >>> model(torch.tensor([3, 7])).sum().backward()
    >>> opt.step()
    >>> opt.state[model[0].weight]["exp_avg"].count_nonzero(1).nonzero().flatten()
    tensor([3, 7])
    """

    _decoupled = False
    _foreach_takes_tensor_lr = False
    _fixed: ClassVar[dict[str, Any]] = {"maximize": False, "decoupled_weight_decay": False}

    def __init__(
        self,
        params: Params,
        lr: float | torch.Tensor = 1e-3,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
        weight_decay: float = 0.0,
        amsgrad: bool = False,
        *,
        foreach: bool | None = None,
        maximize: bool = False,
        capturable: bool = False,
        differentiable: bool = False,
        fused: bool = False,
        decoupled_weight_decay: bool | None = None,
    ) -> None:
        defaults = {"lr": lr, "betas": tuple(betas) if isinstance(betas, list) else betas,
                    "eps": eps, "weight_decay": weight_decay,
                    "decoupled_weight_decay": self._decoupled}
        self._check_torch_options(
            defaults, amsgrad=amsgrad, foreach=foreach, maximize=maximize,
            capturable=capturable, differentiable=differentiable,
            decoupled_weight_decay=(self._decoupled if decoupled_weight_decay is None
                                    else decoupled_weight_decay))
        super().__init__(params, defaults, fused=fused)

    def _init_state(self, p: torch.Tensor, state: dict[str, Any], group: dict[str, Any]) -> None:
        state["step"] = 0
        if _row_wise(p):
            state["exp_avg"], state["exp_avg_sq"] = paired_moments(p)
        else:
            state["exp_avg"] = zeros_like(p, name="exp_avg")
            state["exp_avg_sq"] = zeros_like(p, name="exp_avg_sq")

    def _state_shapes(self, p: torch.Tensor) -> dict[str, tuple[int, ...]]:
        return {"exp_avg": tuple(p.shape), "exp_avg_sq": tuple(p.shape)}

    def _loaded_state(self, p: torch.Tensor, state: dict[str, Any]) -> None:
        """A table in a file's loaded moments go straight into its paired moments file
        (``state-moments.bin``, where its first row-wise step would move them), not into a
        file per moment left behind on the disk."""
        m, v = state.get("exp_avg"), state.get("exp_avg_sq")
        if not (_row_wise(p) and provides_state(p) and isinstance(m, torch.Tensor)
                and isinstance(v, torch.Tensor) and m.shape == v.shape == p.shape):
            super()._loaded_state(p, state)
            return
        del state["exp_avg"], state["exp_avg_sq"]
        super()._loaded_state(p, state)
        state["exp_avg"], state["exp_avg_sq"] = paired_moments(p)
        state["exp_avg"].copy_(m.to_dense() if m.layout != torch.strided else m)
        state["exp_avg_sq"].copy_(v.to_dense() if v.layout != torch.strided else v)

    def _prepare_state(self, p: torch.Tensor, state: dict[str, Any]) -> None:
        if _row_wise(p):
            self._pair(p, state, True)

    @staticmethod
    def _pair(p: torch.Tensor, state: dict[str, Any], paired: bool) -> None:
        """Lay ``p``'s moments out paired (:func:`paired_moments`) or apart (two tensors, as
        ``torch.optim.Adam`` keeps them); one copy where they are not so already."""
        m, v = state["exp_avg"], state["exp_avg_sq"]
        if _is_paired(m, v) == paired:
            return
        if paired:
            state["exp_avg"], state["exp_avg_sq"] = paired_moments(p)
        else:
            state["exp_avg"] = zeros_like(p, name="exp_avg")
            state["exp_avg_sq"] = zeros_like(p, name="exp_avg_sq")
        state["exp_avg"].copy_(m)
        state["exp_avg_sq"].copy_(v)

    def _layout(self, p: torch.Tensor) -> dict[str, Any]:
        state = self.state.get(p, {})
        if "exp_avg" not in state:
            return {}
        return {"paired": _is_paired(state["exp_avg"], state["exp_avg_sq"])}

    def _lay_out(self, p: torch.Tensor, state: dict[str, Any],
                 layout: dict[str, Any] | None) -> None:
        if "exp_avg" in state:
            self._pair(p, state, bool((layout or {}).get("paired", False)))

    def _dense_step(self, params: list[torch.Tensor], grads: list[torch.Tensor],
                    states: list[dict[str, Any]], group: dict[str, Any], *,
                    foreach: bool) -> None:
        beta1, beta2 = group["betas"]
        adam_functional(
            params, grads, [s["exp_avg"] for s in states], [s["exp_avg_sq"] for s in states], [],
            step_tensors(states), foreach=foreach, has_complex=any(map(torch.is_complex, params)),
            decoupled_weight_decay=self._decoupled, amsgrad=False, beta1=beta1, beta2=beta2,
            lr=group["lr"], weight_decay=group["weight_decay"], eps=group["eps"],
            maximize=False)
        for s in states:
            s["step"] += 1

    _kernel = "adam"
    _zeros_stay = False

    def _scalars(self, group: dict[str, Any], at: list[tuple[int, int]]
                 ) -> list[dict[str, float]]:
        """SparseAdam's step size; the L2 factor (Adam) or the touched rows' decay (AdamW)."""
        lr, (beta1, beta2), wd = float(group["lr"]), group["betas"], group["weight_decay"]
        l2, decay = (0.0, 1 - lr * wd) if self._decoupled else (wd, 1.0)
        by_step: dict[int, dict[str, float]] = {}  # the step size depends on the step alone
        out: list[dict[str, float]] = []
        for _, step in at:
            named = by_step.get(step)
            if named is None:
                # in lr's dtype where it is a tensor, as torch.optim.SparseAdam rounds it
                step_size = float(group["lr"] * math.sqrt(1 - beta2**step) / (1 - beta1**step))
                named = by_step[step] = {
                    "beta1": beta1, "one_minus_beta1": 1 - beta1, "beta2": beta2,
                    "one_minus_beta2": 1 - beta2, "eps": group["eps"], "step_size": step_size,
                    "l2": l2, "decay": decay}
            out.append(named)
        return out

    def _kernel_states(self, tables: list[tuple[torch.Tensor, dict[str, Any]]]
                       ) -> list[torch.Tensor | None]:
        out: list[torch.Tensor | None] = []
        for w, state in tables:
            self._prepare_state(w, state)
            m = state["exp_avg"]
            if not _is_paired(m, state["exp_avg_sq"]):
                out.append(None)  # the kernel reads a row's m and v as one (2, n) block
                continue
            n = m.shape[1] if m.dim() == 2 else m[0].numel()
            # the (rows, 2, n) block as the kernel reads it: a row's m, then its v
            out.append(m.as_strided((m.shape[0], 2 * n), (2 * n, 1)))
        return out

    def _state_rows(self, w: torch.Tensor, state: dict[str, Any]
                    ) -> tuple[torch.Tensor | None, ...]:
        return state["exp_avg"].view(w.shape), state["exp_avg_sq"].view(w.shape)


class AdamW(Adam):
    r"""AdamW (decoupled weight decay), lazy on row-sparse gradients.

    As :class:`Adam`, with ``w[i] *= 1 - lr * weight_decay`` on each *touched* row before the
    update instead of the L2 term (``torch.optim.AdamW`` for dense gradients). Rows a batch
    does not touch are not decayed: dense AdamW shrinks every row every step, lazy AdamW only
    the rows that are trained, which is what keeps a step's cost to the batch.

    Examples
    --------
    >>> from lookuplinear import LookupLinear
    >>> layer = LookupLinear(1_000, 4, bias=False, sparse=True)
    >>> opt = AdamW(layer.parameters(), lr=1e-2, weight_decay=0.1)
    >>> w0 = layer.weight.detach().clone()
    >>> layer(torch.tensor([5])).sum().backward()
    >>> opt.step()
    >>> (layer.weight != w0).any(1).nonzero().flatten()
    tensor([5])
    """

    _decoupled = True
    _fixed: ClassVar[dict[str, Any]] = {"maximize": False, "decoupled_weight_decay": True}

    def __init__(
        self,
        params: Params,
        lr: float | torch.Tensor = 1e-3,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
        weight_decay: float = 1e-2,
        amsgrad: bool = False,
        *,
        maximize: bool = False,
        foreach: bool | None = None,
        capturable: bool = False,
        differentiable: bool = False,
        fused: bool = False,
    ) -> None:
        super().__init__(params, lr=lr, betas=betas, eps=eps, weight_decay=weight_decay,
                         amsgrad=amsgrad, foreach=foreach, maximize=maximize,
                         capturable=capturable, differentiable=differentiable, fused=fused)


def _row_wise(p: torch.Tensor) -> bool:
    """Whether ``p`` is a CPU table updated row by row (its state then paired)."""
    return p.device.type == "cpu" and p.dim() >= 2 and (p.grad is None or p.grad.is_sparse)
