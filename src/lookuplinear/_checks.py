"""Per-call input checks compiled by numba, for CPU input.

A check that runs on every forward call is measured against the lookup itself (about 100 us
for 1024 bags of 20 entries). Written with numpy, the CSR offsets check costs a few microseconds
of its own and, by running numpy's dispatch machinery between two lookups, slows the lookup that
follows by 10-25% (its data and code are evicted from the core's caches; docs/benchmarks.md). One
compiled loop does the same check in one pass without temporaries, at a small fraction of that.

Compiled on first use and cached on disk (``cache=True``), like :mod:`lookuplinear._numba`.
"""

from __future__ import annotations

import numpy as np
from numba import njit

__all__ = ["csr_offsets_ok"]


@njit(cache=True, nogil=True)
def _offsets_ok(offsets: np.ndarray, nnz: int) -> bool:
    n = offsets.shape[0]
    if n == 0 or offsets[0] != 0 or offsets[n - 1] != nnz:
        return False
    for k in range(1, n):  # noqa: SIM110 - numba compiles no generator inside all()
        if offsets[k] < offsets[k - 1]:
            return False
    return True


def csr_offsets_ok(offsets: np.ndarray, nnz: int) -> bool:
    """Whether ``offsets`` are the CSR offsets of ``nnz`` entries.

    True when ``offsets[0] == 0``, ``offsets[-1] == nnz`` and the offsets never decrease: the
    rows of a CSR matrix (``indptr``) with ``nnz`` stored entries.

    Examples
    --------
    >>> csr_offsets_ok(np.array([0, 2, 2, 5]), 5), csr_offsets_ok(np.array([0, 3, 2, 5]), 5)
    (True, False)
    """
    return bool(_offsets_ok(offsets, nnz))
