"""The project's errors for the builtin ones that the C++ operators raise (``csrc/ops.cpp``)."""

from __future__ import annotations

from ..errors import (
    InputValueError,
    LookupIndexError,
    LookupLinearError,
    OffsetsError,
    PaddingIdxError,
)

__all__ = ["project_error"]


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
