"""``Adagrad`` (per element) and ``RowWiseAdagrad`` (one state value per row, FBGEMM's)."""

from __future__ import annotations

import functools
import warnings
from typing import Any

import torch
from torch.optim.adagrad import adagrad as adagrad_functional

from ..ops import update_rows
from ..ops._hooks import state_tensor
from ._base import LOW_PRECISION, Params, RowSparseOptimizer, step_tensors, zeros_like

__all__ = ["Adagrad", "RowWiseAdagrad"]


class Adagrad(RowSparseOptimizer):
    r"""Adagrad, row-sparse where gradients are: ``torch.optim.Adagrad``'s formula.

    .. code-block:: text

        clr = lr / (1 + (step - 1) * lr_decay)
        g = grad[i] + weight_decay * w[i]                   for each touched row i
        s[i] += g * g
        w[i] -= clr * g / (sqrt(s[i]) + eps)

    With sparse gradients it gives what ``torch.optim.Adagrad`` gives on the same sparse
    gradients (which it also updates row by row), in one pass over the touched rows instead of
    a coalesce, a ``sparse_mask`` and three sparse additions; a dense gradient gets
    ``torch.optim.Adagrad``'s dense update (``torch.optim.adagrad.adagrad``, multi-tensor for
    a group's small parameters together: the values of ``torch.optim.Adagrad``'s default).
    ``weight_decay`` on sparse gradients (which ``torch.optim.Adagrad`` refuses) decays the
    touched rows only.

    The constructor takes ``torch.optim.Adagrad``'s arguments: ``maximize`` and
    ``differentiable`` at their defaults (another value is an
    :class:`~lookuplinear.InputValueError`), ``foreach`` at any value (the update is
    multi-tensor or not per parameter).

    State per parameter: ``sum`` of the parameter's shape (one value per element), ``step``.
    Every ``sum`` starts at the constructor's ``initial_accumulator_value``, as in
    ``torch.optim.Adagrad``, which reads no group's own value (a group that sets another one
    warns).

    Examples
    --------
    >>> from lookuplinear import LookupLinear
    >>> layer = LookupLinear(1_000, 4, sparse=True)
    >>> opt = Adagrad(layer.parameters(), lr=0.1)
    >>> layer(torch.tensor([3, 7])).sum().backward()
    >>> opt.step()
    >>> opt.state[layer.weight]["sum"].count_nonzero().item()   # 2 rows x 4
    8
    """

    def __init__(
        self,
        params: Params,
        lr: float | torch.Tensor = 1e-2,
        lr_decay: float = 0.0,
        weight_decay: float = 0.0,
        initial_accumulator_value: float = 0.0,
        eps: float = 1e-10,
        foreach: bool | None = None,
        *,
        maximize: bool = False,
        differentiable: bool = False,
        fused: bool = False,
    ) -> None:
        defaults = {"lr": lr, "lr_decay": lr_decay, "weight_decay": weight_decay,
                    "initial_accumulator_value": initial_accumulator_value, "eps": eps}
        self._check_torch_options(defaults, maximize=maximize, foreach=foreach,
                                  differentiable=differentiable)
        self._building = True  # its groups warn once, together, below
        try:
            super().__init__(params, defaults, fused=fused)
        finally:
            del self._building
        _warn_group_accumulators(self.param_groups, initial_accumulator_value)

    def add_param_group(self, param_group: dict[str, Any]) -> None:
        """As ``torch.optim.Adagrad.add_param_group``: the group's sums start at the
        constructor's ``initial_accumulator_value`` (a group's own value warns, unused)."""
        super().add_param_group(param_group)
        if not getattr(self, "_building", False):
            _warn_group_accumulators(self.param_groups[-1:],
                                     self.defaults["initial_accumulator_value"])

    def share_memory(self) -> None:
        """Move each parameter's ``sum`` into shared memory (``Tensor.share_memory_``), as
        ``torch.optim.Adagrad.share_memory`` does, for training from several processes
        (Hogwild): the state is made first where no step has made it yet.

        Examples
        --------
        >>> p = torch.nn.Parameter(torch.zeros(3))
        >>> opt = Adagrad([p], lr=0.1)
        >>> opt.share_memory()
        >>> opt.state[p]["sum"].is_shared()
        True
        """
        for group in self.param_groups:
            for p in group["params"]:
                state = self.state[p] or self._new_state(p, group)
                state["sum"].share_memory_()

    def _init_state(self, p: torch.Tensor, state: dict[str, Any], group: dict[str, Any]) -> None:
        state["step"] = 0
        state["sum"] = zeros_like(p, self.defaults["initial_accumulator_value"], name="sum")

    def _state_shapes(self, p: torch.Tensor) -> dict[str, tuple[int, ...]]:
        return {"sum": tuple(p.shape)}

    def _state_fill(self, key: str, group: dict[str, Any]) -> float:
        return float(self.defaults["initial_accumulator_value"]) if key == "sum" else 0.0

    def _starts(self) -> dict[str, Any]:
        return {"initial_accumulator_value": float(self.defaults["initial_accumulator_value"])}

    @staticmethod
    def _clr(group: dict[str, Any], step: int) -> float:
        return float(group["lr"] / (1 + (step - 1) * group["lr_decay"]))

    def _dense_step(self, params: list[torch.Tensor], grads: list[torch.Tensor],
                    states: list[dict[str, Any]], group: dict[str, Any], *,
                    foreach: bool) -> None:
        adagrad_functional(
            params, grads, [s["sum"] for s in states], step_tensors(states), foreach=foreach,
            has_complex=any(map(torch.is_complex, params)), lr=group["lr"],
            weight_decay=group["weight_decay"], lr_decay=group["lr_decay"], eps=group["eps"],
            maximize=False)
        for s in states:
            s["step"] += 1

    _kernel = "adagrad"

    def _kernel_states(self, tables: list[tuple[torch.Tensor, dict[str, Any]]]
                       ) -> list[torch.Tensor | None]:
        out: list[torch.Tensor | None] = []
        for w, state in tables:
            s = state["sum"]
            out.append(s if s.is_contiguous() and s.shape == w.shape else None)
        return out

    def _scalars(self, group: dict[str, Any], at: list[tuple[int, int]]
                 ) -> list[dict[str, float]]:
        eps, weight_decay = group["eps"], group["weight_decay"]
        by_step: dict[int, dict[str, float]] = {}  # clr depends on the step alone
        out: list[dict[str, float]] = []
        for _, step in at:
            named = by_step.get(step)
            if named is None:
                named = by_step[step] = {"clr": self._clr(group, step), "eps": eps,
                                         "weight_decay": weight_decay}
            out.append(named)
        return out

    def _state_rows(self, w: torch.Tensor, state: dict[str, Any]
                    ) -> tuple[torch.Tensor | None, ...]:
        return (state["sum"].view(w.shape),)


