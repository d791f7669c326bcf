"""The package's one compiled part: the C kernels in ``src/lookuplinear/_kernels/c``.

Everything else is declared in ``pyproject.toml``. The extension is optional: where no C
compiler is found the install goes on without it and lookuplinear runs the same computations
with torch ops (docs/performance.md, "Kernels", for what the C kernels buy). Set
``LOOKUPLINEAR_NO_C=1`` at install time to skip the build on purpose.
"""

import os
from glob import glob

from setuptools import Extension, setup

# No -ffast-math: the kernels must give the same bits fused and unfused (see rowkernels.c), and
# -ffast-math in a shared library can switch the whole process to flush-to-zero.
FLAGS = ["-O3", "-std=gnu11", "-fno-math-errno", "-fno-trapping-math", "-ffp-contract=fast"]
C_DIR = "src/lookuplinear/_kernels/c"

KERNELS = Extension(
    "lookuplinear._kernels._lib",
    sources=sorted(glob(f"{C_DIR}/*.c")),
    depends=sorted(glob(f"{C_DIR}/*.h")),
    extra_compile_args=FLAGS,
    libraries=["m"],  # fma/fmaf, called where the CPU has no FMA instruction
    optional=True,
)

setup(ext_modules=[] if os.name != "posix" or os.environ.get("LOOKUPLINEAR_NO_C") else [KERNELS])
