"""``Vocab``: tokens to indices and back, the first step before any lookup."""

from __future__ import annotations

import numbers
import string
from collections.abc import Hashable, Iterable, Sequence
from typing import Any

import numpy as np
import torch

from ..errors import InputTypeError, InputValueError, LookupIndexError, UnknownTokenError

__all__ = ["Vocab"]


class Vocab:
    """A mapping between hashable tokens and the indices ``range(len(vocab))``.

    Its indices are what ``LookupLinear(len(vocab), d)`` takes: token ``t`` stands for the
    one-hot vector ``e_{vocab[t]}``.

    Parameters
    ----------
    tokens : iterable of hashable
        Tokens in index order; repeats keep their first index.
    unknown : hashable, optional
        A token added (if absent) whose index every unseen token gets; without it, an unseen
        token raises ``UnknownTokenError`` (a ``KeyError``).
    padding : hashable, optional
        A token added (if absent); ``vocab.padding_idx`` is its index, for ``padding_idx=``.

    Examples
    --------
    >>> v = Vocab.characters()
    >>> len(v), v["a"]
    (100, 10)
    >>> x = v.encode("WTF does nn.Embedding do?")
    >>> x.shape
    torch.Size([25])
    >>> v.decode(x)
    'WTF does nn.Embedding do?'
    """

    def __init__(
        self,
        tokens: Iterable[Hashable],
        *,
        unknown: Hashable | None = None,
        padding: Hashable | None = None,
    ) -> None:
        self._index: dict[Hashable, int] = {}
        self._tokens: list[Hashable] = []
        for t in tokens:
            self._add(t)
        self.unknown = unknown
        self.padding = padding
        self.unknown_idx = None if unknown is None else self._add(unknown)
        self.padding_idx = None if padding is None else self._add(padding)

    def _add(self, token: Hashable) -> int:
        if token not in self._index:
            self._index[token] = len(self._tokens)
            self._tokens.append(token)
        return self._index[token]

    @classmethod
    def characters(
        cls, *, unknown: Hashable | None = None, padding: Hashable | None = None
    ) -> Vocab:
        """The 100 characters of ``string.printable``, in order (index = position), then
        ``unknown`` and ``padding`` when given (as for the constructor).

        Examples
        --------
        >>> Vocab.characters().encode("hi!")
        tensor([17, 18, 62])
        >>> chars = Vocab.characters(unknown="<unk>", padding="<pad>")
        >>> chars.encode("café"), chars.padding_idx
        (tensor([ 12,  10,  15, 100]), 101)
        """
        return cls(string.printable, unknown=unknown, padding=padding)

    def __len__(self) -> int:
        return len(self._tokens)

    def __contains__(self, token: object) -> bool:
        return token in self._index

    def __getitem__(self, token: Hashable) -> int:
        idx = self._index.get(token)
        if idx is not None:
            return idx
        if self.unknown_idx is not None:
            return self.unknown_idx
        raise UnknownTokenError(
            f"token {token!r} is not in the vocabulary ({len(self)} tokens) and no unknown token "
            "was set; build the Vocab with unknown='<unk>' (Vocab(tokens, unknown=...) or "
            "Vocab.characters(unknown=...)) to map unseen tokens."
        )

    def encode(self, tokens: str | Sequence[Hashable]) -> torch.Tensor:
        """Indices of ``tokens`` (a string is a sequence of characters), as a LongTensor.

        Examples
        --------
        >>> Vocab(["the", "cat"], unknown="<unk>").encode(["the", "dog", "cat"])
        tensor([0, 2, 1])

        A tensor or numpy array of integer tokens (raw IDs) is read by its values.
        """
        if isinstance(tokens, torch.Tensor | np.ndarray):
            tokens = tokens.tolist()
        return torch.tensor([self[t] for t in tokens], dtype=torch.long)

    def decode(self, indices: torch.Tensor | Sequence[int]) -> str | list[Hashable]:
        """Tokens of ``indices``; joined into a string when every token is a one-character str.

        Examples
        --------
        >>> Vocab(["the", "cat"]).decode([1, 0])
        ['cat', 'the']
        """
        flat: list[Any] = (
            indices.reshape(-1).tolist() if isinstance(indices, torch.Tensor) and
            indices.dim() == 0 else indices.tolist() if isinstance(indices, torch.Tensor)
            else [indices] if isinstance(indices, numbers.Integral) else list(indices))
        if any(isinstance(i, bool) or not isinstance(i, numbers.Integral | list) for i in flat):
            raise InputTypeError(
                f"decode expects integer indices, got {sorted({type(i).__name__ for i in flat})}"
                "; pass the row indices (a list or an integer tensor)."
            )
        if any(isinstance(i, list) for i in flat):
            raise InputValueError(
                "decode expects a 1-D sequence of indices; decode rows one by one."
            )
        out = []
        for i in flat:
            if not 0 <= i < len(self):
                raise LookupIndexError(f"index {i} is outside the vocabulary [0, {len(self) - 1}].")
            out.append(self._tokens[i])
        if all(isinstance(t, str) and len(t) == 1 for t in out):
            return "".join(str(t) for t in out)
        return out

    def __repr__(self) -> str:
        return f"Vocab({len(self)} tokens, unknown={self.unknown!r}, padding={self.padding!r})"
