"""One epoch of dual coordinate descent on CSR rows, every output at once (``csrc/dualcd.c``).

The problem, for each output ``k`` (one-vs-rest), with ``C_ik = 1 / (2 diag[i, k])`` (or
``1 / (2 diag[i])`` for every output)::

    min  1/2 ||w_k||^2 + sum_i C_ik loss(target[i, k], x_i . w_k + b_k)

    "squared_hinge": max(0, 1 - t f)^2, t = +1 / -1      LinearSVC's objective
    "squared_error": (t - f)^2                            ridge regression

solved in its dual as liblinear does (Hsieh et al., 2008): one dual variable per row and output,
updated in closed form while its row is visited; the row's entries are read once for all outputs
(a lookup of ``(n_features, n_outputs)`` rows, ``LookupLinear``'s weight layout) and the update
is the same rows' scatter. Where the C kernels do not apply (the ``torch`` backend, no C
library) the same loop runs in Python over numpy views: the same arithmetic, slowly.
"""

from __future__ import annotations

import numpy as np
import torch

from ._backend import use_c

__all__ = ["LOSSES", "dual_cd_epoch", "dual_cd_twin"]

#: loss name -> the kernel's code
LOSSES = {"squared_hinge": 0, "squared_error": 1}



def dual_cd_epoch(
    weight: torch.Tensor,
    bias: torch.Tensor,
    rows: tuple[torch.Tensor, torch.Tensor, torch.Tensor],
    order: torch.Tensor,
    n_active: int,
    qdiag: torch.Tensor,
    target: torch.Tensor,
    diag: torch.Tensor,
    dual: torch.Tensor,
    loss: str,
    shrink_above: float = float("inf"),
) -> tuple[int, float, float]:
    """Visit the rows ``order[:n_active]`` once, updating ``dual``, ``weight``, ``bias`` and
    ``order`` in place.

    Parameters
    ----------
    weight : torch.Tensor
        ``(n_features, n_outputs)`` float32, contiguous, on the CPU; ``w_k`` is column ``k``.
    bias : torch.Tensor
        ``(n_outputs,)`` float32: the weight of a constant feature 1 that every row carries
        (liblinear's ``intercept_scaling=1``).
    rows : tuple of torch.Tensor
        ``(indptr, indices, data)``, CSR: ``(n + 1,)`` and ``(nnz,)`` (each below
        ``n_features``), both int32 or both int64, and float32 ``(nnz,)``.
    order : torch.Tensor
        int64 ``(n,)``, a permutation of the rows: the first ``n_active`` are visited in turn.
    n_active : int
    qdiag : torch.Tensor
        float64 ``(n,)``: ``||x_i||^2 + 1``.
    target : torch.Tensor
        float64 ``(n, n_outputs)``: ``+1 / -1`` for ``"squared_hinge"``, the targets for
        ``"squared_error"``.
    diag : torch.Tensor
        float64 ``(n,)``: ``1 / (2 C_i)``, positive, for every output of row ``i``; or
        ``(n, n_outputs)``: ``1 / (2 C_ik)``, one a row and output (liblinear's one-vs-rest
        weighs class ``k``'s rows by its class weight in problem ``k`` only). ``inf``
        (``C_ik = 0``) holds the variable at 0.
    dual : torch.Tensor
        float64 ``(n, n_outputs)``: the dual variables, zero at the start.
    loss : {"squared_hinge", "squared_error"}
    shrink_above : float, default inf
        Shrinking (``"squared_hinge"``): a row whose every output rests at zero with a gradient
        above this is moved behind the active rows; ``inf`` keeps every row.

    Returns
    -------
    n_active : int
        The rows still active (they are ``order[:n_active]``).
    pg_max, pg_min : float
        The largest and smallest projected gradient met (both 0 at the optimum).
    """
    code = LOSSES[loss]
    indptr, indices, data = rows
    if not use_c(weight):
        return dual_cd_twin(weight, bias, indptr, indices, data, order, n_active, qdiag, target,
                            diag, dual, code, shrink_above)
    active, pg_max, pg_min = torch.ops.lookuplinear.dual_cd_epoch.default(
        weight, bias, indptr, indices, data, order, n_active, qdiag, target, diag, dual, code,
        shrink_above)
    return active, pg_max, pg_min


def dual_cd_twin(weight: torch.Tensor, bias: torch.Tensor, indptr: torch.Tensor,
                 indices: torch.Tensor, data: torch.Tensor, order: torch.Tensor, n_active: int,
                 qdiag: torch.Tensor, target: torch.Tensor, diag: torch.Tensor,
                 dual: torch.Tensor, loss: int, shrink_above: float
                 ) -> tuple[int, float, float]:
    """``lookuplinear::dual_cd_epoch`` in numpy (``loss``: its code in :data:`LOSSES`): the
    same epoch, in place on the same tensors."""
    return _epoch_python(weight.numpy(), bias.numpy(), indptr.numpy(), indices.numpy(),
                         data.numpy(), order.numpy(), n_active, qdiag.numpy(), target.numpy(),
                         diag.numpy(), dual.numpy(), loss, shrink_above)


def _epoch_python(
    w: np.ndarray, b: np.ndarray, indptr: np.ndarray, indices: np.ndarray,
    data: np.ndarray, order: np.ndarray, n_active: int, qdiag: np.ndarray, target: np.ndarray,
    diag: np.ndarray, dual: np.ndarray, code: int, shrink_above: float,
) -> tuple[int, float, float]:
    """``csrc/dualcd.c`` in numpy, one row at a time (in place on the same arrays)."""
    pg_max, pg_min = -np.inf, np.inf
    hinge = code == LOSSES["squared_hinge"]
    o, n = 0, n_active
    while o < n:
        i = order[o]
        lo, hi = indptr[i], indptr[i + 1]
        cols, x = indices[lo:hi], data[lo:hi].astype(np.float64)
        f = b.astype(np.float64) + x @ w[cols].astype(np.float64)  # (n_out,)
        t, a = target[i], dual[i]
        fixed = np.broadcast_to(np.isinf(diag[i]), a.shape)  # C_ik = 0: a held at 0, settled
        d = np.where(fixed, 0.0, diag[i])
        q = qdiag[i] + d
        if hinge:
            g = t * f - 1.0 + d * a
            pg = np.where(a == 0.0, np.minimum(g, 0.0), g)
            new = np.maximum(a - g / q, 0.0)
        else:
            g = f - t + d * a
            pg = g
            new = a - g / q
        if not fixed.all():
            pg_max = max(pg_max, float(pg[~fixed].max()))
            pg_min = min(pg_min, float(pg[~fixed].min()))
        if hinge and bool((fixed | ((a == 0.0) & (g > shrink_above))).all()):
            n -= 1
            order[o], order[n] = order[n], i
            continue
        o += 1
        move = (np.abs(pg) > 1e-12) & (new != a) & ~fixed
        if not move.any():
            continue
        step = ((new - a) * t if hinge else new - a).astype(np.float32)
        step[~move] = 0.0
        a[move] = new[move]
        b += step
        np.add.at(w, cols, x.astype(np.float32)[:, None] * step[None, :])
    return n, float(pg_max), float(pg_min)
