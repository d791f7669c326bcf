"""The package's compiled parts: the C kernels in ``src/lookuplinear/ops/csrc``.

Everything else is declared in ``pyproject.toml``. Two optional extensions:

* ``lookuplinear.ops._lib``: the C kernels, called through ctypes by the eager path;
* ``lookuplinear.ops._C``: the operators (``csrc/ops.cpp``, ``TORCH_LIBRARY``) over the same C
  kernels, compiled into one shared library that ``torch.ops.load_library`` loads (a graph
  compiled by AOTInductor runs with it alone). It is built against the torch that the build
  imports (a build without torch skips it: ``python setup.py build_ext --inplace`` or ``pip
  install --no-build-isolation -e .`` in an environment that has torch), and that torch's
  version is written beside it (``_C.torch_version``): another torch falls back to the
  operators registered from Python (lookuplinear/ops/_extension.py). Where torch is a CUDA
  build and a CUDA toolkit is found (``torch.utils.cpp_extension.CUDA_HOME``), the ``.cu``
  files of ``csrc`` (CUDA kernels of the operators, registered under ``LOOKUPLINEAR_CUDA``) are
  compiled into it too, by nvcc; without them, or where they fail to build, CUDA tensors run
  the operators' torch-op twins.

Where no compiler is found the install goes on without them and lookuplinear runs the same
computations with torch ops (docs/performance.md, "Kernels", for what the C kernels buy). Set
``LOOKUPLINEAR_NO_C=1`` (or ``true``, ``yes``, ``on``, in any case) at install time to skip both
builds on purpose; ``0``, ``false``, ``no``, ``off`` or empty build them, another value is refused.
"""

import copy
import os
import re
import shutil
import subprocess
import sys
from concurrent.futures import Future, ThreadPoolExecutor
from glob import glob
from typing import Any

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext
from setuptools.errors import CCompilerError, CompileError, LinkError

# No -ffast-math: the kernels must give the same bits fused and unfused (see rowkernels.c), and
# -ffast-math in a shared library can switch the whole process to flush-to-zero.
# -g0: Python's CFLAGS carry -g, whose debug information took 40% of the C++ operators' build.
FLAGS = ["-O3", "-g0", "-std=gnu11", "-fno-math-errno", "-fno-trapping-math", "-ffp-contract=fast",
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
    # (every C source: where the operators are built too, this library compiles only the two
    # that call Python and links the objects it shares with them, BuildKernels.shared)
    depends=[*sorted(glob(f"{C_DIR}/*.h")), *sorted(glob(f"{C_DIR}/*.c")), CLIB],
    define_macros=[("LL_ABI_VERSION", abi_version())],
    extra_compile_args=[*FLAGS, *OPENMP],
    extra_link_args=OPENMP,
    libraries=["m"],  # fma/fmaf, called where the CPU has no FMA instruction
    optional=True,
)


#: the operators' extension: ops.cpp, and the C kernels (those that do not call Python) as
#: objects compiled with the C flags above, once for both libraries (BuildKernels.shared)
OPERATORS = "lookuplinear.ops._C"
PYTHON_C = ("module.c", "pyids.c")
OPERATOR_C = [s for s in sorted(glob(f"{C_DIR}/*.c")) if os.path.basename(s) not in PYTHON_C]


#: the operators' CUDA kernels, compiled into the same library where a toolkit is found
CUDA_SOURCES = sorted(glob(f"{C_DIR}/*.cu"))
#: defined where they are: ops.cpp then registers them for CUDA tensors
CUDA_MACRO = "LOOKUPLINEAR_CUDA"


def cuda_toolkit() -> bool:
    """Whether CUDA sources can be built here: torch is a CUDA build and a CUDA toolkit is
    found (``CUDA_HOME``: the environment variable, or nvcc on the PATH)."""
    import torch
    from torch.utils import cpp_extension

    return torch.version.cuda is not None and cpp_extension.CUDA_HOME is not None


