"""The estimators' input: ``X`` as a float32 CSR matrix, cut into ``Bags`` of consecutive rows."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import scipy.sparse as sp
import torch

from ..errors import InputValueError
from ..functional import row_scale
from ..sparse.bags import Bags

__all__ = ["CSRBatches", "csr_first", "float32_values", "fold_mode", "is_token_lists",
           "max_squared_row_norm", "to_csr"]

#: how to bring features beyond float32's range into it
_RESCALE_X = ("rescale the features, e.g. with sklearn.preprocessing.StandardScaler (dense X) "
              "or MaxAbsScaler (sparse X)")


def float32_values(a: np.ndarray, what: str, fix: str = _RESCALE_X) -> np.ndarray:
    """Finite ``a`` as float32, in which the model computes. A value beyond float32's range
    (``|v| > 3.4e38``, which the cast would make infinite) is refused, naming the largest
    one and ``fix``.

    Raises
    ------
    InputValueError
        ``a`` has a value float32 cannot hold.
    """
    with np.errstate(over="ignore"):  # the cast's overflow is what is checked next
        out = np.asarray(a, dtype=np.float32)
    if not np.isfinite(out).all():
        big = np.asarray(a, dtype=np.float64).ravel()[np.argmax(np.abs(np.asarray(a).ravel()))]
        raise InputValueError(
            f"{what} has a value {big:.6g}, beyond float32's range (magnitude at most "
            f"{np.finfo(np.float32).max:.6g}), in which the model computes; {fix}."
        )
    return out


def _int_rows(X: Any) -> bool:
    """A non-empty Python list/tuple whose rows are lists/tuples of Python (or numpy) ints
    (the first 20 rows are checked for their type, every row's length is read)."""
    if not isinstance(X, list | tuple) or len(X) == 0:
        return False
    if not all(isinstance(r, list | tuple) for r in X):
        return False
    return all(
        all(isinstance(i, int | np.integer) and not isinstance(i, bool) for i in r)
        for r in X[: min(len(X), 20)]
    )


def is_token_lists(X: Any, *, fitted_on_tokens: bool = False) -> bool:
    """Whether ``X`` is read as fastText-style token-id lists rather than as scikit-learn reads
    a nested list (a dense 2-D array).

    A list of lists of ints is token-id lists when its rows differ in length (scikit-learn
    refuses such ragged input, so nothing else reads it), or when the estimator was fitted on
    token-id lists (``fitted_on_tokens``: ``predict([[3, 1]])`` is then one document). A
    rectangular one is otherwise a dense matrix, as for any scikit-learn estimator.

    Examples
    --------
    >>> is_token_lists([[3, 1], [], [2, 2, 0]]), is_token_lists([[0, 2, 1], [1, 0, 0]])
    (True, False)
    >>> is_token_lists([[3, 1]], fitted_on_tokens=True)
    True
    """
    if not _int_rows(X):
        return False
    return fitted_on_tokens or len({len(r) for r in X}) > 1


class CSRBatches:
    """A CSR matrix as torch tensors, cut into ``Bags`` of consecutive rows.

    Rows ``a:b`` are ``Bags(indices[indptr[a]:indptr[b]], indptr[a:b+1] - indptr[a], data[...])``:
    a view, no copy, nothing densified.
    """

    def __init__(self, X: sp.csr_matrix) -> None:
        self.n = X.shape[0]
        self.indptr = torch.from_numpy(np.asarray(X.indptr, dtype=np.int64))
        self.indices = torch.from_numpy(np.asarray(X.indices, dtype=np.int64))
        self.data = torch.from_numpy(np.asarray(X.data, dtype=np.float32))

    def rows(self, a: int, b: int) -> Bags:
        s, e = int(self.indptr[a]), int(self.indptr[b])
        return Bags(self.indices[s:e], self.indptr[a : b + 1] - s, self.data[s:e])

    def bounds(self, size: int) -> Iterator[tuple[int, int]]:
        """``(a, b)`` of each batch of ``size`` consecutive rows."""
        for a in range(0, self.n, size):
            yield a, min(a + size, self.n)

    def batches(self, size: int) -> Iterator[tuple[int, int, Bags]]:
        for a, b in self.bounds(size):
            yield a, b, self.rows(a, b)


def fold_mode(X: sp.csr_matrix, mode: str) -> sp.csr_matrix:
    """``X`` with ``mode``'s row scaling folded into its values (``"mean"``: each row divided
    by its sum; ``row_scale``'s factors), so that ``X @ W`` is a ``mode`` lookup of ``X``: the
    matrix ``solver="dual_cd"`` solves on."""
    scale = row_scale(Bags.from_scipy(X), mode, None).numpy()  # (N,)
    data = X.data * np.repeat(scale, np.diff(X.indptr))
    return sp.csr_matrix((data, X.indices, X.indptr), shape=X.shape)


def max_squared_row_norm(X: sp.csr_matrix, mode: str) -> float:
    """The largest squared L2 norm of a row of ``X`` as a ``mode`` lookup reads it (0 for no
    entries): the values of ``"sum"``; each row scaled as :func:`fold_mode` scales it for
    ``"mean"`` (``sum(w**2) / sum(w)**2``) and ``"sqrtn"`` (1); for ``"max"``, whose output
    takes one entry per row and output, the largest squared entry. One pass over the stored
    values, in float64 (a unit-norm row stays within float32's rounding of 1); nothing
    densified.

    Examples
    --------
    >>> X = sp.csr_matrix(np.array([[3.0, 4.0], [1.0, 0.0]], dtype=np.float32))
    >>> [max_squared_row_norm(X, mode) for mode in ("sum", "mean", "sqrtn", "max")]
    [25.0, 1.0, 1.0, 16.0]
    """
    if not X.nnz:
        return 0.0
    values = np.asarray(X.data, dtype=np.float64)
    if mode == "max":
        return float(np.max(np.square(values)))
    starts = X.indptr[:-1][np.diff(X.indptr) > 0]  # reduceat sums each non-empty row
    squares = np.add.reduceat(np.square(values), starts)
    if mode == "mean":  # a row of sum 0 has no mean: row_scale makes it 0
        sums = np.square(np.add.reduceat(values, starts))
        squares = np.divide(squares, sums, out=np.zeros_like(squares), where=sums > 0)
    elif mode == "sqrtn":
        squares = (squares > 0).astype(np.float64)
    return float(np.max(squares))


def csr_first(X: Any) -> Any:
    """Sparse input in CSR before validation (scikit-learn cannot check DOK/LIL for NaN)."""
    if not sp.issparse(X):
        return X
    m: Any = X  # issparse narrows to an ABC without the matrix API
    return m if m.format in ("csr", "csc", "coo") else m.tocsr()


def to_csr(X: Any) -> sp.csr_matrix:
    """Validated ``X`` (sparse of any format, or dense) as a float32 CSR matrix in canonical
    format: entries stored twice at one ``(row, column)`` are summed into one, and stored
    zeros dropped (on a copy; ``X`` is left as it is), as scipy and scikit-learn read them, so
    that ``mode="sqrtn"`` and ``"max"`` (whose bags take each stored entry) and the rows
    ``hidden`` draws see the matrix's values and not how they were stored.

    Raises
    ------
    InputValueError
        A value beyond float32's range (:func:`float32_values`).
    """
    if sp.issparse(X):
        m: Any = X
        out = sp.csr_matrix(m)  # may share its arrays with X
        if not out.has_canonical_format:
            out = out.copy()
            out.sum_duplicates()
        if out.dtype != np.float32:
            out = sp.csr_matrix((float32_values(out.data, "X"), out.indices, out.indptr),
                                shape=out.shape)
        if not out.data.all():  # a stored zero (or one float32 rounds to zero) is no entry
            out = out.copy()
            out.eliminate_zeros()
        return out
    return sp.csr_matrix(float32_values(np.asarray(X), "X"))
