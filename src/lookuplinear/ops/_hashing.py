"""The hash functions the kernels compute, each defined once beside its C twin (tested equal):
MurmurHash3 and SplitMix64.

* :func:`murmur3_int64` (torch), :func:`murmur3_segments` (torch, of byte strings) and
  :func:`murmur3_many` / :func:`murmur3_bytes` (the operator ``lookuplinear::murmur3_32``, over
  C ``ll_murmur3_32``): MurmurHash3_x86_32 with seed 0, signed.
* :func:`hash_int_ids`: the core of :func:`lookuplinear.hash_ids` for an integer tensor, the row
  ``abs(murmur3_int64(id)) % num_rows``, over :func:`murmur3_ids` (C where it can).
* :func:`splitmix64` (torch), :func:`splitmix64_int` (a Python int) and
  :func:`splitmix64_c` (the operator ``lookuplinear::splitmix64``, over C ``ll_splitmix64``,
  the probe start of ``IdMap``'s hash table).
* :func:`ngram_bucket` (torch): ``FeatureHasher``'s column of signed 32-bit hashes, the twin of
  the operator ``lookuplinear::ngram_bucket`` (C ``ll_ngram_bucket``).

:mod:`lookuplinear.ids.hashing` states what they mean for IDs and re-exports them.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

import numpy as np
import torch

from ..errors import InputValueError
from ._backend import use_c

__all__ = [
    "hash_int_ids",
    "murmur3_bytes",
    "murmur3_ids",
    "murmur3_int64",
    "murmur3_many",
    "murmur3_segments",
    "ngram_bucket",
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
    return _finish(h, 8)  # the key's length


def _scramble(k: torch.Tensor) -> torch.Tensor:
    """The mix of one 4-byte block (or the tail) before it enters the hash."""
    return _mul(_rotl(_mul(k, _C1), 15), _C2)


def _finish(h: torch.Tensor, length: torch.Tensor | int) -> torch.Tensor:
    """The final mix of the state ``h`` after ``length`` bytes: the signed 32-bit hash."""
    h = h ^ (length & _M32)
    h = h ^ (h >> 16)
    h = _mul(h, 0x85EBCA6B)
    h = h ^ (h >> 13)
    h = _mul(h, 0xC2B2AE35)
    h = h ^ (h >> 16)
    return torch.where(h >= 2**31, h - 2**32, h)


def murmur3_segments(data: torch.Tensor, starts: torch.Tensor) -> torch.Tensor:
    """Signed MurmurHash3_x86_32 (seed 0) of each byte string ``data[starts[i]:starts[i + 1]]``,
    as int64, with torch ops (the twin of the operator ``lookuplinear::murmur3_32``): all
    strings at once, one step per 4-byte block of the longest.

    Examples
    --------
    >>> data = torch.tensor(list(b"a bxyz"), dtype=torch.uint8)
    >>> murmur3_segments(data, torch.tensor([0, 3, 3])).tolist()  # b"a b", b""
    [1033158525, 0]
    """
    d = data.long() if data.numel() else data.new_zeros(1, dtype=torch.int64)
    begin = starts[:-1].long()
    lengths = starts[1:].long() - begin
    blocks = lengths // 4
    h = torch.zeros_like(lengths)

    def byte(at: torch.Tensor, live: torch.Tensor) -> torch.Tensor:
        return torch.where(live, d[torch.where(live, at, 0)], 0)

    for j in range(int(blocks.max()) if blocks.numel() else 0):
        live = blocks > j
        at = begin + 4 * j
        k = byte(at, live) | (byte(at + 1, live) << 8) | (byte(at + 2, live) << 16) | (
            byte(at + 3, live) << 24)
        mixed = (_mul(_rotl(h ^ _scramble(k), 13), 5) + 0xE6546B64) & _M32
        h = torch.where(live, mixed, h)
    tail, at = lengths % 4, begin + 4 * blocks  # the last 1 to 3 bytes, little-endian
    k = torch.zeros_like(h)
    for i in range(3):
        k = k | (byte(at + i, tail > i) << (8 * i))
    h = torch.where(tail > 0, h ^ _scramble(k), h)
    return _finish(h, lengths)


def _operands(items: Sequence[bytes]) -> tuple[torch.Tensor, torch.Tensor]:
    """``items`` as the operands of ``murmur3_32``: their bytes one after another (uint8) and
    the ``len(items) + 1`` bounds between them (int64)."""
    joined = bytearray().join(items)  # writable: a tensor over it without a copy or a warning
    data = (torch.frombuffer(joined, dtype=torch.uint8) if joined
            else torch.empty(0, dtype=torch.uint8))
    starts = np.zeros(len(items) + 1, np.int64)  # numpy: a third of torch's cost for a few
    np.cumsum(np.fromiter(map(len, items), np.int64, len(items)), out=starts[1:])
    return data, torch.from_numpy(starts)


def murmur3_many(items: Sequence[bytes]) -> torch.Tensor:
    """The signed MurmurHash3_x86_32 (seed 0) of every byte string, as int64: one call of the
    operator ``lookuplinear::murmur3_32`` (C, :func:`murmur3_segments` with the ``torch``
    backend), scikit-learn's ``murmurhash3_32(item, seed=0, positive=False)`` of each.

    Examples
    --------
    >>> murmur3_many([b"a b", b""]).tolist()
    [1033158525, 0]
    """
    data, starts = _operands(items)
    if use_c():
        out: torch.Tensor = torch.ops.lookuplinear.murmur3_32.default(data, starts)
        return out
    return murmur3_segments(data, starts)


def signed_rows(signed: torch.Tensor, num_rows: int | torch.Tensor) -> torch.Tensor:
    """The row of each signed 32-bit hash among ``num_rows`` (one count, or one per hash):
    ``abs(h) % num_rows``."""
    return signed.abs() % num_rows  # abs(-2**31) is 2**31 in int64, as scikit-learn defines it


def murmur3_ids(ids: torch.Tensor) -> torch.Tensor:
    """:func:`murmur3_int64` of integer IDs (of any int dtype, hashed as int64), the fastest
    way: on the CPU with the C kernels, one call of the operator ``lookuplinear::murmur3_32``
    over the IDs' own bytes (each ID the string of its 8 little-endian bytes); elsewhere, and
    while a graph is recorded, :func:`murmur3_int64`'s torch ops (about fifty of them)."""
    ids = ids.to(torch.int64)
    # use_c first: False while a graph is recorded, whose sizes are not read
    if use_c(ids) and sys.byteorder == "little" and ids.numel():
        flat = ids.reshape(-1).contiguous()
        starts = torch.arange(0, 8 * flat.numel() + 1, 8)
        signed: torch.Tensor = torch.ops.lookuplinear.murmur3_32.default(
            flat.view(torch.uint8), starts)
        return signed.view(ids.shape)
    return murmur3_int64(ids)


