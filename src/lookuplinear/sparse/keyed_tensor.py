"""``KeyedTensor``: the output of a collection, one dense block per feature (TorchRec's)."""

from __future__ import annotations

from collections.abc import Sequence
from itertools import accumulate, pairwise

import torch

from ..errors import InputValueError
from .pytree import register_node

__all__ = ["KeyedTensor"]


class KeyedTensor:
    """The pooled outputs of several features side by side: TorchRec's ``KeyedTensor``.

    ``values()`` is one ``(N, sum of dims)`` tensor, the features' outputs concatenated in
    ``keys()`` order; ``kt[key]`` is a feature's ``(N, dim)`` slice (a view) and ``to_dict()``
    all of them.

    Examples
    --------
    >>> kt = KeyedTensor(["a", "b"], [2, 1], torch.arange(6.0).reshape(2, 3))
    >>> kt["b"]
    tensor([[2.],
            [5.]])
    """

    __slots__ = ("_keys", "_lengths", "_starts", "_values")

    def __init__(self, keys: Sequence[str], length_per_key: Sequence[int],
                 values: torch.Tensor) -> None:
        self._keys = list(keys)
        self._lengths = list(map(int, length_per_key))
        if len(self._lengths) != len(self._keys):
            raise InputValueError(
                f"KeyedTensor: one width per key; got {len(self._lengths)} widths "
                f"(length_per_key) for {len(self._keys)} keys {self._keys}."
            )
        starts = [0, *accumulate(self._lengths)]
        self._starts = dict(zip(self._keys, pairwise(starts), strict=True))
        self._values = values

    def keys(self) -> list[str]:
        return list(self._keys)

    def values(self) -> torch.Tensor:
        """The ``(N, sum of dims)`` tensor."""
        return self._values

    def length_per_key(self) -> list[int]:
        """Each feature's output width (its table's ``embedding_dim``)."""
        return list(self._lengths)

    def __getitem__(self, key: str) -> torch.Tensor:
        if key not in self._starts:
            raise KeyError(f"KeyedTensor has no key {key!r}; its keys are {self._keys}.")
        a, b = self._starts[key]
        return self._values[:, a:b]

    def to_dict(self) -> dict[str, torch.Tensor]:
        return {k: self[k] for k in self._keys}

    def __repr__(self) -> str:
        return f"KeyedTensor(keys={self._keys}, values={tuple(self._values.shape)})"


register_node(
    KeyedTensor, ("_values",), lambda kt: (tuple(kt._keys), tuple(kt._lengths)),
    lambda leaves, context: KeyedTensor(context[0], context[1], *leaves),
)
