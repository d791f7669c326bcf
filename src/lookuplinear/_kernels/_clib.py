"""The C kernels (``c/*.c``, built by the package's install), loaded through ctypes.

ctypes releases the GIL for the call. Every entry point takes raw pointers: the callers pass
``tensor.data_ptr()`` of contiguous CPU tensors they have checked.
"""

from __future__ import annotations

import ctypes
import functools
from typing import Any

import torch

__all__ = ["VERSION", "function", "load", "ptr", "pyfunction", "suffix"]

#: ``ll_version()`` of the library this loader was written for (``c/module.c``)
VERSION = 14

_SUFFIX = {torch.float32: "f32", torch.float64: "f64", torch.int32: "i32", torch.int64: "i64"}


def _open() -> Any:
    try:
        from . import _lib  # type: ignore[attr-defined]

        lib = ctypes.CDLL(_lib.__file__)
    except (ImportError, OSError):
        return None
    lib.ll_version.restype = ctypes.c_int64
    return lib if lib.ll_version() == VERSION else None


#: opened once, when the kernel layer is imported: a graph compiler reads this constant
#: where it could not trace the opening of a shared library
_LIB = _open()


def load() -> Any:
    """The ctypes library, or None where the extension was not built or is of another version."""
    return _LIB


@functools.cache
def function(name: str, restype: Any, *argtypes: Any) -> Any:
    """The entry point ``name`` of the library with its signature set (the library must load)."""
    fn = getattr(load(), name)
    fn.restype, fn.argtypes = restype, list(argtypes)
    return fn


@functools.cache
def pyfunction(name: str, restype: Any, *argtypes: Any) -> Any:
    """An entry point that calls the Python C API (the library must load): through
    ``ctypes.PyDLL``, which holds the GIL during the call and raises the error it sets."""
    from . import _lib  # type: ignore[attr-defined]

    fn = getattr(ctypes.PyDLL(_lib.__file__), name)
    fn.restype, fn.argtypes = restype, list(argtypes)
    return fn


def ptr(t: torch.Tensor | None) -> int | None:
    """The address of a tensor's first element (None for None: a NULL pointer)."""
    return None if t is None else t.data_ptr()


def suffix(dtype: torch.dtype) -> str | None:
    """The entry points' suffix for ``dtype`` (``f32``, ``f64``, ``i32``, ``i64``), or None."""
    return _SUFFIX.get(dtype)
