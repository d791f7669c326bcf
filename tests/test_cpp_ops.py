"""The C++ operators (``lookuplinear.ops._C``, ``csrc/ops.cpp``): the same bits as the Python
registration on the CPU, a stale build never loaded, the other registration's operator tests
in a process of its own, and an AOTInductor package that runs where lookuplinear cannot be
imported."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
import torch

import lookuplinear
import lookuplinear.ops.library as library
from lookuplinear.ops import _extension, _idmap, segment_triples

ops = torch.ops.lookuplinear
ROOT = Path(__file__).resolve().parent.parent
needs_cpp = pytest.mark.skipif(not library.CPP, reason="the C++ operators are not loaded "
                               f"({_extension.PROBLEM})")


def _same_bits(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.dtype == b.dtype and a.shape == b.shape and torch.equal(
        a.view(-1).view(torch.uint8) if a.is_floating_point() else a,
        b.view(-1).view(torch.uint8) if b.is_floating_point() else b)


def op_cases() -> list[tuple[str, tuple[Any, ...], dict[str, Any]]]:
    g = torch.Generator().manual_seed(3)
    cases: list[tuple[str, tuple[Any, ...], dict[str, Any]]] = []
    for dtype in (torch.float32, torch.float64):
        w = torch.randn(50, 16, dtype=dtype, generator=g)
        idx = torch.randint(0, 50, (40,), generator=g)
        off = torch.tensor([0, 3, 3, 10, 22, 40])
        psw = torch.rand(40, dtype=dtype, generator=g)
        cases += [
            ("bag_lookup", (w, idx), {}),
            ("bag_lookup", (w, idx.reshape(8, 5).int()), {}),
            ("bag_lookup", (w, idx, off, psw, int(idx[0])), {}),
            ("bag_lookup", (w, idx, off[:-1]), {"include_last_offset": False}),
            ("bag_max", (w, idx, off), {}),
            ("bag_max", (w, idx.int(), off.int()), {}),
            ("bag_max_backward", (torch.randn(5, 16, dtype=dtype, generator=g), w, idx, off), {}),
            ("mode_weights", (off, psw, True, dtype, 40), {}),
            ("mode_weights", (off.int(), None, False, dtype, 40), {}),
            ("row_sums", (torch.randn(5, 16, dtype=dtype, generator=g), idx, off, psw, None, 50),
             {}),
            ("row_sums", (torch.randn(40, 16, dtype=dtype, generator=g), idx, None, None,
                          int(idx[1]), 50), {}),
        ]
    a, b = torch.randn(6, 2), torch.randn(3, 3)
    cases.append(("in_feature_order", ([a, b], [2, 0], list(segment_triples(
        [(0, 2), (2, 3), (1, 2)], [2, 2, 3]))), {}))
    table = _idmap.empty_table(16)
    _idmap.set_values(table, torch.tensor([5, 10**12, -3]), torch.tensor([0, 1, 2]))
    keys = torch.tensor([[10**12, 7], [-3, 5]])
    cases.append(("idmap_find", (table, keys), {}))
    cases.append(("idmap_rows", (torch.tensor([3, -1, 0, -1, -1]),
                                 torch.tensor([10, 10**12, 7, -5, -(2**63)]), 7), {}))
    return cases


PYTHON_CPU = {"bag_lookup": library._bag_lookup_cpu, "bag_max": library._bag_max_cpu,
              "bag_max_backward": library._bag_max_backward_cpu,
              "mode_weights": library._mode_weights_cpu, "row_sums": library._row_sums_cpu,
              "in_feature_order": library._in_feature_order_cpu,
              "idmap_find": _idmap.find, "idmap_rows": library._idmap_rows_cpu}


@needs_cpp
@pytest.mark.parametrize(("name", "args", "kw"), op_cases(),
                         ids=[f"{c[0]}-{i}" for i, c in enumerate(op_cases())])
def test_cpp_operator_equals_the_python_registration_to_the_bit(
        name: str, args: tuple[Any, ...], kw: dict[str, Any]) -> None:
    ours = getattr(ops, name)(*args, **kw)
    python = PYTHON_CPU[name](*args, **kw)
    assert _same_bits(ours, python), name
    torch.library.opcheck(getattr(ops, name).default, args, kw)


def test_a_build_for_another_torch_is_never_loaded(monkeypatch: pytest.MonkeyPatch) -> None:
    """The version written beside the library is compared before it is opened."""
    monkeypatch.setattr(_extension, "library_path", lambda: "/nonexistent/_C.so")
    monkeypatch.setattr(_extension, "torch_version", lambda path: "1.0.0")
    loaded, why = _extension._load()
    assert not loaded and why is not None and "built for torch 1.0.0" in why
    monkeypatch.setattr(_extension, "library_path", lambda: None)
    assert "was not built" in str(_extension._load()[1])


def test_the_other_registration_passes_the_operator_tests() -> None:
    """tests/test_library.py in a process that registers the operators the other way."""
    other = "python" if library.CPP else "cpp"
    if other == "cpp" and _extension.library_path() is None:
        pytest.skip("the C++ operators are not built")
    env = {**os.environ, "LOOKUPLINEAR_OPS": other, "PYTHONPATH": str(ROOT / "src")}
    run = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                          "-x", str(ROOT / "tests" / "test_library.py")],
                         cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]


class Served(torch.nn.Module):
    """A sparse sum table and a max table, side by side."""

    def __init__(self) -> None:
        super().__init__()
        self.sums = lookuplinear.LookupLinear(100, 4, sparse=True)
        self.maxes = lookuplinear.LookupLinear(30, 3, mode="max")

    def forward(self, ids: torch.Tensor, offsets: torch.Tensor, other: torch.Tensor,
                other_offsets: torch.Tensor) -> torch.Tensor:
        return torch.cat([self.sums(ids, offsets), self.maxes(other, other_offsets)], 1)


@needs_cpp
def test_aoti_package_runs_where_lookuplinear_cannot_be_imported(tmp_path: Path) -> None:
    """Exported, compiled by AOTInductor, run in a process that loads the extension's shared
    library alone: the module's outputs."""
    torch.manual_seed(0)
    model = Served().eval()
    args = (torch.tensor([1, 5, 99, 3, 3, 7]), torch.tensor([0, 2, 2, 6]),
            torch.tensor([4, 29, 0, 8]), torch.tensor([0, 1, 1, 4]))
    program = torch.export.export(model, args)
    targets = {str(n.target) for n in program.graph.nodes}
    assert {"lookuplinear.bag_lookup.default", "lookuplinear.bag_max.default"} <= targets
    package = torch._inductor.aoti_compile_and_package(
        program, package_path=str(tmp_path / "served.pt2"))
    with torch.no_grad():
        expected = model(*args)
    torch.save({"args": args, "expected": expected}, tmp_path / "io.pt")
    script = textwrap.dedent(f"""
        import sys
        sys.modules["lookuplinear"] = None  # cannot be imported
        import torch
        torch.ops.load_library({_extension.library_path()!r})
        io = torch.load({str(tmp_path / "io.pt")!r})
        runner = torch._inductor.aoti_load_package({package!r})
        out = runner(*io["args"])
        assert torch.equal(out, io["expected"]), (out, io["expected"])
        print("served")
    """)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    run = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, env=env,
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0 and "served" in run.stdout, run.stdout + run.stderr
