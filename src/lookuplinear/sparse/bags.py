"""``Bags``: a jagged batch of index bags in CSR form, and its adapters.

A batch of ``N`` bags is three flat tensors, exactly the rows of a CSR matrix::

    Bags.from_lists([[3, 1], [], [2, 2, 0]])

    indices = [3, 1, 2, 2, 0]        # the column of every entry, bag after bag
    offsets = [0, 2, 2, 5]           # bag b is indices[offsets[b]:offsets[b + 1]]
    weights = None                   # or one value per entry (the CSR ``data``)

    # bag 0 is indices[0:2], bag 1 is indices[2:2] (empty), bag 2 is indices[2:5]

Its dense equivalent, with ``in_features=4``, is the multi-hot matrix below: duplicate indices add
up, an entry's weight (1 when ``weights is None``) is its value::

    [[0, 1, 0, 1],
     [0, 0, 0, 0],
     [1, 0, 2, 0]]
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from ..errors import DtypeMismatchError, InputTypeError, InputValueError, LookupIndexError
from ..ops import assert_bags, drop_entries, values_known
from ..ops._asserts import index_range
from .offsets import check_offsets, on_host

if TYPE_CHECKING:
    import scipy.sparse as sp

__all__ = ["Bags", "check_index_range", "check_weights", "is_scipy_sparse"]


def is_scipy_sparse(x: Any) -> bool:
    """``scipy.sparse.issparse(x)``, without importing scipy (slow) when nothing has: a
    scipy matrix can only exist once ``scipy.sparse`` is imported."""
    sp = sys.modules.get("scipy.sparse")
    return sp is not None and bool(sp.issparse(x))


def as_int_tensor(name: str, value: Any) -> torch.Tensor:
    if isinstance(value, torch.Tensor):
        t = value
    else:
        arr = np.asarray(value)
        if arr.ndim == 1 and isinstance(value, Sequence):  # the items as from_lists reads them
            arr = int64_entries(
                value, arr, "Bags", f"{name} must be integers",
                "Pass ints (a float such as 1.5 would name no row).",
                f"{name} holds {{}}, which does not fit in int64; {name} are int64 positions "
                "(indices below the table's number of rows).")
        t = torch.as_tensor(_native(arr))
    if (t.dtype is torch.int64 or t.dtype is torch.int32) and t.dim() == 1:  # the common case
        return t
    if t.dtype.is_floating_point or t.dtype.is_complex or t.dtype == torch.bool:
        raise DtypeMismatchError(  # a RuntimeError too, as F.embedding_bag raises
            f"Bags: {name} must be an integer tensor, got dtype {t.dtype}. "
            f"Convert it with {name}.long() (offsets and indices are positions, not values)."
        )
    if t.dim() != 1:
        raise InputValueError(
            f"Bags: {name} must be 1-D, got shape {tuple(t.shape)}. Flatten it first."
        )
    if t.dtype == torch.uint64:  # .long() would wrap the values past int64 to negative ones
        t = t.view(torch.int64)
        if values_known() and on_host(t) and t.numel() and bool((t < 0).any()):
            value = int(t[t < 0][0]) + 2**64
            raise InputValueError(
                f"Bags: {name} holds {value}, which does not fit in int64; {name} are int64 "
                "positions (indices below the table's number of rows)."
            )
    if t.dtype not in (torch.int32, torch.int64):
        t = t.long()
    return t


def check_weights(weights: Any, entries: torch.Tensor, owner: str, name: str, per: str,
                  fix: str = "") -> torch.Tensor:
    """``weights`` as a floating-point tensor of one value per entry of ``entries`` (a batch's
    ``name``: indices or values), on their device; else the error of ``owner`` (``Bags``,
    ``KeyedBags``) that says so.

    A tensor is taken as it is. An array keeps its floating dtype (float16, float32, float64;
    another byte order or longdouble is read as float64), so that no value is rounded before
    the layer casts the weights to its table's dtype; a list, or an array of integers or
    bools, is read in torch's default dtype (float32 unless ``torch.set_default_dtype`` says
    otherwise), as ``torch.tensor`` reads a list of Python floats."""
    w = weights if isinstance(weights, torch.Tensor) else _weights_tensor(weights)
    if not w.dtype.is_floating_point:
        raise DtypeMismatchError(  # a RuntimeError too, as F.embedding_bag raises
            f"{owner}: weights must be floating point, got dtype {w.dtype}; "
            "convert with weights.float()."
        )
    if w.shape != entries.shape:
        raise InputValueError(
            f"{owner}: weights must have one value per {per}, shape {tuple(entries.shape)}, "
            f"got shape {tuple(w.shape)}.{fix}"
        )
    if w.device != entries.device:
        raise InputValueError(
            f"{owner}: weights are on {w.device} but {name} on {entries.device}; "
            "move both to the same device."
        )
    return w


def _weights_tensor(weights: Any) -> torch.Tensor:
    """:func:`check_weights`' tensor of weights that are not one."""
    a = np.asarray(weights)
    if not isinstance(weights, np.ndarray) or a.dtype.kind != "f":  # as torch.tensor reads it
        return torch.as_tensor(np.asarray(weights, dtype=np.float64)).to(
            torch.get_default_dtype())
    if not a.dtype.isnative or a.dtype.itemsize > 8:  # big-endian, longdouble
        a = a.astype(np.float64)
    return torch.as_tensor(_native(a))


