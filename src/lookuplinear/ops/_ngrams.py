"""Word and word n-gram counts of tokenized texts, n-grams hashed as scikit-learn hashes them.

scikit-learn's ``HashingVectorizer(ngram_range=(2, n), alternate_sign=False, norm=None)`` joins
the words of each n-gram with a space and puts it in column ``abs(h) % n_features``, where ``h``
is the signed 32-bit MurmurHash3 (x86, seed 0) of its UTF-8 bytes (``FeatureHasher``'s
``_hashing_fast.transform``). A lone surrogate (``"\\ud800"``, which strict UTF-8 cannot encode
and scikit-learn's hashing refuses) is taken as its three ``"surrogatepass"`` bytes, as
:func:`~lookuplinear.hash_ids` hashes it and as fastText reads those bytes in a file.
:func:`count_matrix` streams the bytes of the n-gram's words, and the spaces between them,
through the same MurmurHash3 in C (``csrc/ngrams.c``): the same column for
every n-gram, without building its string (the operator ``lookuplinear::count_rows``).
Joining and hashing the strings in Python would be most of the time of
``FastTextVectorizer.fit_transform`` (benchmarks/bench_text.py).

Where the C++ operators are not built (or with the ``torch`` backend) the same matrix is
computed by their twin (:func:`count_rows_twin`): each n-gram's string built in Python and all
of them hashed at once by the torch-op MurmurHash3
(:func:`~lookuplinear.ops._hashing.murmur3_segments`); the tests hold both to
``HashingVectorizer``.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from itertools import chain, count
from typing import TYPE_CHECKING, NamedTuple

import numpy as np
import torch

from ._backend import use_c
from ._hashing import murmur3_bytes as murmur
from ._hashing import murmur3_segments, ngram_bucket

if TYPE_CHECKING:
    import scipy.sparse as sp

__all__ = ["Tokens", "bucket", "count_matrix", "count_rows_twin", "murmur", "ngram_column",
           "renumber_twin", "token_ids"]

_INT32_MIN = -(2**31)


class Tokens(NamedTuple):
    """Tokenized texts as integers: ``unique[ids[k]]`` is token ``k`` of the concatenated
    texts, and text ``i``'s tokens are ``ids[doc_ptr[i]:doc_ptr[i + 1]]``."""

    ids: np.ndarray  # int64, one per token
    doc_ptr: np.ndarray  # int64, n_texts + 1
    unique: list[str]  # each distinct token once, in order of first occurrence


def token_ids(tokens: Iterable[list[str]]) -> Tokens:
    """The :class:`Tokens` of each text's token list, taken one at a time.

    One pass of dict lookups in C: ``setdefault`` gives each token the position of its first
    occurrence, which :func:`_renumber` turns into ``0, 1, ...`` in the same order. Each list
    is dropped once read, so a generator of them keeps one text's tokens alive at a time and
    does not wake Python's garbage collector, as a list of every text's list would: a full
    collection inside a larger program costs a large part of the time (benchmarks/bench_text.py).

    Examples
    --------
    >>> t = token_ids([["a", "b", "a"], [], ["c", "b"]])
    >>> t.ids.tolist(), t.doc_ptr.tolist(), t.unique
    ([0, 1, 0, 2, 1], [0, 3, 3, 5], ['a', 'b', 'c'])
    """
    lengths: list[int] = []

    def each() -> Iterator[list[str]]:
        for words in tokens:
            lengths.append(len(words))
            yield words

    first: dict[str, int] = {}
    ids = np.fromiter(map(first.setdefault, chain.from_iterable(each()), count()), np.int64)
    _renumber(ids)
    doc_ptr = np.zeros(len(lengths) + 1, np.int64)
    np.cumsum(lengths, out=doc_ptr[1:])
    return Tokens(ids, doc_ptr, list(first))


