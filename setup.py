"""The package's one compiled part: the C row kernels (``src/lookuplinear/_rowkernels.c``).

Everything else is declared in ``pyproject.toml``. The extension is optional: where no C
compiler is found the install goes on without it and lookuplinear runs its numba kernels,
which compute the same thing (docs/benchmarks.md, "Kernel choices", for what the C kernels buy).
Set ``LOOKUPLINEAR_NO_C=1`` to skip it on purpose.
"""

import os

from setuptools import Extension, setup

# No -ffast-math: the kernels must give the same bits fused and unfused (see the C file), and
# -ffast-math in a shared library can switch the whole process to flush-to-zero.
FLAGS = ["-O3", "-std=gnu11", "-fno-math-errno", "-fno-trapping-math", "-ffp-contract=fast"]

KERNELS = Extension(
    "lookuplinear._rowkernels",
    sources=["src/lookuplinear/_rowkernels.c"],
    depends=["src/lookuplinear/_rowkernels_impl.h"],
    define_macros=[("LL_PYTHON_MODULE", "1")],
    extra_compile_args=FLAGS,
    optional=True,
)

setup(ext_modules=[] if os.name != "posix" or os.environ.get("LOOKUPLINEAR_NO_C") else [KERNELS])