def _native(a: np.ndarray) -> np.ndarray:
    """``a`` as ``torch.as_tensor`` takes it: in the machine's byte order, without negative
    strides (a reversed view ``a[::-1]``); copied only where it is not."""
    if not a.dtype.isnative:
        a = a.astype(a.dtype.newbyteorder("="))
    if any(stride < 0 for stride in a.strides):
        a = np.ascontiguousarray(a)
    return a


class Bags:
    """A jagged batch of ``N`` bags of indices, offsets in CSR form, with optional weights.

    The dense equivalent is the ``(N, in_features)`` matrix ``X`` with
    ``X[b, j] = sum of weights[k] for k in range(offsets[b], offsets[b + 1]) if indices[k] == j``,
    so ``LookupLinear(in_features, ...)(bags)`` equals ``nn.Linear`` on ``bags.to_dense(...)``.

    Parameters
    ----------
    indices : Tensor of shape (nnz,), int32 or int64
        The index of every entry, bag after bag.
    offsets : Tensor of shape (N + 1,), same integer dtype
        ``offsets[0] == 0``, non-decreasing, ``offsets[-1] == nnz``. Bag ``b`` holds
        ``indices[offsets[b]:offsets[b + 1]]``.
    weights : Tensor of shape (nnz,), floating, optional
        One value per entry (a CSR matrix's ``data``, e.g. TF-IDF values). ``None`` means 1.
        An array keeps its floating dtype, a list is read in torch's default dtype (as
        ``torch.tensor`` reads it); the layer casts the weights to its table's dtype.

    Raises
    ------
    InputTypeError
        Indices or offsets are not integers (in a list: an entry that is a bool or a float),
        or weights are not floating point.
    InputValueError
        Weights of the wrong length; tensors on different devices; an index or offset past
        int64 (a uint64 one checked for CPU tensors; an int in a list).
    OffsetsError
        Offsets do not start at 0, decrease, or do not end at ``len(indices)`` (checked here
        for CPU tensors; see below). Also an ``InputValueError``.

    Notes
    -----
    The constructor never synchronises with a device. Types, shapes and devices are checked
    on every device; the offsets' values are checked here only on the CPU, where reading
    them is free. On another device (a GPU) they are checked where they are read: the lookup
    asserts on the device that the offsets cut the indices into bags and that every index is
    in range (a device-side assert, as ``nn.EmbeddingBag`` raises on CUDA), and
    :meth:`validate` runs every check on the host and names what is wrong. Call it on data
    from an untrusted source, on a GPU.

    Examples
    --------
    >>> bags = Bags.from_lists([[3, 1], [], [2, 2, 0]])
    >>> bags
    Bags(n_bags=3, nnz=5, weighted=False)
    >>> bags.to_dense(4)
    tensor([[0., 1., 0., 1.],
            [0., 0., 0., 0.],
            [1., 0., 2., 0.]])
    """

    __slots__ = ("indices", "offsets", "weights")

    def __init__(
        self,
        indices: torch.Tensor | Sequence[int] | np.ndarray,
        offsets: torch.Tensor | Sequence[int] | np.ndarray,
        weights: torch.Tensor | Sequence[float] | np.ndarray | None = None,
    ) -> None:
        idx = as_int_tensor("indices", indices)
        off = as_int_tensor("offsets", offsets)
        if off.device != idx.device:
            raise InputValueError(
                f"Bags: offsets are on {off.device} but indices on {idx.device}; "
                "move both to the same device."
            )
        if idx.dtype != off.dtype:  # F.embedding_bag needs one dtype for both
            idx, off = idx.long(), off.long()
        check_offsets(off, idx.numel(), lazy=True)  # values: on the CPU only
        w = None if weights is None else check_weights(
            weights, idx, "Bags", "indices", "index",
            " Pass a 1-D weight for every entry of indices.")
        self.indices = idx
        self.offsets = off
        self.weights = w

    def validate(self, in_features: int | None = None) -> Bags:
        """Run every check of the batch's values on any device and return ``self``.

        The constructor checks values only on the CPU (see the class notes); on a GPU this
        copies the offsets (and, with ``in_features``, the smallest and largest index) to the
        host, a synchronisation. Call it on batches from an untrusted source before a lookup
        on a GPU, to get the error that names the bad offset or index instead of a
        device-side assert.

        Parameters
        ----------
        in_features : int, optional
            Also check that every index is in ``[0, in_features)``.

        Returns
        -------
        Bags
            ``self``, for ``bags = Bags(indices, offsets).validate()``.

        Raises
        ------
        OffsetsError
            Offsets that do not start at 0, decrease, or do not end at ``len(indices)``.
        LookupIndexError
            An index outside ``[0, in_features)``.

        Examples
        --------
        >>> Bags(torch.tensor([3, 1, 2]), torch.tensor([0, 2, 3])).validate(in_features=4)
        Bags(n_bags=2, nnz=3, weighted=False)
        >>> Bags.from_checked(torch.tensor([3, 1]), torch.tensor([0, 3, 2])).validate()
        Traceback (most recent call last):
            ...
        lookuplinear.errors.OffsetsError: Bags: offsets must be non-decreasing (CSR offsets), ...
        """
        check_offsets(self.offsets, self.indices.numel())
        if in_features is not None:
            check_index_range(self.indices, in_features, where="Bags.indices", sync=True)
        return self

    # ------------------------------------------------------------------ constructors
    @classmethod
    def from_checked(
        cls, indices: torch.Tensor, offsets: torch.Tensor, weights: torch.Tensor | None = None
    ) -> Bags:
        """Bags of tensors that already hold the contract of :class:`Bags`, not checked again.

        For parts of checked batches (a slice, a subset, a shift): the checks of ``Bags(...)``
        run on every call and cost as much as a small lookup. Passing tensors that break the
        contract (offsets that are not CSR offsets of ``indices``, a dtype mismatch, weights of
        another length) gives undefined results; build from user input with ``Bags(...)``.

        Examples
        --------
        >>> Bags.from_checked(torch.tensor([3, 1, 2]), torch.tensor([0, 2, 3]))
        Bags(n_bags=2, nnz=3, weighted=False)
        """
        bags = cls.__new__(cls)
        bags.indices, bags.offsets, bags.weights = indices, offsets, weights
        return bags

    @classmethod
    def from_lists(
        cls,
        lists: Sequence[Sequence[int]],
        weights: Sequence[Sequence[float]] | None = None,
    ) -> Bags:
        """Build from one list of indices per bag (and optionally one list of weights per bag).

        Weights are read in torch's default dtype, as ``torch.tensor`` reads a list of
        Python floats (``torch.set_default_dtype(torch.float64)`` for a float64 layer to read
        them exactly; or build ``Bags`` with a float64 array of weights).

        Examples
        --------
        >>> Bags.from_lists([[3, 1], [], [2, 2, 0]]).offsets
        tensor([0, 2, 2, 5])

        Raises
        ------
        InputTypeError
            An entry that is not an integer (a float, a bool, a string, a list): read as an
            index, ``1.5`` would be row 1.
        InputValueError
            An integer outside int64.
        """
        lengths = [len(b) for b in lists]
        offsets = np.zeros(len(lengths) + 1, dtype=np.int64)
        np.cumsum(lengths, out=offsets[1:])
        entries = [i for b in lists for i in b]
        flat = int64_entries(
            entries, np.asarray(entries) if entries else np.zeros(0, dtype=np.int64),
            "Bags.from_lists", "each bag must be a list of integer row indices",
            "Pass ints (a float such as 1.5 would name no row), one flat list per bag.",
            "index {} does not fit in int64; row indices are int64 (and below the table's "
            "number of rows).")
        w = None
        if weights is not None:
            if [len(b) for b in weights] != lengths:
                raise InputValueError(
                    "Bags.from_lists: weights must have one list per bag with one value per "
                    f"index; bag lengths are {lengths}, weight lengths {[len(b) for b in weights]}."
                )
            w = [x for b in weights for x in b]  # torch's default dtype: check_weights
        return cls(torch.from_numpy(flat), torch.from_numpy(offsets), w)

    @classmethod
    def from_padded(cls, x: torch.Tensor, padding_idx: int | None) -> Bags:
        """Build from a ``(N, L)`` index tensor: bag ``b`` is row ``b`` without the entries equal
        to ``padding_idx`` (``None``: every entry is kept, ``N`` bags of ``L``).

        Examples
        --------
        >>> Bags.from_padded(torch.tensor([[3, 1, 0], [0, 0, 0], [2, 2, 5]]), padding_idx=0)
        Bags(n_bags=3, nnz=5, weighted=False)
        >>> Bags.from_padded(torch.tensor([[3, 1, 0], [0, 0, 0]]), padding_idx=None)
        Bags(n_bags=2, nnz=6, weighted=False)

        With ``padding_idx`` the number of entries depends on the values: on a GPU, as
        ``x[x != padding_idx]``, it is read on the host (a synchronisation).
        """
        if not isinstance(x, torch.Tensor) or x.dim() != 2:
            raise InputValueError(
                "Bags.from_padded: x must be a 2-D index tensor of shape (N, L), got "
                f"{type(x).__name__} of shape {tuple(getattr(x, 'shape', ()))}."
            )
        if padding_idx is None:
            n, length = x.shape
            return cls(x.reshape(-1), torch.arange(n + 1, device=x.device) * length)
        keep = x != padding_idx
        offsets = torch.zeros(x.shape[0] + 1, dtype=torch.long, device=x.device)
        torch.cumsum(keep.sum(1), 0, out=offsets[1:])
        return cls(x[keep], offsets)

    @classmethod
    def from_scipy(cls, m: Any) -> Bags:
        """Build from any ``scipy.sparse`` matrix or array; values become the weights.

        Each bag holds its row's values once: entries stored twice at one row and column (a CSR
        or CSC matrix built with duplicates) are summed into one, on a copy, as ``m.toarray()``
        adds them, so that ``mode="sqrtn"`` and ``"max"`` read the matrix's values and not how
        it was stored. CSR input in canonical format (``m.has_canonical_format``: sorted
        indices, no duplicates) with int32 or int64 indices is shared, not copied. Other
        formats are converted to CSR first (duplicate COO entries add up). Data in another byte
        order or wider than float64 (longdouble) is read as float64, other indices as int64.
        Complex values raise ``InputTypeError`` (pass ``m.real`` or ``abs(m)``), as the layer
        refuses complex dense input.

        Examples
        --------
        >>> import scipy.sparse as sp
        >>> Bags.from_scipy(sp.csr_matrix([[1.0, 0.0, 0.5], [0.0, 0.0, 0.0]]))
        Bags(n_bags=2, nnz=2, weighted=True)
        """
        return cls._from_scipy(m, merge=True)

    @classmethod
    def _from_scipy(cls, m: Any, *, merge: bool) -> Bags:
        """:meth:`from_scipy`; ``merge=False`` takes a CSR's entries as stored, without the
        pass that looks for duplicates (for a sum, which they do not change)."""
        if not is_scipy_sparse(m):
            raise InputTypeError(
                f"Bags.from_scipy: expected a scipy.sparse matrix or array, got {type(m).__name__}."
            )
        mat: Any = m
        if mat.ndim != 2:
            raise InputValueError(f"Bags.from_scipy: expected a 2-D matrix, got {mat.ndim}-D.")
        csr = mat if mat.format == "csr" else mat.tocsr()
        indices, indptr, data = csr.indices, csr.indptr, csr.data
        # torch takes native-order int32/int64 indices and float16/32/64 data
        if indices.dtype != indptr.dtype or indices.dtype not in _TORCH_INDEX_DTYPES:
            indices, indptr = indices.astype(np.int64), indptr.astype(np.int64)
        if data.dtype.kind == "c":
            _refuse_complex("Bags.from_scipy", data.dtype)
        if data.dtype.kind != "f":  # np.issubdtype(dtype, np.floating), at a tenth of the cost
            data = data.astype(np.float32)
        elif not data.dtype.isnative or data.dtype.itemsize > 8:  # big-endian, longdouble
            data = data.astype(np.float64)
        nnz = indices.shape[0]
        if indices.ndim != 1 or data.shape != (nnz,) or indptr.ndim != 1 or indptr.size == 0:
            raise InputValueError(
                f"Bags.from_scipy: not a valid CSR matrix: indices of shape {indices.shape}, data "
                f"of shape {data.shape}, indptr of shape {indptr.shape}. Rebuild it, or call "
                "its check_format(full_check=True) to see what is wrong."
            )
        check_offsets(indptr, nnz)  # scipy checks its indptr only on request
        if merge:  # looked for only now: scipy's pass over the indices trusts indptr
            shared = indices is csr.indices and indptr is csr.indptr  # its flag may be cached
            stored = csr if shared else _csr(csr.shape, indices, indptr, data)
            if not stored.has_canonical_format:
                indices, indptr, data = _summed_duplicates(csr.shape, indices, indptr, data)
        # the types, shapes and offsets are checked: skip Bags.__init__'s checks (they would
        # run again on every call; benchmarks/bench_layer.py times the per-call cost)
        return cls.from_checked(_from_numpy(indices), _from_numpy(indptr), _from_numpy(data))

    @classmethod
    def from_torch_sparse(cls, t: torch.Tensor) -> Bags:
        """Build from a 2-D torch sparse COO or CSR tensor; values (and their grad) are kept.

        A coalesced tensor is read without a host synchronisation (an uncoalesced COO tensor
        is coalesced first, which reads its values: entries at one row and column add up). A
        CPU CSR tensor whose columns are not sorted and distinct in each row (PyTorch's
        invariant, which it does not check by default) is coalesced the same way; on another
        device the columns are read as stored. Complex values raise ``InputTypeError`` (pass
        ``t.real`` or ``t.abs()``).

        Examples
        --------
        >>> t = torch.tensor([[0.0, 2.0, 0.0], [1.0, 0.0, 0.0]]).to_sparse()
        >>> Bags.from_torch_sparse(t).weights
        tensor([2., 1.])
        """
        return cls._from_torch_sparse(t, merge=True)

    @classmethod
    def _from_torch_sparse(cls, t: torch.Tensor, *, merge: bool) -> Bags:
        """:meth:`from_torch_sparse`; ``merge=False`` takes a CSR tensor's entries as stored,
        without the pass that looks for duplicates (for a sum, which they do not change)."""
        if not isinstance(t, torch.Tensor) or t.layout not in (torch.sparse_coo, torch.sparse_csr):
            raise InputTypeError(
                "Bags.from_torch_sparse: expected a torch sparse COO or CSR tensor, got "
                f"{type(t).__name__} with layout {getattr(t, 'layout', None)}."
            )
        if not values_known():
            # torch.export traces a sparse input as a tensor without entries (torch.compile
            # refuses one): a program built on it would read none, or assert on none
            raise InputTypeError(
                "Bags.from_torch_sparse: a recorded graph (torch.export) cannot take a torch "
                "sparse tensor: PyTorch traces it without its entries, so the program would "
                "read none. Export a forward that takes the bags' tensors instead, e.g. "
                "forward(indices, offsets, weights) building Bags(indices, offsets, weights), "
                "and call it with b = Bags.from_torch_sparse(x): b.indices, b.offsets, b.weights."
            )
        if t.dim() != 2 or t.dense_dim() != 0:
            raise InputValueError(
                "Bags.from_torch_sparse: expected a 2-D sparse matrix with scalar values, got "
                f"shape {tuple(t.shape)} with {t.dense_dim()} dense dims."
            )
        if t.layout == torch.sparse_coo and not t.is_coalesced():
            t = t.coalesce()  # sorts entries by row and adds up duplicates (values() needs it)
        values = t.values()
        if values.dtype.is_complex:
            _refuse_complex("Bags.from_torch_sparse", values.dtype)
        if not values.dtype.is_floating_point:
            values = values.float()
        if t.layout == torch.sparse_csr:
            bags = cls(t.col_indices(), t.crow_indices(), values)  # offsets checked on the CPU
            if not merge or not on_host(bags.indices) or _sorted_distinct(bags):
                return bags
            # columns out of order or stored twice in a row: coalesced, as a COO tensor's
            t = torch.sparse_coo_tensor(torch.stack([bags.bag_ids(), bags.indices.long()]),
                                        values, t.shape).coalesce()
            values = t.values()
        rows, cols = t.indices()
        return cls(cols, _row_offsets(rows, t.shape[0]), values)

    @classmethod
    def from_dense(cls, x: torch.Tensor) -> Bags:
        """Build from a dense ``(N, in_features)`` tensor, keeping its non-zero entries.

        A complex tensor raises ``InputTypeError`` (pass ``x.real`` or ``x.abs()``).

        Examples
        --------
        >>> Bags.from_dense(torch.tensor([[0.0, 3.0], [0.0, 0.0]])).weights
        tensor([3.])
        """
        if not isinstance(x, torch.Tensor) or x.dim() != 2:
            raise InputValueError(
                "Bags.from_dense: expected a 2-D tensor of shape (N, in_features), got "
                f"{type(x).__name__} of shape {tuple(getattr(x, 'shape', ()))}."
            )
        if x.dtype.is_complex:
            _refuse_complex("Bags.from_dense", x.dtype)
        rows, cols = torch.nonzero(x, as_tuple=True)  # sizes read on the host, as nonzero's
        values = x[rows, cols]
        if not values.dtype.is_floating_point:
            values = values.float()
        return cls(cols, _row_offsets(rows, x.shape[0]), values)

    # ------------------------------------------------------------------ views
    def __len__(self) -> int:
        return self.offsets.numel() - 1

    def __repr__(self) -> str:
        return (
            f"Bags(n_bags={len(self)}, nnz={self.indices.numel()}, "
            f"weighted={self.weights is not None})"
        )

    @property
    def device(self) -> torch.device:
        """The device of the indices (and offsets and weights)."""
        return self.indices.device

    def lengths(self) -> torch.Tensor:
        """Number of entries in each bag, shape ``(N,)``.

        Examples
        --------
        >>> Bags.from_lists([[3, 1], [], [2, 2, 0]]).lengths()
        tensor([2, 0, 3])
        """
        return self.offsets[1:] - self.offsets[:-1]

    def bag_ids(self) -> torch.Tensor:
        """The bag of every entry, shape ``(nnz,)``: the row index of each CSR entry.

        Examples
        --------
        >>> Bags.from_lists([[3, 1], [], [2, 2, 0]]).bag_ids()
        tensor([0, 0, 2, 2, 2])
        """
        lengths = self.lengths()
        # sizes read with size(), which a trace records as ops (len() and nnz are numbers)
        return torch.repeat_interleave(
            torch.arange(lengths.size(0), device=self.device), lengths.long(),
            output_size=self.indices.size(0),
        )

    @property
    def nnz(self) -> int:
        """Number of entries, duplicates and padding included."""
        return self.indices.numel()

    def to(self, device: torch.device | str) -> Bags:
        """Return the same bags on ``device`` (this object if nothing moves).

        Examples
        --------
        >>> bags = Bags.from_lists([[3, 1], []])
        >>> bags.to("cpu") is bags
        True
        >>> bags.to("meta").device
        device(type='meta')
        """
        device = torch.device(device)
        if self.indices.device == device:
            return self
        w = None if self.weights is None else self.weights.to(device)
        return Bags(self.indices.to(device), self.offsets.to(device), w)

    def drop_index(self, index: int) -> Bags:
        """The same bags without their entries equal to ``index`` (this object if there are none).

        The dense equivalent is ``to_dense`` with column ``index`` set to zero. Weights that
        require grad keep their graph (the dropped entries get a zero gradient).

        Examples
        --------
        >>> bags = Bags.from_lists([[3, 0, 1], [0], [2, 2]]).drop_index(0)
        >>> bags.indices, bags.offsets
        (tensor([3, 1, 2, 2]), tensor([0, 2, 2, 4]))
        """
        # one C pass on the CPU (boolean-mask indexing costs far more), torch ops elsewhere
        dropped = drop_entries(self.indices, self.offsets, index)
        if dropped is None:
            return self
        kept, indices, offsets = dropped
        weights = None if self.weights is None else self.weights.index_select(0, kept)
        return Bags.from_checked(indices, offsets, weights)  # a subset of checked bags

    def check_indices(self, in_features: int) -> None:
        """Raise ``LookupIndexError`` if an index is outside ``[0, in_features)``, on any
        device (on a GPU the smallest and largest index are read on the host).

        Examples
        --------
        >>> Bags.from_lists([[3, 1], [7]]).check_indices(5)
        Traceback (most recent call last):
            ...
        lookuplinear.errors.LookupIndexError: index 7 at Bags.indices[2] is out of range ...
        """
        check_index_range(self.indices, in_features, where="Bags.indices", sync=True)

    def to_dense(self, in_features: int, *, dtype: torch.dtype | None = None) -> torch.Tensor:
        """The dense ``(N, in_features)`` matrix these bags stand for (duplicates add up), in
        ``dtype`` (default: the weights' dtype, float32 without weights).

        This is the reference path: it allocates ``N x in_features`` values.

        Examples
        --------
        >>> Bags.from_lists([[0, 2, 2]], weights=[[0.5, 1.0, 1.0]]).to_dense(4)
        tensor([[0.5000, 0.0000, 2.0000, 0.0000]])
        """
        self.check_indices(in_features)
        if dtype is None:
            dtype = self.weights.dtype if self.weights is not None else torch.float32
        out = torch.zeros(len(self), in_features, dtype=dtype, device=self.device)
        vals = (
            torch.ones(self.nnz, dtype=dtype, device=self.device)
            if self.weights is None
            else self.weights.to(dtype)
        )
        return out.index_put((self.bag_ids(), self.indices.long()), vals, accumulate=True)

    def to_scipy(self, in_features: int) -> sp.csr_matrix:
        """The same batch as a ``scipy.sparse.csr_matrix`` of shape ``(N, in_features)``.

        The matrix owns its arrays (copies of the bags' tensors): scipy's in-place operations
        on it (``sort_indices``, ``eliminate_zeros``, ``m.data *= 2``) leave the bags as they
        are. Its data is float64 for float64 weights and float32 otherwise (float16 and
        bfloat16 weights are widened, as scipy has no bfloat16); unweighted bags give ones.

        Examples
        --------
        >>> Bags.from_lists([[3, 1], [], [2]]).to_scipy(4).toarray()
        array([[0., 1., 0., 1.],
               [0., 0., 0., 0.],
               [0., 0., 1., 0.]], dtype=float32)
        """
        self.check_indices(in_features)
        if self.weights is None:
            vals = np.ones(self.nnz, dtype=np.float32)
        else:
            w = self.weights.detach().cpu()
            vals = (w if w.dtype in (torch.float32, torch.float64) else w.float()).numpy()
        import scipy.sparse as sp

        return sp.csr_matrix(
            (vals, self.indices.cpu().numpy(), self.offsets.cpu().numpy()),
            shape=(len(self), in_features), copy=True,
        )


