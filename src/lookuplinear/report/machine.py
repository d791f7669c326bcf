"""What machine a benchmark ran on: CPU model, threads, memory, library versions."""

from __future__ import annotations

import os
import platform
from typing import Any

import numpy as np
import scipy
import torch

__all__ = ["available_memory", "cpu_ticks", "format_machine", "machine_info", "others_share"]

#: the instruction sets that change the speed of the kernels measured here (FBGEMM's most)
_FLAGS = ("avx2", "fma", "avx512f", "avx512bw", "avx512_vnni", "amx_tile")


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _cpu_flags() -> list[str] | None:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("flags"):
                    have = set(line.split(":", 1)[1].split())
                    return [f for f in _FLAGS if f in have]
    except OSError:
        pass
    return None


def cpu_ticks() -> tuple[int, int, int] | None:
    """``(all, idle, this process)`` CPU clock ticks so far on every core; None off Linux.

    Two readings tell which share of the machine other processes used between them
    (:func:`others_share`): a benchmark timed while they ran is not this machine's number.
    """
    try:
        with open("/proc/stat", encoding="ascii") as f:
            cpu = [int(v) for v in f.readline().split()[1:]]
        with open("/proc/self/stat", encoding="ascii") as f:
            own = f.read().rsplit(")", 1)[1].split()  # after the command name
    except (OSError, ValueError, IndexError):
        return None
    idle = cpu[3] + (cpu[4] if len(cpu) > 4 else 0)  # idle + iowait
    total = sum(cpu[:8])  # user nice system idle iowait irq softirq steal (guest is in user)
    return total, idle, int(own[11]) + int(own[12])  # utime + stime, all threads


def others_share(
    before: tuple[int, int, int] | None, after: tuple[int, int, int] | None
) -> float | None:
    """The share of all cores' time that other processes used between two :func:`cpu_ticks`.

    None when unknown (no readings, or too few ticks between them to tell).

    Examples
    --------
    >>> others_share((1000, 600, 100), (1200, 700, 150))  # 200 ticks: 100 idle, 50 ours
    0.25
    """
    if before is None or after is None:
        return None
    total, idle, own = (a - b for a, b in zip(after, before, strict=True))
    if total < 20:  # 10 ms ticks: under 0.2 core-seconds the share is a guess
        return None
    return max(0.0, (total - idle - own) / total)


def _total_memory_bytes() -> int | None:
    try:
        return int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
    except (ValueError, OSError, AttributeError):
        return None


def available_memory() -> int:
    """Bytes the kernel says can be allocated now (``MemAvailable``), else 8 GiB.

    Examples
    --------
    >>> available_memory() > 0
    True
    """
    try:
        with open("/proc/meminfo", encoding="ascii") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 8 * 2**30


def machine_info(device: str = "cpu") -> dict[str, Any]:
    """The machine as a JSON-ready dict.

    Examples
    --------
    >>> info = machine_info()
    >>> sorted(info)[:3]
    ['cpu_count', 'cpu_flags', 'cpu_model']
    """
    info: dict[str, Any] = {
        "cpu_model": _cpu_model(),
        "cpu_flags": _cpu_flags(),
        "cpu_count": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "memory_bytes": _total_memory_bytes(),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "numpy": np.__version__,
        "scipy": scipy.__version__,
        "device": device,
    }
    try:
        info["load_average"] = [round(x, 2) for x in os.getloadavg()]  # others' work: noise
    except OSError:
        info["load_average"] = None
    if device == "cuda" and torch.cuda.is_available():
        info["gpu"] = torch.cuda.get_device_name()
    return info


def format_machine(info: dict[str, Any]) -> str:
    """One line: ``CPU model, N cores (T torch threads), M GiB, torch X``."""
    mem = info.get("memory_bytes")
    mem_s = f", {mem / 2**30:.0f} GiB RAM" if mem else ""
    gpu = f", GPU {info['gpu']}" if info.get("gpu") else ""
    load = info.get("load_average")
    gpu += f", load average {load[0]:.1f} at the start" if load else ""
    flags = info.get("cpu_flags")
    flags_s = f" [{' '.join(flags) or 'no AVX2'}]" if flags is not None else ""
    return (
        f"{info['cpu_model']}{flags_s}, {info['cpu_count']} cores "
        f"({info['torch_threads']} torch threads)"
        f"{mem_s}{gpu}; torch {info['torch']}, numpy {info['numpy']}, scipy {info['scipy']}, "
        f"Python {info['python']}"
    )
