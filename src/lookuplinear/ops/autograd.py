"""The lookup that is not the operators' (``torch.jit.trace``'s), and the C kernels' max lookup.

The layers' and the collections' sum and max lookups call the operators
``lookuplinear::bag_lookup``, ``lookuplinear::gather_groups`` and ``lookuplinear::bag_max``
(:mod:`.library`), whose backward is C++ (or registered from Python where the extension is not
built), eagerly and in recorded graphs alike. A table bound to a
``fused=True`` optimizer (:mod:`lookuplinear._fusion`) is no exception: in a backward that
accumulates into it, the operators' backward hands ``grad_out`` and the lookup to the optimizer
(``lookuplinear::fused_defer``), which updates the rows at the end of the backward.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from ._bagmax import c_operands
from .library import check_pooling, project_error

__all__ = ["bag_lookup", "bag_max"]


_BAG_MAX = torch.ops.lookuplinear.bag_max.default
#: the operator ``lookuplinear::bag_lookup``'s modes, as ``F.embedding_bag`` names them
_MODES = {0: "sum", 1: "mean"}


def bag_lookup(
    weight: torch.Tensor,
    indices: torch.Tensor,
    offsets: torch.Tensor | None = None,
    weights: torch.Tensor | None = None,
    padding_idx: int | None = None,
    mode: int = 0,
    *,
    include_last_offset: bool = True,
) -> torch.Tensor:
    """``densify(x) @ weight`` (``mode`` 0, sum) or the bags' means (``mode`` 1) by torch's own
    ops, with their sparse gradient: where the operator ``lookuplinear::bag_lookup`` is not
    called (a ``torch.jit.trace``, whose graph and ONNX export hold ATen's ops). Its arguments
    are the operator's.

    ``offsets is None``: index input of any shape ``S``, returns ``S + (out,)``
    (``F.embedding(sparse=True)``, ``mode`` 0); otherwise bags, returns ``(N, out)``
    (``F.embedding_bag(mode="sum" or "mean", sparse=True)``, the sum with
    ``per_sample_weights``): CSR offsets (``N + 1``), or with ``include_last_offset=False``
    ``nn.EmbeddingBag``'s ``N`` start offsets. ``mode`` 1 is
    ATen's mean, as the operator's: the sums divided by the bags' sizes (padding entries not
    counted), the gradient the output's times ``1 / size``. ``weight.grad`` is torch's: a
    sparse COO tensor, one row per entry (padding left out), uncoalesced.

    Raises
    ------
    InputValueError
        ``mode`` other than 0 and 1, or ``mode`` 1 without ``offsets`` or with ``weights``, as
        the operator refuses them.

    Examples
    --------
    >>> W = torch.ones(5, 2, requires_grad=True)
    >>> bag_lookup(W, torch.tensor([3, 1, 3]), torch.tensor([0, 2, 3])).sum().backward()
    >>> W.grad.coalesce().indices(), W.grad.coalesce().values()   # rows 1 and 3; 3 twice
    (tensor([[1, 3]]), tensor([[1., 1.],
            [2., 2.]]))
    """
    check_pooling(offsets, weights, mode)  # the operator's errors
    if offsets is None:
        return F.embedding(indices, weight, padding_idx=padding_idx, sparse=True)
    return F.embedding_bag(indices, weight, offsets, mode=_MODES[mode], sparse=True,
                           per_sample_weights=weights, include_last_offset=include_last_offset,
                           padding_idx=padding_idx)


def bag_max(
    weight: torch.Tensor, indices: torch.Tensor, offsets: torch.Tensor
) -> torch.Tensor | None:
    """``F.embedding_bag(indices, weight, offsets, mode="max", include_last_offset=True)`` by
    the C kernels (the operator ``lookuplinear::bag_max``), differentiable in ``weight``; None
    where they do not apply.

    Parameters
    ----------
    weight : torch.Tensor
        ``(rows, dim)`` table.
    indices : torch.Tensor
        ``(nnz,)`` int32/int64 entries.
    offsets : torch.Tensor
        ``(N + 1,)`` CSR offsets.

    Returns
    -------
    torch.Tensor or None
        ``(N, dim)``; None unless the C kernels apply: the backend runs C, all three on the CPU,
        ``weight`` contiguous float32/float64, the indices int32/int64. The backward adds
        ``grad_out[b, j]`` to the row that gave each maximum in the forward
        (``bag_max_backward``), and differentiates again under ``create_graph=True``.

    Raises
    ------
    LookupIndexError
        An index outside ``[0, rows)``, before anything is read outside the table.
    OffsetsError
        ``offsets`` that are not CSR offsets of the entries.

    Examples
    --------
    >>> W = torch.tensor([[1.0, 5.0], [3.0, 2.0], [0.0, 0.0]])
    >>> out = bag_max(W, torch.tensor([0, 1, 2]), torch.tensor([0, 2, 2, 3]))
    >>> out is None or out.tolist() == [[3.0, 5.0], [0.0, 0.0], [0.0, 0.0]]  # None: no C library
    True
    """
    if c_operands(weight, indices, offsets) is None:
        return None
    try:
        out: torch.Tensor = _BAG_MAX(weight, indices, offsets)
    except (IndexError, ValueError) as e:  # a C++ kernel's builtin: the project's
        mapped = project_error(e)
        if mapped is None:
            raise
        raise mapped from None
    return out
