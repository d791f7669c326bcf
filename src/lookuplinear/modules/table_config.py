"""``TableConfig``: one table of a ``LookupCollection``, what it computes (its rows, width,
pooling, hashing, padding, dtype and where it lives), checked when made."""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from .._sizes import as_size
from ..errors import InputValueError
from ..functional import Mode, check_mode, normalize_padding_idx
from ..ids.hashing import as_hash_rows, qr_stored_rows

__all__ = ["TableConfig"]


@dataclass(frozen=True)
class TableConfig:
    """One table of a :class:`LookupCollection` and the features that look it up.

    TorchRec's ``EmbeddingBagConfig`` under lookuplinear's names: the table behaves as a
    ``LookupLinear(num_embeddings, embedding_dim, bias=False, mode=mode, ...)``.

    Parameters
    ----------
    name : str
        The table's name (its ``state_dict`` key is ``embedding_bags.<name>.weight``).
    num_embeddings : int
        Rows: the size of the features' one-hot dimension (at most ``2**63 - 1`` with
        ``hashing``, whose rows are int64).
    embedding_dim : int
        Output width of each feature that reads the table.
    feature_names : sequence of str
        The features (keys of a :class:`KeyedBags`) looked up in this table; several features
        may share one table, and a feature may be in several tables (each pools it: outputs
        ``feature@table``, TorchRec's names).
    mode : {"sum", "mean", "sqrtn", "max"}, default "sum"
        How each bag is pooled.
    padding_idx : int, optional
        An index that contributes nothing and gets no gradient (its row starts at zero).
    init : {"normal", "linear"} or callable, default "normal"
        As :class:`~lookuplinear.LookupLinear`'s ``init``; ``"normal"`` is ``nn.Embedding``'s.
    hashing : {None, "mod", "qr"}, default None
        ``None``: IDs are row indices, each in ``[0, num_embeddings)``. ``"mod"``: any int64 ID
        (negative or huge too) reads row ``h = hash_ids(id, num_embeddings)``
        (:func:`~lookuplinear.hash_ids`, MurmurHash3 as scikit-learn's ``HashingVectorizer``);
        the dense equivalent is ``nn.Linear`` on the hashed one-hot ``one_hot(id) @ H``.
        ``"qr"``: the quotient-remainder trick (Shi et al., KDD 2020): row ``h`` is
        ``Q[h // m] + R[h % m]`` with ``m = qr_buckets`` remainder rows and
        ``ceil(num_embeddings / m)`` quotient rows, stored one after the other: about
        ``2 * sqrt(num_embeddings)`` rows instead of ``num_embeddings``. Its dense equivalent is
        ``nn.Linear`` on the multi-hot of each ID's two stored rows. No ``padding_idx`` with
        hashing, and no ``mode="max"`` with ``"qr"``.
    qr_buckets : int, optional
        ``m``, the remainder rows of ``hashing="qr"`` (default ``ceil(sqrt(num_embeddings))``).
    fallback_rows, admit_after : int, optional
        ``hashing="map"``: a managed, collision-free :class:`~lookuplinear.IdMap` gives each
        int64 ID its own row on first sight (after ``admit_after`` sightings, default 1), up
        to ``num_embeddings - fallback_rows`` IDs (``fallback_rows`` default 1), then takes the
        least recently used ID's row, re-drawn as ``init`` says and with fresh optimizer state
        (:mod:`lookuplinear.optim`); IDs without a row share the fallback rows. The map is in
        the collection's ``state_dict``. In eval mode nothing is added.
    key_type : {"int", "str"}, default "int"
        ``hashing="map"``: the IDs the table's ``IdMap`` holds. A ``"str"`` table reads string
        IDs (a list, numpy array or pandas column of str) in a ``{feature: IDs}`` dict.
    dtype : torch.dtype, optional
        The table's dtype (default: torch's default dtype).
    storage : path, optional
        Keep this table and its optimizer state in memory-mapped files of a directory at this
        path (:class:`~lookuplinear.TableStorage`, as ``LookupLinear(..., storage=)``): rows
        drawn lazily from ``(seed, row)``, a table larger than memory. A path that holds a
        table of this shape, ``init``, ``padding_idx`` and ``mode`` is opened (writable) and
        goes on from its values (one made with others is refused); a new path is created.
        CPU only; ``init`` ``"normal"`` or ``"linear"``.

    Examples
    --------
    >>> TableConfig("ids", 1000, 8, ["user", "friend"]).feature_names
    ('user', 'friend')
    """

    name: str
    num_embeddings: int
    embedding_dim: int
    feature_names: Sequence[str]
    mode: Mode = "sum"
    padding_idx: int | None = None
    init: str | Callable[[torch.Tensor], Any] = field(default="normal", compare=False)
    hashing: str | None = None
    dtype: torch.dtype | None = None
    qr_buckets: int | None = None
    fallback_rows: int | None = None
    admit_after: int | None = None
    storage: str | os.PathLike[str] | None = field(default=None, compare=False)
    key_type: str = "int"

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name or "." in self.name:
            raise InputValueError(
                f"TableConfig: name must be a non-empty string without '.', got {self.name!r}."
            )
        where = f"TableConfig {self.name!r}"
        for key in ("num_embeddings", "embedding_dim"):
            object.__setattr__(self, key, as_size(getattr(self, key), key, where=where))
        names = (self.feature_names,) if isinstance(self.feature_names, str) else tuple(
            self.feature_names)
        if not names or not all(isinstance(f, str) for f in names):
            raise InputValueError(
                f"TableConfig {self.name!r}: feature_names must be a non-empty sequence of "
                f"strings, got {self.feature_names!r}."
            )
        object.__setattr__(self, "feature_names", names)
        check_mode(self.mode)
        object.__setattr__(self, "padding_idx",
                           normalize_padding_idx(self.padding_idx, self.num_embeddings,
                                                 "num_embeddings"))
        if not (self.init in ("normal", "linear") or callable(self.init)):
            raise InputValueError(
                f"TableConfig {self.name!r}: init must be 'normal', 'linear' or a callable, "
                f"got {self.init!r}."
            )
        if self.storage is not None and self.init not in ("normal", "linear"):
            raise InputValueError(
                f"TableConfig {self.name!r}: storage= draws each row on its first lookup from "
                f"(seed, row), so init must be 'normal' or 'linear', got {self.init!r}."
            )
        if self.hashing not in (None, "mod", "qr", "map"):
            raise InputValueError(
                f"TableConfig {self.name!r}: hashing must be None, 'mod', 'qr' or 'map', got "
                f"{self.hashing!r}."
            )
        if self.hashing is not None:  # IDs hash (or fall back) into int64 rows
            as_hash_rows(self.num_embeddings, "num_embeddings", where=where)
        for key in ("fallback_rows", "admit_after"):
            if getattr(self, key) is not None:
                object.__setattr__(self, key, as_size(getattr(self, key), key, where=where))
        if self.hashing == "map":  # what the table's IdMap takes, named by the table
            fallback = 1 if self.fallback_rows is None else self.fallback_rows
            if self.key_type not in ("int", "str"):
                raise InputValueError(
                    f"TableConfig {self.name!r}: key_type must be 'int' or 'str' (the IDs its "
                    f"IdMap holds), got {self.key_type!r}."
                )
            if self.num_embeddings <= fallback:
                raise InputValueError(
                    f"TableConfig {self.name!r}: num_embeddings={self.num_embeddings} leaves "
                    f"no row for IDs after fallback_rows={fallback} (hashing='map' keeps "
                    "num_embeddings - fallback_rows rows for the IDs it admits). Give the "
                    "table more rows than fallback rows."
                )
        if self.hashing != "map" and (self.fallback_rows, self.admit_after, self.key_type) != (
                None, None, "int"):
            raise InputValueError(
                f"TableConfig {self.name!r}: fallback_rows, admit_after and key_type are for "
                f"hashing='map', got hashing={self.hashing!r}."
            )
        if self.hashing is not None and self.padding_idx is not None:
            raise InputValueError(
                f"TableConfig {self.name!r}: padding_idx={self.padding_idx} with "
                f"hashing={self.hashing!r}: any ID may hash to that row. Drop the padding IDs "
                "from the batch instead (or hashing=None)."
            )
        if self.hashing == "qr":
            if self.mode == "max":
                raise InputValueError(
                    f"TableConfig {self.name!r}: hashing='qr' sums two rows per ID, which a "
                    "max over rows cannot express; use mode 'sum', 'mean' or 'sqrtn'."
                )
            m = self.qr_buckets
            if m is None:
                object.__setattr__(self, "qr_buckets", math.isqrt(self.num_embeddings - 1) + 1)
            else:
                object.__setattr__(self, "qr_buckets", as_size(m, "qr_buckets", where=where))
        elif self.qr_buckets is not None:
            raise InputValueError(
                f"TableConfig {self.name!r}: qr_buckets is for hashing='qr', got "
                f"hashing={self.hashing!r}."
            )

    @property
    def stored_rows(self) -> int:
        """The rows the table holds: ``num_embeddings``, or with ``hashing="qr"`` the
        quotient rows plus ``qr_buckets`` remainder rows.

        Examples
        --------
        >>> TableConfig("ids", 1_000_000, 16, ["user"], hashing="qr").stored_rows
        2000
        """
        if self.hashing != "qr":
            return self.num_embeddings
        return qr_stored_rows(self.num_embeddings, int(self.qr_buckets or 1))
