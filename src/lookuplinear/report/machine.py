"""What machine a benchmark ran on: CPU model, threads, memory, library versions."""

from __future__ import annotations

import os
import platform
from typing import Any

import numpy as np
import scipy
import torch

__all__ = ["available_memory", "format_machine", "machine_info"]


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


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
    ['cpu_count', 'cpu_model', 'device']
    """
    info: dict[str, Any] = {
        "cpu_model": _cpu_model(),
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
    return (
        f"{info['cpu_model']}, {info['cpu_count']} cores ({info['torch_threads']} torch threads)"
        f"{mem_s}{gpu}; torch {info['torch']}, numpy {info['numpy']}, scipy {info['scipy']}, "
        f"Python {info['python']}"
    )
