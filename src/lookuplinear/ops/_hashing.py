"""The hash functions the kernels compute, each defined once beside its C twin (tested equal):
MurmurHash3 and SplitMix64.

* :func:`murmur3_int64` (torch) and :func:`murmur3_bytes` (C ``ll_murmur3_32``, scikit-learn's
  where C is not built): MurmurHash3_x86_32 with seed 0, signed.
* :func:`hash_int_ids`: the core of :func:`lookuplinear.hash_ids` for an integer tensor, the row
  ``abs(murmur3_int64(id)) % num_rows``.
* :func:`splitmix64` (torch), :func:`splitmix64_int` (a Python int) and
  :func:`splitmix64_c` (C ``ll_splitmix64``, the probe start of ``IdMap``'s hash table).

:mod:`lookuplinear.ids.hashing` states what they mean for IDs and re-exports them.
"""

from __future__ import annotations

import torch

from ._backend import use_c
from ._clib import function

__all__ = [
    "hash_int_ids",
    "murmur3_bytes",
    "murmur3_int64",
    "splitmix64",
    "splitmix64_c",
    "splitmix64_int",
]

_M32 = 0xFFFFFFFF
_C1, _C2 = 0xCC9E2D51, 0x1B873593


def _rotl(x: torch.Tensor, r: int) -> torch.Tensor:
    return ((x << r) | (x >> (32 - r))) & _M32


def _mul(x: torch.Tensor, c: int) -> torch.Tensor:
    """``x * c mod 2**32`` for 32-bit ``x`` in int64, ``c`` split so no product passes 2**63."""
    lo, hi = c & 0xFFFF, c >> 16
    return ((x * lo) + (((x * hi) & 0xFFFF) << 16)) & _M32


def murmur3_int64(ids: torch.Tensor) -> torch.Tensor:
    """Signed MurmurHash3_x86_32 (seed 0) of each int64's 8 little-endian bytes, as int64."""
    h = torch.zeros_like(ids)
    for block in (ids & _M32, (ids >> 32) & _M32):  # low 4 bytes first (little-endian)
        k = _mul(_rotl(_mul(block, _C1), 15), _C2)
        h = _rotl(h ^ k, 13)
        h = (_mul(h, 5) + 0xE6546B64) & _M32
    h = h ^ 8  # the key's length
    h = h ^ (h >> 16)
    h = _mul(h, 0x85EBCA6B)
    h = h ^ (h >> 13)
    h = _mul(h, 0xC2B2AE35)
    h = h ^ (h >> 16)
    return torch.where(h >= 2**31, h - 2**32, h)


def signed_rows(signed: torch.Tensor, num_rows: int) -> torch.Tensor:
    """The row of each signed 32-bit hash among ``num_rows``: ``abs(h) % num_rows``."""
    return signed.abs() % num_rows  # abs(-2**31) is 2**31 in int64, as scikit-learn defines it


def hash_int_ids(ids: torch.Tensor, num_rows: int) -> torch.Tensor:
    """The row of every int64 ID among ``num_rows``: ``abs(murmur3_int64(id)) % num_rows``
    (:func:`lookuplinear.hash_ids` of an integer tensor, without its checks)."""
    return signed_rows(murmur3_int64(ids), num_rows)


def murmur3_bytes(data: bytes) -> int:
    """The signed MurmurHash3_x86_32 (seed 0) of ``data`` (C ``ll_murmur3_32``; scikit-learn's
    ``murmurhash3_32`` where the C kernels are not built).

    ``murmur3_bytes(int(i).to_bytes(8, "little", signed=True)) == murmur3_int64(i)``.

    Examples
    --------
    >>> murmur3_bytes(b"a b")
    1033158525
    """
    if use_c():
        h: int = function("ll_murmur3_32")(data, len(data))
        return h
    from sklearn.utils import murmurhash3_32

    return int(murmurhash3_32(data, seed=0, positive=False))


_U64 = (1 << 64) - 1
_S1, _S2 = 0xBF58476D1CE4E5B9, 0x94D049BB133111EB


def splitmix64_int(key: int) -> int:
    """SplitMix64's output function of a 64-bit ``key`` (its two's complement bits), in
    ``[0, 2**64)``.

    Examples
    --------
    >>> splitmix64_int(1)
    6238072747940578789
    """
    x = key & _U64
    x ^= x >> 30
    x = (x * _S1) & _U64
    x ^= x >> 27
    x = (x * _S2) & _U64
    return x ^ (x >> 31)


def _signed(c: int) -> int:
    return c - (1 << 64) if c >= 1 << 63 else c


def _shr(x: torch.Tensor, r: int) -> torch.Tensor:
    """The logical right shift of int64 bits."""
    return (x >> r) & ((1 << (64 - r)) - 1)


def splitmix64(keys: torch.Tensor) -> torch.Tensor:
    """:func:`splitmix64_int` of every int64 key, as the int64 of the same 64 bits.

    Examples
    --------
    >>> int(splitmix64(torch.tensor([1]))[0]) == splitmix64_int(1)  # below 2**63
    True
    """
    x = keys.long()
    x = x ^ _shr(x, 30)
    x = x * _signed(_S1)  # int64 products wrap modulo 2**64
    x = x ^ _shr(x, 27)
    x = x * _signed(_S2)
    return x ^ _shr(x, 31)


def splitmix64_c(keys: torch.Tensor) -> torch.Tensor:
    """:func:`splitmix64` computed by the C kernels' function (``ll_splitmix64``, the one
    ``IdMap``'s table probes with); the C kernels must be built."""
    keys = keys.long().contiguous()
    out = torch.empty_like(keys)
    function("ll_splitmix64")(
        keys.data_ptr(), keys.numel(), out.data_ptr())
    return out
