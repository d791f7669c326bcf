"""The GPU tooling as far as a machine without a GPU can check it: ``benchmarks/gpu.sh`` runs
(``--dry-run``: the benchmark's code on the CPU, tiny sizes, every model equal to
``nn.EmbeddingBag``), and ``setup.py`` compiles CUDA sources only where torch is a CUDA build and
a toolkit is found. No timings are asserted."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch
from benchmark_scripts import load, setup_py
from torch.utils import cpp_extension

from lookuplinear.ops import _extension, library

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "benchmarks" / "gpu.sh"


def _gpu_sh(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHON": sys.executable}
    return subprocess.run(["bash", str(SCRIPT), *args], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=300)


def test_gpu_script_dry_run_runs_the_benchmark_and_writes_its_files(tmp_path: Path) -> None:
    run = _gpu_sh("--dry-run", str(tmp_path / "out"))
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    summary = (tmp_path / "out" / "summary.txt").read_text()
    assert "tests: exit 0" in summary and "bench: exit 0" in summary, summary
    report = json.loads((tmp_path / "out" / "bench_gpu.json").read_text())
    assert report["dry_run"] and set(report["cases"]) == {"bags", "bags, large batch",
                                                          "one ID", "collection"}
    for case, result in report["cases"].items():
        assert result["errors"] == {}, (case, result["errors"])
        for found in result["checks"].values():  # each model against nn.EmbeddingBag
            assert found["max_abs_diff"] <= 1e-5 and found["grad_max_abs_diff"] <= 1e-5, case
        models = {"nn.EmbeddingBag", *result["checks"]}
        assert set(result["times"]) == {"forward", "forward+backward"}
        assert all(set(times) == models for times in result["times"].values())
    assert "nn.EmbeddingBag" in (tmp_path / "out" / "bench_gpu.txt").read_text()
    profiled = (tmp_path / "out" / "profile.txt").read_text()
    for name in ("nn.EmbeddingBag", "LookupLinear"):
        assert f"== {name}, forward+backward, 10 calls" in profiled
    assert "aten::embedding_bag" in profiled


def test_gpu_script_needs_an_output_folder() -> None:
    run = _gpu_sh()
    assert run.returncode == 2 and "usage: bash benchmarks/gpu.sh" in run.stderr


@pytest.mark.skipif(torch.cuda.is_available(), reason="CUDA is available here")
def test_gpu_benchmark_without_a_gpu_asks_for_the_dry_run(capsys: pytest.CaptureFixture[str]
                                                          ) -> None:
    with pytest.raises(SystemExit):
        load("bench_gpu").main([])
    assert "sees no CUDA device; use --dry-run" in capsys.readouterr().err


def test_setup_builds_cuda_sources_only_with_a_cuda_torch_and_a_toolkit(
        monkeypatch: pytest.MonkeyPatch) -> None:
    setup = setup_py(monkeypatch)
    cu = f"{setup['C_DIR']}/bag_sum.cu"
    monkeypatch.setitem(setup, "CUDA_SOURCES", [cu])
    for cuda, home in ((None, None), (None, "/usr/local/cuda"), ("13.0", None)):
        monkeypatch.setattr(torch.version, "cuda", cuda)
        monkeypatch.setattr(cpp_extension, "CUDA_HOME", home)
        (ext,) = setup["operators"]()
        assert ext.sources == [f"{setup['C_DIR']}/ops.cpp"], (cuda, home)
        assert ext.define_macros == []
    monkeypatch.setattr(torch.version, "cuda", "13.0")
    monkeypatch.setattr(cpp_extension, "CUDA_HOME", "/usr/local/cuda")
    (ext,) = setup["operators"]()
    assert ext.sources == [f"{setup['C_DIR']}/ops.cpp", cu]
    assert ext.define_macros == [("LOOKUPLINEAR_CUDA", None)]
    assert set(ext.extra_compile_args) == {"cxx", "nvcc"}
    monkeypatch.setitem(setup, "CUDA_SOURCES", [])  # no .cu: the C++ library alone
    (ext,) = setup["operators"]()
    assert ext.sources == [f"{setup['C_DIR']}/ops.cpp"]


@pytest.mark.parametrize(("flags", "visible", "preset", "expected"), [
    ("sm_75 sm_80 sm_90a sm_100 sm_120", 0, None, "7.5;8.0;10.0;12.0+PTX"),
    ("sm_75 sm_80", 1, None, None),  # torch's build reads the visible GPU's
    ("sm_75 sm_80", 0, "8.0", None),  # the user's choice stands
    (None, 0, None, None),
])
def test_a_cuda_build_that_sees_no_gpu_compiles_for_torchs_architectures(
        monkeypatch: pytest.MonkeyPatch, flags: str | None, visible: int, preset: str | None,
        expected: str | None) -> None:
    """Without ``TORCH_CUDA_ARCH_LIST``, torch's build of a CUDA extension compiles for the
    visible GPUs, and fails (an ``IndexError`` inside torch) where none is: a build machine,
    a container built without its GPU. setup.py then names the architectures torch was
    built for."""
    setup = setup_py(monkeypatch)
    monkeypatch.setattr(torch._C, "_cuda_getArchFlags", lambda: flags, raising=False)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: visible)
    if preset is None:
        monkeypatch.delenv("TORCH_CUDA_ARCH_LIST", raising=False)
    else:
        monkeypatch.setenv("TORCH_CUDA_ARCH_LIST", preset)
    assert setup["cuda_arch_list"]() == expected


def test_a_cuda_build_that_fails_in_any_way_builds_the_operators_without_it(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
        ) -> None:
    """Whatever stops the CUDA kernels' build (a compiler error, or torch's build code
    raising), the operators are built without them: an install never fails for them."""
    from setuptools import Distribution

    setup = setup_py(monkeypatch)
    kernels = setup["BuildKernels"]
    built: list[list[str]] = []

    def build_extension(self: Any, ext: Any) -> None:
        built.append(list(ext.sources))
        if any(s.endswith(".cu") for s in ext.sources):
            raise IndexError("list index out of range")  # torch's, with no GPU visible
        Path(self.get_ext_fullpath(ext.name)).parent.mkdir(parents=True, exist_ok=True)
        Path(self.get_ext_fullpath(ext.name)).write_bytes(b"")

    monkeypatch.setattr(kernels.__mro__[1], "build_extension", build_extension)
    monkeypatch.setitem(setup, "raise_crashes", lambda library: None)
    monkeypatch.setenv("TORCH_CUDA_ARCH_LIST", "9.0")
    cmd = kernels(Distribution({"name": "lookuplinear"}))
    cmd.initialize_options()
    cmd.build_lib, cmd.build_temp = str(tmp_path / "lib"), str(tmp_path / "temp")
    cmd.finalize_options()
    cmd.compiler = type("Compiler", (), {"compile": lambda self, *a, **k: []})()
    ops_cpp, cu = f"{setup['C_DIR']}/ops.cpp", f"{setup['C_DIR']}/asserts.cu"
    ext = setup["Extension"](setup["OPERATORS"], sources=[ops_cpp, cu],
                             define_macros=[("LOOKUPLINEAR_CUDA", None)])
    cmd.build_extension(ext)
    assert built == [[ops_cpp, cu], [ops_cpp]]
    assert ext.define_macros == []
    assert "the CUDA kernels did not build (IndexError: list index out of range)" in \
        capsys.readouterr().out
    written = Path(cmd.get_ext_fullpath(setup["OPERATORS"])).parent / "_C.torch_version"
    assert written.read_text() == torch.__version__ + "\n"


def test_both_libraries_link_the_c_kernels_compiled_once(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Both libraries built: the C kernels they share are compiled once (in a thread, on a copy
    of the compiler); the operators' link waits for them and links them, and the C library
    compiles only its two Python-calling sources beside them. Where that compile fails, the
    C library builds from all its sources, as without the operators."""
    from setuptools import Distribution

    setup = setup_py(monkeypatch)
    kernels = setup["BuildKernels"]
    events: list[str] = []
    built: dict[str, tuple[list[str], list[str]]] = {}

    class Compiler:
        fail = False

        def compile(self, sources: list[str], output_dir: str, **kw: Any) -> list[str]:
            events.append("compiled")
            if self.fail:
                raise setup["CompileError"]("no OpenMP")
            return self.object_filenames(sources, output_dir=output_dir)

        def object_filenames(self, sources: list[str], output_dir: str) -> list[str]:
            return [os.path.join(output_dir, s[:-2] + ".o") for s in sources]

        def link_shared_object(self, *args: Any, **kw: Any) -> None:
            events.append("linked")

    def build_extension(self: Any, ext: Any) -> None:
        self.compiler.link_shared_object()
        built[ext.name] = (list(ext.sources), list(ext.extra_objects or []))
        Path(self.get_ext_fullpath(ext.name)).parent.mkdir(parents=True, exist_ok=True)
        Path(self.get_ext_fullpath(ext.name)).write_bytes(b"")

    monkeypatch.setattr(kernels.__mro__[1], "build_extension", build_extension)
    monkeypatch.setattr(kernels.__mro__[1], "build_extensions", lambda self: [
        self.build_extension(ext) for ext in self.extensions])
    monkeypatch.setitem(setup, "raise_crashes", lambda library: None)
    for fail in (False, True):
        events.clear()
        built.clear()
        cmd = kernels(Distribution({"name": "lookuplinear"}))
        cmd.initialize_options()
        cmd.build_lib, cmd.build_temp = str(tmp_path / "lib"), str(tmp_path / "temp")
        cmd.finalize_options()
        cmd.compiler = Compiler()
        cmd.compiler.fail = fail
        operators = setup["Extension"](setup["OPERATORS"], sources=[f"{setup['C_DIR']}/ops.cpp"])
        cmd.extensions = [operators, setup["KERNELS"]]
        if fail:  # the operators' link raises the shared compile's error
            with pytest.raises(setup["CompileError"], match="no OpenMP"):
                cmd.build_extensions()
            cmd.build_extension(setup["KERNELS"])
            assert built[setup["KERNELS"].name] == (setup["KERNELS"].sources, [])
            continue
        cmd.build_extensions()
        shared = Compiler().object_filenames(setup["OPERATOR_C"],
                                             output_dir=os.path.join(cmd.build_temp, "shared"))
        assert events == ["compiled", "linked", "linked"]
        assert built[setup["OPERATORS"]] == ([f"{setup['C_DIR']}/ops.cpp"], shared)
        assert built[setup["KERNELS"].name] == (
            [s for s in setup["KERNELS"].sources if os.path.basename(s) in setup["PYTHON_C"]],
            shared)
        assert setup["KERNELS"].extra_objects == []  # as it was


@pytest.mark.skipif(_extension.library_path() is None or not library.CPP,
                    reason="the C++ operators are not built here")
def test_raise_probe_reports_how_a_library_takes_an_error(capsys: pytest.CaptureFixture[str]
                                                          ) -> None:
    """``benchmarks/gpu_raise.py`` runs setup.py's probe on a library: the one built here
    raises into Python; with no library named and none refused under build/, nothing."""
    module = load("gpu_raise")
    path = _extension.library_path()
    assert module.main([path]) == 0
    assert f"== {path}\nexit status 0: the error reached Python" in capsys.readouterr().out
    module.ROOT = Path("/nonexistent")
    assert module.main([]) == 0
    assert "nothing to probe" in capsys.readouterr().out
