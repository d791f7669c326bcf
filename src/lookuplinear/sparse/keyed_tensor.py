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

    def key_dim(self) -> int:
        """The dimension the keys' outputs are side by side in: 1 (``values()`` is
        ``(N, sum of dims)``), TorchRec's default."""
        return 1

    def offset_per_key(self) -> list[int]:
        """Where each key's columns start in ``values()``, and the total width last:
        ``[0, d0, d0 + d1, ...]`` (TorchRec's ``offset_per_key``)."""
        return [0, *accumulate(self._lengths)]

    def _key_indices(self) -> dict[str, int]:
        """Each key's position in ``keys()``: what TorchRec's ``KeyedTensor.regroup`` reads
        of the keyed tensors it takes, so ours go through it too."""
        return {k: i for i, k in enumerate(self._keys)}

    @staticmethod
    def regroup(keyed_tensors: Sequence[KeyedTensor], groups: Sequence[Sequence[str]]
                ) -> list[torch.Tensor]:
        """One ``(N, sum of the group's dims)`` tensor per group of keys: the keys' outputs
        side by side in the group's order, taken from whichever of ``keyed_tensors`` holds
        the key (the last one where several do), as TorchRec's ``KeyedTensor.regroup``.

        Dense equivalent: ``torch.cat([kt_of[k][k] for k in group], dim=1)`` for each group.

        Raises
        ------
        InputValueError
            A group names a key that none of ``keyed_tensors`` holds.

        Examples
        --------
        >>> a = KeyedTensor(["x", "y"], [1, 2], torch.arange(6.0).reshape(2, 3))
        >>> b = KeyedTensor(["z"], [1], torch.tensor([[10.0], [20.0]]))
        >>> KeyedTensor.regroup([a, b], [["z", "x"], ["y"]])
        [tensor([[10.,  0.],
                [20.,  3.]]), tensor([[1., 2.],
                [4., 5.]])]
        """
        owner: dict[str, KeyedTensor] = {}
        for kt in keyed_tensors:
            owner.update(dict.fromkeys(kt.keys(), kt))  # the last one that holds a key
        parts: list[torch.Tensor] = []
        widths: list[int] = []
        for group in groups:
            width = 0
            for key in group:
                holder = owner.get(key)
                if holder is None:
                    raise InputValueError(
                        f"KeyedTensor.regroup: no keyed tensor holds key {key!r} of group "
                        f"{list(group)}; their keys are {list(owner)}. Name keys they hold."
                    )
                part = holder[key]
                parts.append(part)
                width += part.shape[1]
            widths.append(width)
        if not parts:  # every group empty: each (N, 0), as an empty group beside others is
            values = keyed_tensors[0].values() if keyed_tensors else torch.empty(0, 0)
            return [values.new_empty(values.shape[0], 0) for _ in groups]
        return list(torch.cat(parts, dim=1).split(widths, dim=1))

    @staticmethod
    def regroup_as_dict(keyed_tensors: Sequence[KeyedTensor], groups: Sequence[Sequence[str]],
                        keys: Sequence[str]) -> dict[str, torch.Tensor]:
        """:meth:`regroup`'s tensors by name, ``keys[i]`` the ``i``-th group's (TorchRec's
        ``KeyedTensor.regroup_as_dict``).

        Raises
        ------
        InputValueError
            ``keys`` not one name per group.
        """
        if len(keys) != len(groups):
            raise InputValueError(
                f"KeyedTensor.regroup_as_dict: one name per group; got {len(keys)} keys "
                f"{list(keys)} for {len(groups)} groups. Give as many keys as groups."
            )
        return dict(zip(keys, KeyedTensor.regroup(keyed_tensors, groups), strict=True))

    def __repr__(self) -> str:
        return f"KeyedTensor(keys={self._keys}, values={tuple(self._values.shape)})"


register_node(
    KeyedTensor, ("_values",), lambda kt: (tuple(kt._keys), tuple(kt._lengths)),
    lambda leaves, context: KeyedTensor(context[0], context[1], *leaves),
)
