"""The hash table of :class:`lookuplinear.IdMap`: int64 keys to int64 values, in one tensor.

``table`` is ``(2 * size,)`` int64, ``size`` a power of 2: slot ``s`` holds a key at ``2s`` and
its value at ``2s + 1``, a negative value marks an empty slot; linear probing from
splitmix64(key) (``csrc/idmap.c``; :func:`._hashing.splitmix64_int` in Python). Where
the C kernels are not built the same table is probed by
a Python loop (the same slots, so a saved table reads the same either way; slow).
"""

from __future__ import annotations

import ctypes
from itertools import repeat
from typing import Any

import numpy as np
import torch

from ..errors import InputValueError
from ._backend import use_c
from ._clib import function, ptr
from ._errors import scalar_type_name
from ._hashing import hash_int_ids, splitmix64_int

__all__ = ["add", "admit_twin", "assign", "check_table", "dict_keys", "empty_table", "erase",
           "find", "set_values"]


def empty_table(size: int) -> torch.Tensor:
    """A table of ``size`` slots (a power of 2), all empty."""
    t = torch.empty(2 * size, dtype=torch.int64)
    t[1::2] = -1
    t[0::2] = 0
    return t


def _mask(table: torch.Tensor) -> int:
    return table.numel() // 2 - 1


def _c(table: torch.Tensor) -> bool:
    return use_c(table) and table.is_contiguous()


def check_table(op: str, table: torch.Tensor, size: bool = True) -> None:
    """Raise :class:`~lookuplinear.errors.InputValueError` unless ``table`` is 1-D int64 and
    (``size``) holds a power of 2 of (key, value) slots, which the probe masks by: the C++
    ``idmap_find``'s checks, the same messages."""
    if table.dtype != torch.int64 or table.dim() != 1:
        raise InputValueError(f"lookuplinear::{op}: the table is 1-D int64; got "
                              f"{scalar_type_name(table.dtype)} of {table.dim()} dimensions")
    slots = table.numel() // 2
    if size and (table.numel() % 2 or slots < 1 or slots & (slots - 1)):
        raise InputValueError(f"lookuplinear::{op}: the table holds a power of 2 of (key, value) "
                              f"slots; got {table.numel()} entries")


def find(table: torch.Tensor, keys: torch.Tensor) -> torch.Tensor:
    """The value of every key (``-1`` where absent), int64, ``(keys.numel(),)``. (Where the C++
    extension is loaded, and in a graph that ``torch.compile`` or ``torch.export`` records, the
    operator ``lookuplinear::idmap_find`` runs instead:
    :func:`lookuplinear.ops.library.idmap_find`.) Raises
    :class:`~lookuplinear.errors.InputValueError` for a table that is not one
    (:func:`check_table`)."""
    check_table("idmap_find", table)
    keys = keys.reshape(-1).to(torch.int64).contiguous()
    out = torch.empty_like(keys)
    if _c(table):
        function("ll_idmap_find")(
            ptr(table), _mask(table), ptr(keys), keys.numel(), ptr(out))
        return out
    t, mask = table.tolist(), _mask(table)
    slots = [_slot(t, mask, k) for k in keys.tolist()]
    out.copy_(torch.tensor([-1 if s < 0 else t[2 * s + 1] for s in slots], dtype=torch.int64))
    return out


def _sorted_find(table: torch.Tensor, keys: torch.Tensor) -> torch.Tensor:
    """:func:`find` with torch ops of fixed shapes, for a recorded graph (``torch.compile``,
    ``torch.export``): the slots sorted by key (a filled slot before an empty one of the same
    key), then a binary search. ``O(size log size)`` per call where the probe is ``O(1)``."""
    slot_keys, values = table[0::2], table[1::2]
    by_fill = torch.argsort((values < 0).to(torch.int8), stable=True)
    order = by_fill[torch.argsort(slot_keys[by_fill], stable=True)]
    sorted_keys, sorted_values = slot_keys[order], values[order]
    at = torch.searchsorted(sorted_keys, keys).clamp(max=sorted_keys.numel() - 1)
    return torch.where(sorted_keys[at] == keys, sorted_values[at], -1)


