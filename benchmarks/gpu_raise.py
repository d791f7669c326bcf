"""Why a built operators' library dies on its first error: evidence for the next fix.

``setup.py`` keeps the operators' library only where an error one of its operators raises
reaches Python (``raise_crashes``); a refused build is kept in the build's temporary folder,
``build/temp*/_C....so.refused``. ``benchmarks/gpu.sh`` runs this script when the build refused
one, and it prints, for each library given:

* how the probe process ends (setup.py's ``RAISE_PROBE``: load the library, make
  ``idmap_rows`` raise, exit 0 where Python catches the ``ValueError``);
* where it crashed, as a backtrace, where a debugger is found (``cuda-gdb``, else ``gdb``);

and with ``--minimal``, the same for a library of one operator that only raises, compiled
here by ``torch.utils.cpp_extension.load_inline`` with and without ``-fopenmp``: whether any
extension built with this compiler and this torch dies so, or only lookuplinear's.

    PYTHONPATH=src python benchmarks/gpu_raise.py [--minimal] [LIBRARY ...]

With no library named it looks for the refused ones under ``build/``. Nothing is timed.
"""

from __future__ import annotations

import argparse
import glob
import runpy
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import setuptools

ROOT = Path(__file__).resolve().parent.parent

#: one operator that raises the builtin ValueError, as lookuplinear's operators do (in a
#: namespace of its own per build: the builder loads each library into this process too)
MINIMAL = r"""
#include <torch/library.h>
#include <ATen/core/Tensor.h>
at::Tensor fail(const at::Tensor &t) {
    TORCH_CHECK_VALUE(t.numel() == 0, "NAMESPACE::fail: a ValueError from C++ for ", t.numel(),
                      " elements");  // an integer formatted, as lookuplinear's messages do
    return t;
}
TORCH_LIBRARY(NAMESPACE, m) {
    m.def("fail(Tensor t) -> Tensor");
    m.impl("fail", c10::DispatchKey::CPU, &fail);
}
"""

MINIMAL_PROBE = """
import sys, torch
torch.ops.load_library(sys.argv[1])
try:
    getattr(torch.ops, sys.argv[2]).fail(torch.ones(1))
except ValueError:
    sys.exit(0)
sys.exit(3)
"""


def setup_probe() -> str:
    """setup.py's probe code (its ``setup()`` call left out)."""
    real = setuptools.setup
    setuptools.setup = lambda **kwargs: None  # type: ignore[assignment]
    try:
        names = runpy.run_path(str(ROOT / "setup.py"), run_name="setup")
    finally:
        setuptools.setup = real
    return str(names["RAISE_PROBE"])


def probe(code: str, *args: str) -> str:
    """How a process that runs ``code`` with ``args`` (the library first) ends, and where a
    debugger saw it crash."""
    done = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True,
                          timeout=300)
    lines = [f"exit status {done.returncode}"
             + (": the error reached Python" if done.returncode == 0 else "")]
    if done.stderr.strip():
        lines.append("stderr (last lines): " + " | ".join(done.stderr.strip().splitlines()[-3:]))
    debugger = shutil.which("cuda-gdb") or shutil.which("gdb")
    if done.returncode != 0 and debugger is not None:
        traced = subprocess.run(
            [debugger, "-batch", "-ex", "run", "-ex", "bt 30", "--args", sys.executable, "-c",
             code, *args], capture_output=True, text=True, timeout=300)
        frames = [line for line in traced.stdout.splitlines() if line.startswith("#")]
        lines.append(f"backtrace ({Path(debugger).name}):")
        lines.extend("  " + f[:220] for f in frames or ["(none: " + traced.stderr[-300:] + ")"])
    return "\n".join(lines)


def minimal(namespace: str, openmp: bool) -> str:
    """The minimal library compiled here (with or without ``-fopenmp``), its operator in
    ``namespace``: its path."""
    from torch.utils.cpp_extension import load_inline

    flags = ["-O2", *(["-fopenmp"] if openmp else [])]
    where = tempfile.mkdtemp(prefix="ll_probe_")
    load_inline(namespace, cpp_sources=[MINIMAL.replace("NAMESPACE", namespace)],
                extra_cflags=flags, extra_ldflags=flags, is_python_module=False,
                build_directory=where, verbose=False)
    return glob.glob(f"{where}/*.so")[0]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("libraries", nargs="*", help="libraries to probe (default: the refused "
                   "builds under build/)")
    p.add_argument("--minimal", action="store_true",
                   help="also compile and probe a one-operator library, with and without OpenMP")
    a = p.parse_args(argv)
    libraries = a.libraries or sorted(glob.glob(str(ROOT / "build/temp*/_C*.refused")))
    if not libraries and not a.minimal:
        print("no refused library under build/ and --minimal not asked: nothing to probe")
        return 0
    code = setup_probe()
    for library in libraries:
        print(f"== {library}\n{probe(code, library)}", flush=True)
    if a.minimal:
        for openmp in (False, True):
            name = f"one operator that raises, {'with' if openmp else 'without'} -fopenmp"
            namespace = f"ll_probe_{'omp' if openmp else 'plain'}"
            try:
                library = minimal(namespace, openmp)
            except Exception as e:  # the compiler's failure is the finding
                print(f"== {name}: did not build: {type(e).__name__}: {str(e)[-500:]}")
                continue
            print(f"== {name}\n{probe(MINIMAL_PROBE, library, namespace)}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
