"""Peak memory of one call: the resident-set growth on Linux, the allocator's peak on CUDA.

On Linux the kernel keeps the peak resident set size (``VmHWM``) of the process and lets the
process reset it (``/proc/self/clear_refs``, value 5), so the peak of one call is measured
exactly, for torch, numpy and scipy allocations alike; ``malloc_trim`` first returns freed heap
memory so that the baseline is the memory in use. Elsewhere the measurement is unavailable.
"""

from __future__ import annotations

import ctypes
import ctypes.util
from collections.abc import Callable
from functools import cache
from typing import Any

import torch

__all__ = ["format_bytes", "measure_peak", "peak_memory_available"]


def format_bytes(n: float) -> str:
    """``n`` bytes in the largest binary unit (KiB, MiB, GiB) that is not above it.

    Examples
    --------
    >>> format_bytes(512 * 10 * 4), format_bytes(512 * 20_000_000 * 4), format_bytes(800)
    ('20.0 KiB', '38.1 GiB', '800 B')
    """
    for unit, size in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= size:
            return f"{n / size:.1f} {unit}"
    return f"{n:.0f} B"


@cache
def _libc() -> Any:
    name = ctypes.util.find_library("c")
    return ctypes.CDLL(name) if name else None


def _status(key: str) -> int:
    with open("/proc/self/status", encoding="ascii") as f:
        for line in f:
            if line.startswith(key):
                return int(line.split()[1]) * 1024
    raise OSError(f"{key} not in /proc/self/status")


def _reset_peak() -> int:
    """Return freed memory to the OS, reset the peak RSS, return the current RSS in bytes."""
    libc = _libc()
    if libc is not None and hasattr(libc, "malloc_trim"):
        libc.malloc_trim(0)
    with open("/proc/self/clear_refs", "w", encoding="ascii") as f:
        f.write("5")
    return _status("VmRSS:")


@cache
def peak_memory_available() -> bool:
    """Whether :func:`measure_peak` can measure CPU memory on this system."""
    try:
        _reset_peak()
        _status("VmHWM:")
    except OSError:
        return False
    return True


def measure_peak(fn: Callable[[], Any], device: str = "cpu") -> int | None:
    """Bytes allocated at the peak of ``fn()`` above what was in use before; None if unknown.

    Examples
    --------
    >>> n = measure_peak(lambda: torch.ones(4_000_000).sum())  # a 16 MB temporary
    >>> n is None or n > 8_000_000
    True
    """
    if device == "cuda":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
        fn()
        torch.cuda.synchronize()
        return int(torch.cuda.max_memory_allocated() - base)
    if not peak_memory_available():
        return None
    base = _reset_peak()
    fn()
    return max(0, _status("VmHWM:") - base)
