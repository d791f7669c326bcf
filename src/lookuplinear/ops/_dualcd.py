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
library) the same loop runs in Python over numpy views: the same arithmetic, slowly, and not
the C kernel's bits (C fuses multiply-adds where the CPU has them).
"""

from __future__ import annotations

import ctypes

import numpy as np
import torch

from ..errors import InputValueError
from ._backend import use_c
from ._clib import function
from ._errors import scalar_type_name

__all__ = ["LOSSES", "dual_cd_cpu", "dual_cd_epoch", "dual_cd_twin"]

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


def _check_array(name: str, t: torch.Tensor, dtype: torch.dtype,
                 shape: tuple[int, ...]) -> None:
    """Raise :class:`InputValueError` unless ``t`` is a contiguous CPU tensor of ``dtype`` and
    ``shape`` (the C++ kernel's check, in its words)."""
    if t.dtype != dtype or tuple(t.shape) != shape or not t.is_contiguous() or not t.is_cpu:
        raise InputValueError(
            f"lookuplinear::dual_cd_epoch: {name} must be a contiguous {scalar_type_name(dtype)} "
            f"CPU tensor of shape {list(shape)}; got {scalar_type_name(t.dtype)} of shape "
            f"{list(t.shape)}")


def _check_operands(weight: torch.Tensor, bias: torch.Tensor, indptr: torch.Tensor,
                    indices: torch.Tensor, data: torch.Tensor, order: torch.Tensor,
                    n_active: int, qdiag: torch.Tensor, target: torch.Tensor,
                    diag: torch.Tensor, dual: torch.Tensor, loss: int) -> None:
    """Raise :class:`InputValueError` for operands the C kernel cannot read, as the C++
    kernel checks them (the rows' entries themselves are the caller's to check)."""
    if weight.dim() != 2:
        raise InputValueError("lookuplinear::dual_cd_epoch: weight must be 2-D; got "
                              f"{list(weight.shape)}")
    n_out, n, nnz = weight.shape[1], order.numel(), indices.numel()
    _check_array("weight", weight, torch.float32, tuple(weight.shape))
    _check_array("bias", bias, torch.float32, (n_out,))
    _check_array("order", order, torch.int64, (n,))
    _check_array("indptr", indptr, indices.dtype, (n + 1,))
    if indices.dtype not in (torch.int32, torch.int64):
        raise InputValueError("lookuplinear::dual_cd_epoch: indices must be int32 or int64; "
                              f"got {scalar_type_name(indices.dtype)}")
    _check_array("indices", indices, indices.dtype, (nnz,))
    _check_array("data", data, torch.float32, (nnz,))
    _check_array("qdiag", qdiag, torch.float64, (n,))
    _check_array("diag", diag, torch.float64, (n, n_out) if diag.dim() == 2 else (n,))
    _check_array("target", target, torch.float64, (n, n_out))
    _check_array("dual", dual, torch.float64, (n, n_out))
    if not (0 <= n_active <= n and loss in (0, 1)):
        raise InputValueError(f"lookuplinear::dual_cd_epoch: n_active in [0, {n}] and loss 0 "
                              f"or 1; got {n_active} and {loss}")


def dual_cd_cpu(weight: torch.Tensor, bias: torch.Tensor, indptr: torch.Tensor,
                indices: torch.Tensor, data: torch.Tensor, order: torch.Tensor, n_active: int,
                qdiag: torch.Tensor, target: torch.Tensor, diag: torch.Tensor,
                dual: torch.Tensor, loss: int, shrink_above: float
                ) -> tuple[int, float, float]:
    """``lookuplinear::dual_cd_epoch``'s CPU kernel where the operators are registered from
    Python: the C++ kernel's checks, then the same C kernel (``ll_dual_cd_f32_<i32|i64>``)
    through ctypes, so that both registrations give the same bits; :func:`dual_cd_twin` where
    the C kernels are not used."""
    _check_operands(weight, bias, indptr, indices, data, order, n_active, qdiag, target, diag,
                    dual, loss)
    if not use_c(weight):
        return dual_cd_twin(weight, bias, indptr, indices, data, order, n_active, qdiag, target,
                            diag, dual, loss, shrink_above)
    n_out = weight.shape[1]
    active = ctypes.c_int64(n_active)
    pg = torch.tensor([shrink_above, 0.0, 0.0], dtype=torch.float64)
    f = torch.empty(n_out, dtype=torch.float64)
    step = torch.empty(n_out, dtype=torch.float32)
    moved = torch.empty(n_out, dtype=torch.int64)
    variant = "f32_i32" if indices.dtype == torch.int32 else "f32_i64"
    function("ll_dual_cd", variant)(
        weight.data_ptr(), bias.data_ptr(), indptr.data_ptr(), indices.data_ptr(),
        data.data_ptr(), order.data_ptr(), ctypes.addressof(active), qdiag.data_ptr(),
        target.data_ptr(), diag.data_ptr(), n_out if diag.dim() == 2 else 1, dual.data_ptr(),
        n_out, loss, pg.data_ptr(), f.data_ptr(), step.data_ptr(), moved.data_ptr())
    return active.value, float(pg[1]), float(pg[2])


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
