"""The reductions of a bag's rows (``mode``): PyTorch's ``EmbeddingBag`` modes plus TensorFlow's
``sqrtn``, and the per-bag factor that turns a weighted sum into each of them."""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal, TypeAlias, get_args

import torch

from .errors import InputValueError

if TYPE_CHECKING:
    from .sparse.bags import Bags

__all__ = ["ENTRYWISE_MODES", "MODES", "Mode", "check_mode", "mean_of_sums", "reduce_sums",
           "row_scale", "safe_inverse"]

#: how a row of matrix input is reduced: PyTorch's EmbeddingBag modes plus TensorFlow's sqrtn
Mode: TypeAlias = Literal["sum", "mean", "sqrtn", "max"]
MODES: tuple[str, ...] = get_args(Mode)

#: the modes that read a matrix's entries one by one (``sqrtn`` their squares, ``max`` each as a
#: row present): for these an entry stored twice must be merged into its sum first, while
#: ``sum`` and ``mean`` read only the sums, which merging does not change
ENTRYWISE_MODES: tuple[str, ...] = ("sqrtn", "max")


def check_mode(mode: str) -> None:
    """Raise ``InputValueError`` unless ``mode`` is one of :data:`MODES`."""
    if mode not in MODES:
        raise InputValueError(
            f"mode must be one of {', '.join(repr(m) for m in MODES)}, got {mode!r}. "
            "Pass one of those (PyTorch's EmbeddingBag modes plus TensorFlow's 'sqrtn')."
        )


def row_scale(
    bags: Bags, mode: str, padding_idx: int | None, *, dtype: torch.dtype = torch.float32
) -> torch.Tensor:
    """Per-bag factor that turns the weighted sum into ``mode``'s reduction, shape ``(N,)``.

    ``sum``: 1; ``mean``: ``1 / sum(w)``; ``sqrtn``: ``1 / sqrt(sum(w**2))``, over the bag's
    non-padding entries (``w = 1`` when unweighted), and 0 for a bag whose denominator is 0.

    Examples
    --------
    >>> from lookuplinear import Bags
    >>> bags = Bags.from_lists([[1, 1, 2], [], [0]], weights=[[3.0, 4.0, 0.0], [], [2.0]])
    >>> row_scale(bags, "mean", None)          # 1 / (3 + 4 + 0), empty bag -> 0, 1 / 2
    tensor([0.1429, 0.0000, 0.5000])
    >>> row_scale(bags, "sqrtn", None)         # 1 / sqrt(9 + 16), 0, 1 / sqrt(4)
    tensor([0.2000, 0.0000, 0.5000])
    """
    if mode == "sum" or mode == "max":
        return torch.ones_like(bags.offsets[1:], dtype=dtype)
    acc = torch.float32 if dtype in _LOW_PRECISION else dtype
    denom = _denominator(bags, mode, padding_idx, acc)
    return safe_inverse(denom, sqrt=mode == "sqrtn").to(dtype)


def reduce_sums(sums: torch.Tensor, bags: Bags, mode: str, padding_idx: int | None
                ) -> torch.Tensor:
    """The bags' weighted sums ``(N, dim)`` reduced as ``mode`` says: each divided by its bag's
    denominator (``row_scale``'s, 0 for a bag whose denominator is 0).

    Divided, not multiplied by a reciprocal, as ATen's ``embedding_bag`` computes its mean (in
    float16 and bfloat16 in float32, then rounded once): a reciprocal rounded to the table's
    precision would round twice, and a bag's mean would then depend on the path that computed
    it (``sparse=True`` or not).

    Examples
    --------
    >>> from lookuplinear import Bags
    >>> sums = torch.tensor([[3.0], [0.0]], dtype=torch.bfloat16)
    >>> reduce_sums(sums, Bags.from_lists([[1, 2, 3], []]), "mean", None)   # 3 / 3, empty -> 0
    tensor([[1.],
            [0.]], dtype=torch.bfloat16)
    """
    if mode == "sum" or mode == "max":
        return sums
    if mode == "mean" and bags.weights is None and sums.dtype not in _LOW_PRECISION:
        # on the sums' device: a table on the meta device takes CPU indices, as nn.EmbeddingBag's
        sizes = _denominator(bags, mode, padding_idx, sums.dtype).to(sums.device)
        return mean_of_sums(sums, sizes.unsqueeze(1))
    acc = torch.float32 if sums.dtype in _LOW_PRECISION else sums.dtype
    # on the sums' device: a table on the meta device takes CPU indices, as nn.EmbeddingBag's
    denom = _denominator(bags, mode, padding_idx, acc).to(sums.device)
    nonzero = denom != 0
    safe = torch.where(nonzero, denom, torch.ones_like(denom))  # no 1/0: gradients stay finite
    safe = safe.sqrt() if mode == "sqrtn" else safe
    out = torch.where(nonzero.unsqueeze(1), sums.to(acc) / safe.unsqueeze(1),
                      torch.zeros((), dtype=acc, device=sums.device))
    return out.to(sums.dtype)


