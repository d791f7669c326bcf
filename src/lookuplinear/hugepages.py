"""Large CPU tables on transparent huge pages: fewer TLB misses for scattered row access.

A lookup, and a row-wise optimizer step, read rows scattered over a table far larger than the
TLB covers with 4 KiB pages, so most touched rows cost a page walk. Linux can back a region with
2 MiB pages when asked (``madvise(MADV_HUGEPAGE)``, honoured when
``/sys/kernel/mm/transparent_hugepage/enabled`` is ``always`` or ``madvise``); the request must
come before the memory is first written.

The policy, the same for a table and its optimizer state: a CPU tensor of at least
:data:`MIN_BYTES` that lookuplinear allocates (:func:`empty`: a ``LookupLinear`` table, the
state of :mod:`lookuplinear.optim`) asks for huge pages, and so does a table that arrives from
elsewhere (``.to()``, unpickling, a loaded optimizer state), which :func:`place` copies into
such memory once. It is a hint: on other systems, other devices, for small tensors, or when the
kernel says no, it is ordinary memory. Shared memory (``share_memory_()``) is left where it is,
and so is a table given with ``load_state_dict(..., assign=True)``, which the layer adopts as
PyTorch's modules do (a ``torch.load(..., mmap=True)`` table stays in its file).

Turn it off with ``LOOKUPLINEAR_HUGEPAGES=0`` (or ``false``, ``no``, ``off``, in any case; ``1``,
``true``, ``yes``, ``on`` or empty leave it on, and another value is refused when lookuplinear
is imported) in the environment, or with :func:`set_enabled`.
PyTorch's own CPU allocator does the same for every large tensor when ``THP_MEM_ALLOC_ENABLE=1``
is set; benchmarks that compare with other libraries set it for both sides.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import sys
from typing import Any

import torch

from ._env import flag

__all__ = ["MIN_BYTES", "empty", "enabled", "place", "set_enabled"]

#: tensors smaller than this stay on ordinary pages
MIN_BYTES = 8 << 20
_HUGE = 2 << 20
_MADV_HUGEPAGE = 14
_enabled = flag("LOOKUPLINEAR_HUGEPAGES", default=True)


def enabled() -> bool:
    """Whether lookuplinear asks for huge pages (``LOOKUPLINEAR_HUGEPAGES``, ``set_enabled``)."""
    return _enabled


def set_enabled(flag: bool) -> None:
    """Turn the huge-page policy on or off for the tables and states allocated from now on.

    Examples
    --------
    >>> set_enabled(False); enabled()
    False
    >>> set_enabled(True)
    """
    global _enabled
    _enabled = bool(flag)


@functools.cache
def _madvise() -> Any:
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        fn = libc.madvise
    except (OSError, AttributeError):
        return None
    fn.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    return fn


def _wanted(t: torch.Tensor) -> bool:
    return _enabled and t.device.type == "cpu" and t.numel() * t.element_size() >= MIN_BYTES


def empty(*size: int, dtype: torch.dtype | None = None,
          device: torch.device | str | None = None) -> torch.Tensor:
    """``torch.empty(*size)``, on huge pages where the policy and the system allow.

    Examples
    --------
    >>> t = empty(1024, 4096)            # 16 MiB: asks for huge pages
    >>> t.shape, t.dtype
    (torch.Size([1024, 4096]), torch.float32)
    """
    t = torch.empty(size, dtype=dtype, device=device)  # (a tuple: () gives a 0-d tensor)
    madvise = _madvise() if _wanted(t) else None
    if madvise is not None:
        nbytes = t.numel() * t.element_size()
        start = -(-t.data_ptr() // _HUGE) * _HUGE  # the whole 2 MiB pages inside the tensor
        stop = (t.data_ptr() + nbytes) // _HUGE * _HUGE
        if stop > start:
            madvise(start, stop - start, _MADV_HUGEPAGE)  # a hint: a refusal changes nothing
    return t


def place(t: torch.Tensor) -> torch.Tensor:
    """``t``, or a copy of it on huge pages where the policy asks for them (a large CPU tensor
    not in shared memory). Same values, same shape, contiguous.

    Examples
    --------
    >>> small = torch.ones(3)
    >>> place(small) is small
    True
    """
    if not _wanted(t) or t.is_shared() or t.requires_grad:
        return t
    return empty(*t.shape, dtype=t.dtype, device=t.device).copy_(t)
