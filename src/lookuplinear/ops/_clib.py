"""The C kernels (``csrc/*.c``, built by the package's install), loaded through ctypes.

Every entry point is declared once, in :data:`ENTRIES`: its name, the dtype variants it is
built for (``ll_gather_rows_f32``, ``ll_gather_rows_f64``), its return type and argument
types, and for the row optimizers the order of their scalars (:data:`SCALARS`). The library is
opened and checked against that table once, when the kernel layer is imported: a library of
another version, or one that lacks a declared entry, is not used (one warning says so, and
the torch ops run every kernel; ``LOOKUPLINEAR_BACKEND=c`` then raises at the first kernel).

ctypes releases the GIL for the call. Every entry point takes raw pointers: the callers pass
``tensor.data_ptr()`` of contiguous CPU tensors they have checked.
"""

from __future__ import annotations

import ctypes
import functools
import warnings
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import torch

from .._env import flag

__all__ = ["ENTRIES", "NO_C", "SCALARS", "SUFFIXES", "VERSION", "Entry", "function", "load",
           "problem", "ptr", "scalars", "suffix"]

#: ``ll_version()`` of the library this loader was written for: the one source of the C kernels'
#: ABI version, which setup.py reads and compiles into ``csrc/module.c``. Raise it whenever an
#: exported function changes.
VERSION = 15

#: the entry points' suffix per dtype (:func:`suffix`)
SUFFIXES = {torch.float32: "f32", torch.float64: "f64", torch.int32: "i32", torch.int64: "i64"}
_P, _I64 = ctypes.c_void_p, ctypes.c_int64
_F = ("f32", "f64")
_I = ("i32", "i64")
_FI = ("f32_i32", "f32_i64", "f64_i32", "f64_i64")

#: the row optimizers' kernels (``ll_rows_<kernel>``, ``ll_fused_<kernel>``) and the order in
#: which each reads its scalars (``csrc/rowkernels_impl.h``: ``p[0]``, ``p[1]``, ...)
SCALARS: dict[str, tuple[str, ...]] = {
    "sgd": ("lr", "weight_decay", "momentum", "one_minus_dampening", "nesterov"),
    "adagrad": ("clr", "eps", "weight_decay"),
    "rowwise_adagrad": ("lr", "eps", "weight_decay", "inv_dim"),
    "adam": ("beta1", "one_minus_beta1", "beta2", "one_minus_beta2", "eps", "step_size",
             "l2", "decay"),
}
_N_SCALARS = 8  # the C side's array: every kernel's scalars, zero-padded
_SCALAR_NAMES = {k: frozenset(v) for k, v in SCALARS.items()}


@dataclass(frozen=True)
class Entry:
    """One C entry point: ``name`` (``ll_...``), the dtype ``variants`` it is built for (the
    symbol is ``name_variant``; ``("",)``: the name alone), its ctypes signature, and whether
    it calls the Python C API (``ctypes.PyDLL``: the GIL held, the error it sets raised)."""

    name: str
    restype: Any
    argtypes: tuple[Any, ...]
    variants: tuple[str, ...] = ("",)
    python_api: bool = False

    def symbols(self) -> list[str]:
        return [f"{self.name}_{v}" if v else self.name for v in self.variants]


_ROWS = (_P, _P, _P, _I64, _P, _I64, _P)  # weight, state, rows, n, values, dim, scalars
_FUSED = (_I64, *[_P] * 12)

#: every entry point of the library, by name
ENTRIES: dict[str, Entry] = {e.name: e for e in [
    Entry("ll_gather_rows", _I64, (_P, _I64, _I64, _P, _I64, _P), _F),
    Entry("ll_first_outside", _I64, (_P, _I64, _I64)),
    Entry("ll_gather_into", None, (_I64, _P, _P, _P, _I64, _P, _P, _P, _I64), _F),
    Entry("ll_group_rows", _I64, (_P, _I64, _P, _I64, _I64, _P, _P, _I64, _P, _P), _F),
    *[Entry(f"ll_rows_{k}", _I64, _ROWS, _F) for k in SCALARS],
    *[Entry(f"ll_fused_{k}", None, _FUSED, _F) for k in SCALARS],
    Entry("ll_bag_max", _I64, (_P, _I64, _I64, _P, _P, _I64, _P, _P), _FI),
    Entry("ll_bag_max_backward", None, (_P, _P, _P, _I64, _I64), _F),
    Entry("ll_interleave", None, (_I64, _I64, _P, _P, _P, _P, _P, _P, _I64, _I64)),
    Entry("ll_dual_cd", None, (*[_P] * 10, _I64, _P, _I64, _I64, *[_P] * 4),
          ("f32_i32", "f32_i64")),
    Entry("ll_offsets_ok", _I64, (_P, _I64, _I64, _I64), _I),
    Entry("ll_count_equal", _I64, (_P, _I64, _I64), _I),
    Entry("ll_drop_entries", _I64, (_P, _P, _I64, _I64, _P, _P, _P), _I),
    Entry("ll_mode_weights", None, (_P, _I64, _P, _I64, _P), _FI),
    Entry("ll_shifted_rows", _I64, (_P, _P, _I64, _I64, _P, _P, _P), _I),
    Entry("ll_one_id_rows", _I64, (_P, _P, _I64, _I64, _P, _P, _P, _P), _I),
    Entry("ll_idmap_find", None, (_P, _I64, _P, _I64, _P)),
    Entry("ll_idmap_set", _I64, (_P, _I64, _P, _P, _I64)),
    Entry("ll_idmap_add", _I64, (_P, _I64, _P, _P, _I64, _P)),
    Entry("ll_idmap_erase", _I64, (_P, _I64, _P, _I64)),
    Entry("ll_idmap_assign", _I64, (_P, _I64, _P, _I64, _P, _I64, _P)),
    Entry("ll_dict_keys", _I64, (ctypes.py_object, ctypes.py_object, _P, _I64, _P),
          python_api=True),
    Entry("ll_renumber_ids", None, (_P, _I64)),
    Entry("ll_count_rows", _I64, (_P, _P, _I64, _P, _P, _P, _I64, _I64, _I64, _P, _P, _P), _I),
    Entry("ll_murmur3_32", _I64, (ctypes.c_char_p, _I64)),
    Entry("ll_splitmix64", None, (_P, _I64, _P)),
    Entry("ll_ngram_bucket", _I64, (_I64, _I64)),
]}


