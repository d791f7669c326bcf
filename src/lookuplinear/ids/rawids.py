"""Raw IDs of any type (tensors, numpy arrays, lists, pandas columns) as the ID kernels take them.

Integer IDs become one int64 tensor; string IDs one flat list of ``str``. pandas is never
imported here: a pandas ``Series``, ``Index`` or array is read through its ``to_numpy``.
Missing IDs (``None``, ``NaN``, ``pd.NA``) are refused with :class:`InputValueError`, IDs of
another type than the caller takes with :class:`InputTypeError`; nothing is converted silently
(no float truncated to an int, no int turned into its decimal string).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

import numpy as np
import torch

from ..errors import InputTypeError, InputValueError

__all__ = ["as_int_ids", "as_str_ids", "check_strs", "key_type_of"]

_I64_MAX = 2**63 - 1


def _is_pandas(ids: Any) -> bool:
    return type(ids).__module__.split(".")[0] == "pandas" and hasattr(ids, "to_numpy")


def _missing(x: Any) -> bool:
    """None, a float NaN, pandas' NA / NaT: a missing value, not an ID."""
    return x is None or (isinstance(x, float | np.floating) and x != x) or \
        type(x).__name__ in ("NAType", "NaTType")


def _from_pandas(ids: Any, where: str) -> np.ndarray:
    """A pandas column as numpy: integers as int64/uint64 (refused where some are missing),
    everything else (object, string, categorical) as an object array."""
    kind = getattr(ids.dtype, "kind", "O")
    if kind in "iu":  # numpy or nullable (Int64, UInt64) integers
        if bool(ids.isna().any()):
            raise InputValueError(
                f"{where}: the ID column has missing values (NA). Drop or fill them first, "
                "e.g. series.dropna() or series.fillna(-1)."
            )
        return np.asarray(ids.to_numpy(dtype=np.uint64 if kind == "u" else np.int64))
    if kind in "fcbmM":
        return np.asarray(ids.to_numpy())
    return np.asarray(ids.to_numpy(dtype=object))


def key_type_of(ids: Any, where: str = "IDs") -> Literal["int", "str"]:
    """Whether ``ids`` reads as integer or string IDs: by dtype, or for a list or an object
    array by its first element (an empty one: int); one ``bytes`` object is refused
    (``where`` names the caller)."""
    if isinstance(ids, torch.Tensor):
        return "int"
    if _is_pandas(ids):
        kind = getattr(ids.dtype, "kind", "O")
        if kind == "U":  # pyarrow strings (ArrowDtype(pa.string()), dtype_backend="pyarrow")
            return "str"
        if kind != "O":
            return "int"  # numbers (as_int_ids refuses all but integers)
        ids = ids.to_numpy(dtype=object)
    if isinstance(ids, np.ndarray):
        if ids.dtype.kind == "U":
            return "str"
        if ids.dtype.kind != "O":
            return "int"
        ids = ids.reshape(-1)
    if isinstance(ids, str):
        return "str"
    _refuse_bytes(ids, where)
    first = next(iter(ids), None) if isinstance(ids, Sequence | np.ndarray) else None
    return "str" if isinstance(first, str) else "int"


def _refuse_bytes(ids: Any, where: str) -> None:
    """Refuse one ``bytes``-like object given as the IDs: Python reads it as the sequence of
    its byte values, so it would be as many integer IDs as it has bytes, where it names one
    key (scikit-learn's ``murmurhash3_32`` hashes it as one)."""
    if isinstance(ids, bytes | bytearray | memoryview):
        raise InputTypeError(
            f"{where}: got one {type(ids).__name__} object ({bytes(ids)[:20]!r}), which is a "
            "sequence of byte values, not of IDs. Decode it and give a list: "
            "[ids.decode()] for one string ID."
        )


def _refuse_dtype(arr: np.ndarray, where: str, want: str) -> None:
    kind = arr.dtype.kind
    if kind == "f" and arr.size and bool(np.isnan(arr).any()):
        raise InputValueError(
            f"{where}: the IDs have missing values (NaN; pandas stores an integer column with "
            "missing values as float64). Drop or fill them first, e.g. series.dropna() or "
            "series.fillna(-1).astype('int64')."
        )
    hint = {
        "f": "Convert exact integer IDs with ids.astype('int64').",
        "S": "Decode bytes IDs first: ids.astype(str).",
        "b": "Booleans are not IDs.",
    }.get(kind, "")
    raise InputTypeError(f"{where}: IDs must be {want}, got a numpy array of {arr.dtype}. {hint}")


