"""Checks of a batch read off the CPU, without a host synchronisation: device-side asserts.

A lookup on another device (CUDA) does not read its batch's values on the host: that would
synchronise with the device at every call. It asserts on the device instead that every index
is a row of the table and that the CSR offsets cut the entries into bags, as
``nn.EmbeddingBag``'s CUDA kernels assert an index. A failed assert is raised where the device
reports it: at once on the CPU (a ``RuntimeError``), at the next synchronisation on CUDA (a
device-side assert). ``Bags.validate()`` names the bad value instead, at the cost of a copy to
the host.

The operator ``lookuplinear::assert_bags`` runs both checks in one call: on CUDA one kernel
launch where the install compiled the CUDA kernels (``csrc/asserts.cu``), else torch ops
(:func:`assert_bags_twin`, two ``_assert_async``). While a graph is recorded the torch ops are
recorded instead, so that the graph keeps them (an operator that returns nothing would be
dropped from it).
"""

from __future__ import annotations

import torch

from . import _extension
from ._backend import capturing

__all__ = ["assert_bags", "assert_bags_twin", "assert_offsets_twin", "graph_message",
           "index_message", "index_range", "offsets_message"]


def graph_message(text: str) -> str:
    """``text`` made fit to be the message of an assert a recorded graph holds
    (``torch._assert_async``): double quotes as single quotes, backslashes as slashes, line
    breaks and other unprintable characters as spaces.

    Inductor, and so AOTInductor, writes such a message into the C++ source it generates
    between double quotes, unescaped: a double quote or a backslash in it (a ``mode="max"``,
    a feature name) breaks the build of the whole graph.

    Examples
    --------
    >>> graph_message('mode="max"')
    "mode='max'"
    """
    return "".join(
        "'" if c == '"' else "/" if c == "\\" else c if c.isprintable() else " " for c in text
    )


def index_range(num_rows: int) -> str:
    """Which indices a table of ``num_rows`` rows takes, in words (none where it has none).

    Examples
    --------
    >>> index_range(5)
    'every index must be in [0, 4]'
    >>> index_range(0)
    'the table has no rows, so no index is valid'
    """
    if num_rows <= 0:
        return "the table has no rows, so no index is valid"
    return f"every index must be in [0, {num_rows - 1}]"


def index_message(where: str, num_rows: int) -> str:
    """What a failed index assert says: ``where`` names the indices."""
    return (f"lookuplinear: an index of {where} is out of range for in_features={num_rows}: "
            f"{index_range(num_rows)}.")


def offsets_message(owner: str, nnz: int | None, include_last_offset: bool = True) -> str:
    """What a failed offsets assert says: ``owner`` names the batch (``Bags``); ``nnz``, its
    number of entries where known (None: a recorded graph's, symbolic)."""
    kind, last = ("CSR", "end at") if include_last_offset else ("start", "stay within")
    count = "" if nnz is None else f"{nnz} "
    return (f"lookuplinear: {owner} offsets are not the {kind} offsets of its {count}entries "
            f"(they must start at 0, never decrease and {last} the number of entries); call "
            "validate() on the batch to see which offset is wrong.")


def _largest(dtype: torch.dtype) -> int:
    """The largest value of the integer ``dtype`` (of int64 for any other)."""
    try:
        return int(torch.iinfo(dtype).max)
    except TypeError:  # bool or a floating dtype: compared as torch promotes them
        return int(torch.iinfo(torch.int64).max)


def assert_bags_twin(indices: torch.Tensor, offsets: torch.Tensor | None, num_rows: int,
                     where: str, owner: str, include_last_offset: bool = True) -> None:
    """``lookuplinear::assert_bags`` with torch ops: every index in ``[0, num_rows)`` and,
    where given, ``offsets`` the CSR offsets of the entries (``include_last_offset=False``:
    start offsets, the last at most the number of entries); non-empty (the batch's
    constructor, or the caller, checked their shape)."""
    in_range = indices >= 0
    if num_rows <= _largest(indices.dtype):  # else every index is below it (in the dtype the
        in_range = in_range & (indices < num_rows)  # bound would wrap: 300 is 44 in uint8)
    torch._assert_async(in_range.all(), graph_message(index_message(where, num_rows)))
    if offsets is not None:
        assert_offsets_twin(offsets, indices.numel(), owner, include_last_offset)


def assert_offsets_twin(offsets: torch.Tensor, nnz: int | torch.SymInt, owner: str,
                        include_last_offset: bool = True) -> None:
    """Assert with torch ops, where they run, that non-empty ``offsets`` are the CSR offsets
    of ``nnz`` entries (``include_last_offset=False``: start offsets, the last at most
    ``nnz``): :func:`assert_bags_twin`'s offsets check, which a recorded graph keeps."""
    last = offsets[-1] == nnz if include_last_offset else offsets[-1] <= nnz
    ok = (offsets[0] == 0) & last & (offsets[1:] >= offsets[:-1]).all()
    # the count left out of a recorded graph's message: it is symbolic there, and formatting
    # it would specialize the graph to this batch's size
    known = None if torch.compiler.is_compiling() or not isinstance(nnz, int) else nnz
    torch._assert_async(ok, graph_message(offsets_message(owner, known, include_last_offset)))


def assert_bags(indices: torch.Tensor, offsets: torch.Tensor | None, num_rows: int, *,
                where: str, owner: str = "Bags", include_last_offset: bool = True) -> None:
    """Assert on ``indices``' device, without a host synchronisation, that every index is in
    ``[0, num_rows)`` and, where ``offsets`` are given, that they are the CSR offsets of the
    entries (non-empty; ``include_last_offset=False``: ``nn.EmbeddingBag``'s start offsets).

    Parameters
    ----------
    indices : Tensor, integer
        The entries' rows, of any shape.
    offsets : Tensor of shape (N + 1,) (or (N,): start offsets), integer, or None
        The bags' CSR offsets, on the same device.
    num_rows : int
        The table's rows.
    where, owner : str
        What the messages call the indices and the batch.
    include_last_offset : bool
        As ``nn.EmbeddingBag``'s: whether ``offsets`` end with the number of entries.

    The dense equivalent reads the values: ``0 <= indices.min()``, ``indices.max() <
    num_rows``, ``offsets[0] == 0``, ``offsets[-1] == indices.numel()`` (``<=`` for start
    offsets), ``offsets.diff().min() >= 0``.
    """
    if _extension.LOADED and not capturing():  # the C++ operator: one call, no Python per op
        torch.ops.lookuplinear.assert_bags.default(indices, offsets, num_rows, where, owner,
                                                   include_last_offset)
    else:  # the Python registration would run these; a recorded graph keeps them
        assert_bags_twin(indices, offsets, num_rows, where, owner, include_last_offset)