def set_values(table: torch.Tensor, keys: torch.Tensor, values: torch.Tensor) -> int:
    """``table[key] = value`` for every pair (in order); returns how many keys were new.
    Raises :class:`~lookuplinear.errors.InputValueError` where a new key finds no empty
    slot (a damaged table)."""
    keys = keys.reshape(-1).to(torch.int64).contiguous()
    values = values.reshape(-1).to(torch.int64).contiguous()
    if _c(table):
        added: int = function("ll_idmap_set")(
            ptr(table), _mask(table), ptr(keys), ptr(values), keys.numel())
        if added < 0:
            raise _full()
        return added
    t, mask, added = table.tolist(), _mask(table), 0
    for k, v in zip(keys.tolist(), values.tolist(), strict=True):
        s = _slot(t, mask, k)
        if s < 0:
            raise _full()
        added += t[2 * s + 1] < 0
        t[2 * s], t[2 * s + 1] = k, v
    table.copy_(torch.tensor(t, dtype=torch.int64))
    return added


def add(table: torch.Tensor, keys: torch.Tensor, adds: torch.Tensor) -> tuple[torch.Tensor, int]:
    """``table[key] += add`` (absent keys start at 0); returns the new values and how many
    keys were new. Raises :class:`~lookuplinear.errors.InputValueError` where a new key finds
    no empty slot (a damaged table)."""
    keys = keys.reshape(-1).to(torch.int64).contiguous()
    adds = adds.reshape(-1).to(torch.int64).contiguous()
    out = torch.empty_like(keys)
    if _c(table):
        added: int = function("ll_idmap_add")(
            ptr(table), _mask(table), ptr(keys), ptr(adds), keys.numel(), ptr(out))
        if added < 0:
            raise _full()
        return out, added
    t, mask, added = table.tolist(), _mask(table), 0
    for i, (k, a) in enumerate(zip(keys.tolist(), adds.tolist(), strict=True)):
        s = _slot(t, mask, k)
        if s < 0:
            raise _full()
        old = t[2 * s + 1]
        added += old < 0
        t[2 * s], t[2 * s + 1] = k, max(old, 0) + a
        out[i] = t[2 * s + 1]
    table.copy_(torch.tensor(t, dtype=torch.int64))
    return out, added


def erase(table: torch.Tensor, keys: torch.Tensor) -> int:
    """Remove the keys present; returns how many were."""
    keys = keys.reshape(-1).to(torch.int64).contiguous()
    if _c(table):
        removed: int = function("ll_idmap_erase")(
            ptr(table), _mask(table), ptr(keys), keys.numel())
        return removed
    t, mask, removed = table.tolist(), _mask(table), 0
    for k in keys.tolist():
        i = _slot(t, mask, k)
        if i < 0 or t[2 * i + 1] < 0:
            continue
        removed += 1
        t[2 * i + 1] = -1
        j = (i + 1) & mask
        while t[2 * j + 1] >= 0:
            home = splitmix64_int(t[2 * j]) & mask
            stays = (i < home <= j) if i <= j else (i < home or home <= j)
            if not stays:
                t[2 * i], t[2 * i + 1] = t[2 * j], t[2 * j + 1]
                t[2 * j + 1] = -1
                i = j
            j = (j + 1) & mask
    table.copy_(torch.tensor(t, dtype=torch.int64))
    return removed


def assign(table: torch.Tensor, keys: torch.Tensor, next_value: int, end: int
           ) -> tuple[torch.Tensor, int]:
    """The value of every key; an absent key gets ``next_value``, ``next_value + 1``, ... in
    order of first appearance while below ``end`` (and the table has an empty slot), else
    ``-1``. Returns the values and the next unused value."""
    keys = keys.reshape(-1).to(torch.int64).contiguous()
    out = torch.empty_like(keys)
    if _c(table):
        nxt = ctypes.c_int64(next_value)
        function("ll_idmap_assign")(
            ptr(table), _mask(table), ptr(keys), keys.numel(), ctypes.addressof(nxt), end,
            ptr(out))
        return out, nxt.value
    t, mask = table.tolist(), _mask(table)
    for i, k in enumerate(keys.tolist()):
        s = _slot(t, mask, k)
        if s < 0:  # no empty slot: no row
            out[i] = -1
        elif t[2 * s + 1] >= 0:
            out[i] = t[2 * s + 1]
        elif next_value < end:
            t[2 * s], t[2 * s + 1] = k, next_value
            out[i] = next_value
            next_value += 1
        else:
            out[i] = -1
    table.copy_(torch.tensor(t, dtype=torch.int64))
    return out, next_value


