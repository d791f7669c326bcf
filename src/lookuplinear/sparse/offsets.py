"""The one validator of CSR offsets, for :class:`~lookuplinear.sparse.bags.Bags` and
:class:`~lookuplinear.sparse.keyed.KeyedBags`.

CSR offsets of ``nnz`` entries cut them into ``len(offsets) - 1`` bags::

    entries = [a, b,   c,   d, e, f]
    offsets = [0,      2,   3,        6]      # bag b is entries[offsets[b]:offsets[b + 1]]

They start at 0, never decrease and end at ``nnz``.

Where they are checked: a CPU batch when it is built (reading the values costs no
synchronisation); a batch on another device when it is looked up, by device-side asserts
(:func:`lookuplinear.ops.assert_bags`, as ``nn.EmbeddingBag``'s CUDA kernels assert), or when its
``validate()`` is called (:func:`check_offsets`, which copies the offsets to the host).
"""

from __future__ import annotations

from typing import Any

import torch

from ..errors import InputTypeError, OffsetsError
from ..ops import offsets_ok, values_known
from ..ops._asserts import assert_offsets_twin

__all__ = ["as_offsets", "check_offsets", "csr_offsets", "on_host"]

#: whether CPU tensors are read where they are checked (False runs the path of the other
#: devices on CPU tensors, whose asserts then fire at once: how the tests see that path)
_CPU_IS_HOST = True


def on_host(t: torch.Tensor) -> bool:
    """Whether ``t``'s values can be read without a host synchronisation (a CPU tensor): batch
    constructors check the values of these and leave the others to ``validate()`` and to the
    lookup's device-side asserts."""
    return t.is_cpu and _CPU_IS_HOST


def check_offsets(offsets: Any, nnz: int, *, owner: str = "Bags", entries: str = "indices",
                  lazy: bool = False) -> None:
    """Raise ``OffsetsError`` unless ``offsets`` are the CSR offsets of ``nnz`` entries.

    Parameters
    ----------
    offsets : Tensor or numpy array of shape (N + 1,), integer
        The offsets to check.
    nnz : int
        The number of entries they cut into bags.
    owner, entries : str
        The batch type and the name of its entries, for the message (``"Bags"`` and
        ``"indices"``, ``"KeyedBags"`` and ``"values"``).
    lazy : bool
        Check the values only where reading them costs no host synchronisation (numpy arrays
        and CPU tensors, :func:`on_host`); on other devices only the shape. ``False`` reads
        them on any device (a copy to the host). Meta tensors have no values to check.

    Raises
    ------
    OffsetsError
        The offsets are empty, do not start at 0, decrease, or do not end at ``nnz`` (a
        ``ValueError``, and a ``RuntimeError`` as PyTorch's ``embedding_bag`` raises).

    Examples
    --------
    >>> check_offsets(torch.tensor([0, 2, 3]), 3)
    >>> check_offsets(torch.tensor([0, 2, 1, 3]), 3)
    Traceback (most recent call last):
        ...
    lookuplinear.errors.OffsetsError: Bags: offsets must be non-decreasing (CSR offsets), ...
    """
    if (offsets.numel() if isinstance(offsets, torch.Tensor) else offsets.size) == 0:
        raise OffsetsError(
            f"{owner}: offsets must hold N + 1 entries (CSR offsets: 0, end of bag 0, ...), got "
            "an empty tensor. An empty batch has offsets=[0]."
        )
    if isinstance(offsets, torch.Tensor):
        if offsets.is_meta or (lazy and not on_host(offsets)):  # no values read here
            return
        if not values_known():  # a recorded graph: asserted where it runs (ATen's lookups
            # read bad offsets as they come, outside the table or its output)
            assert_offsets_twin(offsets, nnz, owner)
            return
        if not offsets.is_cpu:
            offsets = offsets.cpu()
    # one C pass: numpy ops here slow the next lookup (ops/_inputs.py says why); True while
    # a graph is recorded, which has no values to check
    if not offsets_ok(offsets, nnz):
        _explain(offsets, nnz, owner, entries)


def _explain(vals: Any, nnz: int, owner: str, entries: str) -> None:
    """Raise ``OffsetsError`` saying how ``vals`` (numpy array or tensor) fail to be the CSR
    offsets of ``nnz`` entries; return if they are fine."""
    first, last = int(vals[0]), int(vals[-1])
    if first != 0:
        raise OffsetsError(
            f"{owner}: offsets must start at 0 (CSR offsets), got offsets[0]={first}. "
            "Prepend 0 to EmbeddingBag-style offsets."
        )
    if last != nnz:
        raise OffsetsError(
            f"{owner}: offsets must end at len({entries})={nnz} (CSR offsets, "
            f"len(offsets) == N + 1), got offsets[-1]={last}. For EmbeddingBag-style start "
            f"offsets, append len({entries})."
        )
    decreasing = vals[1:] < vals[:-1]
    if bool(decreasing.any()):
        bag = int(decreasing.nonzero()[0][0])  # numpy: a tuple of arrays; torch: (k, 1)
        raise OffsetsError(
            f"{owner}: offsets must be non-decreasing (CSR offsets), but offsets[{bag + 1}]="
            f"{int(vals[bag + 1])} < offsets[{bag}]={int(vals[bag])}. Build them as 0 "
            "followed by the cumulative sum of the bag lengths."
        )