def hash_int_ids(ids: torch.Tensor, num_rows: int) -> torch.Tensor:
    """The row of every int64 ID among ``num_rows``: ``abs(murmur3_int64(id)) % num_rows``
    (:func:`lookuplinear.hash_ids` of an integer tensor, without its checks;
    :func:`murmur3_ids`)."""
    return signed_rows(murmur3_ids(ids), num_rows)


def murmur3_bytes(data: bytes) -> int:
    """The signed MurmurHash3_x86_32 (seed 0) of ``data``, scikit-learn's ``murmurhash3_32``
    (:func:`murmur3_many` of one string: hash many at once).

    ``murmur3_bytes(int(i).to_bytes(8, "little", signed=True)) == murmur3_int64(i)``.

    Examples
    --------
    >>> murmur3_bytes(b"a b")
    1033158525
    """
    return int(murmur3_many([data])[0])


def ngram_bucket(hashes: torch.Tensor, buckets: int) -> torch.Tensor:
    """``FeatureHasher``'s column of each signed 32-bit hash (the low 32 bits of each int64):
    ``abs(h) % buckets``, ``abs(-2**31)`` taken as ``2**31`` (the twin of the operator
    ``lookuplinear::ngram_bucket``).

    Examples
    --------
    >>> ngram_bucket(torch.tensor([-7, -(2**31), 2**32 + 3]), 10).tolist()
    [7, 8, 3]
    """
    if buckets < 1:
        raise InputValueError(f"lookuplinear::ngram_bucket: buckets must be >= 1; got {buckets}")
    h = ((hashes.long() & _M32) ^ 2**31) - 2**31  # the signed 32-bit value
    return h.abs() % buckets


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
    """:func:`splitmix64` of CPU keys computed by the operator ``lookuplinear::splitmix64``
    (C ``ll_splitmix64``, the function ``IdMap``'s table probes with; :func:`splitmix64` where
    the operators are registered from Python)."""
    out: torch.Tensor = torch.ops.lookuplinear.splitmix64.default(keys.long())
    return out
