"""The C row kernels (``_rowkernels.c``, built by the package's install), called through ctypes.

They compute what the numba kernels of :mod:`lookuplinear._numba` compute, faster on CPU
(docs/benchmarks.md, "Kernel choices"): the row-sparse gradient of a bag lookup
(``densify(x).T @ grad_out``, one row per unique index) and the row-wise updates of
:mod:`lookuplinear.optim`, stored or fused into the backward. Each function here returns
``None`` where the C library is missing (an install without a C compiler, or
``LOOKUPLINEAR_NO_C=1``) or does not apply to its arguments; the caller then runs numba.
ctypes releases the GIL for the call.
"""

from __future__ import annotations

import ctypes
import functools
import os
from typing import Any

import numpy as np

__all__ = ["ENABLED", "available", "fused_update", "group_rows", "update"]

#: set to False to run the numba kernels even where the C ones are built (tests compare them);
#: the environment variable ``LOOKUPLINEAR_NO_C=1`` starts a process with it False
ENABLED = not os.environ.get("LOOKUPLINEAR_NO_C")

_VERSION = 1
#: the numba kernel -> the name of its C twin (same state, same scalars in the same order)
_TWINS = {
    "sgd_rows": "sgd",
    "adagrad_rows": "adagrad",
    "rowwise_adagrad_rows": "rowwise_adagrad",
    "adam_rows": "adam",
}
_SUFFIX = {np.dtype(np.float32): "f32", np.dtype(np.float64): "f64"}
#: entries are numbered in 32 bits and rows keyed in 32 bits inside the sort
_MAX_ENTRIES = 2**31 - 1
_MAX_ROWS = 2**32


@functools.cache
def _load() -> Any:
    """The ctypes library, or None where the extension was not built or does not match."""
    try:
        from . import _rowkernels  # type: ignore[attr-defined]

        lib = ctypes.CDLL(_rowkernels.__file__)
    except (ImportError, OSError):
        return None
    lib.ll_version.restype = ctypes.c_int64
    if lib.ll_version() != _VERSION:
        return None
    p, i64 = ctypes.c_void_p, ctypes.c_int64
    for sfx in _SUFFIX.values():
        fn = getattr(lib, f"ll_group_rows_{sfx}")
        fn.restype, fn.argtypes = i64, [p, i64, p, i64, i64, p, p, i64, p, p]
        for name in _TWINS.values():
            fn = getattr(lib, f"ll_rows_{name}_{sfx}")
            fn.restype, fn.argtypes = i64, [p, p, p, i64, p, i64, p]
            fn = getattr(lib, f"ll_fused_{name}_{sfx}")
            fn.restype, fn.argtypes = i64, [p, i64, p, i64, i64, p, p, i64, p, p, p]
    return lib


def _enabled() -> Any:
    """The library where it is built and :data:`ENABLED`, else None."""
    return _load() if ENABLED else None


def available() -> bool:
    """Whether the C kernels are built and enabled."""
    return _enabled() is not None


def _ptr(a: np.ndarray) -> int:
    return int(a.ctypes.data)


def _entries(
    indices: np.ndarray, offsets: np.ndarray, weights: np.ndarray, grad_out: np.ndarray,
    padding_idx: int, in_features: int,
) -> tuple[int, int, int, int, int, int | None, int] | None:
    """The leading arguments of the grouping and fused kernels, ``(indices, n, offsets,
    n_bags, padding_idx, weights, grad_out)``, from a lookup's backward in the form of
    :func:`lookuplinear.rowgrad.numpy_inputs`; None where the C kernels do not take them."""
    if (
        grad_out.dtype not in _SUFFIX
        or grad_out.ndim != 2
        or not grad_out.flags.c_contiguous
        or indices.size > _MAX_ENTRIES
        or grad_out.shape[0] > _MAX_ENTRIES
        or in_features > _MAX_ROWS
        or (weights.size and weights.dtype != grad_out.dtype)
    ):
        return None
    n_bags = offsets.size - 1 if offsets.size else -1
    return (_ptr(indices), indices.size, _ptr(offsets), n_bags, padding_idx,
            _ptr(weights) if weights.size else None, _ptr(grad_out))


