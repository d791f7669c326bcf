"""Rows of a jagged batch: row selectors (slices, indices, masks) as positions, and the entries
of chosen CSR bags."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from ..errors import InputTypeError, InputValueError, LookupIndexError

__all__ = ["gather_bags", "rows_index"]


def rows_index(name: str, rows: Any, n: int, device: torch.device) -> torch.Tensor:
    """``rows`` (a slice, integer indices or a boolean mask over ``n`` rows) as int64 positions.

    Negative indices count from the end, as in PyTorch; an index outside ``[-n, n)`` or a mask
    of another length raises ``LookupIndexError``.
    """
    if isinstance(rows, slice):  # Python's slice rules (a negative step too)
        if rows.step == 0:
            raise InputValueError(f"{name}: slice step cannot be zero, got {rows}.")
        r = range(n)[rows]
        return torch.arange(len(r), device=device) * r.step + r.start
    if isinstance(rows, int | np.integer) and not isinstance(rows, bool | np.bool_):
        rows = [int(rows)]
    t = rows if isinstance(rows, torch.Tensor) else torch.as_tensor(np.asarray(rows))
    t = t.to(device)
    if t.dtype == torch.bool:
        if t.dim() != 1 or t.numel() != n:
            raise LookupIndexError(
                f"{name}: a boolean mask must have one value per row, shape ({n},), got shape "
                f"{tuple(t.shape)}."
            )
        return torch.nonzero(t).flatten()
    if t.numel() == 0:
        return torch.zeros(0, dtype=torch.long, device=device)
    if t.dtype.is_floating_point or t.dtype.is_complex or t.dim() != 1:
        raise InputTypeError(
            f"{name}: rows must be a slice, 1-D integer indices or a boolean mask, got a "
            f"tensor of dtype {t.dtype} and shape {tuple(t.shape)}."
        )
    t = t.long()
    bad = (t < -n) | (t >= n)
    if bool(bad.any()):
        i = int(torch.nonzero(bad)[0, 0])
        raise LookupIndexError(
            f"{name}: row {int(t[i])} (rows[{i}]) is out of range for a batch of {n} rows; "
            f"rows must be in [-{n}, {n})."
        )
    return torch.where(t < 0, t + n, t)


def gather_bags(offsets: torch.Tensor, bags: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The entries of ``bags`` (positions of CSR bags), in order: ``(entry positions, lengths)``.

    The result is ``cat([arange(offsets[b], offsets[b + 1]) for b in bags])`` and the lengths
    of those bags, without a Python loop.
    """
    starts = offsets[bags].long()
    lengths = offsets[bags + 1].long() - starts
    ends = torch.cumsum(lengths, 0)
    total = int(ends[-1]) if ends.numel() else 0
    # entry p of bag j (output position ends[j] - lengths[j] + p) reads starts[j] + p
    shift = torch.repeat_interleave(starts - (ends - lengths), lengths, output_size=total)
    return torch.arange(total, device=offsets.device) + shift, lengths
