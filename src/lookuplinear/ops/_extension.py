"""Which registration of the operators runs: the C++ extension, or the same schemas from Python.

The install builds ``lookuplinear.ops._C`` (``csrc/ops.cpp``: the schemas of every
``lookuplinear::`` operator, their CPU kernels over the C kernels, their torch-op twins) where a
C++ compiler and torch are found, and writes the torch version it was built against beside it
(``_C.torch_version``). The library is loaded (``torch.ops.load_library``) only where that
version is this process's torch: a library built for another torch could fail to load, or
crash, so it is never opened then. Otherwise :mod:`.library` registers the same schemas from
Python, with one warning naming the cause.

``LOOKUPLINEAR_OPS`` picks the side when the process starts:

* ``auto`` (the default): the extension where it is built for this torch, else Python (with
  one warning);
* ``cpp``: the extension, or an ``ImportError`` saying why it cannot be loaded (for CI);
* ``python``: the Python registration (to compare, or to debug).

``LOOKUPLINEAR_BACKEND`` (:mod:`._backend`) is another choice: which kernels the eager path
calls (and the Python registration's CPU implementations).
"""

from __future__ import annotations

import importlib.util
import os
import warnings

import torch

from .._env import choice
from . import _clib

__all__ = ["CHOICES", "LOADED", "PROBLEM", "library_path", "torch_version"]

CHOICES = ("auto", "cpp", "python")
_NAME = "lookuplinear.ops._C"
#: where the install's build writes why it left the library out (setup.py: a library whose
#: first error killed the process)
REFUSAL = os.path.join(os.path.dirname(__file__), "_C.refused")


def library_path() -> str | None:
    """The path of the built extension's shared library, or None where it was not built (the
    module is found, not imported: it has no Python module to import)."""
    spec = importlib.util.find_spec(_NAME)
    return None if spec is None or spec.origin is None else spec.origin


def torch_version(path: str) -> str | None:
    """The torch version the library at ``path`` was built against (the file the build writes
    beside it), or None where there is no such file."""
    try:
        with open(os.path.join(os.path.dirname(path), "_C.torch_version"), encoding="utf-8") as f:
            return f.read().strip()
    except OSError:
        return None


def _load() -> tuple[bool, str | None]:
    """Load the extension where it is built for this torch: ``(True, None)``, or ``(False,
    why)``."""
    if _clib.NO_C:
        return False, "LOOKUPLINEAR_NO_C is on (the process runs as an install without a compiler)"
    path = library_path()
    if path is None:
        try:  # the install's build left it out, saying why
            with open(REFUSAL, encoding="utf-8") as f:
                return False, f.read().strip()
        except OSError:
            pass
        return False, ("the C++ extension lookuplinear.ops._C was not built (no C++ compiler or "
                       "no torch at install time, or LOOKUPLINEAR_NO_C=1)")
    built_for = torch_version(path)
    if built_for != torch.__version__:
        return False, (f"the C++ extension {path} was built for torch {built_for or 'unknown'}, "
                       f"this is torch {torch.__version__}")
    try:
        torch.ops.load_library(path)
    except (OSError, RuntimeError) as e:
        return False, f"the C++ extension {path} does not load: {e}"
    return True, None


def _choice() -> str:
    return choice("LOOKUPLINEAR_OPS", CHOICES, "auto",
                  "Use 'auto' (the C++ operators where they are built for this torch) unless you "
                  "are comparing or debugging the two registrations.")


def _decide() -> tuple[bool, str | None]:
    chosen = _choice()
    if chosen == "python":
        return False, None
    loaded, why = _load()
    if not loaded and chosen == "cpp":
        raise ImportError(
            f"LOOKUPLINEAR_OPS=cpp but {why}. Build it with the installed torch: python setup.py "
            "build_ext --inplace (or pip install --no-build-isolation -e .), or set "
            "LOOKUPLINEAR_OPS=auto to register the operators from Python.")
    if not loaded:
        warnings.warn(
            f"lookuplinear's operators are registered from Python: {why}. The results are the "
            "same up to float rounding; a graph compiled by AOTInductor then needs "
            "lookuplinear imported to run. Rebuild it with the installed torch: python setup.py "
            "build_ext --inplace (or pip install --no-build-isolation -e .).", RuntimeWarning,
            stacklevel=2)
    return loaded, why


#: whether the C++ operators are loaded (decided once, when the operators are first imported),
#: and, where they are not, why (None: LOOKUPLINEAR_OPS=python)
LOADED, PROBLEM = _decide()
