"""Columns of IDs (numpy, pandas, pyarrow) read as the bags of one feature.

A column is either one ID per example (an integer column: every bag holds one entry) or one
list of IDs per example (a list column: the bags, empty lists allowed)::

    user = [3, 1]                  ->  values [3, 1],     lengths [1, 1]
    tags = [[7, 7, 2], []]         ->  values [7, 7, 2],  lengths [3, 0]

Nothing here imports pandas or pyarrow: their objects are read through ``to_numpy`` and the
Arrow list layout (``offsets`` and ``flatten``), so both stay optional.
"""

from __future__ import annotations

from itertools import chain
from typing import Any

import numpy as np

from ..errors import InputTypeError, InputValueError

__all__ = ["column_bags"]

_INT64_MAX = np.iinfo(np.int64).max
_STRINGS = (
    "IDs must be integers; map string IDs to rows first with "
    "IdMap(key_type=\"str\") (lookuplinear.IdMap) or hash them with hash_ids."
)


def column_bags(name: str, column: Any) -> tuple[np.ndarray, np.ndarray]:
    """``(values, lengths)`` of column ``name``: its IDs (int64) and the length of every bag.

    Raises
    ------
    InputTypeError
        A column that is neither integer IDs nor lists of integer IDs (floats, strings, bools,
        nested lists), or that mixes scalar IDs and lists.
    InputValueError
        A missing ID (None, NaN, NA) or an ID outside the int64 range.
    """
    arrow = _arrow_list(column)
    if arrow is not None:
        return _arrow_bags(name, arrow)
    if type(column).__module__.startswith("pyarrow"):  # a flat Arrow array of IDs
        column = column.to_numpy(zero_copy_only=False)
    elif hasattr(column, "to_numpy") and not isinstance(column, np.ndarray):  # pandas
        column = column.to_numpy()
    if not isinstance(column, np.ndarray):
        column = np.fromiter(column, dtype=object, count=len(column))
    if column.ndim != 1:
        raise InputValueError(
            f"column {name!r}: expected a 1-D column (one entry per example), got shape "
            f"{column.shape}; pass each feature as its own column."
        )
    if column.dtype != object:
        values = _ids(name, column)
        return values, np.ones(len(values), dtype=np.int64)
    sized = np.fromiter((hasattr(x, "__len__") and not isinstance(x, str | bytes)
                         for x in column), dtype=bool, count=len(column))
    if not sized.any():  # scalar IDs in an object column (Python ints, None, strings)
        values = _ids(name, column)
        return values, np.ones(len(values), dtype=np.int64)
    if not sized.all():
        i = int(np.flatnonzero(~sized)[0])
        if _missing(column[i]):
            raise InputValueError(
                f"column {name!r}: row {i} is a missing list ({column[i]!r}); give an empty "
                "list for no IDs (e.g. fill the missing rows with [])."
            )
        raise InputTypeError(
            f"column {name!r} mixes lists and scalars: row {i} holds {column[i]!r}, other "
            "rows lists of IDs. Give every row a list (an empty list for no IDs), or one ID "
            "per row."
        )
    lengths = np.fromiter(map(len, column), dtype=np.int64, count=len(column))
    try:  # one call for integer lists and arrays
        flat = np.concatenate(column) if len(column) else np.zeros(0, dtype=np.int64)
    except ValueError:  # lists nested in lists, of different depths
        flat = np.zeros((1, 1))  # read below as nested lists
    if flat.dtype.kind in "iu":  # numpy reads True as 1 beside integers: refuse it here
        for i, x in enumerate(column):
            if (x.dtype.kind == "b" if isinstance(x, np.ndarray)
                    else any(isinstance(v, bool | np.bool_) for v in x)):
                raise InputTypeError(
                    f"column {name!r} (a list column): row {i} holds a bool ({x!r}); "
                    "expected integer IDs. Convert flags to IDs first (e.g. int(flag))."
                )
    else:
        # an empty list reads as float64, an ID past int64 as object, a None as object:
        # read the IDs one by one instead, so that no ID is rounded and the error names it
        try:
            flat = np.array(list(chain.from_iterable(column)))
        except ValueError:
            flat = np.zeros((1, 1))
    return _ids(name, flat, listed=True), lengths


def _missing(x: Any) -> bool:
    return x is None or (isinstance(x, float | np.floating) and x != x) or type(x).__name__ in (
        "NAType", "NaTType")