_TORCH_INDEX_DTYPES = (np.dtype(np.int32), np.dtype(np.int64))  # native byte order


def _refuse_complex(where: str, dtype: Any) -> None:
    """Raise the ``InputTypeError`` the layer raises for complex dense input."""
    raise InputTypeError(
        f"{where}: values must be real floating point (or integers), got dtype {dtype}. "
        "Pass x.real (or x.abs())."
    )


def _csr(shape: tuple[int, int], indices: np.ndarray, indptr: np.ndarray, data: np.ndarray
         ) -> sp.csr_matrix:
    """A CSR matrix of checked arrays, sharing them where scipy can."""
    import scipy.sparse as sp

    return sp.csr_matrix((data, indices, indptr), shape=shape, copy=False)


def _summed_duplicates(shape: tuple[int, int], indices: np.ndarray, indptr: np.ndarray,
                       data: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The CSR arrays with the entries of each row sorted and those stored twice at one column
    summed into one (scipy's ``sum_duplicates``, on copies); float16 data is summed in float32
    (scipy has no float16 kernels) and rounded back."""
    wide = data.astype(np.float32) if data.dtype.itemsize < 4 else data.copy()
    m = _csr(shape, indices.copy(), indptr.copy(), wide)
    m.sum_duplicates()
    if m.indices.dtype != indices.dtype:  # scipy narrows int64 indices that fit int32
        return (m.indices.astype(indices.dtype), m.indptr.astype(indices.dtype),
                m.data.astype(data.dtype, copy=False))
    return m.indices, m.indptr, m.data.astype(data.dtype, copy=False)


def _sorted_distinct(bags: Bags) -> bool:
    """Whether the indices of each of the CPU ``bags`` are increasing."""
    idx, off = bags.indices.numpy(), bags.offsets.numpy()
    step = idx[1:] > idx[:-1]
    ends = off[1:-1]  # each bag's end: no step from its last entry to the next bag's first
    step[ends[(ends > 0) & (ends < idx.size)] - 1] = True
    return bool(step.all())


def _from_numpy(a: np.ndarray) -> torch.Tensor:
    """``torch.from_numpy`` without a copy; read-only arrays are copied (torch needs writable)."""
    if not a.flags.writeable:
        a = a.copy()
    return torch.from_numpy(a)


def _row_offsets(rows: torch.Tensor, n: int) -> torch.Tensor:
    """The CSR offsets of ``n`` rows from the sorted row of every entry, int64: row ``b``'s
    entries are ``offsets[b]:offsets[b + 1]``. Without a host synchronisation (a bincount
    reads the largest row first)."""
    return torch.searchsorted(rows, torch.arange(n + 1, dtype=rows.dtype, device=rows.device))


def check_index_range(indices: torch.Tensor, in_features: int, *, where: str,
                      sync: bool = False) -> None:
    """Raise ``LookupIndexError`` naming the first index outside ``[0, in_features)``.

    The values are read on the host for CPU tensors; on other devices (unless ``sync``)
    and while ``torch.compile`` or ``torch.export`` records a graph the check is
    :func:`lookuplinear.ops.assert_bags`, a device-side assert without a host
    synchronisation (at once on the CPU, a ``RuntimeError``; at the next synchronisation on
    CUDA, as ``nn.Embedding`` raises there).
    ``sync=True`` (an explicit check: ``Bags.check_indices``, ``validate``) reads them on
    any device. Meta tensors have no values to check."""
    if not values_known() or (not sync and not on_host(indices)):
        assert_bags(indices, None, in_features, where=where)
        return
    if indices.numel() == 0 or indices.is_meta:
        return
    unsigned64 = indices.dtype == torch.uint64
    if unsigned64:  # its values past int64 read as negative ones, each out of range
        indices = indices.view(torch.int64)
    elif indices.dtype in (torch.uint16, torch.uint32):  # no aminmax of their own
        indices = indices.long()
    lo, hi = torch.aminmax(indices)
    if int(lo) >= 0 and int(hi) < in_features:
        return
    bad = (indices < 0) | (indices >= in_features)
    pos = tuple(int(p) for p in torch.nonzero(bad)[0])
    value = int(indices[pos]) + (2**64 if unsigned64 and int(indices[pos]) < 0 else 0)
    at = f"{where}[{', '.join(map(str, pos))}]" if pos else where
    raise LookupIndexError(
        f"index {value} at {at} is out of range for "
        f"in_features={in_features}: {index_range(in_features)}. "
        "Check the vocabulary size, or map unknown tokens to a reserved index."
    )


_NO_ENTRY = object()
_BOOL_TYPES = frozenset({bool, np.bool_, torch.Tensor})  # a tensor may hold a bool


def int64_entries(entries: Sequence[Any], flat: np.ndarray, where: str, what: str, fix: str,
                  too_big: str) -> np.ndarray:
    """The integers ``entries`` (a flat sequence, ``flat`` its ``np.asarray``) as an int64
    array. Each entry is looked at only where numpy holds them otherwise than as integers (of
    mixed kinds, past int64, or not integers) or one is a bool (numpy reads it as 0 or 1).

    Raises
    ------
    InputTypeError
        An entry that is no integer: ``"{where}: {what}, got <type> <entry>. {fix}"``.
    InputValueError
        An integer outside int64: ``"{where}: " + too_big.format(value)``.
    """
    if (flat.ndim != 1 or flat.dtype.kind not in "iu"
            or not _BOOL_TYPES.isdisjoint(map(type, entries))):
        bad = next((i for i in entries if _not_an_index(i)), _NO_ENTRY)
        if bad is not _NO_ENTRY:  # None itself is an entry to refuse
            raise InputTypeError(f"{where}: {what}, got {type(bad).__name__} {bad!r}. {fix}")
        # integers numpy held otherwise: past int64, or of mixed kinds
        ints = [int(i) for i in entries]
        past = [i for i in ints if not -(2**63) <= i < 2**63]
        if past:
            raise InputValueError(f"{where}: {too_big.format(past[0])}")
        flat = np.array(ints, dtype=np.int64)
    if flat.dtype.kind == "u" and flat.size and int(flat.max()) >= 2**63:
        raise InputValueError(f"{where}: {too_big.format(int(flat.max()))}")
    return flat.astype(np.int64, copy=False)


def _not_an_index(entry: Any) -> bool:
    """Whether an entry of :meth:`Bags.from_lists` is no integer row index: a bool, a float, a
    string, a list, a tensor that is not one integer."""
    if isinstance(entry, torch.Tensor):
        return (entry.dim() != 0 or entry.is_floating_point() or entry.is_complex()
                or entry.dtype is torch.bool)
    return isinstance(entry, bool) or not isinstance(entry, int | np.integer)
