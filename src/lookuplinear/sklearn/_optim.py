"""The estimators' optimizers: one ``lookuplinear.optim`` optimizer for the whole model.

The sparse table of ``LookupLinear(sparse=True)`` gets row-sparse gradients; the optimizers of
:mod:`lookuplinear.optim` update only the rows a batch touches and give the dense parameters
the ``torch.optim`` update of the same name.

The optimizer is ``fused``: the table is updated inside ``backward`` (no gradient stored, the
same weights as an unfused step). ``weight_decay`` is the optimizer's, on the table lazily (the
rows a batch touches) and on the dense parameters every step.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
from torch.optim import Optimizer

__all__ = ["DEFAULT_LR", "LINEAR_LOG_LOSS_LR", "SGD_BIAS_LR_SCALE", "SGD_LR", "SOLVERS",
           "UNIT_NORM_ROUND_OFF", "LinearDecay",
           "default_learning_rate", "make_optimizers", "make_schedulers", "optimizer_class",
           "set_hyperparameters"]

#: solver name -> class name in lookuplinear.optim
SOLVERS: dict[str, str] = {
    "sgd": "SGD",
    "adagrad": "Adagrad",
    "rowwise_adagrad": "RowWiseAdagrad",
    "adam": "Adam",
    "adamw": "AdamW",
}

#: ``learning_rate_init=None``: the rate of each adaptive solver that scored best on the
#: validation splits of bench_sklearn.py's text datasets (rt and three clothing-review targets,
#: over 0.001-3), at the estimators' other defaults. Adagrad divides each step by the root of
#: the squared gradients a row has summed, so it takes ten times Adam's rate
DEFAULT_LR: dict[str, float] = {"adagrad": 0.1, "rowwise_adagrad": 0.1, "adam": 0.01,
                                "adamw": 0.01}
#: exceptions to ``DEFAULT_LR`` for the linear model with log loss: Adagrad at 0.1 scored up
#: to 1.2 points below Adam there, at 0.3 at or above it on every split
LINEAR_LOG_LOSS_LR: dict[str, float] = {"adagrad": 0.3}
#: plain SGD's default per loss and model (``"linear"``: ``hidden=None``; ``"network"``: a
#: hidden layer), chosen on the same validation splits, whose tf-idf rows have unit norm: a
#: squared loss's step moves a row's output by the rate times its squared norm, so
#: :func:`default_learning_rate` divides these by the largest squared row norm where it is
#: above 1 (the 1 / L of SAG's and liblinear's step). As in scikit-learn's ``SGDClassifier``
#: on sparse data, the biases step at ``SGD_BIAS_LR_SCALE`` times the rate: a bias moves with
#: every row, a sparse feature's weight only with the rows that have it, so one rate for both
#: is bounded by the bias (1.0 diverges for the squared losses) and leaves the weights
#: crawling. With the biases slowed, the linear model's weights take 10 with the squared losses
#: (100 diverges) and a network, whose dense output layer every row moves, 1 (3 diverges).
#: Log loss (curvature at most 1/4, the squared losses' 2) takes three times as much: larger
#: rates fitted the benchmark's text closer but scored below Adam on noisier data
SGD_LR: dict[tuple[str, str], float] = {
    ("squared_hinge", "linear"): 10.0, ("squared_error", "linear"): 10.0,
    ("log_loss", "linear"): 30.0,
    ("squared_hinge", "network"): 1.0, ("squared_error", "network"): 1.0,
    ("log_loss", "network"): 3.0,
}
#: the biases' rate over the weights' for ``solver="sgd"``: scikit-learn's
#: ``SPARSE_INTERCEPT_DECAY`` (``sklearn/linear_model/_stochastic_gradient.py``), on dense X
#: too, where ``SGDClassifier``'s intercept steps at the full rate: at ``SGD_LR``'s rates a bias
#: at the full rate makes the squared losses diverge on unit-norm rows given as a dense array
SGD_BIAS_LR_SCALE = 0.01
#: a squared row norm at most this far above 1 is 1 to :func:`default_learning_rate`: an L2
#: normalized row (tf-idf) in float32 sums to 1 within ``2**-23``
UNIT_NORM_ROUND_OFF = 16 * float(np.finfo(np.float32).eps)


def default_learning_rate(solver: str, loss: str, *, network: bool = False,
                          max_row_norm: float = 1.0) -> float:
    """``learning_rate_init=None`` for ``solver`` training ``loss`` (``network``: with a
    hidden layer) on rows whose largest squared L2 norm is ``max_row_norm``.

    ``"sgd"``'s rate is ``SGD_LR``'s divided by ``max_row_norm`` where that is above 1 (rows of
    unit norm up to float32 rounding, ``UNIT_NORM_ROUND_OFF``, keep it as it is); the adaptive
    solvers' steps are bounded by the rate itself, whatever the rows.

    Examples
    --------
    >>> default_learning_rate("adam", "log_loss"), default_learning_rate("sgd", "log_loss")
    (0.01, 30.0)
    >>> default_learning_rate("sgd", "squared_hinge", max_row_norm=12.5)
    0.8
    """
    if solver == "sgd":
        rate = SGD_LR[loss, "network" if network else "linear"]
        return rate / max_row_norm if max_row_norm > 1.0 + UNIT_NORM_ROUND_OFF else rate
    if loss == "log_loss" and not network:
        return LINEAR_LOG_LOSS_LR.get(solver, DEFAULT_LR[solver])
    return DEFAULT_LR[solver]


def optimizer_class(solver: str) -> type[Optimizer]:
    """``lookuplinear.optim.<Class>`` for ``solver``.

    Examples
    --------
    >>> optimizer_class("rowwise_adagrad").__name__
    'RowWiseAdagrad'
    """
    from .. import optim

    cls: type[Optimizer] = getattr(optim, SOLVERS[solver])
    return cls


def make_optimizers(
    solver: str,
    sparse_params: Sequence[torch.nn.Parameter],
    dense_params: Sequence[torch.nn.Parameter],
    *,
    lr: float,
    weight_decay: float,
) -> list[Optimizer]:
    """The optimizers that together update ``sparse_params`` (sparse gradients) and the rest.

    One fused ``lookuplinear.optim`` optimizer; see the module docstring. For ``"sgd"`` the
    one-dimensional dense parameters (the biases) form a group of their own at
    ``lr * SGD_BIAS_LR_SCALE``, as ``SGDClassifier`` scales its intercept's step on sparse
    data; the optimizer's update is ``torch.optim.SGD``'s in every group.

    Examples
    --------
    >>> table = torch.nn.Parameter(torch.zeros(10, 2)); bias = torch.nn.Parameter(torch.zeros(2))
    >>> [type(o).__name__ for o in make_optimizers("adagrad", [table], [bias], lr=0.1,
    ...                                            weight_decay=0.0)]
    ['Adagrad']
    >>> [g["lr"] for g in make_optimizers("sgd", [table], [bias], lr=10.0,
    ...                                   weight_decay=0.0)[0].param_groups]
    [10.0, 0.1]
    """
    sparse, dense = list(sparse_params), list(dense_params)
    groups: list[dict[str, Any]] = [{"params": sparse}] if sparse else []
    if solver == "sgd":  # the biases at a hundredth of the rate, as SGDClassifier's on sparse X
        weights = [p for p in dense if p.dim() > 1]
        biases = [p for p in dense if p.dim() <= 1]
        groups += [{"params": weights}] if weights else []
        groups += [{"params": biases, "lr": lr * SGD_BIAS_LR_SCALE}] if biases else []
    elif dense:
        groups.append({"params": dense})
    cls: Any = optimizer_class(solver)
    return [cls(groups, lr=lr, weight_decay=weight_decay, fused=True)]


def set_hyperparameters(
    optimizers: Sequence[Optimizer], solver: str, *, lr: float, weight_decay: float
) -> None:
    """Set the learning rate and ``weight_decay`` of every parameter group of optimizers that
    :func:`make_optimizers` built for ``solver``, as it sets them (``"sgd"``'s biases at
    ``lr * SGD_BIAS_LR_SCALE``); the optimizers' state (moments, sums of squares) is kept.

    Examples
    --------
    >>> table = torch.nn.Parameter(torch.zeros(10, 2)); bias = torch.nn.Parameter(torch.zeros(2))
    >>> opts = make_optimizers("sgd", [table], [bias], lr=10.0, weight_decay=0.0)
    >>> set_hyperparameters(opts, "sgd", lr=1.0, weight_decay=0.5)
    >>> [(g["lr"], g["weight_decay"]) for g in opts[0].param_groups]
    [(1.0, 0.5), (0.01, 0.5)]
    """
    for opt in optimizers:
        for group in opt.param_groups:
            biases = solver == "sgd" and all(p.dim() <= 1 for p in group["params"])
            group["lr"] = lr * SGD_BIAS_LR_SCALE if biases else lr
            group["weight_decay"] = weight_decay


class LinearDecay:
    """fastText's learning rate: ``lr_t = lr_0 * max(0, 1 - t / total_steps)`` after ``t`` steps.

    The values of ``LambdaLR(optimizer, lambda t: max(0.0, 1.0 - t / total_steps))``, written
    into the parameter groups directly: ``step`` is one float write per group, without an
    ``LRScheduler``'s per-step bookkeeping (and its warning when the estimators' fused step
    updates the parameters without calling ``optimizer.step``).
    """

    def __init__(self, optimizer: Optimizer, total_steps: int) -> None:
        self.groups = optimizer.param_groups
        self.base = [float(g["lr"]) for g in self.groups]
        self.total_steps = max(1, total_steps)
        self.t = 0

    def step(self) -> None:
        """Advance one step and set every group's ``lr``."""
        self.t += 1
        factor = max(0.0, 1.0 - self.t / self.total_steps)
        for g, base in zip(self.groups, self.base, strict=True):
            g["lr"] = base * factor


def make_schedulers(
    optimizers: Sequence[Optimizer], schedule: str, total_steps: int
) -> list[LinearDecay]:
    """fastText's linear decay to zero over ``total_steps`` (``"linear"``), or none.

    Examples
    --------
    >>> p = torch.nn.Parameter(torch.zeros(2))
    >>> opt = torch.optim.SGD([p], lr=1.0)
    >>> sched = make_schedulers([opt], "linear", total_steps=4)[0]
    >>> for _ in range(3):
    ...     opt.step(); sched.step()
    >>> opt.param_groups[0]["lr"]
    0.25
    """
    if schedule != "linear":
        return []
    return [LinearDecay(o, total_steps) for o in optimizers]
