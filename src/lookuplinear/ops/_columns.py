"""Columns of several blocks side by side in one matrix, and back: the output of lookups of
tables of different widths, in feature order.

A collection's tables of one width are one parameter, so a batch is one lookup per width
(``(N, F_w * w)`` each, its features side by side), but the output puts the features in the
tables' order, which interleaves the widths::

    blocks   [a a | c c]   (width 2: features a, c)   [b b b]   (width 3: feature b)
    out      [a a | b b b | c c]
    segments (block 0, column 0, 2), (1, 0, 3), (0, 2, 2)

:func:`interleave` builds ``out`` and :func:`deinterleave` takes a gradient of ``out`` apart
into the blocks' gradients. On the CPU each is one C pass (``ll_interleave``, ``csrc/gather.c``),
the rows of a common width copied as a few vector moves; elsewhere ``torch.cat``. Consecutive
features of one block are one segment.
"""

from __future__ import annotations

import ctypes
import functools
from collections.abc import Sequence

import torch

from ._backend import use_c
from ._clib import function, ptr

__all__ = ["deinterleave", "interleave", "segment_tensor", "segment_triples", "segments"]

_P = ctypes.c_void_p


def segments(parts: Sequence[tuple[int, int]], widths: Sequence[int]) -> torch.Tensor:
    """The ``(3, S)`` int64 segments ``(block, first column, columns)`` of an output made of
    ``parts``: ``(block, columns)`` in output order, each block's parts taken left to right
    from its ``widths[block]`` columns; neighbours of one block merged.

    Examples
    --------
    >>> segments([(0, 2), (1, 3), (0, 2)], [4, 3]).tolist()
    [[0, 1, 0], [0, 0, 2], [2, 3, 2]]
    >>> segments([(0, 2), (0, 2), (1, 3)], [4, 3]).tolist()
    [[0, 1], [0, 0], [4, 3]]
    """
    return segment_tensor(segment_triples(parts, widths))


def segment_triples(parts: Sequence[tuple[int, int]], widths: Sequence[int]
                    ) -> tuple[int, ...]:
    """:func:`segments` as a flat tuple of ``(block, first column, columns)`` triples.

    Examples
    --------
    >>> segment_triples([(0, 2), (1, 3), (0, 2)], [4, 3])
    (0, 0, 2, 1, 0, 3, 0, 2, 2)
    """
    taken = [0] * len(widths)
    out: list[list[int]] = []
    for block, cols in parts:
        if out and out[-1][0] == block:
            out[-1][2] += cols
        else:
            out.append([block, taken[block], cols])
        taken[block] += cols
    if taken != list(widths):
        raise ValueError(f"segments: the parts take {taken} columns of blocks of {list(widths)}")
    return tuple(v for seg in out for v in seg)


@functools.lru_cache(maxsize=64)
def segment_tensor(triples: tuple[int, ...]) -> torch.Tensor:
    """The ``(3, S)`` int64 segments of ``(block, first column, columns)`` triples, flattened
    (as an operator's ``int[]`` argument holds them); the same tensor for the same triples."""
    return torch.tensor(triples, dtype=torch.int64).reshape(-1, 3).T.contiguous()


def interleave(blocks: Sequence[torch.Tensor], segs: torch.Tensor) -> torch.Tensor:
    """``cat([blocks[b][:, o:o + c] for b, o, c in segs.T], 1)``: the ``(N, total)`` matrix of
    the blocks' segments side by side (blocks ``(N, width)`` of one dtype and device, each row
    contiguous)."""
    n = blocks[0].shape[0]
    if _c_takes(blocks):
        out = torch.empty(n, int(segs[2].sum()), dtype=blocks[0].dtype)
        _call(blocks, segs, out, to_out=True)
        return out
    return torch.cat([blocks[b].narrow(1, o, c) for b, o, c in segs.T.tolist()], 1)


def deinterleave(out: torch.Tensor, segs: torch.Tensor, blocks: Sequence[torch.Tensor]) -> None:
    """The inverse of :func:`interleave`: ``out``'s columns copied into the ``blocks`` whose
    segments make it (views of the caller's tensors, each row contiguous)."""
    if _c_takes([out, *blocks]):
        _call(blocks, segs, out.contiguous(), to_out=False)
        return
    at = 0
    with torch.no_grad():  # a copy, as the C pass: no graph (out may require grad)
        for b, o, c in segs.T.tolist():
            blocks[b].narrow(1, o, c).copy_(out.narrow(1, at, c))
            at += c


def _c_takes(tensors: Sequence[torch.Tensor]) -> bool:
    dtype = tensors[0].dtype
    for t in tensors:
        if t.dim() != 2 or t.dtype != dtype or t.stride(1) != 1:
            return False
    return use_c(*tensors)


def _call(blocks: Sequence[torch.Tensor], segs: torch.Tensor, out: torch.Tensor, to_out: bool
          ) -> None:
    size = out.element_size()
    pointers = (ctypes.c_void_p * len(blocks))(*map(torch.Tensor.data_ptr, blocks))
    block_ld = torch.tensor([b.stride(0) * size for b in blocks], dtype=torch.int64)
    in_bytes = (segs * size).contiguous()  # named: they live through the call
    fn = function("ll_interleave")
    fn(out.shape[0], segs.shape[1], ctypes.cast(pointers, _P), ptr(block_ld), ptr(segs[0]),
       ptr(in_bytes[1]), ptr(in_bytes[2]), ptr(out), out.shape[1] * size, int(to_out))