def cuda_arch_list() -> str | None:
    """``TORCH_CUDA_ARCH_LIST`` for a build that sees no GPU: the architectures torch was built
    for (torch's build of a CUDA extension reads the visible GPUs', and fails where there are
    none), or None where it is set, a GPU is visible, or torch does not say."""
    import torch

    if os.environ.get("TORCH_CUDA_ARCH_LIST") or torch.cuda.device_count() > 0:
        return None
    flags = getattr(torch._C, "_cuda_getArchFlags", lambda: None)() or ""
    arches = [f"{a[3:-1]}.{a[-1]}" for a in flags.split() if re.fullmatch(r"sm_\d+", a)]
    return ";".join(arches) + "+PTX" if arches else None


def operators() -> list[Extension]:
    """The operators' extension (with the CUDA kernels where :func:`cuda_toolkit`), or none
    where torch (its headers) cannot be imported."""
    try:
        from torch.utils.cpp_extension import CppExtension, CUDAExtension
    except ImportError:
        print("lookuplinear: torch is not importable here, so the C++ operators are not built "
              "(the operators are registered from Python instead)")
        return []
    common = {"depends": [*sorted(glob(f"{C_DIR}/*")), CLIB], "extra_link_args": OPENMP,
              "libraries": ["m"], "optional": True}
    # the C++ standard: the one torch's headers ask for (BuildExtension adds it)
    cxx = ["-O3", "-g0", *OPENMP]
    if CUDA_SOURCES and cuda_toolkit():
        return [CUDAExtension(OPERATORS, sources=[f"{C_DIR}/ops.cpp", *CUDA_SOURCES],
                              define_macros=[(CUDA_MACRO, None)],
                              extra_compile_args={"cxx": cxx, "nvcc": ["-O3"]}, **common)]
    return [CppExtension(OPERATORS, sources=[f"{C_DIR}/ops.cpp"], extra_compile_args=cxx,
                         **common)]


def torch_build_ext() -> type[build_ext]:
    """torch's ``BuildExtension`` (its flags for a torch extension) where torch imports."""
    try:
        from torch.utils.cpp_extension import BuildExtension
    except ImportError:
        return build_ext
    return BuildExtension.with_options(use_ninja=False)  # type: ignore[no-any-return]


