"""The hash functions of the library, each defined once: MurmurHash3, SplitMix64 and the
quotient-remainder rows, with their C twins beside them (tested equal).

* :func:`hash_ids`: unbounded IDs (any int64, or strings) to the rows of a table. The row of an
  ID among ``n`` is scikit-learn's ``HashingVectorizer`` column of it (``alternate_sign=False``):
  ``abs(murmurhash3_32(key, seed=0)) % n``, where ``key`` is the UTF-8 bytes of a string ID and
  the 8 little-endian bytes of an integer ID. As a matrix, hashing is the ``(num_ids, n)`` 0/1
  matrix ``H`` with one 1 per row, so a hashed lookup is ``one_hot(id) @ H @ W``: ``nn.Linear``
  on the hashed one-hot.
* :func:`murmur3_int64` (torch) and :func:`murmur3_bytes` (C ``ll_murmur3_32``, scikit-learn's
  where C is not built): MurmurHash3_x86_32 with seed 0, signed.
* :func:`splitmix64` (torch), :func:`splitmix64_int` (a Python int) and
  :func:`splitmix64_c` (C ``ll_splitmix64``, the probe start of ``IdMap``'s hash table).
* :func:`qr_rows` and :func:`qr_stored_rows`: the quotient-remainder trick (Shi et al., KDD
  2020), row ``h`` of ``num_embeddings`` read as ``Q[h // m] + R[h % m]``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from .._sizes import as_size
from .rawids import as_int_ids, as_str_ids, check_strs, key_type_of

__all__ = [
    "hash_ids",
    "murmur3_bytes",
    "murmur3_int64",
    "qr_rows",
    "qr_stored_rows",
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


def hash_ids(ids: torch.Tensor | np.ndarray | Sequence[Any], num_rows: int) -> torch.Tensor:
    """The row of every ID among ``num_rows``: ``abs(murmurhash3_32(key)) % num_rows``.

    Dense equivalent: the hashing matrix ``H`` (``H[i, hash_ids(i)] = 1``), so that a table of
    ``num_rows`` rows looked up at ``hash_ids(x)`` equals ``nn.Linear`` on ``one_hot(x) @ H``.
    Strings hash as scikit-learn's ``HashingVectorizer(alternate_sign=False)`` hashes a token
    (the same columns); an integer ID hashes as its 8 little-endian bytes (negative IDs too).

    Parameters
    ----------
    ids : integer tensor or array of any shape, or strings
        Integer IDs: a tensor of any integer dtype, a numpy integer array (``uint64`` below
        ``2**63``), a list or pandas column of ints. String IDs: a numpy ``str`` or object
        array, a list of str, a pandas column of str (object, ``string`` or categorical
        dtype). Which of the two is read from the dtype, or from the first element.
    num_rows : int
        The table's rows, ``>= 1``.

    Returns
    -------
    Tensor of int64, the shape of ``ids`` (``(len(ids),)`` for a list), on ``ids``' device
    (the CPU for anything but a tensor).

    Raises
    ------
    InputTypeError
        Floating-point or boolean IDs, or IDs of mixed types (ints among strings).
    InputValueError
        ``num_rows < 1``; a missing ID (None, NaN, pandas' NA); an integer outside int64.

    Examples
    --------
    >>> hash_ids(torch.tensor([0, -1, 2**40]), 1000)
    tensor([...])
    >>> from sklearn.utils import murmurhash3_32
    >>> int(hash_ids(["user42"], 1000)[0]) == abs(murmurhash3_32("user42", seed=0)) % 1000
    True
    """
    num_rows = as_size(num_rows, "num_rows", where="hash_ids")
    if key_type_of(ids) == "int":
        return _rows(murmur3_int64(as_int_ids(ids, "hash_ids").long()), num_rows)
    strs, shape = as_str_ids(ids, "hash_ids")
    check_strs(strs, "hash_ids")
    hashes = torch.tensor([murmur3_bytes(s.encode("utf-8", "surrogatepass")) for s in strs],
                          dtype=torch.int64)
    return _rows(hashes, num_rows).reshape(shape)


def _rows(signed: torch.Tensor, n: int) -> torch.Tensor:
    return signed.abs() % n  # abs(-2**31) is 2**31 in int64, as scikit-learn defines it


def murmur3_bytes(data: bytes) -> int:
    """The signed MurmurHash3_x86_32 (seed 0) of ``data`` (C ``ll_murmur3_32``; scikit-learn's
    ``murmurhash3_32`` where the C kernels are not built).

    ``murmur3_bytes(int(i).to_bytes(8, "little", signed=True)) == murmur3_int64(i)``.

    Examples
    --------
    >>> murmur3_bytes(b"a b")
    1033158525
    """
    from ..ops._backend import use_c
    from ..ops._clib import function

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
    from ..ops._clib import function

    keys = keys.long().contiguous()
    out = torch.empty_like(keys)
    function("ll_splitmix64")(
        keys.data_ptr(), keys.numel(), out.data_ptr())
    return out


def qr_stored_rows(num_embeddings: int, buckets: int) -> int:
    """The rows a quotient-remainder table stores: ``ceil(num_embeddings / buckets)`` quotient
    rows, then ``buckets`` remainder rows.

    Examples
    --------
    >>> qr_stored_rows(1_000_000, 1000)
    2000
    """
    return -(-num_embeddings // buckets) + buckets


def qr_rows(rows: torch.Tensor, num_embeddings: int, buckets: int
            ) -> tuple[torch.Tensor, torch.Tensor]:
    """The two stored rows that row ``h`` of a quotient-remainder table reads: its quotient
    row ``h // m`` and its remainder row ``ceil(num_embeddings / m) + h % m`` (``m`` =
    ``buckets``), so that row ``h`` is ``Q[h // m] + R[h % m]``.

    Dense equivalent: the ``(num_embeddings, stored rows)`` 0/1 matrix with two 1s per row;
    a table looked up at both rows and summed is ``nn.Linear`` on the multi-hot of the two.

    Examples
    --------
    >>> qr_rows(torch.tensor([0, 7, 9]), 10, 4)
    (tensor([0, 1, 2]), tensor([3, 6, 4]))
    """
    n_q = -(-num_embeddings // buckets)
    return rows // buckets, rows % buckets + n_q
