"""The benchmark scripts of ``benchmarks/`` and ``setup.py`` imported as modules, for the tests
that run them."""

from __future__ import annotations

import importlib.util
import runpy
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import setuptools

ROOT = Path(__file__).resolve().parents[1]
BENCHMARKS = ROOT / "benchmarks"


def load(name: str) -> ModuleType:
    """``benchmarks/<name>.py`` as the module ``name`` (registered in ``sys.modules``: a
    script's dataclasses look their module up there), with the folder on ``sys.path`` as it is
    for a script run from it (a benchmark imports another's helpers)."""
    if str(BENCHMARKS) not in sys.path:
        sys.path.append(str(BENCHMARKS))
    spec = importlib.util.spec_from_file_location(name, BENCHMARKS / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def setup_py(monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """setup.py's functions (their module globals), its ``setup()`` call left out, run from the
    repository's root."""
    monkeypatch.chdir(ROOT)
    monkeypatch.setattr(setuptools, "setup", lambda **kwargs: None)
    namespace = runpy.run_path(str(ROOT / "setup.py"), run_name="setup")
    globals_: dict[str, Any] = namespace["operators"].__globals__
    return globals_
