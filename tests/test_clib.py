"""The C boundary: every entry point declared once (``ops/_clib.py``), checked at load."""

from __future__ import annotations

import ctypes
import re
from pathlib import Path
from typing import Any

import pytest
from forms import needs_c

from lookuplinear.ops import _clib
from lookuplinear.ops._clib import ENTRIES, SCALARS, Entry


@needs_c
def test_every_declared_entry_is_in_the_library() -> None:
    lib = _clib.load()
    for entry in ENTRIES.values():
        for symbol in entry.symbols():
            assert hasattr(lib, symbol), symbol
            fn = _clib.function(entry.name, symbol[len(entry.name) + 1:])
            assert fn.argtypes == list(entry.argtypes)


@needs_c
def test_every_library_entry_is_declared() -> None:
    from lookuplinear.ops import _lib  # type: ignore[attr-defined]

    declared = {s for e in ENTRIES.values() for s in e.symbols()} | {"ll_version"}
    with open(_lib.__file__, "rb") as f:
        text = f.read()
    # the names in the library's symbol table that it exports: ll_ and a lower-case word
    found = {m.decode() for m in re.findall(rb"\bll_[a-z0-9_]+", text)}
    exported = {s for s in found if hasattr(ctypes.CDLL(_lib.__file__), s)}
    assert exported - declared == set()


@needs_c
def test_the_library_reports_the_loaders_version() -> None:
    lib = _clib.load()
    assert lib.ll_version() == _clib.VERSION
    assert _clib.problem() is None


def test_the_abi_version_has_one_source() -> None:
    # module.c returns the number the build reads from ops/_clib.py, and has none of its own
    root = Path(__file__).resolve().parents[1]
    module = (root / "src/lookuplinear/ops/csrc/module.c").read_text()
    assert re.search(r"ll_version\(void\) \{ return LL_ABI_VERSION; \}", module)
    assert "#error" in module
    setup = (root / "setup.py").read_text()
    assert '("LL_ABI_VERSION", abi_version())' in setup
    assert re.search(r"^VERSION = (\d+)$", Path(_clib.__file__).read_text(), re.MULTILINE)


@needs_c
def test_another_version_is_not_used_and_says_why(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_clib, "VERSION", _clib.VERSION + 1)
    lib, why = _clib._open()
    assert lib is None and why is not None and "expects" in why


@needs_c
def test_a_missing_entry_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    entries: dict[str, Any] = dict(ENTRIES)
    entries["ll_nothing"] = Entry("ll_nothing", None, (), ("f32",))
    monkeypatch.setattr(_clib, "ENTRIES", entries)
    lib, why = _clib._open()
    assert lib is None and why is not None and "ll_nothing_f32" in why


def test_scalars_follow_the_declared_order() -> None:
    given = {"weight_decay": 0.0, "eps": 1e-10, "clr": 0.1}  # by name, in any order
    assert _clib.scalars("adagrad", given) == [0.1, 1e-10, 0.0] + [0.0] * 5
    with pytest.raises(ValueError, match=r"missing \['weight_decay'\], unknown \['wd'\]"):
        _clib.scalars("adagrad", {"clr": 0.1, "eps": 1e-10, "wd": 0.0})
    assert set(SCALARS) == {"sgd", "adagrad", "rowwise_adagrad", "adam"}