class BuildKernels(torch_build_ext()):  # type: ignore[misc]
    """Build the kernels with OpenMP where the compiler has it, else without (one thread);
    the operators over the C kernels compiled as C, their torch version written beside them.

    Where both libraries are built, the C kernels they share (:data:`OPERATOR_C`) are compiled
    once, in a thread of their own from the start (:attr:`shared`), while the operators' C++
    compiles: each library links those objects, the operators' waiting for them only to link.
    """

    #: the shared C objects being compiled, or None (one library built, or the compile failed
    #: and each library compiles its own)
    shared: Future[list[str]] | None = None

    def build_extensions(self) -> None:
        names = {ext.name for ext in self.extensions}
        if {OPERATORS, KERNELS.name} <= names:
            # a compiler of its own, copied before torch's build wraps this one's compile for
            # C++ (and, for the .cu files, swaps its executable while one compiles)
            compiler = copy.copy(self.compiler)
            pool = ThreadPoolExecutor(1)
            self.shared = pool.submit(
                compiler.compile, OPERATOR_C, output_dir=os.path.join(self.build_temp, "shared"),
                extra_postargs=[*FLAGS, *OPENMP, "-fPIC"], depends=KERNELS.depends)
            pool.shutdown(wait=False)
        super().build_extensions()

    def shared_objects(self) -> list[str] | None:
        """The shared C objects, once compiled; None where they are not (their compile failed:
        each library then compiles its C sources itself, as without the other)."""
        if self.shared is None:
            return None
        try:
            return self.shared.result()
        except (CCompilerError, CompileError):
            return None

    def build_extension(self, ext: Extension) -> None:
        if ext.name == OPERATORS:
            self.build_operators(ext)
            return
        objects = self.shared_objects()
        if objects is not None:  # the two sources that call Python, and the shared objects
            sources = ext.sources
            ext.sources = [s for s in sources if os.path.basename(s) in PYTHON_C]
            ext.extra_objects = objects
            try:
                super().build_extension(ext)
                return
            except (CCompilerError, CompileError, LinkError):
                pass  # built again below from all its sources, as without the operators
            finally:
                ext.sources, ext.extra_objects = sources, []
        try:
            super().build_extension(ext)
        except (CCompilerError, CompileError, LinkError):
            if not ext.extra_link_args:
                raise
            print("lookuplinear: building the C kernels without OpenMP (one thread)")
            ext.extra_compile_args, ext.extra_link_args = list(FLAGS), []
            super().build_extension(ext)

    def build_operators(self, ext: Extension) -> None:
        library = self.get_ext_fullpath(ext.name)
        refusal = self.refusal_file(library)
        if os.path.exists(refusal):  # an earlier build's: this one says again
            os.remove(refusal)

        # the C kernels as C (BuildExtension would pass them C++ flags), linked in as objects:
        # the shared ones, which the link waits for (the C++ compiles meanwhile), or, without
        # them, compiled here first
        if self.shared is None:
            ext.extra_objects = self.compiler.compile(
                OPERATOR_C, output_dir=os.path.join(self.build_temp, "operators"),
                extra_postargs=[*FLAGS, *OPENMP, "-fPIC"], depends=ext.depends)
            self.link_operators(ext)
        else:
            shared, link = self.shared, self.compiler.link_shared_object
            ext.extra_objects = self.compiler.object_filenames(
                OPERATOR_C, output_dir=os.path.join(self.build_temp, "shared"))

            def linked(*args: Any, **kwargs: Any) -> Any:
                shared.result()  # (its compiler's error, where it failed)
                return link(*args, **kwargs)

            self.compiler.link_shared_object = linked
            try:
                self.link_operators(ext)
            finally:
                self.compiler.link_shared_object = link
        self.check_operators(library, refusal)

    def link_operators(self, ext: Extension) -> None:
        """Compile the operators' C++ (and CUDA) and link them with the C kernels' objects."""
        cuda = any(s.endswith(".cu") for s in ext.sources)
        arches = cuda_arch_list() if cuda else None
        if arches is not None:
            os.environ["TORCH_CUDA_ARCH_LIST"] = arches
        try:
            super().build_extension(ext)
        except Exception as e:  # a compiler's error, or torch's build failing on the way
            if not cuda:
                raise
            print(f"lookuplinear: the CUDA kernels did not build ({type(e).__name__}: {e}); "
                  "building the operators without them (CUDA tensors run their torch-op "
                  "twins)")
            ext.sources = [s for s in ext.sources if not s.endswith(".cu")]
            ext.define_macros = [m for m in ext.define_macros if m[0] != CUDA_MACRO]
            super().build_extension(ext)

    def check_operators(self, library: str, refusal: str) -> None:
        """Leave the built operators' ``library`` out where an error one of them raises kills
        the process (saying why in ``refusal``); else write its torch version beside it."""
        import torch

        crash = raise_crashes(library)
        if crash is not None:
            if os.path.exists(self.version_file(library)):
                os.remove(self.version_file(library))
            # out of the package (kept for benchmarks/gpu_raise.py), its reason in it
            kept = os.path.join(self.build_temp, os.path.basename(library) + ".refused")
            os.replace(library, kept)
            own = own_cxx_runtime(kept)
            cause = (f"it defines {own} of the C++ runtime's own symbols (std::locale, the "
                     "streams): the compiler linked a libstdc++ of its own into it, beside the "
                     "one torch loads. Build with a compiler that links the shared libstdc++, "
                     "for example the system's: CC=gcc CXX=g++" if own else
                     "the compiler's C++ runtime and torch's differ. Build with the compiler "
                     "torch was built with")
            why = (f"the C++ extension built at install time was left out: it did not survive "
                   f"an error one of its operators raised ({crash}); {cause}")
            with open(refusal, "w", encoding="utf-8") as f:
                f.write(why + "\n")
            raise CompileError(f"lookuplinear: {why} (the library is kept as {kept}); the "
                               "operators are registered from Python (the same results)")
        with open(self.version_file(library), "w", encoding="utf-8") as f:
            f.write(torch.__version__ + "\n")

    @staticmethod
    def version_file(library: str) -> str:
        """Where the torch version of the operators' ``library`` is written: beside it."""
        return os.path.join(os.path.dirname(library), "_C.torch_version")

    @staticmethod
    def refusal_file(library: str) -> str:
        """Where the reason a built ``library`` was left out is written, in its place (the
        loader names it in its warning)."""
        return os.path.join(os.path.dirname(library), "_C.refused")

    def copy_extensions_to_source(self) -> None:
        """``--inplace`` (and an editable install): the libraries and the version file, or
        the reason the operators' library was left out; where it did not build, no earlier
        build of it is left in place."""
        super().copy_extensions_to_source()
        if not any(ext.name == OPERATORS for ext in self.extensions):
            return
        built = os.path.join(self.build_lib, self.get_ext_filename(OPERATORS))
        package = self.get_finalized_command("build_py").get_package_dir("lookuplinear.ops")
        for stale in glob(os.path.join(package, "_C.*")):
            if not (os.path.exists(built) and stale.endswith(os.path.basename(built))):
                os.remove(stale)
        made = self.version_file(built) if os.path.exists(built) else self.refusal_file(built)
        if os.path.exists(made):
            self.copy_file(made, os.path.join(package, os.path.basename(made)))