def _renumber(ids: np.ndarray) -> None:
    """``ids[k]``, the position of the first occurrence of token ``k``'s string, becomes that
    string's number in order of first occurrence, in place (the operator
    ``lookuplinear::renumber_ids``: one pass in C)."""
    if use_c():
        torch.ops.lookuplinear.renumber_ids.default(torch.from_numpy(ids))
    else:
        renumber_twin(torch.from_numpy(ids))


def renumber_twin(ids: torch.Tensor) -> None:
    """``lookuplinear::renumber_ids`` with torch ops: ``ids[k]``, the position of the first
    occurrence of token ``k``'s string, becomes that string's number, in place."""
    first = ids == torch.arange(ids.numel())  # a string's first occurrence: ids[k] == k
    number = torch.cumsum(first, 0) - 1
    ids.copy_(number[ids])


def count_matrix(tokens: Tokens, column: np.ndarray, word_ngrams: int, bucket: int,
                 n_words: int, n_columns: int) -> sp.csr_matrix:
    """Counts of each text's words and hashed word n-grams, a canonical float32 CSR matrix.

    Dense equivalent: ``X[i, column[t]]`` counts token ``t`` in text ``i`` (tokens with
    ``column[t] < 0`` are not counted as words, but are part of n-grams), and
    ``X[i, n_words + ngram_column(g, bucket)]`` counts each of its word n-grams ``g``,
    ``2 <= len(g) <= word_ngrams``, the space-joined string scikit-learn's word analyzer makes.

    Parameters
    ----------
    tokens : Tokens
        The tokenized texts.
    column : numpy.ndarray
        int64, one per ``tokens.unique``: the word's column, or -1.
    word_ngrams : int
        Longest word n-gram; 1: words only.
    bucket : int
        Hash buckets of the n-grams, after the ``n_words`` word columns.
    n_words : int
        Word columns, the first of the matrix.
    n_columns : int
        The matrix's width: at least ``n_words + bucket`` with n-grams, ``n_words`` without.

    Returns
    -------
    scipy.sparse.csr_matrix
        ``(n_texts, n_columns)``, each row's columns sorted and each once.

    Examples
    --------
    >>> t = token_ids([["a", "b", "a"], ["b"]])
    >>> X = count_matrix(t, np.array([0, 1]), 2, 10, 2, 12)
    >>> X.toarray()[:, :2].tolist(), X.sum(axis=1).tolist()  # 2 words + 2 bigrams, 1 word
    ([[2.0, 1.0], [0.0, 1.0]], [[5.0], [1.0]])
    """
    index_dtype = torch.int32 if n_columns <= np.iinfo(np.int32).max else torch.int64
    encoded = [w.encode("utf-8", "surrogatepass") for w in tokens.unique]
    starts = np.zeros(len(encoded) + 1, np.int64)
    np.cumsum(np.fromiter(map(len, encoded), np.int64, len(encoded)), out=starts[1:])
    joined = bytearray().join(encoded)  # writable: a tensor over it without a copy or a warning
    text = (torch.frombuffer(joined, dtype=torch.uint8) if joined
            else torch.empty(0, dtype=torch.uint8))
    operands = (torch.from_numpy(np.ascontiguousarray(tokens.ids, np.int64)),
                torch.from_numpy(np.ascontiguousarray(tokens.doc_ptr, np.int64)),
                torch.from_numpy(np.ascontiguousarray(column, np.int64)), text,
                torch.from_numpy(starts), word_ngrams, bucket, n_words, index_dtype)
    count_rows = torch.ops.lookuplinear.count_rows.default if use_c() else count_rows_twin
    indptr, indices, data = count_rows(*operands)
    import scipy.sparse as sp

    return sp.csr_matrix((data.numpy(), indices.numpy(), indptr.numpy()),
                         shape=(len(tokens.doc_ptr) - 1, n_columns))