#: ``LOOKUPLINEAR_NO_C`` on when the process starts (``1``, ``true``, ``yes``, ``on``; ``0``,
#: ``false``, ``no``, ``off`` or empty: off; another value is refused): it runs as an install
#: without a compiler (neither the C kernels nor the C++ operators are loaded)
NO_C = flag("LOOKUPLINEAR_NO_C", default=False)


def _open() -> tuple[Any, str | None]:
    """The library and None, or None and why it is not used (None too: it was not built, or
    ``LOOKUPLINEAR_NO_C`` is on: the process runs as an install without a compiler)."""
    if NO_C:
        return None, None
    try:
        from . import _lib  # type: ignore[attr-defined]

        lib = ctypes.CDLL(_lib.__file__)
    except (ImportError, OSError):
        return None, None
    found = getattr(lib, "ll_version", None)
    if found is None:
        return None, f"{_lib.__file__} has no ll_version()"
    found.restype = ctypes.c_int64
    if lib.ll_version() != VERSION:
        return None, (f"{_lib.__file__} is version {lib.ll_version()}, this lookuplinear "
                      f"expects {VERSION}")
    missing = [s for e in ENTRIES.values() for s in e.symbols() if not hasattr(lib, s)]
    if missing:
        return None, f"{_lib.__file__} lacks {', '.join(missing)}"
    return lib, None


#: opened once, when the kernel layer is imported: a graph compiler reads these constants
#: where it could not trace the opening of a shared library
_LIB, _PROBLEM = _open()
if _PROBLEM is not None:
    warnings.warn(
        f"lookuplinear's C kernels are not used: {_PROBLEM}. Every kernel runs as torch ops "
        "(the same results up to float rounding, slower). Rebuild them with the installed version: "
        "pip install --no-deps --no-build-isolation -e . (or reinstall lookuplinear).",
        RuntimeWarning, stacklevel=2,
    )


def load() -> Any:
    """The ctypes library, or None where the extension was not built or does not match
    :data:`ENTRIES` (:func:`problem` says how)."""
    return _LIB


def problem() -> str | None:
    """Why a built library is not used (another version, a missing entry), or None."""
    return _PROBLEM


@functools.cache
def function(name: str, variant: str = "") -> Any:
    """The entry point ``name`` (of :data:`ENTRIES`) for ``variant`` (``"f32"``,
    ``"f32_i64"``, ...), its signature set as declared; the library must load."""
    entry = ENTRIES[name]
    if variant not in entry.variants:
        raise KeyError(f"{name} is built for {entry.variants}, not {variant!r}")
    symbol = f"{name}_{variant}" if variant else name
    if entry.python_api:
        from . import _lib  # type: ignore[attr-defined]

        fn = getattr(ctypes.PyDLL(_lib.__file__), symbol)
    else:
        fn = getattr(_LIB, symbol)
    fn.restype, fn.argtypes = entry.restype, list(entry.argtypes)
    return fn


def scalars(kernel: str, values: Mapping[str, float], padded: bool = True) -> list[float]:
    """An optimizer kernel's scalars, given by name, in :data:`SCALARS` order as the C side
    reads them: ``_N_SCALARS`` doubles (``padded``; else the kernel's own, as the operators
    take them; a float32 scalar is exact as a double, converted in C). Raises ``ValueError``
    naming the missing or unknown names."""
    names = SCALARS[kernel]
    if values.keys() != _SCALAR_NAMES[kernel]:
        missing = [n for n in names if n not in values]
        unknown = [n for n in values if n not in names]
        raise ValueError(f"the {kernel} kernel reads the scalars {names}; missing {missing}, "
                         f"unknown {unknown}")
    # map, not a comprehension: this runs for every table in every fused step
    own = [*map(float, map(values.__getitem__, names))]
    return own + [0.0] * (_N_SCALARS - len(names)) if padded else own


def ptr(t: torch.Tensor | None) -> int | None:
    """The address of a tensor's first element (None for None: a NULL pointer)."""
    return None if t is None else t.data_ptr()


def suffix(dtype: torch.dtype) -> str | None:
    """The entry points' suffix for ``dtype`` (``f32``, ``f64``, ``i32``, ``i64``), or None."""
    return SUFFIXES.get(dtype)
