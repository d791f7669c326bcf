"""The dense path every result is checked against: build the one-hot / multi-hot matrix, then
``nn.Linear``. This is the slow, obviously-right definition; it allocates ``N x in_features``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from .errors import InputValueError
from .modules.layer import LookupLinear
from .sparse.bags import Bags

__all__ = ["REFERENCE_BYTES", "TouchedReference", "dense_reference", "densify",
           "reference_bytes", "touched_reference"]


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
    per_element = (
        isinstance(x, torch.Tensor)
        and x.layout == torch.strided
        and not (x.dtype.is_floating_point or x.dtype == torch.bool)
    )
    # an index lookup returns the padding row as it is (nn.Embedding); bags drop its entries
    return _densify(x, layer.in_features, None if per_element else layer.padding_idx,
                    "sum" if per_element else layer.mode, dtype or layer.weight.dtype)


def _densify(x: Any, n: int, pad: int | None, mode: str, dtype: torch.dtype) -> torch.Tensor:
    """:func:`densify` of a layer of ``n`` inputs, ``padding_idx`` ``pad`` and ``mode``."""
    X, bags = _rows(x, n, dtype)
    if pad is not None:
        X = X.index_fill(-1, torch.tensor([pad], device=X.device), 0)
    if mode == "sum":
        return X
    if mode == "max":
        raise InputValueError(
            "mode='max' has no linear equivalent, so there is no dense input to give; "
            "use dense_reference(layer, x) for the reference output."
        )
    if mode == "mean":
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
    scale = torch.where(nonzero, 1 / (safe.sqrt() if mode == "sqrtn" else safe), 0)
    return X * scale.unsqueeze(-1)


def dense_reference(
    layer: LookupLinear, x: Any, *, linear: nn.Linear | None = None
) -> torch.Tensor:
    """``layer(x)`` computed the dense way: ``linear(densify(x, layer))``.

    ``linear`` defaults to ``layer.to_linear(strict=False)``; pass your own (e.g. a float64 copy)
    to take gradients through it. On index input a ``padding_idx`` position gives the padding
    row as a constant (``nn.Embedding``'s: its value, no gradient). For ``mode="max"`` on
    matrix input the output is the element-wise max of ``linear.weight.T``'s rows present in
    each row (0 for an empty row), plus the bias; of tied rows the first in the bag (the
    lowest column of a dense row) takes the gradient, as ``nn.EmbeddingBag``'s.

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
    if bags is None:  # dense rows: the entries are the non-zeros, in column order
        columns = torch.arange(layer.in_features, device=X.device)
        order = columns.expand(X.shape).where(X != 0, _ABSENT)
    else:
        order = _first_positions(bags, layer.in_features)
    if layer.padding_idx is not None:
        order = order.index_fill(-1, torch.tensor([layer.padding_idx], device=order.device),
                                 _ABSENT)
    flat = order.reshape(-1, layer.in_features)
    out = _max_rows(lin.weight.T, flat).reshape(*order.shape[:-1], -1)  # W: (in, out)
    return out if lin.bias is None else out + lin.bias


# ---- the reference on the rows a batch touches ------------------------------------------------

#: bytes a float64 reference may hold at once, by default (``check_equivalence(max_bytes=)``)
REFERENCE_BYTES = 1 << 30
_PIECE_BYTES = 32 << 20


@dataclass
class TouchedReference:
    """The dense reference of a lookup on the weight rows its batch touches (``rows``, sorted):
    its output and the gradients, in float64, for an upstream gradient. Every other row of
    ``densify(x)`` is zero, so every other weight row's gradient is exactly zero."""

    out: torch.Tensor  #: (N, out)
    rows: torch.Tensor  #: (k,) the distinct indices of the batch, sorted
    weight_grad: torch.Tensor  #: (k, out): the gradient of ``weight[rows]``
    bias_grad: torch.Tensor | None  #: (out,)
    weights_grad: torch.Tensor | None  #: (nnz,): of the per-entry weights, where asked


def reference_bytes(bags: Bags, out_features: int, mode: str) -> tuple[int, int]:
    """``(fixed, smallest chunk)``: the bytes :func:`touched_reference` holds for the whole
    batch (output, upstream, the touched rows and their gradient, the entries) and for its
    largest one-bag piece (the densified bag on its touched columns; for ``max`` times the
    output width)."""
    n_bags, nnz = len(bags), bags.nnz
    fixed = 8 * (3 * n_bags * out_features + 3 * nnz * out_features + 4 * nnz)
    lengths = bags.offsets[1:] - bags.offsets[:-1]
    longest = int(lengths.max()) if n_bags else 0
    return fixed, _chunk_bytes(1, longest, out_features, mode)


def _chunk_bytes(n_rows: int, entries: int, out_features: int, mode: str) -> int:
    """Bytes of ``n_rows`` bags of ``entries`` entries densified on their touched columns
    (at most ``entries``), with the copies the scaling and the backward make."""
    per_cell = 8 * (2 * out_features + 2) + out_features if mode == "max" else 8 * 4
    return n_rows * max(1, entries) * per_cell


def _chunks(offsets: list[int], out_features: int, mode: str, budget: int
            ) -> list[tuple[int, int]]:
    """Bag ranges ``[a, b)`` of at most ``budget`` bytes each (one bag at least)."""
    n, out, a = len(offsets) - 1, [], 0
    while a < n:
        step = 1
        while a + 2 * step <= n and _chunk_bytes(
                2 * step, offsets[a + 2 * step] - offsets[a], out_features, mode) <= budget:
            step *= 2
        out.append((a, a + step))
        a += step
    return out


def touched_reference(
    weight: torch.Tensor, bias: torch.Tensor | None, bags: Bags, mode: str,
    padding_idx: int | None, upstream: torch.Tensor, *, weights_grad: bool = False,
    max_bytes: int = REFERENCE_BYTES,
) -> TouchedReference:
    """``nn.Linear`` (``weight.T``, ``bias``) on ``densify(bags)``, and its gradients for
    ``upstream``, in float64, computed on the columns the batch touches: bag by bag in pieces
    of at most ``max_bytes - fixed`` bytes (:func:`reference_bytes`), each piece densified on
    its own touched columns, each ``nn.Linear`` the rows of ``weight`` those columns name.

    ``weight``: ``(in_features, out)``, the layer's table; ``bags``: on the CPU; ``mode``:
    ``"sum"``, ``"mean"``, ``"sqrtn"`` or ``"max"`` (the element-wise max of the present rows,
    0 for an empty bag, plus the bias); ``weights_grad``: also differentiate the bags'
    per-entry weights.
    """
    fixed, _ = reference_bytes(bags, weight.shape[1], mode)
    # pieces of a few MiB: a piece of r bags of r entries densifies to r * r values, so
    # smaller pieces do less work in all, down to where the calls' own cost shows
    budget = max(min(max_bytes - fixed, _PIECE_BYTES), 1)
    rows = torch.unique(bags.indices.long())
    W = weight.detach().index_select(0, rows).double()  # (k, out)
    b = None if bias is None else bias.detach().double().requires_grad_(True)
    w_all = None if bags.weights is None else bags.weights.detach().double()
    if w_all is not None:
        w_all.requires_grad_(weights_grad)
    off = bags.offsets.long().tolist()
    up = upstream.double()
    W_grad = torch.zeros_like(W)
    others = [*([b] if b is not None else []),
              *([w_all] if w_all is not None and weights_grad else [])]
    sums = [torch.zeros_like(t) for t in others]
    outs = []
    for a, z in _chunks(off, weight.shape[1], mode, budget):
        e0, e1 = off[a], off[z]
        idx = bags.indices[e0:e1].long()
        cols = torch.unique(idx)  # this piece's touched columns
        piece = Bags(torch.searchsorted(cols, idx), torch.tensor(off[a:z + 1]) - e0,
                     None if w_all is None else w_all[e0:e1])
        pad = None
        if padding_idx is not None:
            at = int(torch.searchsorted(cols, torch.tensor(padding_idx)))
            pad = at if at < cols.numel() and int(cols[at]) == padding_idx else None
        at_rows = torch.searchsorted(rows, cols)
        W_cols = W.index_select(0, at_rows).requires_grad_(True)  # (k_piece, out)
        out = _dense_piece(piece, cols.numel(), pad, mode, W_cols, b)
        got = torch.autograd.grad(out, [W_cols, *others], up[a:z], allow_unused=True)
        if got[0] is not None:
            W_grad.index_put_((at_rows,), got[0], accumulate=True)
        for total, g in zip(sums, got[1:], strict=True):
            if g is not None:
                total += g
        outs.append(out.detach())
    grads = iter(sums)
    return TouchedReference(
        torch.cat(outs) if outs else up.new_zeros((0, weight.shape[1])), rows, W_grad,
        None if b is None else next(grads),
        None if w_all is None or not weights_grad else next(grads))


def _dense_piece(bags: Bags, n: int, pad: int | None, mode: str, W: torch.Tensor,
                 bias: torch.Tensor | None) -> torch.Tensor:
    """``nn.Linear(n, out)`` with weight ``W.T`` on ``densify(bags)`` (``max``: the max of the
    present rows of ``W``)."""
    if mode != "max":
        return F.linear(_densify(bags, n, pad, mode, W.dtype), W.T, bias)
    if n == 0:  # every bag of the piece is empty: 0, plus the bias
        out = W.new_zeros((len(bags), W.shape[1])) + 0 * W.sum()
        return out if bias is None else out + bias
    order = _first_positions(bags, n)
    if pad is not None:
        order[:, pad] = _ABSENT
    out = _max_rows(W, order)
    return out if bias is None else out + bias


#: the position :func:`_first_positions` gives a row absent from a bag
_ABSENT = torch.iinfo(torch.int64).max


def _first_positions(bags: Bags, n: int) -> torch.Tensor:
    """``(N, n)``: where each of the ``n`` rows first occurs in each bag (its entry's position
    in the bag), :data:`_ABSENT` where it does not."""
    offsets, device = bags.offsets.long(), bags.indices.device
    bag_of = torch.repeat_interleave(torch.arange(len(bags), device=device), offsets.diff())
    position = torch.arange(bags.nnz, device=device) - offsets[bag_of]
    first = torch.full((len(bags) * n,), _ABSENT, dtype=torch.int64, device=device)
    first.scatter_reduce_(0, bag_of * n + bags.indices.long(), position, "amin")
    return first.reshape(len(bags), n)


def _max_rows(W: torch.Tensor, order: torch.Tensor) -> torch.Tensor:
    """``(N, out)``: per bag and column, the largest value of the rows of ``W`` (``(n, out)``)
    the bag holds (``order``, ``(N, n)``: their first positions, :data:`_ABSENT` for a row it
    does not hold), 0 for an empty bag.

    As ``nn.EmbeddingBag(mode="max")``, a row replaces the maximum so far only where it is
    strictly larger, so of tied rows the one first in the bag is the maximum and takes all of
    the value's gradient (``amax`` would split it between them)."""
    present = order != _ABSENT
    with torch.no_grad():
        masked = torch.where(present.unsqueeze(-1), W, torch.tensor(float("-inf"),
                                                                    dtype=W.dtype))
        top = masked.amax(-2, keepdim=True)  # NaN where a present row is NaN, as amax
        tied = present.unsqueeze(-1) & ((masked == top) | (masked.isnan() & top.isnan()))
        winner = torch.where(tied, order.unsqueeze(-1), _ABSENT).argmin(-2)  # (N, out)
    out = W.gather(0, winner)
    return torch.where(present.any(-1, keepdim=True), out, torch.zeros((), dtype=W.dtype))