def as_offsets(offsets: Any, device: torch.device) -> torch.Tensor:
    """``offsets`` as a tensor on ``device``: a tensor as it is, a list, tuple or numpy array of
    integers through ``torch.as_tensor``. Their meaning is the caller's (start offsets, or CSR
    offsets with ``include_last_offset=True``); a dtype that is not integer is left to the
    caller's check, which names it.

    Raises
    ------
    InputTypeError
        ``offsets`` that ``torch.as_tensor`` cannot read (strings, ragged lists).

    Examples
    --------
    >>> as_offsets([0, 1, 3], torch.device("cpu"))
    tensor([0, 1, 3])
    """
    if isinstance(offsets, torch.Tensor):
        return offsets
    try:
        return torch.as_tensor(offsets, device=device)
    except (TypeError, ValueError, RuntimeError):
        raise InputTypeError(
            f"offsets must be a 1-D tensor of integers (a list of ints is read as one), got "
            f"{type(offsets).__name__} {offsets!r:.60}. Pass torch.tensor(offsets)."
        ) from None


def csr_offsets(
    indices: torch.Tensor, offsets: torch.Tensor, include_last_offset: bool,
    *, last_to_end: bool = False,
) -> torch.Tensor:
    """The CSR offsets (``N + 1`` entries) of ``F.embedding_bag``-style ``offsets``: ``N`` start
    offsets with ``len(indices)`` appended, or the CSR offsets themselves
    (``include_last_offset=True``). ``Bags`` then checks them and names what is wrong.

    ``last_to_end``: CSR offsets whose last entry falls short of ``len(indices)`` have their last
    bag run to the end of ``indices``, as ``F.embedding_bag`` reads them with ``padding_idx``
    set or ``mode="max"`` (its other kernels read them in two different ways, so lookuplinear
    refuses them there)::

        indices = [a, b, c, d],  offsets = [0, 3, 3]  ->  bags [a, b, c], [d]

    Offsets of another integer dtype (int8, int16, uint8, ...) are read as int64, as
    ``F.embedding_bag`` reads them; a list, tuple or numpy array of offsets is read as the same
    tensor would be (:func:`as_offsets`).
    """
    if not isinstance(offsets, torch.Tensor):
        offsets = as_offsets(offsets, indices.device)
    if (offsets.dtype not in (torch.int32, torch.int64)
            and not offsets.dtype.is_floating_point and not offsets.dtype.is_complex
            and offsets.dtype is not torch.bool):
        offsets = offsets.to(torch.int64)
    if include_last_offset:
        if (last_to_end and isinstance(offsets, torch.Tensor) and offsets.dim() == 1
                and offsets.numel() > 1 and offsets.dtype in (torch.int32, torch.int64)):
            if not values_known() or not on_host(offsets):
                # the same result without reading the offsets (a recorded graph's, a device's):
                # a last entry short of the end moves to it, one past the end stays (for the
                # lookup to refuse)
                end = torch.full((1,), indices.size(0), dtype=offsets.dtype,
                                 device=offsets.device)
                return torch.cat([offsets[:-1], torch.maximum(offsets[-1:], end)])
            if (not offsets_ok(offsets, indices.numel(), include_last=True)
                    and int(offsets[-1]) < indices.numel()):
                end = torch.full((1,), indices.size(0), dtype=offsets.dtype,
                                 device=offsets.device)
                return torch.cat([offsets[:-1], end])
        return offsets  # CSR: Bags checks them
    if (
        not isinstance(offsets, torch.Tensor)
        or offsets.dim() != 1
        or offsets.dtype not in (torch.int32, torch.int64)
    ):
        return offsets  # a tensor Bags refuses with its own message
    nnz = indices.numel()  # a number: checks only, never in the result (see below)
    if offsets.numel() == 0 and nnz:  # nn.EmbeddingBag drops these entries without a word
        raise OffsetsError(
            f"offsets must hold one start offset per bag (nn.EmbeddingBag's form), got an empty "
            f"tensor for {nnz} entries. One bag of all the entries is offsets=[0]; CSR offsets "
            "(N + 1 entries) need include_last_offset=True."
        )
    # on another device an offset past the end is left to the lookup's assert (it makes the
    # CSR offsets decrease) and to validate(): reading it here would synchronise
    if (
        on_host(offsets)
        and not offsets_ok(offsets, nnz, include_last=False)  # True while a graph is recorded
        and offsets.numel()
        and int(offsets[0]) == 0
    ):
        past = offsets > nnz
        if bool(past.any()):
            k = int(past.nonzero()[0, 0])
            raise OffsetsError(
                f"offsets[{k}]={int(offsets[k])} is past len(indices)={nnz}: offsets are read as "
                "nn.EmbeddingBag's N start offsets. For CSR offsets (N + 1 entries ending at "
                "len(indices)) build the layer with include_last_offset=True, or pass "
                "Bags(indices, offsets)."
            )
    # the end read from indices' size, not the number nnz: a trace records size() as an op,
    # where a number would enter the graph as a constant (the trace batch's entry count)
    end = torch.full((1,), indices.size(0), dtype=offsets.dtype, device=offsets.device)
    return torch.cat([offsets, end])
