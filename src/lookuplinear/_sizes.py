"""Sizes and counts given as arguments: anything ``operator.index`` accepts, as PyTorch takes them.

``nn.EmbeddingBag(np.int64(1000), 16)`` works because ``torch.empty`` reads its sizes through
``__index__``; numpy integers (a table size read from an array) and one-element integer tensors
are sizes here for the same reason. A bool, a float or a number below the minimum is refused,
with the class PyTorch's modules raise for it too (``TypeError``, ``RuntimeError``).
"""

from __future__ import annotations

import operator
from typing import Any

import torch

from .errors import SizeError, SizeTypeError, TableShapeError

__all__ = ["as_size", "check_pretrained_table", "check_table_shape"]


def as_size(value: Any, name: str, *, low: int = 1, where: str = "") -> int:
    """``value`` as a Python ``int`` of at least ``low``, read as ``operator.index`` reads it.

    Parameters
    ----------
    value : int, numpy integer or one-element integer tensor
    name : str
        The argument's name, for the message.
    low : int, default 1
        The smallest value accepted.
    where : str, optional
        What the argument belongs to (``"TableConfig 'user'"``), prefixed to the message.

    Raises
    ------
    SizeTypeError
        ``value`` is a bool or is not an integer (a float, a string...): also a ``TypeError``,
        as ``nn.Embedding(2.5, 3)`` raises.
    SizeError
        ``value`` is below ``low``: also a ``RuntimeError``, as ``nn.Embedding(-1, 3)`` raises.

    Examples
    --------
    >>> import numpy as np
    >>> as_size(np.int64(1000), "in_features"), as_size(torch.tensor(16), "out_features")
    (1000, 16)
    >>> as_size(16.0, "out_features")
    Traceback (most recent call last):
        ...
    lookuplinear.errors.SizeTypeError: out_features must be an integer >= 1 (an int, a numpy ...
    """
    prefix = f"{where}: " if where else ""
    size: int | None = None
    if not isinstance(value, bool) and not (
        isinstance(value, torch.Tensor) and value.dtype == torch.bool
    ):
        try:
            size = operator.index(value)
        except TypeError:
            size = None
    if size is None or size < low:
        raise (SizeTypeError if size is None else SizeError)(
            f"{prefix}{name} must be an integer >= {low} (an int, a numpy integer or a "
            f"one-element integer tensor), got {value!r} ({type(value).__name__}). Pass a "
            "whole number of rows / columns / items (int(x) of a float that holds one)."
        )
    return size


def check_table_shape(weight: torch.Tensor | None, num_embeddings: int, embedding_dim: int,
                      where: str) -> None:
    """Raise :class:`TableShapeError` (an ``AssertionError`` too, as ``nn.Embedding`` asserts
    it) unless ``weight`` (an ``nn.Embedding``-style ``_weight``) is None or of shape
    ``(num_embeddings, embedding_dim)``; ``where``: the class's name."""
    if weight is not None and tuple(weight.shape) != (num_embeddings, embedding_dim):
        raise TableShapeError(
            f"{where}: _weight must have shape (num_embeddings, embedding_dim) = "
            f"({num_embeddings}, {embedding_dim}), got {tuple(weight.shape)}. Pass sizes "
            f"that match the table, or use {where}.from_pretrained(table)."
        )


def check_pretrained_table(embeddings: torch.Tensor, where: str) -> None:
    """Raise :class:`TableShapeError` (an ``AssertionError`` too, as ``nn.Embedding`` asserts
    it) unless ``embeddings``, a ``from_pretrained`` table, is 2-D; ``where``: the class's
    name."""
    if isinstance(embeddings, torch.Tensor) and embeddings.dim() != 2:
        raise TableShapeError(
            f"{where}.from_pretrained: embeddings must be a 2-D table (num_embeddings, "
            f"embedding_dim), got shape {tuple(embeddings.shape)}. Reshape it, e.g. "
            "embeddings.reshape(-1, 1) for one column."
        )