class RowWiseAdagrad(RowSparseOptimizer):
    r"""Row-wise Adagrad: one accumulator per row, FBGEMM's ``EXACT_ROWWISE_ADAGRAD``.

    .. code-block:: text

        g = grad[i] + weight_decay * w[i]                   for each touched row i
        s[i] += mean(g * g)                                 (mean over the row's elements)
        w[i] -= lr / (sqrt(s[i]) + eps) * g

    The state is one float per row (``in_features`` values for a ``LookupLinear`` table, where
    ``Adagrad`` keeps ``in_features x out_features``), which is why recommender systems train
    their tables with it. A dense gradient is the same formula on every row (the C row kernel
    on the CPU, ``torch._foreach_*`` ops on a group's dense parameters together elsewhere); a
    1-D parameter (a bias) is one row.

    State per parameter: ``sum`` of shape ``(rows,)``, ``step``. The ``sum`` of a float16 or
    bfloat16 parameter is float32, as FBGEMM keeps it: in the parameter's dtype it would stop
    growing (at 2048 in float16, 256 in bfloat16: the rate would stop decaying) or overflow to
    inf (the row would stop moving). Such a parameter's update is computed in float32 and each
    row rounded to its dtype once, as FBGEMM's; its gradient is the one autograd gives, in the
    parameter's dtype. Other dtypes keep ``sum`` in the parameter's dtype.

    Examples
    --------
    >>> from lookuplinear import LookupLinear
    >>> layer = LookupLinear(1_000, 4, bias=False, sparse=True)
    >>> opt = RowWiseAdagrad(layer.parameters(), lr=0.1)
    >>> layer(torch.tensor([3, 7])).sum().backward()
    >>> opt.step()
    >>> opt.state[layer.weight]["sum"].shape, opt.state[layer.weight]["sum"][3].item()
    (torch.Size([1000]), 1.0)
    """

    def __init__(
        self,
        params: Params,
        lr: float | torch.Tensor = 1e-2,
        eps: float = 1e-8,
        weight_decay: float = 0.0,
        *,
        fused: bool = False,
    ) -> None:
        super().__init__(params, {"lr": lr, "eps": eps, "weight_decay": weight_decay},
                         fused=fused)

    def _init_state(self, p: torch.Tensor, state: dict[str, Any], group: dict[str, Any]) -> None:
        state["step"] = 0
        n_rows = p.shape[0] if p.dim() > 1 else 1
        dtype = self._state_dtype(p, "sum")
        # a table in a file: a file beside it
        sums = state_tensor(p, self._state_file("sum"), (n_rows,), dtype=dtype)
        if sums is None:
            sums = torch.zeros(n_rows, dtype=dtype, device=p.device)
        state["sum"] = sums

    def _sparse_update(self, p: torch.Tensor, rows: torch.Tensor, values: torch.Tensor,
                       state: dict[str, Any], group: dict[str, Any], *,
                       unique: bool = False) -> None:
        """As the base class's; a parameter of fewer than 2 dimensions is one row, which a
        sparse gradient with any entry touches (its entries placed in a zero row)."""
        if p.dim() < 2 and rows.numel():
            values = values.new_zeros(p.numel()).index_add_(0, rows, values.reshape(-1))
            rows = rows.new_zeros(1)
            values = values.view(1, -1)
        super()._sparse_update(p, rows, values, state, group, unique=unique)

    def _state_file(self, key: str) -> str:
        """``rowwise_sum`` for ``sum``: not Adagrad's ``sum`` file, whose shape is the
        table's."""
        return "rowwise_sum" if key == "sum" else key

    def _state_dtype(self, p: torch.Tensor, key: str) -> torch.dtype:
        """float32 for a float16/bfloat16 parameter's ``sum`` (FBGEMM's), else ``p``'s dtype."""
        return torch.float32 if p.dtype in LOW_PRECISION else p.dtype

    def _state_shapes(self, p: torch.Tensor) -> dict[str, tuple[int, ...]]:
        return {"sum": (p.shape[0] if p.dim() > 1 else 1,)}

    def _dense_step(self, params: list[torch.Tensor], grads: list[torch.Tensor],
                    states: list[dict[str, Any]], group: dict[str, Any], *,
                    foreach: bool) -> None:
        """Its formula on every row of each parameter: on the CPU the C row kernel on all the
        rows of a parameter (one pass, where the multi-tensor ops below make eight:
        bench_optim.py --dense-model), elsewhere ``torch._foreach_*`` ops on them together."""
        rest = [i for i, (p, grad, s) in enumerate(zip(params, grads, states, strict=True))
                if not self._all_rows_by_kernel(p, grad, s, group)]
        if not rest:
            return
        sums = [states[i]["sum"] for i in rest]
        rows = [params[i].view(s.shape[0], -1) for i, s in zip(rest, sums, strict=True)]
        # float16/bfloat16: computed in the state's float32, each row rounded once at the end
        w = [x.to(s.dtype) for x, s in zip(rows, sums, strict=True)]
        g = [grads[i].reshape(x.shape).to(x.dtype)  # (rows, n)
             for i, x in zip(rest, w, strict=True)]
        if group["weight_decay"] != 0:
            g = list(torch._foreach_add(g, w, alpha=group["weight_decay"]))
        torch._foreach_add_(sums, [x.mean(1) for x in torch._foreach_mul(g, g)])
        std = torch._foreach_sqrt(sums)
        torch._foreach_add_(std, group["eps"])
        torch._foreach_reciprocal_(std)
        torch._foreach_mul_(std, float(group["lr"]))  # lr / (sqrt(s) + eps), one per row
        full = [k for k, (x, computed) in enumerate(zip(rows, w, strict=True)) if computed is x]
        if full:
            torch._foreach_addcmul_([w[k] for k in full], [g[k] for k in full],
                                    [std[k].unsqueeze(1) for k in full], value=-1)
        for k in sorted(set(range(len(w))) - set(full)):  # float16/bfloat16, as FBGEMM's:
            rows[k].copy_(w[k].sub_(g[k] * std[k].unsqueeze(1)))  # no fused multiply-add
        for i in rest:
            states[i]["step"] += 1

    def _all_rows_by_kernel(self, p: torch.Tensor, grad: torch.Tensor, state: dict[str, Any],
                            group: dict[str, Any]) -> bool:
        """The dense update of ``p`` as the C row kernel on every row; False (nothing done)
        where the kernel does not apply."""
        if not p.is_contiguous():
            return False
        w = p.view(p.shape[0] if p.dim() > 1 else 1, -1)  # a 1-D parameter is one row
        args = self._c_args(w, state, group, state["step"] + 1)
        if args is None:
            return False
        g = grad if grad.shape == w.shape else grad.reshape(w.shape)
        if not update_rows(self._kernel, w, args[0], _all_rows(w.shape[0]), g, args[1]):
            return False
        state["step"] += 1
        torch.autograd.graph.increment_version(p)  # the kernel wrote through its pointer
        return True

    _kernel = "rowwise_adagrad"

    def _kernel_states(self, tables: list[tuple[torch.Tensor, dict[str, Any]]]
                       ) -> list[torch.Tensor | None]:
        out: list[torch.Tensor | None] = []
        for w, state in tables:
            s = state["sum"]
            out.append(s if s.is_contiguous() and s.shape == w.shape[:1] else None)
        return out

    def _scalars(self, group: dict[str, Any], at: list[tuple[int, int]]
                 ) -> list[dict[str, float]]:
        lr, eps, weight_decay = float(group["lr"]), group["eps"], group["weight_decay"]
        out: list[dict[str, float]] = []
        for width, _ in at:  # inv_dim: the mean over a row of the table
            out.append({"lr": lr, "eps": eps, "weight_decay": weight_decay,
                        "inv_dim": 1 / width})
        return out

    def _state_rows(self, w: torch.Tensor, state: dict[str, Any]
                    ) -> tuple[torch.Tensor | None, ...]:
        return (state["sum"],)  # (rows,)


def _warn_group_accumulators(groups: list[dict[str, Any]], initial: float) -> None:
    """One ``UserWarning`` if a group sets an ``initial_accumulator_value`` other than the
    constructor's ``initial``: unused, as ``torch.optim.Adagrad`` leaves it unused."""
    other = sorted({g["initial_accumulator_value"] for g in groups
                    if g["initial_accumulator_value"] != initial})
    if other:
        warnings.warn(
            f"Adagrad: a parameter group sets initial_accumulator_value={other[0]!r}, but "
            f"every sum starts at the constructor's initial_accumulator_value={initial!r}: "
            "torch.optim.Adagrad ignores a group's own value too. Pass the value to the "
            "constructor (one optimizer per value), or drop it from the group.",
            UserWarning, stacklevel=3)


@functools.lru_cache(maxsize=64)
def _all_rows(n: int) -> torch.Tensor:
    """``arange(n)`` (int64, CPU), made once per size: the rows of a dense update."""
    return torch.arange(n)
