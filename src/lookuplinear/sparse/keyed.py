"""``KeyedBags``: several features' bags for the same examples (``KeyedTensor``, their output, is
in :mod:`.keyed_tensor`).

A keyed batch is TorchRec's ``KeyedJaggedTensor``: one flat ``values`` tensor holding, feature
after feature, each feature's ``N`` bags (feature-major), cut by ``lengths``::

    KeyedBags.from_dict({"user": [[3], [1, 4]], "item": [[7, 7, 2], []]})

    keys    = ["user", "item"]                 # F = 2 features, N = 2 examples
    values  = [3, 1, 4,   7, 7, 2]             # user's bags, then item's
    lengths = [1, 2,      3, 0]                # F * N bag lengths, feature-major
    offsets = [0, 1, 3,   6, 6]                # CSR offsets of the F * N bags

    # 'user' bags are values[0:1], values[1:3]; 'item' bags are values[3:6], values[6:6]

``kb["item"]`` is that feature's :class:`~lookuplinear.Bags` (a view, no copy), so everything a
``LookupLinear`` takes per bag batch, a keyed batch gives per feature.

A variable batch per key (TorchRec's VBE) holds each key's distinct bags once and says which one
each example reads::

    keys                    = ["user", "item"]             # N = 3 examples
    stride_per_key_per_rank = [[1], [2]]                   # user: 1 bag, item: 2 bags
    values  = [3, 1,   7, 7, 2]
    lengths = [2,      3, 0]
    inverse_indices = [[0, 0, 0],                          # every example reads user's bag 0
                       [1, 0, 1]]                          # example 0 reads item's bag 1

    # the same batch as N bags per key (kb.full_batch()):
    # user [[3, 1], [3, 1], [3, 1]]   item [[], [7, 7, 2], []]
"""

from __future__ import annotations

import functools
import itertools
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, cast, overload

import numpy as np
import torch

from ..errors import InputTypeError, InputValueError
from ..ops import values_known
from ..ops._asserts import assert_offsets_twin
from ..ops._inputs import assert_bag_count
from .bags import Bags, as_int_tensor, check_weights
from .columns import column_bags
from .keyed_tensor import KeyedTensor
from .offsets import check_offsets, on_host
from .pytree import register_node
from .rows import gather_bags, rows_index

__all__ = ["KeyedBags", "KeyedTensor"]


