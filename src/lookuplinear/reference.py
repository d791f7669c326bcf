"""The dense path every result is checked against: build the one-hot / multi-hot matrix, then
``nn.Linear``. This is the slow, obviously-right definition; it allocates ``N x in_features``.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from .errors import InputValueError
from .modules.layer import LookupLinear
from .sparse.bags import Bags

__all__ = ["dense_reference", "densify"]


def _rows(x: Any, in_features: int, dtype: torch.dtype) -> tuple[torch.Tensor, Bags | None]:
    """The dense matrix of ``x`` (one-hot for index tensors) and its entries as ``Bags``."""
    if isinstance(x, torch.Tensor) and x.layout == torch.strided:
        if x.dtype.is_floating_point or x.dtype == torch.bool:
            return x.to(dtype), None
        return F.one_hot(x.long(), in_features).to(dtype), None
    if isinstance(x, Bags):
        bags = x
    else:  # a torch sparse COO / CSR tensor or a scipy.sparse matrix of shape (N, in_features)
        if tuple(x.shape)[1:] != (in_features,):
            raise InputValueError(
                f"x must have shape (N, in_features={in_features}), got {tuple(x.shape)}."
            )
        bags = Bags.from_torch_sparse(x) if isinstance(x, torch.Tensor) else Bags.from_scipy(x)
    return bags.to_dense(in_features, dtype=dtype), bags


def densify(x: Any, layer: LookupLinear, *, dtype: torch.dtype | None = None) -> torch.Tensor:
    """The dense input ``X`` with ``layer(x) == layer.to_linear(strict=False)(X)``.

    One-hot rows for index input (a ``padding_idx`` position included: it reads the padding
    row, as ``nn.Embedding`` does), the multi-hot / weighted matrix for matrix input with the
    ``padding_idx`` column zeroed (bags drop padding entries, as ``nn.EmbeddingBag`` does); for
    ``mode="mean"`` (``"sqrtn"``) each matrix row is divided by the sum of its entries' weights
    (the square root of the sum of their squares).

    Raises
    ------
    InputValueError
        ``mode="max"`` on matrix input: a max has no linear equivalent.

    Examples
    --------
    >>> layer = LookupLinear(4, 2, mode="mean")
    >>> densify(Bags.from_lists([[0, 2, 2], []]), layer)
    tensor([[0.3333, 0.0000, 0.6667, 0.0000],
            [0.0000, 0.0000, 0.0000, 0.0000]])
    """
    dtype = dtype or layer.weight.dtype
    n = layer.in_features
    X, bags = _rows(x, n, dtype)
    pad = layer.padding_idx
    per_element = (
        isinstance(x, torch.Tensor)
        and x.layout == torch.strided
        and not (x.dtype.is_floating_point or x.dtype == torch.bool)
    )
    if per_element:
        return X
    if pad is not None:
        X = X.index_fill(-1, torch.tensor([pad], device=X.device), 0)
    if layer.mode == "sum":
        return X
    if layer.mode == "max":
        raise InputValueError(
            "mode='max' has no linear equivalent, so there is no dense input to give; "
            "use dense_reference(layer, x) for the reference output."
        )
    if layer.mode == "mean":
        denom = X.sum(-1)
    elif bags is None:  # dense rows: the entries are the non-zeros
        denom = (X * X).sum(-1)
    else:  # entries as given (duplicates counted one by one, like TensorFlow's sqrtn)
        w = torch.ones(bags.nnz, dtype=dtype) if bags.weights is None else bags.weights.to(dtype)
        sq = Bags(bags.indices, bags.offsets, w * w).to_dense(n, dtype=dtype)
        if pad is not None:
            sq[:, pad] = 0
        denom = sq.sum(-1)
    nonzero = denom != 0
    safe = torch.where(nonzero, denom, 1)  # no sqrt(0) or 1/0: gradients stay finite
    scale = torch.where(nonzero, 1 / (safe.sqrt() if layer.mode == "sqrtn" else safe), 0)
    return X * scale.unsqueeze(-1)


def dense_reference(
    layer: LookupLinear, x: Any, *, linear: nn.Linear | None = None
) -> torch.Tensor:
    """``layer(x)`` computed the dense way: ``linear(densify(x, layer))``.

    ``linear`` defaults to ``layer.to_linear(strict=False)``; pass your own (e.g. a float64 copy)
    to take gradients through it. On index input a ``padding_idx`` position gives the padding
    row as a constant (``nn.Embedding``'s: its value, no gradient). For ``mode="max"`` on
    matrix input the output is the element-wise max of ``linear.weight.T``'s rows present in
    each row (0 for an empty row), plus the bias.

    Examples
    --------
    >>> layer = LookupLinear(4, 2, mode="max", bias=False)
    >>> bags = Bags.from_lists([[0, 3], []])
    >>> W = layer.weight.detach()
    >>> torch.equal(dense_reference(layer, bags)[0], torch.maximum(W[0], W[3]))
    True
    """
    lin = linear if linear is not None else layer.to_linear(strict=False)
    dtype = lin.weight.dtype
    is_index = (
        isinstance(x, torch.Tensor)
        and x.layout == torch.strided
        and not (x.dtype.is_floating_point or x.dtype == torch.bool)
    )
    if is_index and layer.padding_idx is not None:
        # nn.Embedding: a padding position reads the padding row, which gets no gradient, so
        # that column is a constant of the reference (a linear map would give it a gradient)
        X = densify(x, layer, dtype=dtype)
        pad = layer.padding_idx
        at_pad = X[..., pad : pad + 1]  # (..., 1): 1 at padding positions
        X = X.index_fill(-1, torch.tensor([pad], device=X.device), 0)
        return lin(X) + at_pad * lin.weight[:, pad].detach()
    if layer.mode != "max" or is_index:
        return lin(densify(x, layer, dtype=dtype))
    X, bags = _rows(x, layer.in_features, dtype)
    present = (
        X != 0
        if bags is None
        else Bags(bags.indices, bags.offsets).to_dense(layer.in_features, dtype=dtype) != 0
    )
    if layer.padding_idx is not None:
        present[..., layer.padding_idx] = False
    W = lin.weight.T  # (in, out)
    masked = torch.where(present.unsqueeze(-1), W, torch.tensor(float("-inf"), dtype=dtype))
    out = masked.amax(-2)
    out = torch.where(present.any(-1, keepdim=True), out, torch.zeros((), dtype=dtype))
    return out if lin.bias is None else out + lin.bias
