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
    if isinstance(rows, torch.Tensor):
        t = rows.to(device)
    else:
        a = np.asarray(rows)
        if not a.flags.writeable:  # torch warns about sharing a read-only array
            a = a.copy()
        t = (torch.from_numpy(a) if a.dtype.kind in "iub" and a.dtype.isnative
             else torch.as_tensor(a)).to(device)
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
    lo, hi = (int(v) for v in torch.aminmax(t))  # one pass, one sync
    if lo < -n or hi >= n:
        bad = (t < -n) | (t >= n)
        i = int(torch.nonzero(bad)[0, 0])
        raise LookupIndexError(
            f"{name}: row {int(t[i])} (rows[{i}]) is out of range for a batch of {n} rows; "
            f"rows must be in [-{n}, {n})."
        )
    return torch.where(t < 0, t + n, t) if lo < 0 else t


def gather_bags(
    offsets: torch.Tensor, bags: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The entries of ``bags`` (positions of CSR bags), in order: ``(entry positions, lengths,
    new offsets)``, the new offsets the CSR offsets of the picked bags (``N + 1``, from 0).

    The result is ``cat([arange(offsets[b], offsets[b + 1]) for b in bags])``, the lengths of
    those bags and their cumulative sum, without a Python loop.
    """
    starts = offsets.index_select(0, bags).long()
    lengths = offsets.index_select(0, bags + 1).long() - starts
    new = lengths.new_zeros(lengths.numel() + 1)
    ends = torch.cumsum(lengths, 0, out=new[1:])
    total = int(new[-1])
    # entry p of bag j (output position ends[j] - lengths[j] + p) reads starts[j] + p
    shift = torch.repeat_interleave(starts - ends + lengths, lengths, output_size=total)
    return torch.arange(total, device=offsets.device) + shift, lengths, new
