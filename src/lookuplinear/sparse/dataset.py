"""``KeyedBagsDataset``: the rows of a ``KeyedBags`` (and their targets) for ``DataLoader``."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from ..errors import InputValueError
from .keyed import KeyedBags
from .rows import rows_index

__all__ = ["KeyedBagsDataset"]


class KeyedBagsDataset(torch.utils.data.Dataset):
    """The examples of a ``KeyedBags`` and their targets, as a ``torch.utils.data`` Dataset.

    ``dataset[i]`` is example ``i`` as a batch of one: ``(features[[i]], target[[i]])``.
    A ``DataLoader`` with ``collate_fn=KeyedBagsDataset.collate`` reads a whole mini-batch in
    one call (``__getitems__``): ``(features[rows], target[rows])``, the same batch as
    ``KeyedBags.cat`` of those examples, with no loop over rows. Build the features once, with
    ``KeyedBags.from_dataframe`` or ``from_columns``; each batch is then a row selection.

    Parameters
    ----------
    features : KeyedBags
        ``N`` examples' bags.
    target : Tensor or array of shape (N, ...), optional
        One target per example (the labels); ``None`` gives batches of features alone.

    Raises
    ------
    InputValueError
        A target whose first dimension is not ``N``.

    Examples
    --------
    >>> kb = KeyedBags.from_columns({"user": np.array([3, 1, 2]), "tags": [[7, 2], [], [1]]})
    >>> data = KeyedBagsDataset(kb, target=torch.tensor([0.0, 1.0, 1.0]))
    >>> loader = torch.utils.data.DataLoader(data, batch_size=2, shuffle=True,
    ...                                      collate_fn=KeyedBagsDataset.collate)
    >>> [(len(x), y.shape) for x, y in loader]
    [(2, torch.Size([2])), (1, torch.Size([1]))]
    """

    def __init__(self, features: KeyedBags, target: torch.Tensor | np.ndarray | None = None
                 ) -> None:
        self.features = features
        self.target = None if target is None else torch.as_tensor(target)
        if self.target is not None and (
                self.target.dim() == 0 or self.target.shape[0] != len(features)):
            raise InputValueError(
                f"KeyedBagsDataset: target must hold one value per example, shape "
                f"({len(features)}, ...), got shape {tuple(self.target.shape)}."
            )

    def __len__(self) -> int:
        return len(self.features)

    def __getitem__(self, i: int) -> Any:
        return self.__getitems__([i])

    def __getitems__(self, rows: Sequence[int]) -> Any:
        """The examples ``rows`` as one batch: ``features[rows]`` (and ``target[rows]``)."""
        picked = rows_index("KeyedBagsDataset", list(rows), len(self.features),
                            self.features.device)
        x = self.features[picked]
        return x if self.target is None else (
            x, self.target.index_select(0, picked.to(self.target.device)))

    @staticmethod
    def collate(batch: Any) -> Any:
        """A ``DataLoader``'s ``collate_fn``: a batch read by ``__getitems__`` as it is, or a
        list of single examples joined with ``KeyedBags.cat`` (and ``torch.cat``)."""
        if not isinstance(batch, list):
            return batch
        if isinstance(batch[0], KeyedBags):
            return KeyedBags.cat(batch)
        xs, ys = zip(*batch, strict=True)
        return KeyedBags.cat(xs), torch.cat(ys)
