"""``hash_ids``: unbounded IDs (any int64, or strings) to the rows of a table, by MurmurHash3.

The row of an ID among ``n`` is scikit-learn's ``HashingVectorizer`` column of it
(``alternate_sign=False``): ``abs(murmurhash3_32(key, seed=0)) % n``, where ``key`` is the UTF-8
bytes of a string ID and the 8 little-endian bytes of an integer ID. As a matrix, hashing is the
``(num_ids, n)`` 0/1 matrix ``H`` with one 1 per row, so a hashed lookup is
``one_hot(id) @ H @ W``: ``nn.Linear`` on the hashed one-hot.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from ._rawids import as_int_ids, as_str_ids, check_strs, key_type_of
from ._sizes import as_size

__all__ = ["hash_ids"]

_M32 = 0xFFFFFFFF
_C1, _C2 = 0xCC9E2D51, 0x1B873593


def _rotl(x: torch.Tensor, r: int) -> torch.Tensor:
    return ((x << r) | (x >> (32 - r))) & _M32


def _mul(x: torch.Tensor, c: int) -> torch.Tensor:
    """``x * c mod 2**32`` for 32-bit ``x`` in int64, ``c`` split so no product passes 2**63."""
    lo, hi = c & 0xFFFF, c >> 16
    return ((x * lo) + (((x * hi) & 0xFFFF) << 16)) & _M32


def _murmur3_int64(ids: torch.Tensor) -> torch.Tensor:
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
        return _rows(_murmur3_int64(as_int_ids(ids, "hash_ids").long()), num_rows)
    strs, shape = as_str_ids(ids, "hash_ids")
    check_strs(strs, "hash_ids")
    from ._kernels._ngrams import murmur

    hashes = torch.tensor([murmur(s.encode("utf-8", "surrogatepass")) for s in strs],
                          dtype=torch.int64)
    return _rows(hashes, num_rows).reshape(shape)


def _rows(signed: torch.Tensor, n: int) -> torch.Tensor:
    return signed.abs() % n  # abs(-2**31) is 2**31 in int64, as scikit-learn defines it
