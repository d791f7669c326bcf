"""The project's errors for the builtin ones that the C++ operators raise (``csrc/ops.cpp``)."""

from __future__ import annotations

import torch

from ..errors import (
    InputValueError,
    LookupIndexError,
    LookupLinearError,
    OffsetsError,
    PaddingIdxError,
)

__all__ = ["project_error", "scalar_type_name"]

#: the C++ names of torch's dtypes (``c10::ScalarType``), as the C++ kernels' messages print them
_SCALAR_TYPES = {
    torch.int64: "Long", torch.int32: "Int", torch.int16: "Short", torch.int8: "Char",
    torch.uint8: "Byte", torch.bool: "Bool", torch.float64: "Double", torch.float32: "Float",
    torch.float16: "Half", torch.bfloat16: "BFloat16", torch.complex64: "ComplexFloat",
    torch.complex128: "ComplexDouble",
}


def scalar_type_name(dtype: torch.dtype) -> str:
    """``dtype`` as the C++ kernels' messages name it (``Long`` for ``torch.int64``), so that
    a check on the Python side words its message as the C++ side's.

    Examples
    --------
    >>> scalar_type_name(torch.int32)
    'Int'
    """
    return _SCALAR_TYPES.get(dtype, str(dtype).removeprefix("torch."))


def project_error(e: Exception) -> Exception | None:
    """The project's error for a builtin one that a C++ kernel raised (``TORCH_CHECK_INDEX``:
    ``IndexError``, ``TORCH_CHECK_VALUE``: ``ValueError``, the message the Python side's), or
    None where ``e`` is not one."""
    message = str(e)
    if isinstance(e, LookupLinearError) or not message.startswith("lookuplinear::"):
        return None
    if isinstance(e, IndexError):
        return LookupIndexError(message)
    if isinstance(e, ValueError):
        if "offsets must" in message:
            return OffsetsError(message)
        return PaddingIdxError(message) if "padding_idx must" in message else \
            InputValueError(message)
    return None
