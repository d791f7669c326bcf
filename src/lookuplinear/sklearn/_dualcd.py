"""``solver="dual_cd"``: the linear model solved exactly, as liblinear solves ``LinearSVC``.

For each output ``k`` (a class one-vs-rest, a label, a regression target), with ``n`` rows,
sample weights ``s_i`` and the table's column ``w_k`` (its bias included)::

    min  mean_i s_i loss(t_ik, x_i . w_k + b_k)  +  alpha / 2 ||(w_k, b_k)||^2

    squared hinge: max(0, 1 - t f)^2, t = +1 / -1     (alpha = 1 / n: LinearSVC(C=1))
    squared error: (t - f)^2                          (alpha = 2 / n: Ridge(alpha=1))

The bias is the weight of a constant feature 1 and is penalised with the rest, as liblinear's
``intercept_scaling=1``. Dual coordinate descent (Hsieh et al., ICML 2008) with liblinear's
shrinking and stopping rule (the spread of the projected gradient under ``tol``); each epoch
is one kernel call that visits the rows in a seeded random order and reads each row's table
entries once for every output (:func:`lookuplinear.ops._dualcd.dual_cd_epoch`).
"""

from __future__ import annotations

import sys
import warnings

import numpy as np
import scipy.sparse as sp
import torch
from sklearn.exceptions import ConvergenceWarning

from ..modules.layer import LookupLinear
from ..ops._dualcd import dual_cd_epoch

__all__ = ["solve"]


@torch.no_grad()
def solve(
    lookup: LookupLinear,
    X: sp.csr_matrix,
    target: np.ndarray,
    sample_weight: np.ndarray | None,
    *,
    loss: str,
    alpha: float,
    tol: float,
    max_iter: int,
    seed: int,
    verbose: int = 0,
    offset: np.ndarray | None = None,
) -> int:
    """Fit ``lookup``'s weight and bias to ``(X, target)`` from zero; returns the epochs run.

    Parameters
    ----------
    lookup : LookupLinear
        ``(n_features, n_outputs)`` table with a bias; overwritten.
    X : scipy.sparse.csr_matrix of shape (n, n_features)
        float32 rows (a ``mode`` other than ``"sum"`` already folded into the values).
    target : ndarray of shape (n, n_outputs)
        ``+1 / -1`` signs for ``"squared_hinge"``, targets for ``"squared_error"``.
    sample_weight : ndarray of shape (n,) or (n, n_outputs), or None
        Non-negative, a row's or a row's in each output (one-vs-rest class weights); rows of
        weight 0 are left out, a row's output of weight 0 is left out of that output.
    loss : {"squared_hinge", "squared_error"}
    alpha : float
        The L2 penalty of the mean loss, as above.
    tol : float
        Stop when the projected gradient's spread over an epoch of every row is under it.
    max_iter : int
        Epochs at most; a :class:`~sklearn.exceptions.ConvergenceWarning` if they run out.
    seed : int
        Seeds the order of the rows.
    verbose : int
        One line per epoch on stderr when > 0.
    offset : ndarray of shape (n_outputs,) or None
        Added to the bias after the fit (the targets' mean, which ``target`` had removed).
    """
    n = X.shape[0]
    weights = np.ones(n) if sample_weight is None else np.asarray(sample_weight, np.float64)
    live = np.flatnonzero((weights if weights.ndim == 1 else weights.max(axis=1)) > 0)
    index = np.int32 if X.indptr.dtype == X.indices.dtype == np.int32 else np.int64
    rows = (_tensor(X.indptr, index), _tensor(X.indices, index), _tensor(X.data, np.float32))
    squares = np.concatenate([[0.0], np.cumsum(np.square(X.data, dtype=np.float64))])
    qdiag = torch.from_numpy(squares[X.indptr[1:]] - squares[X.indptr[:-1]] + 1.0)  # |x_i|^2+1
    # 1 / (2 C_i) with C_i = s_i / (alpha n): the dual's diagonal term (liblinear's D_ii); inf
    # where C_i = 0 (a row left out, or an output it has no weight in)
    some = weights > 0
    diag = torch.from_numpy(
        np.where(some, alpha * n / (2.0 * np.where(some, weights, 1.0)), np.inf))
    t = torch.from_numpy(np.ascontiguousarray(target, dtype=np.float64))
    dual = torch.zeros(t.shape, dtype=torch.float64)
    # w = sum_i a_i t_i x_i = 0 at the start; updated in place where the table allows it
    table = lookup.weight.detach()
    in_place = table.is_cpu and table.dtype == torch.float32 and table.is_contiguous()
    weight = table.zero_() if in_place else torch.zeros(table.shape, dtype=torch.float32)
    bias = torch.zeros(t.shape[1], dtype=torch.float32)
    order = torch.from_numpy(live.astype(np.int64))
    gen = torch.Generator().manual_seed(seed)
    total = n_active = len(live)
    shrinking = loss == "squared_hinge"
    above, epoch, converged = float("inf"), 0, total == 0
    while not converged and epoch < max_iter:
        order[:n_active] = order[:n_active][torch.randperm(n_active, generator=gen)]
        n_active, pg_max, pg_min = dual_cd_epoch(
            weight, bias, rows, order, n_active, qdiag, t, diag, dual, loss,
            above if shrinking else float("inf"))
        epoch += 1
        if verbose:
            print(f"epoch {epoch}: projected gradient spread {pg_max - pg_min:.4g}, "
                  f"{n_active:,} of {total:,} rows active", file=sys.stderr)
        if pg_max - pg_min <= tol:
            if n_active == total:
                converged = True
            else:  # what shrinking set aside must meet the test too: one epoch of every row
                n_active, above = total, float("inf")
            continue
        above = pg_max if pg_max > 0 else float("inf")
    if not converged:
        warnings.warn(
            f"dual coordinate descent did not reach tol={tol} in max_iter={max_iter} epochs; "
            "raise max_iter (or tol), or scale the features.", ConvergenceWarning, stacklevel=3)
    if not in_place:
        table.copy_(weight)
    if offset is not None:
        bias += torch.as_tensor(offset, dtype=torch.float32)
    assert lookup.bias is not None  # the linear model's table has one (LookupNet)
    lookup.bias.copy_(bias)
    return epoch


def _tensor(a: np.ndarray, dtype: type) -> torch.Tensor:
    """``a`` as a CPU tensor of ``dtype``, without a copy where it already is one (and
    writable: torch warns on read-only memory)."""
    a = np.ascontiguousarray(a, dtype=dtype)
    return torch.from_numpy(a if a.flags.writeable else a.copy())
