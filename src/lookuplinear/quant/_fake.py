"""Shapes of PyTorch's 4-bit embedding-bag ops for a recorded graph.

``torch.export`` and ``torch.compile`` run each op on fake tensors (shapes, no values) while
they record. PyTorch registers a ``Meta`` kernel for its int8 ops
(``quantized::embedding_bag_byte_unpack`` and ``..._byte_rowwise_offsets``) but none for their
4-bit twins, so an int4 layer could not be recorded. The fake kernels here give the output
shapes the CPU kernels produce; they are registered once, and only where PyTorch has none.
"""

from __future__ import annotations

import torch

__all__ = ["register_4bit_fakes"]

_UNPACK = "quantized::embedding_bag_4bit_unpack"
_BAGS = "quantized::embedding_bag_4bit_rowwise_offsets"
#: a 4-bit row: two values a byte, then its float16 scale and offset (4 bytes)
_ROW_TAIL = 4


def _columns(packed: torch.Tensor) -> int:
    return (packed.shape[-1] - _ROW_TAIL) * 2


#: the Meta kernels' registrations (kept alive: dropping the Library removes them)
_LIBRARY: list[torch.library.Library] = []


def _unpack(weight: torch.Tensor) -> torch.Tensor:
    return weight.new_empty((*weight.shape[:-1], _columns(weight)), dtype=torch.float32)


def _bags(
    weight: torch.Tensor,
    indices: torch.Tensor,
    offsets: torch.Tensor | None = None,
    scale_grad_by_freq: bool = False,
    mode: int = 0,
    pruned_weights: bool = False,
    per_sample_weights: torch.Tensor | None = None,
    compressed_indices_mapping: torch.Tensor | None = None,
    include_last_offset: bool = False,
) -> torch.Tensor:
    if offsets is None:  # a (B, N) index tensor: one bag per row
        n_bags = indices.shape[0]
    else:
        n_bags = offsets.shape[0] - 1 if include_last_offset else offsets.shape[0]
    return weight.new_empty((n_bags, _columns(weight)), dtype=torch.float32)


def register_4bit_fakes() -> None:
    """Register Meta kernels (what fake tensors run) for the two 4-bit ops this package calls,
    where PyTorch has none; a second call does nothing."""
    missing = [(name, fn) for name, fn in ((_UNPACK, _unpack), (_BAGS, _bags))
               if not torch._C._dispatch_has_kernel_for_dispatch_key(name, "Meta")]
    if not missing:
        return
    lib = torch.library.Library("quantized", "IMPL")  # PyTorch's own namespace
    for name, fn in missing:
        lib.impl(name.split("::")[1], fn, "Meta")
    _LIBRARY.append(lib)