def _ids(name: str, a: np.ndarray, *, listed: bool = False) -> np.ndarray:
    """``a`` as int64 IDs, or a clear error for what is not."""
    where = f"column {name!r}" + (" (a list column)" if listed else "")
    if a.ndim == 1 and a.size == 0:
        return np.zeros(0, dtype=np.int64)
    if a.ndim != 1:
        raise InputTypeError(
            f"{where}: lists nested in lists; give one integer ID or one list of integer "
            "IDs per row."
        )
    kind = a.dtype.kind
    if kind == "i":
        return a.astype(np.int64, copy=False)
    if kind == "u":
        if a.max() > _INT64_MAX:
            raise InputValueError(
                f"{where}: ID {int(a.max())} does not fit int64; hash large unsigned IDs "
                "into range with hash_ids, or map them with IdMap."
            )
        return a.astype(np.int64)
    if kind == "f":
        nan = np.flatnonzero(np.isnan(a))
        if nan.size:
            raise InputValueError(
                f"{where}: a missing ID (NaN) at entry {int(nan[0])}; IDs must be integers. "
                "Drop or fill the missing values (e.g. fillna with an unused ID, then "
                "astype('int64')) before building the batch."
            )
        raise InputTypeError(
            f"{where}: IDs must be integers, got dtype {a.dtype}; convert the column with "
            "astype('int64') if its values are whole numbers."
        )
    if kind == "O":
        for i, x in enumerate(a):
            if _missing(x):
                raise InputValueError(
                    f"{where}: a missing ID ({x!r}) at entry {i}; IDs must be integers. Drop "
                    "or fill the missing values before building the batch."
                )
            if isinstance(x, str | bytes):
                raise InputTypeError(f"{where}: entry {i} is the string {x!r}; {_STRINGS}")
            if isinstance(x, bool | np.bool_) or not isinstance(x, int | np.integer):
                raise InputTypeError(
                    f"{where}: entry {i} is {x!r} of type {type(x).__name__}; expected an "
                    "integer ID" + ("." if listed else " or a list of integer IDs per row.")
                )
            if not -_INT64_MAX - 1 <= int(x) <= _INT64_MAX:
                raise InputValueError(
                    f"{where}: ID {int(x)} at entry {i} does not fit int64; hash large IDs "
                    "into range with hash_ids, or map them with IdMap."
                )
        return a.astype(np.int64)
    if kind in "US":
        raise InputTypeError(f"{where}: got strings (dtype {a.dtype}); {_STRINGS}")
    raise InputTypeError(
        f"{where}: IDs must be integers, got dtype {a.dtype}"
        + "; give one integer ID or one list of integer IDs per row."
    )


def _arrow_list(column: Any) -> Any:
    """The pyarrow list array behind ``column`` (pyarrow array or pandas ArrowDtype), or None."""
    dtype = getattr(column, "dtype", None)
    if type(dtype).__name__ == "ArrowDtype":  # a pandas column backed by Arrow
        column = column.array.__arrow_array__()
    if not type(column).__module__.startswith("pyarrow"):
        return None
    if hasattr(column, "combine_chunks"):  # a ChunkedArray
        column = column.combine_chunks()
    if not hasattr(column, "offsets") or not hasattr(column, "flatten"):
        return None  # a flat Arrow array of IDs: read through to_numpy
    return column


def _arrow_view_bags(name: str, column: Any) -> tuple[np.ndarray, np.ndarray]:
    """:func:`_arrow_bags` of a pyarrow list_view column: its rows' IDs gathered in row order
    (its offsets are each row's start in the values, not CSR offsets)."""
    starts = column.offsets.to_numpy(zero_copy_only=False).astype(np.int64)
    sizes = column.sizes.to_numpy(zero_copy_only=False).astype(np.int64)
    at = np.repeat(starts - (np.cumsum(sizes) - sizes), sizes) + np.arange(int(sizes.sum()))
    # only the entries rows reference: a slot of the values no row reads may hold anything
    values = column.values.take(at)
    if values.null_count:
        i = int(np.flatnonzero(values.is_null().to_numpy(zero_copy_only=False))[0])
        raise InputValueError(
            f"column {name!r}: a missing ID (null) at entry {i}; IDs must be integers. Drop "
            "or fill the missing values before building the batch."
        )
    ids = values.to_numpy(zero_copy_only=False)
    if ids.dtype == object and hasattr(values.type, "value_type"):
        raise InputTypeError(
            f"column {name!r}: lists nested in lists (type {column.type}); give one list of "
            "integer IDs per row."
        )
    return _ids(name, ids, listed=True), sizes


def _arrow_bags(name: str, column: Any) -> tuple[np.ndarray, np.ndarray]:
    if column.null_count:
        i = int(np.flatnonzero(column.is_null().to_numpy(zero_copy_only=False))[0])
        raise InputValueError(
            f"column {name!r}: row {i} is a missing list (null); give an empty list for no "
            "IDs (e.g. fill_null([]))."
        )
    if hasattr(column, "sizes"):  # a list_view: each row's start and size, in any order
        return _arrow_view_bags(name, column)
    offsets = column.offsets.to_numpy(zero_copy_only=False).astype(np.int64)
    flat = column.flatten()
    if flat.null_count:
        i = int(np.flatnonzero(flat.is_null().to_numpy(zero_copy_only=False))[0])
        raise InputValueError(
            f"column {name!r}: a missing ID (null) at entry {i}; IDs must be integers. Drop "
            "or fill the missing values before building the batch."
        )
    values = flat.to_numpy(zero_copy_only=False)
    if values.dtype == object and hasattr(flat.type, "value_type"):
        raise InputTypeError(
            f"column {name!r}: lists nested in lists (type {column.type}); give one list of "
            "integer IDs per row."
        )
    return _ids(name, values, listed=True), np.diff(offsets)
