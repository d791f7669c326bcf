"""The network behind the estimators: ``LookupLinear`` (+ an optional ``nn.Linear``)."""

from __future__ import annotations

from functools import partial
from typing import Any

import torch
from torch import nn

from ..functional import Mode
from ..modules.layer import LookupLinear

__all__ = ["LookupNet"]


class LookupNet(nn.Module):
    """fastText's architecture: ``linear(densify(x) @ E)``, or the plain linear model.

    Dense equivalent: with ``hidden=None``, ``nn.Linear(n_features, n_outputs)`` on ``X``
    (``mode`` scales each row); with ``hidden=h``,
    ``nn.Sequential(nn.Linear(n_features, h, bias=False), nn.Linear(h, n_outputs))`` on ``X``.
    The first layer is a ``LookupLinear(sparse=True)``, so ``X`` is never densified and its
    gradient is sparse; with ``mode="max"`` (each output the maximum of the table rows of a
    row's features, ``X`` 0/1) it is ``sparse=False``: PyTorch's maximum has no sparse
    gradient, so each step's table gradient is dense.

    Parameters
    ----------
    n_features : int
        Columns of ``X`` (vocabulary + hash buckets).
    n_outputs : int
        Logits (classes, labels) or regression targets.
    hidden : int or None
        Size of the embedding (fastText's ``dim``); ``None`` for a linear model on ``X``.
    mode : {"sum", "mean", "sqrtn", "max"}
        Row reduction of ``LookupLinear``; fastText averages (``"mean"``).
    drawn : torch.Tensor, optional
        With ``hidden``: the table rows to draw (the columns training reads); the others start
        at zero, where the estimators leave every row training did not touch. None: all rows.

    Initialization follows fastText: the table is uniform in ``[-1/hidden, 1/hidden]``, the
    output layer is zero; the linear model starts at zero.

    Examples
    --------
    >>> import scipy.sparse as sp
    >>> net = LookupNet(1000, 3, hidden=16, mode="mean")
    >>> net(sp.random(4, 1000, density=0.01, format="csr", dtype="float32")).shape
    torch.Size([4, 3])
    """

    def __init__(self, n_features: int, n_outputs: int, *, hidden: int | None, mode: Mode,
                 drawn: torch.Tensor | None = None) -> None:
        super().__init__()
        self.hidden = hidden
        # a row's maximum has no sparse gradient in PyTorch's kernel: mode="max" trains a
        # dense-gradient table (the same values, a gradient the size of the table per step)
        sparse = mode != "max"
        self.output: nn.Linear | None
        if hidden is None:
            self.lookup = LookupLinear(
                n_features, n_outputs, mode=mode, sparse=sparse, init=nn.init.zeros_
            )
            self.output = None
        else:
            bound = 1.0 / hidden
            init = partial(nn.init.uniform_, a=-bound, b=bound)  # picklable
            self.lookup = LookupLinear(n_features, hidden, bias=False, mode=mode, sparse=sparse,
                                       init=init if drawn is None else nn.init.zeros_)
            if drawn is not None:  # a draw of the rows training reads, not of every bucket
                with torch.no_grad():
                    self.lookup.weight.index_copy_(
                        0, drawn, init(torch.empty(drawn.numel(), hidden)))
                self.lookup.init = init
            self.output = nn.Linear(hidden, n_outputs)
            nn.init.zeros_(self.output.weight)
            nn.init.zeros_(self.output.bias)

    def forward(self, x: Any) -> torch.Tensor:
        """The logits / outputs, shape (B, n_outputs)."""
        h = self.lookup(x)  # (B, hidden or n_outputs)
        return h if self.output is None else self.output(h)  # (B, n_outputs)

    def predict(self, x: Any) -> torch.Tensor:
        """``forward`` with the output layer in float64, shape (B, n_outputs).

        Each row's lookup is computed on its own, so a row's prediction does not depend on the
        other rows of the batch; the float64 matmul keeps that true to ~1e-15.
        """
        h = self.lookup(x)  # (B, hidden or n_outputs)
        if self.output is None:
            return h.double()
        w, b = self.output.weight.double(), self.output.bias.double()
        return torch.nn.functional.linear(h.double(), w, b)

    def sparse_parameters(self) -> list[nn.Parameter]:
        """The table, whose gradient is sparse."""
        return [self.lookup.weight]

    def dense_parameters(self) -> list[nn.Parameter]:
        """Every other parameter (biases, the output layer)."""
        return [p for p in self.parameters() if p is not self.lookup.weight]