#: run by :func:`raise_crashes` in a process of its own: load the operators' library, make one
#: of them raise (``idmap_rows`` with a key absent and no rows to hash it into), exit 0 where
#: the error reaches Python as the ValueError it is
RAISE_PROBE = """
import sys, torch
torch.ops.load_library(sys.argv[1])
try:
    torch.ops.lookuplinear.idmap_rows(torch.tensor([-1]), torch.tensor([4]), 0)
except ValueError:
    sys.exit(0)
sys.exit(3)
"""


def raise_crashes(library: str) -> str | None:
    """How the library at ``library`` fails when one of its operators raises (a compiler whose
    C++ runtime differs from torch's can build one whose exceptions kill the process), or None
    where the error arrives as a Python ``ValueError``."""
    try:
        done = subprocess.run([sys.executable, "-c", RAISE_PROBE, library], capture_output=True,
                              text=True, timeout=300)
    except subprocess.TimeoutExpired:
        return "a process that made one raise did not finish in 300 s"
    if done.returncode == 0:
        return None
    last = (done.stderr.strip().splitlines() or ["no message"])[-1]
    return f"a process that made one raise ended with exit status {done.returncode}: {last}"


#: mangled-name prefixes of the C++ runtime's own classes (std::locale, std::ostream,
#: std::istream, std::codecvt): a library that defines them carries a libstdc++ of its own
CXX_RUNTIME = ("_ZNSt6locale", "_ZNSo", "_ZNSi", "_ZNSt7codecvt", "_ZNKSt7codecvt")


def own_cxx_runtime(library: str) -> int:
    """How many of the C++ runtime's own symbols (:data:`CXX_RUNTIME`) the shared ``library``
    defines, by ``nm``: none for a library linked to the shared libstdc++, hundreds where the
    compiler linked one in statically (a C++ exception's message then formats through that
    copy's locale, which the process never set up, and the process dies); 0 where ``nm`` is
    not found."""
    nm = shutil.which("nm")
    if nm is None:
        return 0
    try:
        listed = subprocess.run([nm, "-D", "--defined-only", library], capture_output=True,
                                text=True, timeout=120).stdout
    except (OSError, subprocess.SubprocessError):
        return 0
    return sum(1 for line in listed.splitlines()
               if line.split() and line.split()[-1].startswith(CXX_RUNTIME))


#: the words that turn LOOKUPLINEAR_NO_C on, and off, in any case: lookuplinear/_env.py's ON and
#: OFF (the build cannot import the package; tests/test_kernels.py holds the two to each other)
ON, OFF = ("1", "true", "yes", "on"), ("0", "false", "no", "off")


def no_c() -> bool:
    """Whether ``LOOKUPLINEAR_NO_C`` asks for an install without the compiled parts (unset or
    empty: no), read as the package reads it."""
    value = os.environ.get("LOOKUPLINEAR_NO_C") or "0"
    if value.lower() not in ON + OFF:
        raise RuntimeError(
            f"LOOKUPLINEAR_NO_C must be one of {', '.join(ON + OFF)} (any case), got {value!r}. "
            f"{'/'.join(ON)} skip the C kernels and C++ operators, {'/'.join(OFF)} build them; "
            "unset or empty, they are built."
        )
    return value.lower() in ON


def extensions() -> list[Extension]:
    if os.name != "posix" or no_c():
        return []
    # the operators first: a build of one extension at a time compiles their C++ while the C
    # objects both share compile beside it (BuildKernels.shared)
    return [*operators(), KERNELS]


setup(
    ext_modules=extensions(),
    cmdclass={"build_ext": BuildKernels},
)
