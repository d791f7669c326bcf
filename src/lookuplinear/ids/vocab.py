"""``Vocab``: tokens to indices and back, the first step before any lookup."""

from __future__ import annotations

import numbers
import string
from collections.abc import Hashable, Iterable, Iterator, Sequence
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
        if unknown is not None and padding is not None and unknown == padding:
            raise InputValueError(
                f"Vocab: unknown and padding are the same token {unknown!r}: every unseen "
                "token would read the padding row (zero, no gradient). Give two tokens, e.g. "
                "unknown='<unk>', padding='<pad>'."
            )
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

    def __iter__(self) -> Iterator[Hashable]:
        """The tokens in index order (``unknown`` and ``padding`` where they were added), as a
        dict of token to index iterates its tokens.

        Examples
        --------
        >>> list(Vocab(["the", "cat"], unknown="<unk>"))
        ['the', 'cat', '<unk>']
        """
        return iter(self._tokens)

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

        A tensor or numpy array of integer tokens (raw IDs) is read by its values; a 0-d one
        is one token, its index a 0-d tensor (which :meth:`decode` reads as one index). Input
        of more dimensions (a tensor or array of 2 or more, a list of lists) raises
        ``InputValueError``, as :meth:`decode` does: encode its rows one by one.

        Raises
        ------
        InputValueError
            Input of more than one dimension.
        InputTypeError
            A token that is not hashable.
        UnknownTokenError
            A token not in the vocabulary, without ``unknown``.
        """
        if isinstance(tokens, torch.Tensor | np.ndarray):
            if tokens.ndim > 1:
                raise InputValueError(
                    f"encode expects a 1-D sequence of tokens, got a {type(tokens).__name__} "
                    f"of shape {tuple(tokens.shape)}; encode its rows one by one."
                )
            if tokens.ndim == 0:
                return torch.tensor(self[tokens.item()], dtype=torch.long)
            tokens = tokens.tolist()
        try:
            return torch.tensor([self[t] for t in tokens], dtype=torch.long)
        except TypeError:  # an unhashable token: which one, said plainly
            _check_hashable(tokens)
            raise

    def decode(self, indices: torch.Tensor | Sequence[int]) -> str | list[Hashable]:
        """Tokens of ``indices``; joined into a string when every token is a one-character str.

        ``indices`` is a list, tensor or numpy array of integers (an int or a 0-d tensor or
        array is one index); more than one dimension raises ``InputValueError``.

        Examples
        --------
        >>> Vocab(["the", "cat"]).decode([1, 0])
        ['cat', 'the']
        """
        flat: list[Any]
        if isinstance(indices, torch.Tensor | np.ndarray):
            flat = indices.reshape(-1).tolist() if indices.ndim == 0 else indices.tolist()
        else:
            flat = [indices] if isinstance(indices, numbers.Integral) else list(indices)
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


def _check_hashable(tokens: Iterable[Any]) -> None:
    """Raise for the first token of ``tokens`` that is not hashable: ``InputValueError`` for a
    list (a sequence of sequences, not of tokens), ``InputTypeError`` for any other."""
    for i, t in enumerate(tokens):
        try:
            hash(t)
        except TypeError:
            if isinstance(t, list):
                raise InputValueError(
                    f"encode expects a 1-D sequence of tokens, got a list at position {i}; "
                    "encode the rows one by one."
                ) from None
            raise InputTypeError(
                f"encode expects hashable tokens, got {type(t).__name__} {t!r} at position "
                f"{i}; give tokens as str, int or tuple."
            ) from None
