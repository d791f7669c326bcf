"""One training step of fastText's model without autograd: lookup, head, loss, update.

For ``LookupNet(hidden=h)`` on prescaled rows (a ``"sum"`` lookup) trained by one fused
:mod:`lookuplinear.optim` optimizer, a step is small enough to write out by hand::

    h      = embedding_bag(indices, offsets, values, E)      # (B, h)   sum of scaled rows
    out    = h @ W.T + b                                     # (B, n_outputs)
    loss, g = loss_and_grad(out)                             # g = d loss / d out, (B, n_outputs)
    gW, gb, gh = g.T @ h, g.sum(0), g @ W                    # the head's backward
    E[rows] <- optimizer(E[rows], rows of sum_b values * gh) # fused row update, as in backward
    W, b    <- optimizer(W, gW), optimizer(b, gb)            # the optimizer's dense update

The same computation as ``loss.backward(); optimizer.step()`` on the module (the same kernels
for the lookup and the row update), without the autograd graph, the module calls, ``Bags``'
checks and the optimizer's per-step wrappers: most of a small step's time on the CPU.
``_epochs`` uses it where it applies (:func:`fused_step`) and the module otherwise.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F

from ..optim._base import RowSparseOptimizer
from ..rowgrad import group_rows
from ._model import LookupNet

__all__ = ["USE_FUSED_STEP", "FusedStep", "LossGrad", "fused_step"]

#: set to False to train through autograd always (tests compare both)
USE_FUSED_STEP = True

#: ``(out, target, weight) -> (loss, d loss / d out)``, both detached
LossGrad = Callable[
    [torch.Tensor, torch.Tensor, torch.Tensor | None], tuple[torch.Tensor, torch.Tensor]
]


class FusedStep:
    """A callable that makes one training step of ``model`` on rows of a CSR batch.

    Parameters
    ----------
    model : LookupNet
        With an output layer (``hidden`` set); its lookup is run as a ``"sum"`` lookup of the
        rows given (the estimators fold ``mode``'s scaling into them).
    optimizer : RowSparseOptimizer
        The one optimizer of every parameter of ``model``.
    loss_grad : LossGrad
        The loss of a batch and its gradient with respect to the outputs.
    """

    def __init__(self, model: LookupNet, optimizer: RowSparseOptimizer,
                 loss_grad: LossGrad) -> None:
        head = model.output
        if head is None or head.bias is None:
            raise ValueError("FusedStep needs a LookupNet with an output layer (hidden set).")
        self.table = model.lookup.weight
        self.W, self.b = head.weight, head.bias
        self.opt = optimizer
        self.loss_grad = loss_grad
        self.groups = {id(p): g for g in optimizer.param_groups for p in g["params"]}

    @torch.no_grad()
    def __call__(
        self,
        indices: torch.Tensor,
        offsets: torch.Tensor,
        values: torch.Tensor,
        target: torch.Tensor,
        weight: torch.Tensor | None,
    ) -> torch.Tensor:
        """Update the model on the batch; returns its loss (before the update), a 0-d tensor.

        ``indices``/``values``: the batch's entries; ``offsets``: CSR, ``B + 1`` entries from 0.
        """
        E, W, b = self.table, self.W, self.b
        # E detached: ATen's forward-only kernel (it picks by requires_grad, not grad mode)
        h = F.embedding_bag(indices, E.detach(), offsets, mode="sum", per_sample_weights=values,
                            include_last_offset=True)  # (B, hidden)
        out = F.linear(h, W, b)  # (B, n_outputs)
        loss, g = self.loss_grad(out, target, weight)
        grad_h = g.mm(W)  # (B, hidden), with W before its update
        grad_W, grad_b = g.t().mm(h), g.sum(0)
        opt = self.opt
        if not opt.fused_backward(E, indices, offsets, values, grad_h, None):
            rows, vals = group_rows(indices, offsets, values, grad_h, None, E.shape[0])
            opt._sparse_update(E, rows, vals, self._state(E), self.groups[id(E)])
        for p, grad in ((W, grad_W), (b, grad_b)):
            opt._dense_update(p, grad, self._state(p), self.groups[id(p)])
        return loss

    def _state(self, p: torch.Tensor) -> dict[str, Any]:
        state: dict[str, Any] = self.opt.state[p]
        if not state:
            self.opt._init_state(p, state, self.groups[id(p)])
        return state


def fused_step(
    model: LookupNet, optimizers: list[Any], loss_grad: LossGrad | None, prescaled: bool
) -> FusedStep | None:
    """A :class:`FusedStep` for ``model`` if it applies, else None (train through autograd).

    It applies to a model with an output layer whose lookup is a ``"sum"`` (``prescaled``, or
    ``mode="sum"``) without padding, trained by one :mod:`lookuplinear.optim` optimizer with
    ``fused=True`` that holds every parameter, when the estimator gives ``loss_grad``.
    """
    lk = model.lookup
    if not USE_FUSED_STEP or loss_grad is None or model.output is None or len(optimizers) != 1:
        return None
    opt = optimizers[0]
    params = {id(p) for g in getattr(opt, "param_groups", []) for p in g["params"]}
    if (
        not isinstance(opt, RowSparseOptimizer)
        or not all(g.get("fused") for g in opt.param_groups)
        or params != {id(p) for p in model.parameters()}
        or lk.bias is not None
        or lk.padding_idx is not None
        or not (prescaled or lk.mode == "sum")
    ):
        return None
    return FusedStep(model, opt, loss_grad)