def as_int_ids(ids: Any, where: str) -> torch.Tensor:
    """Integer IDs as an int64 tensor: a tensor as it is (any integer dtype, uint64 below
    2**63, its device and shape), a numpy integer array (int64, int32, ..., uint64 below
    2**63) in its shape, a list or pandas column of ints as a 1-D tensor."""
    if isinstance(ids, torch.Tensor):
        if ids.dtype.is_floating_point or ids.dtype.is_complex or ids.dtype == torch.bool:
            raise InputTypeError(
                f"{where}: IDs must be an integer tensor, got dtype {ids.dtype}. Convert exact "
                "integer IDs with ids.long()."
            )
        if ids.dtype == torch.uint64 and ids.numel() and not torch.compiler.is_compiling():
            over = ids.view(torch.int64) < 0  # the uint64 values from 2**63 on, as int64
            if bool(over.any()):
                raise InputValueError(
                    f"{where}: integer IDs must fit in int64, got the uint64 "
                    f"{int(ids.view(torch.int64)[over][0]) + 2**64}. Give the same bits as "
                    "int64 (ids.view(torch.int64)) if the bit pattern is the ID."
                )
        return ids
    if _is_pandas(ids):
        ids = _from_pandas(ids, where)
    if isinstance(ids, str):
        raise InputTypeError(f"{where}: IDs must be integers, got the string {ids!r}.")
    _refuse_bytes(ids, where)
    if isinstance(ids, Sequence) and not isinstance(ids, np.ndarray):
        items = list(ids)
        for i, x in enumerate(items):
            if isinstance(x, bool | np.bool_) or not isinstance(x, int | np.integer):
                if _missing(x):
                    raise InputValueError(
                        f"{where}: ID {i} is missing ({x!r}). Drop or fill missing IDs first."
                    )
                fix = ("Decode bytes IDs first ([b.decode() for b in ids])"
                       if isinstance(x, bytes | bytearray) else
                       "Give one type of ID (an IdMap holds the type it was built for)")
                raise InputTypeError(
                    f"{where}: IDs must be integers, got {type(x).__name__} {x!r} at position "
                    f"{i}. {fix}."
                )
        if any(not -(2**63) <= int(x) <= _I64_MAX for x in items):
            raise InputValueError(
                f"{where}: integer IDs must fit in int64 [-2**63, 2**63), got "
                f"{next(x for x in items if not -(2**63) <= int(x) <= _I64_MAX)}. "
                "Hash larger IDs into int64 first, or give them as strings."
            )
        return torch.tensor([int(x) for x in items], dtype=torch.int64)
    if not isinstance(ids, np.ndarray):
        raise InputTypeError(
            f"{where}: IDs must be a tensor, numpy array, list or pandas column of integers, "
            f"got {type(ids).__name__}."
        )
    if ids.dtype.kind == "O":
        return as_int_ids(ids.reshape(-1).tolist(), where).reshape(ids.shape)
    if ids.dtype.kind not in "iu":
        _refuse_dtype(ids, where, "integers")
    if ids.dtype == np.uint64 and ids.size and int(ids.max()) > _I64_MAX:
        raise InputValueError(
            f"{where}: integer IDs must fit in int64, got the uint64 {int(ids.max())}. Give "
            "the same bits as int64 (ids.view(np.int64)) if the bit pattern is the ID."
        )
    arr = np.ascontiguousarray(ids, dtype=np.int64)
    return torch.from_numpy(arr if arr.flags.writeable else arr.copy())  # pandas' are read-only


def as_str_ids(ids: Any, where: str) -> tuple[list[Any] | np.ndarray, tuple[int, ...]]:
    """String IDs as a flat list (or 1-D object array: the objects are not copied out) and the
    shape they came in: a numpy ``str`` or object array,
    a list or tuple, a pandas column (object, ``string`` or categorical dtype). The list's
    elements are not checked here: :func:`check_strs` checks those a caller needs checked."""
    if isinstance(ids, torch.Tensor):
        raise InputTypeError(
            f"{where}: takes string IDs, got a tensor of {ids.dtype}. A tensor holds integer "
            "IDs: give those to an IdMap built with key_type='int'."
        )
    if _is_pandas(ids):
        ids = _from_pandas(ids, where)
    if isinstance(ids, str):
        raise InputTypeError(
            f"{where}: takes a sequence of string IDs, got the one string {ids!r}. Wrap it in "
            "a list."
        )
    _refuse_bytes(ids, where)
    if isinstance(ids, np.ndarray):
        if ids.dtype.kind not in "UO":
            _refuse_dtype(ids, where, "strings")
        flat = ids.reshape(-1)
        return (flat if ids.dtype.kind == "O" else flat.tolist()), ids.shape
    if isinstance(ids, Sequence):
        items = ids if type(ids) is list else list(ids)  # read, never written
        return items, (len(items),)
    raise InputTypeError(
        f"{where}: string IDs must be a list, numpy array or pandas column of str, got "
        f"{type(ids).__name__}."
    )


def check_strs(items: Sequence[Any] | np.ndarray, where: str,
               positions: Sequence[int] | None = None
               ) -> None:
    """Raise unless every item is a ``str``: :class:`InputValueError` for a missing one
    (None, NaN, NA), :class:`InputTypeError` for one of another type. ``positions``: where
    each item sits in the caller's IDs (for the message; default their order)."""
    for j, x in enumerate(items):
        if isinstance(x, str):
            continue
        i = j if positions is None else positions[j]
        if _missing(x):
            raise InputValueError(
                f"{where}: ID {i} is missing ({x!r}). Missing IDs have no row: drop or fill "
                "them first, e.g. series.dropna() or series.fillna('<missing>')."
            )
        raise InputTypeError(
            f"{where}: string IDs must all be str, got {type(x).__name__} {x!r} at position "
            f"{i}. Give one type of ID (an IdMap holds the type it was built for), e.g. "
            "series.astype(str)."
        )