def _check_admit_operands(table: torch.Tensor, keys: torch.Tensor, row_id: torch.Tensor,
                          last_used: torch.Tensor, assigned: torch.Tensor, clock: torch.Tensor,
                          fallback_rows: int) -> None:
    """Raise :class:`InputValueError` for operands ``idmap_admit_`` cannot take, as the C++
    kernel checks them (the same messages)."""
    op = "lookuplinear::idmap_admit_"
    for name, t, contiguous in (("table", table, True), ("keys", keys, False),
                                ("row_id", row_id, True), ("last_used", last_used, True)):
        if (t.dim() != 1 or t.dtype != torch.int64 or not t.is_cpu
                or (contiguous and not t.is_contiguous())):
            raise InputValueError(
                f"{op}: {name} must be a 1-D {'contiguous ' if contiguous else ''}Long CPU "
                f"tensor; got {t.dtype} of shape {list(t.shape)} on {t.device}")
    capacity, slots = row_id.numel(), table.numel() // 2
    if last_used.numel() != capacity:
        raise InputValueError(f"{op}: row_id and last_used hold one entry per row of the map; "
                              f"got {capacity} and {last_used.numel()}")
    if table.numel() % 2 or slots <= capacity or slots & (slots - 1):
        raise InputValueError(f"{op}: the table holds a power of 2 of (key, value) slots, more "
                              f"than the map's {capacity} rows; got {table.numel()} entries")
    for t in (assigned, clock):
        if t.dim() != 0 or t.dtype != torch.int64 or not t.is_cpu:
            raise InputValueError(f"{op}: assigned and clock are 0-dimensional int64 CPU "
                                  f"tensors; got {t.dtype} of shape {list(t.shape)}")
    if not 0 <= int(assigned) <= capacity:
        raise InputValueError(f"{op}: assigned counts the rows given out, in [0, {capacity}]; "
                              f"got {int(assigned)}")
    if fallback_rows < 1:
        raise InputValueError(f"{op}: a key without a row is hashed into fallback_rows, which "
                              f"must be >= 1; got {fallback_rows}")


def admit_twin(table: torch.Tensor, keys: torch.Tensor, row_id: torch.Tensor,
               last_used: torch.Tensor, assigned: torch.Tensor, clock: torch.Tensor,
               fallback_rows: int) -> tuple[torch.Tensor, int]:
    """``lookuplinear::idmap_admit_`` from Python (:func:`assign`, then torch ops), in place on
    the same state: an :class:`~lookuplinear.IdMap`'s call in training with ``admit_after=1``.
    Every key's row (new keys take the free rows ``assigned, assigned + 1, ...`` in order of
    first appearance; ``row_id`` records them), the rows read stamped ``last_used = clock``,
    ``clock`` counted. Returns each key's table row (its map row ``+ fallback_rows``, or
    ``hash_ids(key, fallback_rows)`` where no row was free) and how many keys got no map row."""
    _check_admit_operands(table, keys, row_id, last_used, assigned, clock, fallback_rows)
    start, now = int(assigned), int(clock)
    found, nxt = assign(table, keys, start, row_id.numel())
    if nxt > start:
        new = found >= start
        row_id[found[new]] = keys[new]  # a key seen twice writes its row twice, the same
    hit = found >= 0
    last_used[found[hit]] = now
    assigned.fill_(nxt)
    clock.fill_(now + 1)
    rows = found + fallback_rows
    missing = int((~hit).sum())
    if missing:
        rows[~hit] = hash_int_ids(keys[~hit], fallback_rows)
    return rows, missing


def dict_keys(keys: dict[str, int], items: list[Any] | np.ndarray) -> np.ndarray:
    """``keys.get(item, -1)`` of every item of a list or 1-D numpy object array, int64
    (``csrc/pyids.c``: the lookups in one C loop). Raises TypeError for an unhashable item."""
    out = np.empty(len(items), dtype=np.int64)
    if use_c():
        array = isinstance(items, np.ndarray)
        if array:
            items = np.ascontiguousarray(items, dtype=object)
        function("ll_dict_keys")(
            keys, None if array else items, items.ctypes.data if array else None,  # type: ignore[union-attr]
            len(items), out.ctypes.data)
        return out
    return np.fromiter(map(keys.get, items, repeat(-1)), np.int64, len(items))


def _slot(t: list[int], mask: int, key: int) -> int:
    """The slot holding ``key``, else the empty slot where its probe ends; ``-1`` when the probe
    has walked every slot without either (a table with no empty slot: a damaged one)."""
    s = splitmix64_int(key) & mask
    for _ in range(mask + 1):
        if t[2 * s + 1] < 0 or t[2 * s] == key:
            return s
        s = (s + 1) & mask
    return -1


def _full() -> InputValueError:
    return InputValueError("lookuplinear: an IdMap's hash table has no empty slot for a new "
                           "key (a map keeps at most half of its slots filled): its state is "
                           "damaged. Load a state saved from a map, or build a new one.")
