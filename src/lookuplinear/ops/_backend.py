"""Which implementation of the kernels runs: the C library, or torch ops.

``LOOKUPLINEAR_BACKEND`` picks it when the process starts:

* ``auto`` (the default): the C kernels for CPU tensors where the install built them, torch ops
  for everything else (CUDA, other dtypes, while a graph is captured: :func:`capturing`, no C
  library);
* ``torch``: torch ops for every kernel the Python side calls (to compare, or to debug); the
  C++ operators' CPU kernels run C as built (``LOOKUPLINEAR_OPS=python`` registers the
  operators from Python, where this choice holds for them too);
* ``c``: as ``auto``, but the first kernel call raises if the C library is not built (for CI).

:func:`use_backend` changes it for a block of code (the tests run one body on both).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

import torch
from torch.autograd import forward_ad

from .._env import choice, one_of
from . import _clib
from ._clib import load, problem

__all__ = ["BACKENDS", "backend", "c_available", "capturing", "has_tangent", "torch_only",
           "transformed", "use_backend", "use_c", "values_known"]

BACKENDS = ("auto", "c", "torch")


_ADVICE = ("Use 'auto' (C where built, torch ops elsewhere) unless you are comparing or "
           "debugging the kernels.")


def _checked(name: str, where: str) -> str:
    return one_of(name, BACKENDS, where, _ADVICE)


#: the backend asked for: the environment's at start, :func:`use_backend`'s inside its block
#: (a context variable: a block in one thread or task leaves the others' choice as it is)
_DEFAULT: str = choice("LOOKUPLINEAR_BACKEND", BACKENDS, "auto", _ADVICE)
_chosen: ContextVar[str] = ContextVar("lookuplinear_backend", default=_DEFAULT)


def c_available() -> bool:
    """Whether the install built the C kernels (and this process can load them)."""
    return load() is not None


def backend() -> str:
    """The backend in force: ``"c"`` or ``"torch"`` (``auto`` resolved).

    Raises
    ------
    RuntimeError
        ``LOOKUPLINEAR_BACKEND=c`` but the C kernels were not built.
    """
    chosen = _chosen.get()
    if chosen == "torch" or transformed():
        return "torch"
    if load() is None:
        if chosen == "c":
            why = problem() or ("they were not built (no C compiler at install time, or "
                                "LOOKUPLINEAR_NO_C=1)")
            raise RuntimeError(
                f"LOOKUPLINEAR_BACKEND=c but lookuplinear's C kernels cannot be used: {why}. "
                "Reinstall with a C compiler (pip install --force-reinstall --no-binary "
                "lookuplinear lookuplinear), or set LOOKUPLINEAR_BACKEND=auto to run torch ops."
            )
        return "torch"
    return "c"


def capturing() -> bool:
    """Whether a graph of torch ops is being recorded rather than run: ``torch.compile`` and
    ``torch.export`` (their fake tensors have no data for C to read), or ``torch.jit.trace``
    (and the TorchScript ONNX exporter, which traces). A trace records the torch ops it sees:
    what a C kernel returns would enter the graph as a constant, the trace batch's result. So
    while this is true a kernel called directly runs its torch-op twin, and the forward takes
    no branch on the batch's values; ``torch.compile`` and ``torch.export`` record the kernels
    that are operators (:mod:`.library`) as those operators.
    """
    return torch.compiler.is_compiling() or torch.jit.is_tracing()


def values_known() -> bool:
    """Whether the input's values can be read on the host: not while ``torch.compile`` or
    ``torch.export`` records (their tensors are symbolic, and a check on their values has no
    value to read, or would break the graph). The recorded graph then checks what
    ``nn.EmbeddingBag``'s does: ATen's kernels refuse an index out of range and bad offsets
    when the graph runs; ``torch.jit.trace`` runs the checks on the trace batch."""
    return not torch.compiler.is_compiling()


def torch_only() -> bool:
    """Whether the backend in force is ``torch`` (torch ops everywhere, no C kernel), asked
    without resolving ``auto``: one context-variable read. False while ``torch.compile`` or
    ``torch.export`` records a graph, which records the operators whatever the backend."""
    if torch.compiler.is_compiling():
        return False
    return _chosen.get() == "torch" or transformed()


def transformed() -> bool:
    """Whether a ``torch.func`` transform (``grad``, ``vjp``, ``vmap``, ``jacrev``...) is
    active: its tensors are wrappers with no storage for C to read, and it sees through torch
    ops only (not the C++ operators' autograd), so the kernels run their torch-op twins then,
    as the ``torch`` backend does, and the lookups take torch's own ops, as
    ``nn.EmbeddingBag``'s."""
    return torch._C._functorch.maybe_current_level() is not None


def has_tangent(t: torch.Tensor | None) -> bool:
    """Whether ``t`` is a dual tensor of ``torch.autograd.forward_ad`` with a tangent (asked only
    while a forward-AD level is open: one attribute read otherwise). A C kernel reads its primal
    alone: the tangent would be dropped, so such an operand takes the torch ops, which carry it
    or refuse it (ATen's ``embedding_bag`` has no forward AD), never a C kernel."""
    return (t is not None and getattr(forward_ad, "_current_level", -1) >= 0
            and forward_ad.unpack_dual(t).tangent is not None)


def use_c(*tensors: torch.Tensor | None) -> bool:
    """Whether the C kernels take these tensors: backend ``c``, all on the CPU, no graph being
    captured (:func:`capturing`, asked first: a recorded graph never reads the backend)."""
    # capturing() and backend() written out: this runs before every kernel call
    if torch.compiler.is_compiling() or torch.jit.is_tracing():
        return False
    chosen = _chosen.get()
    if chosen == "torch":
        return False
    if _clib._LIB is None:
        if chosen == "c":
            backend()  # raises, saying why
        return False
    for t in tensors:  # noqa: SIM110 - a plain loop: all() of a generator costs more
        if t is not None and not t.is_cpu:
            return False
    return True


@contextmanager
def use_backend(name: str) -> Iterator[None]:
    """Run the block with backend ``name`` (``auto``, ``c`` or ``torch``), then restore it.

    The choice holds in the thread (or ``asyncio`` task) that enters the block, and in the
    backward passes it runs on the CPU; other threads keep theirs.

    Examples
    --------
    >>> from lookuplinear.ops import backend, use_backend
    >>> with use_backend("torch"):
    ...     backend()
    'torch'
    """
    token = _chosen.set(_checked(name, "backend"))
    try:
        yield
    finally:
        _chosen.reset(token)