def count_rows_twin(ids: torch.Tensor, doc_ptr: torch.Tensor, column: torch.Tensor,
                    text: torch.Tensor, starts: torch.Tensor, word_ngrams: int, buckets: int,
                    n_words: int, index_dtype: torch.dtype
                    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``lookuplinear::count_rows`` in Python: the CSR arrays ``(indptr, indices, data)`` of
    :func:`count_matrix` (text ``d``'s tokens ``ids[doc_ptr[d]:doc_ptr[d + 1]]``, token ``t``'s
    UTF-8 bytes ``text[starts[t]:starts[t + 1]]``), each n-gram's string built and all of them
    hashed at once (:func:`~lookuplinear.ops._hashing.murmur3_segments`)."""
    ids_, doc, col, bounds = ids.numpy(), doc_ptr.numpy(), column.numpy(), starts.numpy()
    raw = text.numpy().tobytes()
    words = [raw[bounds[t]:bounds[t + 1]] for t in range(bounds.size - 1)]
    n_docs = doc.size - 1
    # the words: one entry per token with a column
    word_rows = np.repeat(np.arange(n_docs, dtype=np.int64), np.diff(doc))
    word_cols = col[ids_[doc[0]:doc[-1]]] if n_docs else np.zeros(0, np.int64)
    counted = word_cols >= 0
    gram_rows: list[int] = []
    grams: list[bytes] = []
    for d in range(n_docs):
        text_words = [words[t] for t in ids_[doc[d]:doc[d + 1]].tolist()]
        for n in range(2, word_ngrams + 1):
            found = [b" ".join(text_words[i:i + n]) for i in range(len(text_words) - n + 1)]
            grams += found
            gram_rows += [d] * len(found)
    gram_cols = np.zeros(0, np.int64)
    if grams:
        lengths = np.fromiter(map(len, grams), np.int64, len(grams))
        bounds = np.zeros(len(grams) + 1, np.int64)
        np.cumsum(lengths, out=bounds[1:])
        data = torch.frombuffer(bytearray().join(grams) or bytearray(1), dtype=torch.uint8)
        hashes = murmur3_segments(data, torch.from_numpy(bounds))
        gram_cols = n_words + ngram_bucket(hashes, buckets).numpy()
    r = np.concatenate([word_rows[counted], np.array(gram_rows, np.int64)])
    c = np.concatenate([word_cols[counted], gram_cols])
    order = np.lexsort((c, r))  # by row, then column
    r, c = r[order], c[order]
    new = np.ones(r.size, bool)  # the first of each (row, column)
    new[1:] = (r[1:] != r[:-1]) | (c[1:] != c[:-1])
    first = np.flatnonzero(new)
    indptr = np.zeros(n_docs + 1, np.int64)
    np.cumsum(np.bincount(r[first], minlength=n_docs), out=indptr[1:])
    counts = np.diff(np.append(first, r.size)).astype(np.float32)  # the repeats of each
    return (torch.from_numpy(indptr), torch.from_numpy(c[first]).to(index_dtype),
            torch.from_numpy(counts))


def bucket(h: int, n: int) -> int:
    """``FeatureHasher``'s column of the signed 32-bit hash ``h`` among ``n``: ``abs(h) % n``,
    with ``abs(-2**31)`` taken as ``2**31`` the way scikit-learn defines it (of many at once:
    :func:`~lookuplinear.ops._hashing.ngram_bucket`, the operator ``lookuplinear::ngram_bucket``).

    Examples
    --------
    >>> bucket(-7, 5), bucket(-(2**31), 10)
    (2, 8)
    """
    return (2**31 if h == _INT32_MIN else abs(h)) % n


def ngram_column(words: list[str], n_buckets: int) -> int:
    """The bucket of one n-gram ``" ".join(words)`` among ``n_buckets`` (for tests).

    Examples
    --------
    >>> ngram_column(["a", "b"], 1000) == bucket(murmur(b"a b"), 1000)
    True
    """
    return bucket(murmur(" ".join(words).encode("utf-8", "surrogatepass")), n_buckets)
