"""The package's one compiled part: the C kernels in ``src/lookuplinear/ops/csrc``.

Everything else is declared in ``pyproject.toml``. The extension is optional: where no C
compiler is found the install goes on without it and lookuplinear runs the same computations
with torch ops (docs/performance.md, "Kernels", for what the C kernels buy). Set
``LOOKUPLINEAR_NO_C=1`` at install time to skip the build on purpose.
"""

import os
import re
from glob import glob

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext
from setuptools.errors import CCompilerError, CompileError, LinkError

# No -ffast-math: the kernels must give the same bits fused and unfused (see rowkernels.c), and
# -ffast-math in a shared library can switch the whole process to flush-to-zero.
FLAGS = ["-O3", "-std=gnu11", "-fno-math-errno", "-fno-trapping-math", "-ffp-contract=fast",
         "-Wno-unknown-pragmas"]  # OpenMP's, where the build goes on without it
C_DIR = "src/lookuplinear/ops/csrc"

# The kernels' ABI version has one source, ``VERSION`` in the loader (ops/_clib.py): the build
# compiles it into ``ll_version()`` (csrc/module.c), and the loader refuses a library that reports
# another number.
CLIB = "src/lookuplinear/ops/_clib.py"


def abi_version() -> str:
    """``VERSION = <n>`` of ``CLIB``, read as text: the build must not import the package."""
    with open(CLIB, encoding="utf-8") as f:
        found = re.search(r"^VERSION = (\d+)$", f.read(), re.MULTILINE)
    if found is None:
        raise RuntimeError(f"{CLIB} has no line 'VERSION = <integer>': the C kernels' ABI "
                           "version is read from there")
    return found.group(1)


# OpenMP: the kernels split large batches over PyTorch's threads. With GCC the extension links
# libgomp.so.1, which is the OpenMP runtime torch has already loaded, so both share one pool.
OPENMP = ["-fopenmp"]

KERNELS = Extension(
    "lookuplinear.ops._lib",
    sources=sorted(glob(f"{C_DIR}/*.c")),
    depends=[*sorted(glob(f"{C_DIR}/*.h")), CLIB],
    define_macros=[("LL_ABI_VERSION", abi_version())],
    extra_compile_args=[*FLAGS, *OPENMP],
    extra_link_args=OPENMP,
    libraries=["m"],  # fma/fmaf, called where the CPU has no FMA instruction
    optional=True,
)


class BuildKernels(build_ext):
    """Build the kernels with OpenMP where the compiler has it, else without (one thread)."""

    def build_extension(self, ext: Extension) -> None:
        try:
            super().build_extension(ext)
        except (CCompilerError, CompileError, LinkError):
            if not ext.extra_link_args:
                raise
            print("lookuplinear: building the C kernels without OpenMP (one thread)")
            ext.extra_compile_args, ext.extra_link_args = list(FLAGS), []
            super().build_extension(ext)


setup(
    ext_modules=[] if os.name != "posix" or os.environ.get("LOOKUPLINEAR_NO_C") else [KERNELS],
    cmdclass={"build_ext": BuildKernels},
)
