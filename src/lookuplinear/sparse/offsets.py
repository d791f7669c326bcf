"""The one validator of CSR offsets, for :class:`~lookuplinear.sparse.bags.Bags` and
:class:`~lookuplinear.sparse.keyed.KeyedBags`.

CSR offsets of ``nnz`` entries cut them into ``len(offsets) - 1`` bags::

    entries = [a, b,   c,   d, e, f]
    offsets = [0,      2,   3,        6]      # bag b is entries[offsets[b]:offsets[b + 1]]

They start at 0, never decrease and end at ``nnz``.
"""

from __future__ import annotations

from typing import Any

import torch

from ..errors import InputValueError
from ..ops import offsets_ok, values_known

__all__ = ["check_offsets"]


def check_offsets(offsets: Any, nnz: int, *, owner: str = "Bags", entries: str = "indices") -> None:
    """Raise ``InputValueError`` unless ``offsets`` are the CSR offsets of ``nnz`` entries.

    Parameters
    ----------
    offsets : Tensor or numpy array of shape (N + 1,), integer
        The offsets to check.
    nnz : int
        The number of entries they cut into bags.
    owner, entries : str
        The batch type and the name of its entries, for the message (``"Bags"`` and
        ``"indices"``, ``"KeyedBags"`` and ``"values"``).

    Raises
    ------
    InputValueError
        The offsets are empty, do not start at 0, decrease, or do not end at ``nnz``.

    Examples
    --------
    >>> check_offsets(torch.tensor([0, 2, 3]), 3)
    >>> check_offsets(torch.tensor([0, 2, 1, 3]), 3)
    Traceback (most recent call last):
        ...
    lookuplinear.errors.InputValueError: Bags: offsets must be non-decreasing (CSR offsets), ...
    """
    if (offsets.numel() if isinstance(offsets, torch.Tensor) else offsets.size) == 0:
        raise InputValueError(
            f"{owner}: offsets must hold N + 1 entries (CSR offsets: 0, end of bag 0, ...), got "
            "an empty tensor. An empty batch has offsets=[0]."
        )
    if isinstance(offsets, torch.Tensor):
        if torch.compiler.is_compiling():  # tensor ops only, no host arrays in a graph
            if values_known():
                _explain(offsets, nnz, owner, entries)
            return
        if offsets.is_meta:  # meta tensors have no values to check
            return
        if not offsets.is_cpu:
            offsets = offsets.cpu()
    # one C pass: numpy ops here slowed the next lookup by 10-25% (ops/_inputs.py)
    if not offsets_ok(offsets, nnz):
        _explain(offsets, nnz, owner, entries)


def _explain(vals: Any, nnz: int, owner: str, entries: str) -> None:
    """Raise ``InputValueError`` saying how ``vals`` (numpy array or tensor) fail to be the CSR
    offsets of ``nnz`` entries; return if they are fine."""
    first, last = int(vals[0]), int(vals[-1])
    if first != 0:
        raise InputValueError(
            f"{owner}: offsets must start at 0 (CSR offsets), got offsets[0]={first}. "
            "Prepend 0 to EmbeddingBag-style offsets."
        )
    if last != nnz:
        raise InputValueError(
            f"{owner}: offsets must end at len({entries})={nnz} (CSR offsets, "
            f"len(offsets) == N + 1), got offsets[-1]={last}. For EmbeddingBag-style start "
            f"offsets, append len({entries})."
        )
    decreasing = vals[1:] < vals[:-1]
    if bool(decreasing.any()):
        bag = int(decreasing.nonzero()[0][0])  # numpy: a tuple of arrays; torch: (k, 1)
        raise InputValueError(
            f"{owner}: offsets must be non-decreasing (CSR offsets), but offsets[{bag + 1}]="
            f"{int(vals[bag + 1])} < offsets[{bag}]={int(vals[bag])}. Build them as 0 "
            "followed by the cumulative sum of the bag lengths."
        )
