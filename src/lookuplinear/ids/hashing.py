"""The hash functions of the library, each defined once: MurmurHash3, SplitMix64 and the
quotient-remainder rows. MurmurHash3 and SplitMix64 live with the kernels, beside their C twins
(:mod:`lookuplinear.ops._hashing`, tested equal); this module states what they mean for IDs.

* :func:`hash_ids`: unbounded IDs (any int64, or strings) to the rows of a table. The row of an
  ID among ``n`` is scikit-learn's ``HashingVectorizer`` column of it (``alternate_sign=False``):
  ``abs(murmurhash3_32(key, seed=0)) % n``, where ``key`` is the UTF-8 bytes of a string ID and
  the 8 little-endian bytes of an integer ID. As a matrix, hashing is the ``(num_ids, n)`` 0/1
  matrix ``H`` with one 1 per row, so a hashed lookup is ``one_hot(id) @ H @ W``: ``nn.Linear``
  on the hashed one-hot.
* :func:`murmur3_int64` (torch) and :func:`murmur3_bytes` (the operator
  ``lookuplinear::murmur3_32``, C ``ll_murmur3_32``): MurmurHash3_x86_32 with seed 0, signed.
* :func:`splitmix64` (torch), :func:`splitmix64_int` (a Python int) and
  :func:`splitmix64_c` (the operator ``lookuplinear::splitmix64``, the probe start of
  ``IdMap``'s hash table).
* :func:`qr_rows` and :func:`qr_stored_rows`: the quotient-remainder trick (Shi et al., KDD
  2020), row ``h`` of ``num_embeddings`` read as ``Q[h // m] + R[h % m]``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from .._sizes import as_size
from ..errors import InputValueError
from ..ops._hashing import (
    hash_int_ids,
    murmur3_bytes,
    murmur3_ids,
    murmur3_int64,
    murmur3_many,
    signed_rows,
    splitmix64,
    splitmix64_c,
    splitmix64_int,
)
from .rawids import as_int_ids, as_str_ids, check_strs, key_type_of

__all__ = [
    "MAX_HASH_ROWS",
    "as_hash_rows",
    "hash_ids",
    "murmur3_bytes",
    "murmur3_ids",
    "murmur3_int64",
    "qr_rows",
    "qr_stored_rows",
    "splitmix64",
    "splitmix64_c",
    "splitmix64_int",
]


MAX_HASH_ROWS = 2**63 - 1
"""The most rows IDs hash into: a row is an int64 (``hash_ids`` computes ``abs(h) % n`` in
int64, where ``2**63`` has no value)."""


def as_hash_rows(value: Any, name: str, *, where: str) -> int:
    """``value`` as the row count of a hashed table: :func:`~lookuplinear._sizes.as_size`,
    and at most :data:`MAX_HASH_ROWS`.

    Raises
    ------
    SizeTypeError, SizeError
        As :func:`~lookuplinear._sizes.as_size`.
    InputValueError
        ``value`` above ``2**63 - 1``.
    """
    rows = as_size(value, name, where=where)
    if rows > MAX_HASH_ROWS:
        raise InputValueError(
            f"{where}: {name} must be at most 2**63 - 1 (rows are int64: a hashed row is "
            f"computed in int64), got {rows}. Hash into fewer rows."
        )
    return rows


def hash_ids(ids: torch.Tensor | np.ndarray | Sequence[Any], num_rows: int) -> torch.Tensor:
    """The row of every ID among ``num_rows``: ``abs(murmurhash3_32(key)) % num_rows``.

    Dense equivalent: the hashing matrix ``H`` (``H[i, hash_ids(i)] = 1``), so that a table of
    ``num_rows`` rows looked up at ``hash_ids(x)`` equals ``nn.Linear`` on ``one_hot(x) @ H``.
    Strings hash as scikit-learn's ``HashingVectorizer(alternate_sign=False)`` hashes a token
    (the same columns); an integer ID hashes as its 8 little-endian bytes (negative IDs too).

    Parameters
    ----------
    ids : integer tensor or array of any shape, or strings
        Integer IDs: a tensor of any integer dtype or a numpy integer array (``uint64`` below
        ``2**63``), a list or pandas column of ints. String IDs: a numpy ``str`` or object
        array, a list of str, a pandas column of str (object, ``string``, pyarrow string or
        categorical dtype). Which of the two is read from the dtype, or from the first element.
    num_rows : int
        The table's rows, from 1 to ``2**63 - 1``.

    Returns
    -------
    Tensor of int64, the shape of ``ids`` (``(len(ids),)`` for a list), on ``ids``' device
    (the CPU for anything but a tensor).

    Raises
    ------
    InputTypeError
        Floating-point or boolean IDs, or IDs of mixed types (ints among strings).
    InputValueError
        ``num_rows`` outside ``[1, 2**63 - 1]``; a missing ID (None, NaN, pandas' NA); an
        integer outside int64.

    Examples
    --------
    >>> hash_ids(torch.tensor([0, -1, 2**40]), 1000)
    tensor([...])
    >>> from sklearn.utils import murmurhash3_32
    >>> int(hash_ids(["user42"], 1000)[0]) == abs(murmurhash3_32("user42", seed=0)) % 1000
    True
    """
    num_rows = as_hash_rows(num_rows, "num_rows", where="hash_ids")
    if key_type_of(ids, "hash_ids") == "int":
        return hash_int_ids(as_int_ids(ids, "hash_ids").long(), num_rows)
    strs, shape = as_str_ids(ids, "hash_ids")
    check_strs(strs, "hash_ids")
    hashes = murmur3_many([s.encode("utf-8", "surrogatepass") for s in strs])
    return signed_rows(hashes, num_rows).reshape(shape)


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
