"""Public names that load on first use: a package's one table of ``name -> module``, served by
a module ``__getattr__`` (PEP 562), so that importing the package imports none of them."""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["lazy_names"]


def lazy_names(package: str, exports: Mapping[str, str], modules: frozenset[str] = frozenset()
               ) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """``(__getattr__, __dir__)`` for ``package``: the public name ``n`` is the attribute ``n``
    of the module ``exports[n]`` (relative to ``package``), or that module itself where ``n``
    is in ``modules``; imported on first use, then kept in the package's namespace. ``__dir__``
    lists the package's ``__all__``."""
    namespace = sys.modules[package].__dict__

    def getattr_(name: str) -> Any:
        module = exports.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        loaded = importlib.import_module(module, package)
        value = loaded if name in modules else getattr(loaded, name)
        namespace[name] = value
        return value

    def dir_() -> list[str]:
        return sorted(namespace["__all__"])

    return getattr_, dir_
