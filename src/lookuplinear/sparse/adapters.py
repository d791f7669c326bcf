"""Matrix-shaped sparse input (scipy.sparse, torch sparse COO/CSR) as :class:`Bags`."""

from __future__ import annotations

from typing import Any, cast

import torch

from ..errors import InputTypeError, InputValueError
from .bags import Bags, is_scipy_sparse

__all__ = ["as_bags", "check_columns"]


def as_bags(input: Any, in_features: int, *, merge: bool = True) -> Bags:
    """Turn a matrix-shaped sparse input into ``Bags``, checking its number of columns.

    An entry stored twice at one row and column is summed into one, as
    :meth:`Bags.from_scipy` and :meth:`Bags.from_torch_sparse` read it; ``merge=False`` takes
    the entries as stored, without the pass that looks for such entries, for a mode that only
    sums them (not one of :data:`~lookuplinear.modes.ENTRYWISE_MODES`)."""
    if isinstance(input, Bags):
        return input
    if is_scipy_sparse(input):
        check_columns(tuple(cast(Any, input).shape), in_features, "scipy.sparse matrix")
        return Bags._from_scipy(input, merge=merge)
    if isinstance(input, torch.Tensor) and input.layout in (torch.sparse_coo, torch.sparse_csr):
        check_columns(tuple(input.shape), in_features, "torch sparse tensor")
        return Bags._from_torch_sparse(input, merge=merge)
    if isinstance(input, torch.Tensor):
        raise InputTypeError(
            f"a torch sparse input must have layout sparse_coo or sparse_csr, got {input.layout}. "
            "Convert it with x.to_sparse_csr() (or x.to_sparse() for COO)."
        )
    raise InputTypeError(
        "input must be an integer index tensor, a floating tensor of shape (..., in_features), "
        "lookuplinear.Bags, a scipy.sparse matrix or a torch sparse COO/CSR tensor; got "
        f"{type(input).__name__}. Convert lists with Bags.from_lists(...) or torch.tensor(...)."
    )


def check_columns(shape: tuple[int, ...], in_features: int, what: str) -> None:
    if len(shape) != 2:
        raise InputValueError(
            f"{what} must have shape (N, in_features={in_features}), got shape {shape}. "
            "Reshape it to 2-D (one row per sample)."
        )
    if shape[1] != in_features:
        raise InputValueError(
            f"{what} must have shape (N, in_features={in_features}), got shape {shape}. "
            "Build the vectorizer/matrix with the layer's vocabulary size, or the layer with "
            f"in_features={shape[1]}."
        )