def group_rows(
    indices: np.ndarray, offsets: np.ndarray, weights: np.ndarray, grad_out: np.ndarray,
    padding_idx: int, in_features: int,
) -> tuple[np.ndarray, np.ndarray] | None:
    """``(rows, values)`` as :func:`lookuplinear._numba.group_rows` (the same sums, in the same
    order), or None where the C kernels do not apply."""
    lib = _enabled()
    args = lib and _entries(indices, offsets, weights, grad_out, padding_idx, in_features)
    if not args:
        return None
    dim = grad_out.shape[1]
    rows = np.empty(indices.size, np.int64)  # at most one row per entry
    values = np.empty((indices.size, dim), grad_out.dtype)
    fn = getattr(lib, f"ll_group_rows_{_SUFFIX[grad_out.dtype]}")
    n = fn(*args, dim, _ptr(rows), _ptr(values))
    if n < 0:
        raise MemoryError("lookuplinear: out of memory grouping the rows of a backward")
    return rows[:n], values[:n]


def _state(kernel: Any, weight: np.ndarray, state: np.ndarray) -> str | None:
    """The C name of ``kernel``'s twin if ``weight`` and ``state`` have the layout it reads:
    ``weight`` C-contiguous rows; the state one contiguous row per table row (``Adam``: m and
    v of a row next to each other, ``RowWiseAdagrad``: one value per row)."""
    name = _TWINS.get(getattr(kernel, "__name__", ""))
    if (
        name is None
        or weight.dtype not in _SUFFIX
        or weight.ndim != 2
        or not weight.flags.c_contiguous
        or state.dtype != weight.dtype
    ):
        return None
    rows, dim = weight.shape
    size = weight.itemsize
    if name == "adam":
        ok = state.shape == (rows, 2, dim) and state.strides == (2 * dim * size, dim * size, size)
    elif name == "rowwise_adagrad":
        ok = state.shape == (rows,) and state.strides == (size,)
    else:
        ok = state.shape == weight.shape and state.flags.c_contiguous
    return f"{name}_{_SUFFIX[weight.dtype]}" if ok else None


def _params(scalars: tuple[Any, ...]) -> Any:
    """The optimizer's scalars as the C kernels read them: 8 doubles (a float32 scalar is
    exact as a double, and converted back to float32 in C)."""
    return (ctypes.c_double * 8)(*(float(v) for v in scalars))


def update(
    kernel: Any, weight: np.ndarray, rows: np.ndarray, values: np.ndarray, state: np.ndarray,
    *scalars: Any,
) -> bool:
    """``kernel(weight, rows, values, state, *scalars)`` (a numba row kernel) by its C twin;
    False (nothing done) where that does not apply."""
    lib = _enabled()
    name = lib and _state(kernel, weight, state)
    if (
        not name
        or rows.dtype != np.int64
        or values.dtype != weight.dtype
        or values.shape != (rows.size, weight.shape[1])
        or not (rows.flags.c_contiguous and values.flags.c_contiguous)
    ):
        return False
    getattr(lib, f"ll_rows_{name}")(
        _ptr(weight), _ptr(state), _ptr(rows), rows.size, _ptr(values), weight.shape[1],
        _params(scalars),
    )
    return True


def fused_update(
    indices: np.ndarray, offsets: np.ndarray, weights: np.ndarray, grad_out: np.ndarray,
    padding_idx: int, in_features: int, kernel: Any, weight: np.ndarray, state: np.ndarray,
    *scalars: Any,
) -> int | None:
    """:func:`lookuplinear._numba.fused_rows` by the C kernels: the rows grouped and each
    updated as soon as its gradient is summed. Returns the number of rows updated, or None
    (nothing done) where the C kernels do not apply."""
    lib = _enabled()
    name = lib and _state(kernel, weight, state)
    args = name and _entries(indices, offsets, weights, grad_out, padding_idx, in_features)
    if not args or grad_out.dtype != weight.dtype or grad_out.shape[1] != weight.shape[1]:
        return None
    n = getattr(lib, f"ll_fused_{name}")(
        *args, weight.shape[1], _ptr(weight), _ptr(state), _params(scalars),
    )
    if n < 0:
        raise MemoryError("lookuplinear: out of memory grouping the rows of a backward")
    return int(n)