_LOW_PRECISION = (torch.float16, torch.bfloat16)


def mean_of_sums(sums: torch.Tensor, sizes: torch.Tensor) -> torch.Tensor:
    """Unweighted bags' means from their sums ``(N, dim)`` and sizes (``(N, 1)``, or any shape
    that broadcasts to ``sums``', in ``sums``' dtype), as
    ``nn.EmbeddingBag(mode="mean")`` computes them, to the bit: each sum (in float16 and
    bfloat16 rounded to the dtype, as ATen's) divided by its bag's size (0 for an empty bag),
    and the gradient ``grad * (1 / size)`` (ATen's mean backward multiplies by the reciprocal,
    which a division's backward would not).

    Examples
    --------
    >>> mean_of_sums(torch.tensor([[3.0], [0.0]]), torch.tensor([[3.0], [0.0]]))
    tensor([[1.],
            [0.]])
    """
    safe = sizes.clamp_min(1)  # an empty bag's sum is 0: 0 / 1
    if not (sums.requires_grad and torch.is_grad_enabled()) or torch.jit.is_tracing():
        return sums / safe  # no gradient to shape (or a trace: ONNX has no addcdiv)
    # addcdiv's gradient for its tensor1 is grad * (1 / tensor2), ATen's mean backward, in
    # eager mode, recorded graphs, torch.func transforms and forward-mode AD alike; -0 + x is
    # x, signed zeros included. The sizes expanded to the sums' shape: addcdiv's CPU kernel
    # broadcasting two operands at once is several times slower
    return torch.addcdiv(torch.full((), -0.0, dtype=sums.dtype, device=sums.device), sums,
                         safe.expand_as(sums).contiguous())


def _denominator(bags: Bags, mode: str, padding_idx: int | None, acc: torch.dtype
                 ) -> torch.Tensor:
    """Per bag, ``(N,)`` in ``acc``: the sum of the non-padding entries' weights (``mean``) or of
    their squares (``sqrtn``); ``w = 1`` when unweighted."""
    w = bags.weights
    if w is None and padding_idx is None:
        return bags.lengths().to(acc)
    # sizes from the tensors (ones_like, zeros_like), so that a trace keeps them as ops
    vals = torch.ones_like(bags.indices, dtype=acc) if w is None else w.to(acc)
    if mode == "sqrtn":
        vals = vals * vals
    if padding_idx is not None:
        vals = vals.masked_fill(bags.indices == padding_idx, 0)
    return torch.zeros_like(bags.offsets[1:], dtype=acc).index_add(0, bags.bag_ids(), vals)


def safe_inverse(denom: torch.Tensor, *, sqrt: bool) -> torch.Tensor:
    """``1 / denom`` (or ``1 / sqrt(denom)``) where ``denom != 0``, else 0; NaN-free gradients."""
    nonzero = denom != 0
    safe = torch.where(nonzero, denom, torch.ones_like(denom))
    inv = safe.rsqrt() if sqrt else safe.reciprocal()
    return torch.where(nonzero, inv, torch.zeros_like(inv))
