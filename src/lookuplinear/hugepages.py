"""Large CPU tables on transparent huge pages: fewer TLB misses for scattered row access.

A lookup, and a row-wise optimizer step, read rows scattered over a table far larger than the
TLB covers with 4 KiB pages, so most touched rows cost a page walk. Linux can back a region with
2 MiB pages when asked (``madvise(MADV_HUGEPAGE)``, honoured when
``/sys/kernel/mm/transparent_hugepage/enabled`` is ``always`` or ``madvise``); the request must
come before the memory is first written. :func:`empty` allocates a tensor and asks for huge
pages for it. It is a hint: on other systems, on other devices, for small tensors, or when the
kernel says no, it is an ordinary ``torch.empty``. (PyTorch's own allocator does the same when
``THP_MEM_ALLOC_ENABLE=1`` is set.)
"""

from __future__ import annotations

import ctypes
import ctypes.util
import sys
from typing import Any

import torch

__all__ = ["MIN_BYTES", "empty"]

#: tensors smaller than this stay on ordinary pages
MIN_BYTES = 8 << 20
_HUGE = 2 << 20
_MADV_HUGEPAGE = 14
_libc: Any = None


def _madvise() -> Any:
    global _libc
    if _libc is None:
        _libc = False
        if sys.platform.startswith("linux"):
            try:
                libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
                _libc = libc.madvise
                _libc.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
            except (OSError, AttributeError):
                _libc = False
    return _libc


def empty(*size: int, dtype: torch.dtype | None = None,
          device: torch.device | str | None = None) -> torch.Tensor:
    """``torch.empty(*size)``, on huge pages where the system allows (CPU, Linux, large).

    Examples
    --------
    >>> t = empty(1024, 4096)            # 16 MiB: asks for huge pages
    >>> t.shape, t.dtype
    (torch.Size([1024, 4096]), torch.float32)
    """
    t = torch.empty(*size, dtype=dtype, device=device)
    nbytes = t.numel() * t.element_size()
    madvise: Any = _madvise() if t.device.type == "cpu" and nbytes >= MIN_BYTES else None
    if madvise:
        start = -(-t.data_ptr() // _HUGE) * _HUGE  # the whole 2 MiB pages inside the tensor
        stop = (t.data_ptr() + nbytes) // _HUGE * _HUGE
        if stop > start:
            madvise(start, stop - start, _MADV_HUGEPAGE)  # a hint: a refusal changes nothing
    return t