class KeyedBags:
    """A keyed jagged batch: ``F`` features' bags of indices for the same ``N`` examples.

    The dense equivalent of feature ``k`` is ``kb[k].to_dense(n)``, the ``(N, n)`` multi-hot
    (weighted) matrix of its bags, as for :class:`~lookuplinear.Bags`. The layout is TorchRec's
    ``KeyedJaggedTensor`` (feature-major; see the module docstring for a drawn batch).

    Parameters
    ----------
    keys : sequence of str
        The feature names, distinct, in the order their bags appear in ``values``.
    values : Tensor of shape (nnz,), integer
        Every feature's indices, feature after feature, bag after bag.
    lengths : Tensor of shape (F * N,), integer, optional
        The number of entries of every bag, feature-major. Give ``lengths`` or ``offsets``.
    offsets : Tensor of shape (F * N + 1,), integer, optional
        CSR offsets of the ``F * N`` bags (``offsets[0] == 0``, ``offsets[-1] == nnz``).
    weights : Tensor of shape (nnz,), floating, optional
        One weight per entry (``None`` means 1). ``lengths``, ``offsets``, ``weights`` and
        what follows are keyword-only: TorchRec's ``KeyedJaggedTensor`` takes ``weights``
        third, so a call ported positionally is refused, not read otherwise.
    stride_per_key_per_rank : sequence of sequences of int, optional
        A variable batch per key (TorchRec's): key ``k`` has ``sum(stride_per_key_per_rank[k])``
        bags (its ranks' bags one after the other), the keys' bags one key after the other.
        Default: ``N`` bags for every key.
    inverse_indices : Tensor of shape (F, N), integer, or (names, Tensor), optional
        Example ``i`` of key ``k`` reads that key's bag ``inverse_indices[k, i]`` (TorchRec's
        ``inverse_indices``, rows in ``keys`` order): the batch has ``N`` examples, and its
        dense equivalent for key ``k`` is ``kb[k].to_dense(n)[inverse_indices[k]]``
        (``kb.full_batch()`` builds it). As TorchRec's ``(names, rows)`` pair, rows for the
        keys ``names`` only (some of ``keys``, in any order): kept in ``keys`` order, and
        :attr:`inverse_keys` says whose they are. A key without a row cannot be expanded to
        examples: a collection that reads it, or ``full_batch``, refuses the batch.

    Raises
    ------
    InputValueError
        Keys repeated or not strings, lengths negative or not summing to ``len(values)``,
        a number of bags that is not a multiple of the number of keys (or not the sum of
        ``stride_per_key_per_rank``), bad offsets, weights of the wrong length,
        ``inverse_indices`` not ``(F, N)`` (one row per name given) or naming a bag its key
        does not have, names that are not keys or repeated; an int outside int64 in a list
        of values, lengths or offsets.
    InputTypeError
        Integer tensors that are not integers (in a list: an entry that is a bool or a
        float), weights that are not floating point.

    Notes
    -----
    The constructor never synchronises with a device, as TorchRec's ``KeyedJaggedTensor``.
    Keys, types, shapes, devices and strides are checked on every device; the values of
    ``lengths`` (>= 0, summing to ``len(values)``), ``offsets`` and ``inverse_indices`` are
    checked here only on the CPU, where reading them is free. On another device (a GPU) the
    lookup asserts on the device that the offsets cut the values into bags and that every
    index is in range, and :meth:`validate` runs every check above on the host and names
    what is wrong: call it on data from an untrusted source, on a GPU.

    Examples
    --------
    >>> kb = KeyedBags(["user", "item"], torch.tensor([3, 1, 4, 7, 7, 2]),
    ...                lengths=torch.tensor([1, 2, 3, 0]))
    >>> kb
    KeyedBags(keys=['user', 'item'], batch_size=2, nnz=6, weighted=False)
    >>> kb["item"].indices, kb["item"].offsets
    (tensor([7, 7, 2]), tensor([0, 3, 3]))
    """

    __slots__ = ("_bounds", "_from_lengths", "_inverse_keys", "_keys", "_position", "_starts",
                 "_strides", "inverse_indices", "offsets", "values", "weights")

    def __init__(
        self,
        keys: Sequence[str],
        values: torch.Tensor | Sequence[int] | np.ndarray,
        *,
        lengths: torch.Tensor | Sequence[int] | np.ndarray | None = None,
        offsets: torch.Tensor | Sequence[int] | np.ndarray | None = None,
        weights: torch.Tensor | Sequence[float] | np.ndarray | None = None,
        stride_per_key_per_rank: Sequence[Sequence[int]] | None = None,
        inverse_indices: torch.Tensor | Sequence[Sequence[int]] | np.ndarray
        | tuple[Sequence[str], torch.Tensor] | None = None,
    ) -> None:
        keys = list(keys)
        if not all(isinstance(k, str) for k in keys):
            raise InputValueError(
                f"KeyedBags: keys must be strings (feature names), got {keys!r}."
            )
        if len(set(keys)) != len(keys):
            repeated = sorted({k for k in keys if keys.count(k) > 1})
            raise InputValueError(
                f"KeyedBags: keys must be distinct, got {repeated} more than once. Give each "
                "feature one name (features may share a table through TableConfig)."
            )
        vals = as_int_tensor("values", values)
        if (lengths is None) == (offsets is None):
            raise InputValueError(
                "KeyedBags: give exactly one of lengths= (F * N bag lengths) and offsets= "
                f"(F * N + 1 CSR offsets), got lengths={'None' if lengths is None else '...'} and "
                f"offsets={'None' if offsets is None else '...'}."
            )
        if lengths is not None:
            lens = as_int_tensor("lengths", lengths).to(vals.device)
            if lens.dim() != 1:
                raise InputValueError(
                    f"KeyedBags: lengths must be 1-D (F * N values), got shape "
                    f"{tuple(lens.shape)}."
                )
            if on_host(lens) and values_known():  # elsewhere: validate() and the lookup's
                _check_lengths(lens, vals.numel())  # asserts
            off = torch.zeros(lens.numel() + 1, dtype=torch.long, device=vals.device)
            torch.cumsum(lens, 0, out=off[1:])
            if not values_known():  # a recorded graph: asserted where it runs
                assert_offsets_twin(off, vals.numel(), "KeyedBags")
        else:
            off = as_int_tensor("offsets", offsets).long().to(vals.device)
            check_offsets(off, vals.numel(), owner="KeyedBags", entries="values", lazy=True)
        n_bags = off.numel() - 1
        strides = None if stride_per_key_per_rank is None else _strides(
            stride_per_key_per_rank, keys, n_bags)
        if strides is None and keys and n_bags % len(keys):
            raise InputValueError(
                f"KeyedBags: {n_bags} bags for {len(keys)} keys; the bags must be N per key "
                "(feature-major), so their number is a multiple of the number of keys; give "
                "stride_per_key_per_rank= for a variable batch per key."
            )
        if not keys and n_bags:
            raise InputValueError(f"KeyedBags: {n_bags} bags but no keys.")
        if strides is None and keys and not values_known():
            # a recorded graph: the count asserted where it runs too (the check above is an
            # exported program's input constraint, which an AOTInductor package never reads)
            assert_bag_count(off, len(keys))
        w = None if weights is None else check_weights(weights, vals, "KeyedBags", "values",
                                                         "entry of values")
        per_key = [n_bags // max(len(keys), 1)] * len(keys) if strides is None else [
            sum(r) for r in strides]
        inverse, inverse_keys = (None, None) if inverse_indices is None else _inverse(
            inverse_indices, keys, per_key, vals.device)
        self._keys = keys
        self._position = {k: i for i, k in enumerate(keys)}
        self._from_lengths = lengths is not None
        self.values = vals
        self.offsets = off if vals.dtype == off.dtype else off.to(vals.dtype)
        self.weights = w
        self._strides = strides
        self._starts = _starts(strides)
        self._bounds: tuple[torch.Tensor, int, list[int]] | None = None
        self.inverse_indices = inverse
        self._inverse_keys = inverse_keys

    def validate(self) -> KeyedBags:
        """Run every check of the batch's values on any device and return ``self``.

        The constructor checks values only on the CPU (see the class notes); on a GPU this
        copies the offsets and ``inverse_indices``' bounds to the host, a synchronisation.
        Call it on batches from an untrusted source before a lookup on a GPU, to get the
        error that names the bad length, offset or bag instead of a device-side assert. (The
        range of the indices depends on each key's table: the lookup checks it.)

        Returns
        -------
        KeyedBags
            ``self``, for ``kb = KeyedBags(keys, values, lengths=lengths).validate()``.

        Raises
        ------
        InputValueError
            Lengths negative or not summing to ``len(values)``; ``inverse_indices`` naming a
            bag its key does not have.
        OffsetsError
            Offsets that do not start at 0, decrease, or do not end at ``len(values)``.

        Examples
        --------
        >>> kb = KeyedBags(["a"], torch.tensor([1, 2]), lengths=torch.tensor([2, 0]))
        >>> kb.validate() is kb
        True
        """
        if self.offsets.is_meta:  # no values to check
            return self
        if self._from_lengths:  # the lengths given are the offsets' differences
            _check_lengths(self.lengths().cpu(), self.values.numel())
        check_offsets(self.offsets, self.values.numel(), owner="KeyedBags", entries="values")
        if self.inverse_indices is not None:
            strides = dict(zip(self._keys, self.stride_per_key(), strict=True))
            _check_inverse_range(self.inverse_indices, self.inverse_keys,
                                 [strides[k] for k in self.inverse_keys])
        return self

    # ------------------------------------------------------------------ constructors
    @classmethod
    def from_checked(
        cls,
        keys: Sequence[str],
        values: torch.Tensor,
        offsets: torch.Tensor,
        weights: torch.Tensor | None = None,
        *,
        stride_per_key_per_rank: Sequence[Sequence[int]] | None = None,
        inverse_indices: torch.Tensor | None = None,
        inverse_keys: Sequence[str] | None = None,
    ) -> KeyedBags:
        """A batch of tensors that already hold the contract of :class:`KeyedBags` (parts of a
        checked batch), not checked again; build from user input with ``KeyedBags(...)``.
        ``inverse_keys``: the keys whose rows ``inverse_indices`` holds, in ``keys`` order
        (``None``: every key).

        Examples
        --------
        >>> KeyedBags.from_checked(["a"], torch.tensor([1, 2]), torch.tensor([0, 2]))
        KeyedBags(keys=['a'], batch_size=1, nnz=2, weighted=False)
        """
        kb = cls.__new__(cls)
        kb._keys, kb._position = list(keys), {k: i for i, k in enumerate(keys)}
        kb._from_lengths = False
        kb.values, kb.offsets, kb.weights = values, offsets, weights
        kb._strides = None if stride_per_key_per_rank is None else tuple(
            tuple(int(n) for n in r) for r in stride_per_key_per_rank)
        kb._starts = _starts(kb._strides)
        kb._bounds = None
        kb.inverse_indices = inverse_indices
        kb._inverse_keys = None if inverse_keys is None or list(inverse_keys) == kb._keys \
            else list(inverse_keys)
        return kb

    @classmethod
    def from_dict(cls, features: Mapping[str, Bags | Sequence[Sequence[int]]]) -> KeyedBags:
        """Build from ``{key: Bags or list of index lists}``, every feature with ``N`` bags.

        Weights are kept when every feature has them (a feature without weights gets 1s when
        another has them).

        Examples
        --------
        >>> kb = KeyedBags.from_dict({"user": [[3], [1, 4]], "item": [[7, 7, 2], []]})
        >>> kb.values, kb.lengths()
        (tensor([3, 1, 4, 7, 7, 2]), tensor([1, 2, 3, 0]))
        """
        if not features:
            raise InputValueError("KeyedBags.from_dict: got no features; pass {name: bags}.")
        bags = {k: v if isinstance(v, Bags) else Bags.from_lists(v) for k, v in features.items()}
        sizes = {k: len(b) for k, b in bags.items()}
        if len(set(sizes.values())) > 1:
            raise InputValueError(
                f"KeyedBags.from_dict: every feature needs one bag per example, got {sizes} "
                "bags per feature."
            )
        devices = {b.device for b in bags.values()}
        if len(devices) > 1:
            raise InputValueError(
                f"KeyedBags.from_dict: features on different devices {sorted(map(str, devices))};"
                " move them to one device."
            )
        values = torch.cat([b.indices.long() for b in bags.values()])
        lengths = torch.cat([b.lengths().long() for b in bags.values()])
        weights = None
        if any(b.weights is not None for b in bags.values()):
            # promoted over every feature's weights, as torch.cat of their dense matrices
            dtype = functools.reduce(
                torch.promote_types, [b.weights.dtype for b in bags.values()
                                      if b.weights is not None])
            weights = torch.cat([
                b.weights.to(dtype) if b.weights is not None
                else torch.ones(b.nnz, dtype=dtype, device=b.device)
                for b in bags.values()
            ])
        return cls(list(bags), values, lengths=lengths, weights=weights)

    @classmethod
    def from_columns(cls, columns: Mapping[str, Any]) -> KeyedBags:
        """Build from ``{key: column}``, one column per feature, one row per example.

        A column is a numpy array, a pandas Series, a pyarrow array or a list, holding either
        one integer ID per row (every bag holds that one ID) or one list of integer IDs per row
        (the bag; ``[]`` is an empty bag). List columns are read without a loop over rows where
        the column is a pyarrow list array (its offsets are the bags' offsets); an object array
        of lists costs one pass to flatten. The result equals
        ``KeyedBags.from_dict({k: [[id] or ids for each row] ...})``::

            {"user": [3, 1], "tags": [[7, 7, 2], []]}

            keys    = ["user", "tags"]
            values  = [3, 1,   7, 7, 2]
            lengths = [1, 1,   3, 0]

        Raises
        ------
        InputTypeError
            A column that is neither integer IDs nor lists of integer IDs: floats, strings
            (map them with ``IdMap(key_type="str")`` first), bools, lists nested in lists, or
            lists mixed with scalars.
        InputValueError
            A missing ID or list (None, NaN, NA, null), an ID outside int64, columns of
            different lengths, no columns.

        Examples
        --------
        >>> kb = KeyedBags.from_columns({"user": np.array([3, 1]),
        ...                              "tags": [[7, 7, 2], []]})
        >>> kb.values, kb.lengths()
        (tensor([3, 1, 7, 7, 2]), tensor([1, 1, 3, 0]))
        """
        if not columns:
            raise InputValueError("KeyedBags.from_columns: got no columns; pass {name: column}.")
        read = {str(k): column_bags(str(k), c) for k, c in columns.items()}
        rows = {k: len(lengths) for k, (_, lengths) in read.items()}
        if len(set(rows.values())) > 1:
            raise InputValueError(
                f"KeyedBags.from_columns: every column needs one row per example, got {rows} "
                "rows per column."
            )
        values = np.concatenate([v for v, _ in read.values()])
        lengths = np.concatenate([n for _, n in read.values()])
        return cls(list(read), torch.from_numpy(values), lengths=torch.from_numpy(lengths))

    @classmethod
    def from_dataframe(cls, df: Any, columns: Sequence[str] | None = None) -> KeyedBags:
        """Build from a pandas DataFrame's ``columns`` (all of them by default), a key each.

        ``KeyedBags.from_columns({c: df[c] for c in columns})``: integer columns are one ID
        per example, list columns (object columns of lists or arrays, or Arrow-backed
        ``list<int>`` columns) are the bags. pandas is read, never imported.

        Examples
        --------
        >>> import pandas as pd
        >>> df = pd.DataFrame({"user": [3, 1], "tags": [[7, 7, 2], []], "label": [0, 1]})
        >>> KeyedBags.from_dataframe(df, columns=["user", "tags"])
        KeyedBags(keys=['user', 'tags'], batch_size=2, nnz=5, weighted=False)
        """
        names = list(df.columns) if columns is None else list(columns)
        missing = [c for c in names if c not in df.columns]
        if missing:
            raise InputValueError(
                f"KeyedBags.from_dataframe: no column {missing} in the DataFrame; its columns "
                f"are {list(df.columns)}."
            )
        return cls.from_columns({c: df[c] for c in names})

    @classmethod
    def from_kjt(cls, kjt: Any) -> KeyedBags:
        """Build from TorchRec's ``KeyedJaggedTensor`` (same layout; the tensors are shared).

        Off the CPU, the entry bounds of each key that the ``KeyedJaggedTensor`` holds on the
        host (``offset_per_key``) are kept, so ``kb[key]`` reads no offsets back, as in
        TorchRec's own split. A variable batch per key (``stride_per_key_per_rank``) and
        ``inverse_indices`` are kept, as TorchRec reads them: key ``k`` has
        ``kjt.stride_per_key()[k]`` bags, and example ``i`` reads its bag
        ``inverse_indices[k, i]`` (the rows of ``inverse_indices`` taken by key name; a key
        without a row is kept without one, see :attr:`inverse_keys`).
        ``KeyedBags.from_kjt(kjt).to_kjt()`` is ``kjt`` again.

        Raises
        ------
        InputValueError
            ``lengths`` that are not the bags the strides say, covering ``values`` exactly;
            ``inverse_indices`` naming a bag a key lacks. Nothing is read or changed, never
            read as another batch.
        """
        keys = list(kjt.keys())
        strides = [int(n) for n in kjt.stride_per_key()]
        lengths = kjt.lengths()
        if lengths.numel() != sum(strides):
            raise InputValueError(
                f"KeyedBags.from_kjt: the KeyedJaggedTensor has {len(keys)} keys and strides "
                f"{strides} per key, so {sum(strides)} bags, but {lengths.numel()} lengths; "
                "build it with one length per bag of every key."
            )
        per_rank = kjt.stride_per_key_per_rank() if kjt.variable_stride_per_key() else None
        found = kjt.inverse_indices_or_none()
        inverse: tuple[list[str], torch.Tensor] | None = None
        if found is not None and found[1].numel():  # empty ones TorchRec reads as none
            names, table = list(found[0]), found[1]
            # the rows of the keys, by name (TorchRec's EBC reads them so): rows of names
            # that are no key are not read
            inverse = ([k for k in keys if k in names],
                       table[[names.index(k) for k in keys if k in names]])
        kb = cls(keys, kjt.values(), lengths=lengths, weights=kjt.weights_or_none(),
                 stride_per_key_per_rank=per_rank, inverse_indices=inverse)
        bounds = kjt.offset_per_key_or_none()  # TorchRec's, where it has them on the host
        if bounds is not None and not on_host(kb.values):
            bounds = [int(b) for b in bounds]
            if (len(bounds) == len(keys) + 1 and bounds[0] == 0
                    and bounds[-1] == kb.values.numel()
                    and all(a <= b for a, b in itertools.pairwise(bounds))):
                kb._keep_bounds(bounds)
        return kb

    def to_kjt(self) -> Any:
        """TorchRec's ``KeyedJaggedTensor`` of this batch (needs the ``torchrec`` package),
        with its ``stride_per_key_per_rank`` and ``inverse_indices`` where it has them.

        float64 weights (a batch built from Python floats) become float32: TorchRec's tables
        are float32 or narrower, and its lookups take no float64 weights."""
        try:
            from torchrec.sparse.jagged_tensor import KeyedJaggedTensor
        except ImportError as exc:  # an optional dependency
            raise ImportError(
                "KeyedBags.to_kjt needs TorchRec; install it (see docs/collection.md)."
            ) from exc
        extra: dict[str, Any] = {}
        strides = self._strides
        if strides is None and self.inverse_indices is not None:  # TorchRec reads them with
            strides = tuple((n,) for n in self.stride_per_key())  # strides only
        if strides is not None:
            extra["stride_per_key_per_rank"] = [list(r) for r in strides]
        if self.inverse_indices is not None:
            extra["inverse_indices"] = (self.inverse_keys, self.inverse_indices)
        known = self._known_bounds()
        if known is not None:  # known on the host: TorchRec's split reads nothing back
            extra["offset_per_key"] = list(known)
        weights = self.weights
        if weights is not None and weights.dtype == torch.float64:
            weights = weights.float()
        return KeyedJaggedTensor(keys=self.keys(), values=self.values, lengths=self.lengths(),
                                 weights=weights, **extra)

    def full_batch(self) -> KeyedBags:
        """The same batch as ``N`` bags for every key: each example's bag of each key, as
        ``inverse_indices`` say (this object if it has none and one stride for every key).
        Its dense equivalent is this batch's: ``kb[k].to_dense(n)[inverse_indices[k]]``.

        Raises
        ------
        InputValueError
            A variable batch per key without ``inverse_indices`` (no examples to expand to).

        Examples
        --------
        >>> kb = KeyedBags(["user", "item"], torch.tensor([3, 1, 7, 7, 2]),
        ...                lengths=torch.tensor([2, 3, 0]), stride_per_key_per_rank=[[1], [2]],
        ...                inverse_indices=torch.tensor([[0, 0, 0], [1, 0, 1]]))
        >>> kb.batch_size, kb.stride_per_key()
        (3, [1, 2])
        >>> full = kb.full_batch()
        >>> full.lengths(), full["item"].indices
        (tensor([2, 2, 2, 0, 3, 0]), tensor([7, 7, 2]))
        """
        if self.inverse_indices is None:
            if self._starts is None:
                return self
            raise InputValueError(
                f"KeyedBags.full_batch: the batch has a variable batch per key (strides "
                f"{self.stride_per_key()}) and no inverse_indices, so no examples to expand "
                "to; give inverse_indices= (the bag each example reads, per key)."
            )
        if self._inverse_keys is not None:
            missing = [k for k in self._keys if k not in self._inverse_keys]
            raise InputValueError(
                f"KeyedBags.full_batch: the batch's inverse_indices have no row for keys "
                f"{missing} (only for {self._inverse_keys}), so no examples to expand them to; "
                "give inverse_indices a row for every key."
            )
        bags = (self._first_bags()[:, None] + self.inverse_indices.to(self.device)).flatten()
        return self._take(bags)

    def _inverted_only(self) -> KeyedBags:
        """The batch of only the keys ``inverse_indices`` has rows for (this object if it has
        a row for every key or none): what :meth:`full_batch` can expand."""
        if self._inverse_keys is None:
            return self
        keep = self._inverse_keys
        parts = [self[k] for k in keep]
        per_rank = self._strides or tuple((n,) for n in self.stride_per_key())
        ranks = dict(zip(self._keys, per_rank, strict=True))
        weights = None if self.weights is None else torch.cat(
            [cast(torch.Tensor, b.weights) for b in parts])
        return KeyedBags(keep, torch.cat([b.indices for b in parts]),
                         lengths=torch.cat([b.lengths() for b in parts]), weights=weights,
                         stride_per_key_per_rank=[list(ranks[k]) for k in keep],
                         inverse_indices=self.inverse_indices)

    def offset_per_key(self) -> list[int]:
        """Each key's first entry in ``values``, and the end of the last: ``F + 1`` ints
        (TorchRec's ``KeyedJaggedTensor.offset_per_key``).

        Read from the offsets once, then kept: on a GPU that read is a host synchronisation,
        which a batch moved from the CPU (``kb.to("cuda")``) or built by :meth:`from_kjt` from
        a ``KeyedJaggedTensor`` that holds them does not make; ``kb[key]`` slices with them.

        Raises
        ------
        OffsetsError
            Offsets (unchecked off the CPU) whose key bounds leave ``values``.
        InputValueError
            Read while ``torch.jit.trace`` records (so is ``kb[key]``): the trace would keep
            them as constants. ``torch.export.export`` keeps them symbolic.

        Examples
        --------
        >>> KeyedBags.from_dict({"user": [[3], [1, 4]], "item": [[7, 7, 2], []]}).offset_per_key()
        [0, 3, 6]
        """
        return list(self._key_bounds())

    def _known_bounds(self) -> list[int] | None:
        """:meth:`offset_per_key` where it is kept and still holds: for these offsets (the same
        tensor, unchanged in place since) and values; else None."""
        kept = self._bounds
        if kept is None:
            return None
        offsets, version, bounds = kept
        if (offsets is not self.offsets or bounds[-1] != self.values.numel()
                or version != _version(offsets)):
            return None
        return bounds

    def _keep_bounds(self, bounds: list[int]) -> None:
        """Keep ``bounds`` as :meth:`offset_per_key` of the offsets as they are now."""
        self._bounds = (self.offsets, _version(self.offsets), bounds)

    def _key_bounds(self) -> list[int]:
        """:meth:`offset_per_key`, not copied.

        Refused while ``torch.jit.trace`` records: the trace would keep this batch's bounds as
        constants, and slice every later batch at them (a wrong result, no error)."""
        if torch.jit.is_tracing():
            raise InputValueError(
                "KeyedBags: torch.jit.trace cannot record a keyed batch split by feature (a "
                "LookupCollection's forward, kb[key], offset_per_key()): the trace would keep "
                "this batch's per-feature bounds as constants and cut every later batch at "
                "them. Record the model with torch.export.export or torch.compile "
                "(docs/serving.md), which keep them symbolic."
            )
        known = self._known_bounds()
        if known is None:
            if self._starts is not None:
                bounds = self.offsets[self._starts].tolist()
            elif self._keys and self.offsets.numel() > 1:
                bounds = self.offsets[::(self.offsets.numel() - 1) // len(self._keys)].tolist()
            else:
                bounds = [0] * (len(self._keys) + 1)
            if bounds[0] != 0 or bounds[-1] != self.values.numel() or any(
                    a > b for a, b in itertools.pairwise(bounds)):  # unchecked device offsets
                check_offsets(self.offsets, self.values.numel(), owner="KeyedBags",
                              entries="values")
            self._keep_bounds(bounds)
            known = bounds
        return known

    def stride_per_key(self) -> list[int]:
        """Each key's number of bags (``N`` for every key, but for a variable batch)."""
        if self._starts is None:
            n = (self.offsets.numel() - 1) // len(self._keys) if self._keys else 0
            return [n] * len(self._keys)
        return [b - a for a, b in itertools.pairwise(self._starts)]

    def _padded(self) -> KeyedBags:
        """Each key's bags followed by empty ones up to the largest stride, the same values:
        a batch of ``max(stride_per_key())`` examples for every key, without
        ``inverse_indices`` (this batch's own bags, for a lookup of each bag once)."""
        if self._starts is None:
            if self.inverse_indices is None:
                return self
            return KeyedBags.from_checked(self._keys, self.values, self.offsets, self.weights)
        # Python ints (host: no value read) and torch ops, which a recorded graph traces
        strides = self.stride_per_key()
        s, total = max(strides), sum(strides)
        # key k's bag j goes to k * s + j: its place among all bags, plus first[k]
        first = [k * s - before for k, before in enumerate(itertools.accumulate(strides,
                                                                                initial=0))]
        at = torch.repeat_interleave(  # each bag's place among the padded ones
            torch.tensor(first[:len(strides)], device=self.device),
            torch.tensor(strides, device=self.device), output_size=total,
        ) + torch.arange(total, device=self.device)
        lengths = torch.zeros(len(self._keys) * s, dtype=self.offsets.dtype, device=self.device)
        lengths[at] = self.lengths()
        offsets = torch.zeros(lengths.numel() + 1, dtype=self.offsets.dtype, device=self.device)
        torch.cumsum(lengths, 0, out=offsets[1:])
        padded = KeyedBags.from_checked(self._keys, self.values, offsets, self.weights)
        bounds = self._known_bounds()
        if bounds is not None:  # the same entries per key: the same bounds, kept (no read)
            padded._keep_bounds(bounds)
        return padded

    def _first_bags(self) -> torch.Tensor:
        """Each key's first bag, ``(F,)`` int64."""
        if self._starts is None:
            n = (self.offsets.numel() - 1) // len(self._keys) if self._keys else 0
            return torch.arange(len(self._keys), device=self.device) * n
        return torch.tensor(self._starts[:-1], device=self.device)

    # ------------------------------------------------------------------ views
    def keys(self) -> list[str]:
        """The feature names, in the order of ``values``."""
        return list(self._keys)

    @property
    def batch_size(self) -> int:
        """``N``, the number of examples: bags per feature, or ``inverse_indices``' columns
        (for a variable batch without them, the largest stride, as TorchRec's ``stride()``)."""
        if self.inverse_indices is not None:
            return int(self.inverse_indices.shape[1])
        if self._starts is not None:
            return max(self.stride_per_key())
        return (self.offsets.numel() - 1) // len(self._keys) if self._keys else 0

    @property
    def variable(self) -> bool:
        """Whether examples read their bags through ``inverse_indices`` or the keys have
        different numbers of bags (TorchRec's variable batch per key)."""
        return self.inverse_indices is not None or self._starts is not None

    @property
    def inverse_keys(self) -> list[str]:
        """The keys whose rows ``inverse_indices`` holds, in its row order: every key, or
        those a ``(names, rows)`` pair named (``[]`` without ``inverse_indices``)."""
        if self.inverse_indices is None:
            return []
        return list(self._keys if self._inverse_keys is None else self._inverse_keys)

    def __len__(self) -> int:
        """The number of examples ``N``, as ``len(Bags)`` is its number of bags."""
        return self.batch_size

    def __contains__(self, key: object) -> bool:
        return key in self._position

    def __iter__(self) -> Iterator[str]:
        return iter(self._keys)

    def lengths(self) -> torch.Tensor:
        """The ``F * N`` bag lengths, feature-major."""
        return self.offsets[1:] - self.offsets[:-1]

    @property
    def device(self) -> torch.device:
        return self.values.device

    @overload
    def __getitem__(self, key: str) -> Bags: ...

    @overload
    def __getitem__(self, key: slice | torch.Tensor | np.ndarray | Sequence[int]) -> KeyedBags: ...

    def __getitem__(self, key: Any) -> Bags | KeyedBags:
        """Feature ``key``'s ``N`` bags, or the examples ``rows`` of every feature.

        ``kb["user"]`` is that feature's :class:`~lookuplinear.Bags` (views of ``values`` and
        ``weights``, offsets from 0): its ``stride_per_key()`` bags, which with
        ``inverse_indices`` are the distinct bags its examples read. ``kb[rows]``, with
        ``rows`` a slice, an int (a batch of that one row), integer indices (negative count
        from the end, repeats allowed) or a boolean mask of ``N`` values, is a
        new ``KeyedBags`` of those examples in that order, for every feature: its dense
        equivalent is ``kb[k].to_dense(n)[rows]`` for each key ``k``.

        Raises
        ------
        KeyError
            A feature name that is not one of ``keys()``.
        LookupIndexError
            A row outside ``[-N, N)``, or a mask that is not ``N`` values.

        Examples
        --------
        >>> kb = KeyedBags.from_dict({"user": [[3], [1, 4], [5]], "item": [[7, 7], [], [2]]})
        >>> kb[1:].to_dict()["user"].indices, kb[torch.tensor([2, 0])].lengths()
        (tensor([1, 4, 5]), tensor([1, 1, 1, 2]))
        """
        if not isinstance(key, str):
            return self._rows(key)
        pos = self._position.get(key)
        if pos is None:
            raise KeyError(
                f"KeyedBags has no feature {key!r}; its keys are {self._keys}."
            )
        if self._starts is None:
            n = (self.offsets.numel() - 1) // len(self._keys)
            off = self.offsets[pos * n : (pos + 1) * n + 1]
        else:
            off = self.offsets[self._starts[pos] : self._starts[pos + 1] + 1]
        if not values_known():  # symbolic bounds, checked where a graph runs
            start, end = off[0].item(), off[-1].item()
            torch._check(start >= 0)
            torch._check(start <= end)
            torch._check(end <= self.values.numel())
            if self.weights is not None:  # one weight per value: equal slices' sizes
                torch._check(self.weights.shape[0] == self.values.shape[0])
        else:  # every key's bounds in one read, kept (none where the host knows them)
            bounds = self._key_bounds()
            start, end = bounds[pos], bounds[pos + 1]
        weights = None if self.weights is None else self.weights[start:end]
        return Bags.from_checked(self.values[start:end], off - start, weights)  # a checked slice

    def _rows(self, rows: Any) -> KeyedBags:
        n, f = self.batch_size, len(self._keys)
        if self.inverse_indices is not None:  # the same bags, read by the picked examples
            picked = rows_index("KeyedBags[rows]", rows, n, self.inverse_indices.device)
            return KeyedBags.from_checked(self._keys, self.values, self.offsets, self.weights,
                                          stride_per_key_per_rank=self._strides,
                                          inverse_indices=self.inverse_indices[:, picked],
                                          inverse_keys=self._inverse_keys)
        if self._starts is not None:
            raise InputValueError(
                f"KeyedBags[rows]: the batch has a variable batch per key (strides "
                f"{self.stride_per_key()}) and no inverse_indices, so no examples to select; "
                "give inverse_indices= (the bag each example reads, per key)."
            )
        picked = rows_index("KeyedBags[rows]", rows, n, self.device)
        bags = (torch.arange(f, device=self.device)[:, None] * n + picked[None, :]).flatten()
        return self._take(bags)

    def _take(self, bags: torch.Tensor) -> KeyedBags:
        """A batch of these keys made of bags ``bags`` (positions in the key-major bag order)
        of this one: bags of a checked batch, so nothing to check again."""
        positions, _, offsets = gather_bags(self.offsets, bags)
        offsets = offsets.to(self.offsets.dtype)
        weights = None if self.weights is None else self.weights.index_select(0, positions)
        return KeyedBags.from_checked(self._keys, self.values.index_select(0, positions),
                                      offsets, weights)

    @classmethod
    def cat(cls, batches: Sequence[KeyedBags]) -> KeyedBags:
        """The examples of ``batches``, one batch after the other, as one ``KeyedBags``.

        Stacks rows, as ``torch.cat(dim=0)`` does: the dense equivalent of feature ``k`` is
        ``torch.cat([b[k].to_dense(n) for b in batches])``. (TorchRec's
        ``KeyedJaggedTensor.concat`` instead puts different keys side by side.) Every batch
        must have the same keys in the same order, on one device; weights are kept when any
        batch has them (1 for the entries of a batch without), in the dtype ``torch.cat``
        gives the batches' weights (float16 and float32 weights give float32).

        Raises
        ------
        InputValueError
            No batches, different keys, or batches on different devices.

        Examples
        --------
        >>> a = KeyedBags.from_dict({"user": [[3]], "item": [[7, 2]]})
        >>> b = KeyedBags.from_dict({"user": [[1, 4], []], "item": [[], [5]]})
        >>> KeyedBags.cat([a, b]).to_dict()["item"].offsets
        tensor([0, 2, 2, 3])
        """
        batches = list(batches)
        if not batches:
            raise InputValueError("KeyedBags.cat: got no batches; pass a list of KeyedBags.")
        keys = batches[0]._keys
        for i, b in enumerate(batches):
            if not isinstance(b, KeyedBags):
                raise InputTypeError(
                    f"KeyedBags.cat: batches[{i}] is a {type(b).__name__}, not a KeyedBags."
                )
            if b.variable:
                raise InputValueError(
                    f"KeyedBags.cat: batches[{i}] is a variable batch per key (strides "
                    f"{b.stride_per_key()}, inverse_indices "
                    f"{'given' if b.inverse_indices is not None else 'none'}), and cat stacks "
                    "batches of N bags per key. Call batches[i].full_batch() first."
                )
            if b._keys != keys:
                raise InputValueError(
                    f"KeyedBags.cat: batches[{i}] has keys {b._keys} but batches[0] has "
                    f"{keys}; every batch needs the same keys in the same order (build them "
                    "from the same columns)."
                )
        devices = {b.device for b in batches}
        if len(devices) > 1:
            raise InputValueError(
                f"KeyedBags.cat: batches on different devices {sorted(map(str, devices))}; move "
                "them to one device."
            )
        # feature-major: feature 0 of every batch, then feature 1 of every batch, ...
        spans = []
        for f in range(len(keys)):
            for b in batches:
                n = b.batch_size
                spans.append((b, f * n, (f + 1) * n))
        values = torch.cat([b.values[int(b.offsets[s]) : int(b.offsets[e])].long()
                            for b, s, e in spans])
        lengths = torch.cat([b.lengths()[s:e].long() for b, s, e in spans])
        weights = None
        if any(b.weights is not None for b in batches):
            dtype = functools.reduce(  # the weights' common dtype, as torch.cat gives
                torch.promote_types, [b.weights.dtype for b in batches if b.weights is not None])
            weights = torch.cat([
                b.weights[int(b.offsets[s]) : int(b.offsets[e])].to(dtype)
                if b.weights is not None
                else torch.ones(int(b.offsets[e] - b.offsets[s]), dtype=dtype, device=b.device)
                for b, s, e in spans
            ])
        return cls(keys, values, lengths=lengths, weights=weights)

    def to_dict(self) -> dict[str, Bags]:
        """``{key: kb[key]}`` for every feature."""
        return {k: self[k] for k in self._keys}

    def to(self, device: torch.device | str) -> KeyedBags:
        """The same batch on ``device`` (this object if nothing moves)."""
        device = torch.device(device)
        if self.values.device == device:
            return self
        weights = None if self.weights is None else self.weights.to(device)
        inverse = None if self.inverse_indices is None else self.inverse_indices.to(device)
        moved = KeyedBags.from_checked(self._keys, self.values.to(device),
                                       self.offsets.to(device), weights,
                                       stride_per_key_per_rank=self._strides,
                                       inverse_indices=inverse, inverse_keys=self._inverse_keys)
        if self._known_bounds() is not None or on_host(self.offsets):  # known without a sync
            moved._keep_bounds(self._key_bounds())
        return moved

    def unweighted(self) -> KeyedBags:
        """The same bags without weights (this object if it has none; tensors shared).

        Examples
        --------
        >>> kb = KeyedBags(["a"], torch.tensor([1, 2]), lengths=torch.tensor([2]),
        ...                weights=torch.tensor([0.5, 2.0]))
        >>> kb.unweighted()
        KeyedBags(keys=['a'], batch_size=1, nnz=2, weighted=False)
        """
        if self.weights is None:
            return self
        kb = KeyedBags.from_checked(self._keys, self.values, self.offsets,
                                    stride_per_key_per_rank=self._strides,
                                    inverse_indices=self.inverse_indices,
                                    inverse_keys=self._inverse_keys)
        known = self._known_bounds()
        if known is not None:
            kb._keep_bounds(known)
        return kb

    def __repr__(self) -> str:
        variable = f", stride_per_key={self.stride_per_key()}" if self.variable else ""
        return (
            f"KeyedBags(keys={self._keys}, batch_size={self.batch_size}, "
            f"nnz={self.values.numel()}, weighted={self.weights is not None}{variable})"
        )


def _strides(given: Sequence[Sequence[int]], keys: list[str],
             n_bags: int) -> tuple[tuple[int, ...], ...]:
    """``stride_per_key_per_rank``, checked: one row per key, the same ranks for every key,
    counts >= 0 summing to the batch's ``n_bags``."""
    try:
        rows = tuple(tuple(int(n) for n in r) for r in given)
    except (TypeError, ValueError) as exc:
        raise InputValueError(
            "KeyedBags: stride_per_key_per_rank must be one list of bag counts per key "
            f"(one per rank), e.g. [[2], [4]], got {given!r}."
        ) from exc
    ranks = {len(r) for r in rows}
    if len(rows) != len(keys) or len(ranks) > 1 or 0 in ranks or any(
            n < 0 for r in rows for n in r):
        raise InputValueError(
            f"KeyedBags: stride_per_key_per_rank must be one list of counts >= 0 per key "
            f"({len(keys)} keys), each with one count per rank (the same ranks for every "
            f"key), got {[list(r) for r in rows]}."
        )
    total = sum(sum(r) for r in rows)
    if total != n_bags:
        raise InputValueError(
            f"KeyedBags: stride_per_key_per_rank {[list(r) for r in rows]} says {total} bags, "
            f"but lengths (or offsets) give {n_bags}; give one length per bag of every key."
        )
    return rows


def _version(t: torch.Tensor) -> int:
    """``t``'s version counter (which an in-place change moves on); -1 for an inference
    tensor, which has none."""
    return -1 if t.is_inference() else t._version


def _starts(strides: tuple[tuple[int, ...], ...] | None) -> list[int] | None:
    """Each key's first bag and the end (None when every key has as many bags)."""
    if strides is None or len({sum(r) for r in strides}) <= 1:
        return None
    return [0, *itertools.accumulate(sum(r) for r in strides)]


def _inverse(given: Any, keys: list[str], per_key: list[int],
             device: torch.device) -> tuple[torch.Tensor, list[str] | None]:
    """``inverse_indices``, checked: ``(F, N)`` integers, row ``k`` in ``[0, per_key[k])``;
    or TorchRec's ``(names, rows)``, rows for some keys, taken in ``keys`` order. Returns the
    rows and the keys they are for (``None``: every key)."""
    names: list[str] | None = None
    if isinstance(given, tuple) and len(given) == 2 and not isinstance(given[0], torch.Tensor) \
            and all(isinstance(k, str) for k in given[0]):
        names, given = list(given[0]), given[1]
        unknown = [k for k in names if k not in keys]
        if unknown or len(set(names)) != len(names):
            raise InputValueError(
                f"KeyedBags: inverse_indices name keys {names}, "
                + (f"of which {unknown} are not keys of the batch ({keys})" if unknown else
                   "some more than once")
                + "; give (names, rows) with distinct names of keys, one row each."
            )
    inv = given if isinstance(given, torch.Tensor) else torch.as_tensor(np.asarray(given))
    if inv.dtype.is_floating_point or inv.dtype.is_complex or inv.dtype == torch.bool:
        raise InputTypeError(
            f"KeyedBags: inverse_indices must be integers (bag positions), got {inv.dtype}."
        )
    rows = len(keys) if names is None else len(names)
    if inv.dim() != 2 or inv.shape[0] != rows:
        raise InputValueError(
            "KeyedBags: inverse_indices must have shape "
            + (f"(F, N) = ({rows}, N), one row per key" if names is None else
               f"({rows}, N), one row per name {names}")
            + f", got shape {tuple(inv.shape)}."
        )
    inv = inv.to(device)
    if names is None or names == keys:
        names = None
    else:  # the named keys' rows, in keys order
        inv = inv[[names.index(k) for k in keys if k in names]]
        per_key = [n for k, n in zip(keys, per_key, strict=True) if k in names]
        names = [k for k in keys if k in names]
        if len(names) == len(keys):  # every key, named in another order
            keys, names = names, None
        else:
            keys = names
    if on_host(inv) and values_known():  # elsewhere, and in a recorded graph: validate()
        _check_inverse_range(inv, keys, per_key)  # and the lookup
    return inv, names


def _check_inverse_range(inv: torch.Tensor, keys: list[str], per_key: list[int]) -> None:
    """Raise ``InputValueError`` unless row ``k`` of ``inverse_indices`` is in
    ``[0, per_key[k])`` (its key's bags)."""
    if inv.numel() == 0 or inv.is_meta:
        return
    low, high = inv.amin(dim=1).tolist(), inv.amax(dim=1).tolist()
    for k, (lo, hi, n) in enumerate(zip(low, high, per_key, strict=True)):
        if lo < 0 or hi >= n:
            raise InputValueError(
                f"KeyedBags: inverse_indices[{k}] (key {keys[k]!r}) must name bags in "
                f"[0, {n}), the key's bags, got values in [{lo}, {hi}]."
            )


def _check_lengths(lens: torch.Tensor, nnz: int) -> None:
    """Raise ``InputValueError`` unless the bag lengths ``lens`` are >= 0 and sum to ``nnz``
    (a CPU tensor: values read)."""
    if lens.numel() and int(lens.min()) < 0:
        bad = int(torch.nonzero(lens < 0)[0, 0])
        raise InputValueError(
            f"KeyedBags: lengths must be >= 0, got lengths[{bad}] = {int(lens[bad])}."
        )
    total = int(lens.sum())
    if total != nnz:
        raise InputValueError(
            f"KeyedBags: lengths sum to {total} but values holds {nnz} "
            "entries; lengths must give every entry of values to one bag."
        )


def _rebuilt(leaves: list[Any], context: tuple[Any, ...]) -> KeyedBags:
    """A batch from its pytree leaves and context (:func:`_context`; a checked batch's: not
    checked again): ``values, offsets, weights`` and the keys, or for a variable batch per key
    also ``inverse_indices`` and ``(keys, stride_per_key_per_rank, ...)``."""
    if len(leaves) == 3:
        keys = context if not context or isinstance(context[0], str) else context[0]
        return KeyedBags.from_checked(keys, *leaves)
    values, offsets, weights, inverse = leaves
    return KeyedBags.from_checked(context[0], values, offsets, weights,
                                  stride_per_key_per_rank=context[1], inverse_indices=inverse,
                                  inverse_keys=context[3])


def _ordinary(kb: KeyedBags) -> bool:
    """``N`` bags per key, no strides or inverse_indices given: three leaves, the keys."""
    return kb._strides is None and kb.inverse_indices is None


_LEAVES = ("values", "offsets", "weights")
#: the leaves that may be None: whether each is given is part of the context, so that a
#: program exported on an unweighted batch refuses a weighted one (torch.export compares the
#: contexts of a call's batch and the exported one), and the reverse
_OPTIONAL = ("weights", "inverse_indices")


def _context(kb: KeyedBags) -> tuple[Any, ...]:
    """What rebuilds ``kb`` with its leaves, and tells apart the batches one program takes:
    the keys (alone for ``N`` unweighted bags per key), ``("weights",)`` for weighted ones;
    for a variable batch per key ``(keys, stride_per_key_per_rank, given, inverse_keys)``,
    ``given`` the names of the leaves of :data:`_OPTIONAL` that are not None, ``inverse_keys``
    the keys ``inverse_indices`` has rows for (``None``: every key)."""
    given = tuple(n for n in _OPTIONAL if getattr(kb, n) is not None)
    if _ordinary(kb):
        return tuple(kb._keys) if not given else (tuple(kb._keys), given)
    inverse_keys = None if kb._inverse_keys is None else tuple(kb._inverse_keys)
    return tuple(kb._keys), kb._strides, given, inverse_keys


register_node(
    KeyedBags, lambda kb: _LEAVES if _ordinary(kb) else (*_LEAVES, "inverse_indices"),
    _context, lambda leaves, context: _rebuilt(list(leaves), context),
)
