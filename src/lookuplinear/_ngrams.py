"""Word and word n-gram counts of tokenized texts, n-grams hashed as scikit-learn hashes them.

scikit-learn's ``HashingVectorizer(ngram_range=(2, n), alternate_sign=False, norm=None)`` joins
the words of each n-gram with a space and puts it in column ``abs(h) % n_features``, where ``h``
is the signed 32-bit MurmurHash3 (x86, seed 0) of its UTF-8 bytes (``FeatureHasher``'s
``_hashing_fast.transform``). :func:`count_matrix` streams the bytes of the n-gram's words, and
the spaces between them, through the same MurmurHash3 in compiled code: the same column for
every n-gram, without building its string (tests/test_text_cli.py compares both against
scikit-learn's own hashing). Joining and hashing the strings in Python was most of the time of
``FastTextVectorizer.fit_transform`` (docs/benchmarks.md).

The kernel is compiled by numba on first use and cached on disk, as :mod:`lookuplinear._numba`.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from itertools import chain, count
from typing import Any, NamedTuple

import numpy as np
import scipy.sparse as sp
from numba import njit

__all__ = ["Tokens", "count_matrix", "ngram_column", "token_ids"]

_MASK = 0xFFFFFFFF


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
    does not wake Python's garbage collector, as a list of every text's list did: a full
    collection inside a larger program was a large part of the time (docs/benchmarks.md).
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
    """
    encoded = [w.encode("utf-8") for w in tokens.unique]
    starts = np.zeros(len(encoded) + 1, np.int64)
    np.cumsum(np.fromiter(map(len, encoded), np.int64, len(encoded)), out=starts[1:])
    text = np.frombuffer(b"".join(encoded), np.uint8)
    size = tokens.ids.size * max(word_ngrams, 1)  # at most one word and n-1 n-grams a token
    index_dtype = np.int32 if n_columns <= np.iinfo(np.int32).max else np.int64
    indices: np.ndarray[Any, np.dtype[np.signedinteger[Any]]] = np.empty(size, index_dtype)
    data = np.empty(size, np.float32)
    indptr = np.empty(len(tokens.doc_ptr), np.int64)
    nnz = _count_rows(tokens.ids, tokens.doc_ptr, column, text, starts, word_ngrams, bucket,
                      n_words, indptr, indices, data)
    return sp.csr_matrix((data[:nnz], indices[:nnz], indptr),
                         shape=(len(tokens.doc_ptr) - 1, n_columns))


def ngram_column(words: list[str], bucket: int) -> int:
    """The bucket of one n-gram ``" ".join(words)`` (the kernel's hash, for tests)."""
    text = np.frombuffer(" ".join(words).encode("utf-8"), np.uint8)
    return int(_bucket(_murmur(text), bucket))


# ---------------------------------------------------------------------- kernels
@njit(inline="always")
def _scramble(k: int) -> int:
    """MurmurHash3_x86_32's mix of one 4-byte block (or the tail) before it enters the hash."""
    k = (k * 0xCC9E2D51) & _MASK
    k = ((k << 15) | (k >> 17)) & _MASK
    return (k * 0x1B873593) & _MASK


@njit(inline="always")
def _block(h: int, k: int) -> int:
    """MurmurHash3_x86_32's step for one little-endian 4-byte block ``k``."""
    h ^= _scramble(k)
    h = ((h << 13) | (h >> 19)) & _MASK
    return (h * 5 + 0xE6546B64) & _MASK


@njit(inline="always")
def _finish(h: int, tail: int, n_tail: int, length: int) -> int:
    """The tail (``n_tail`` < 4 bytes in ``tail``) and the final mix: the signed 32-bit hash."""
    if n_tail > 0:
        h ^= _scramble(tail)
    h ^= length
    h ^= h >> 16
    h = (h * 0x85EBCA6B) & _MASK
    h ^= h >> 13
    h = (h * 0xC2B2AE35) & _MASK
    h ^= h >> 16
    return h - (1 << 32) if h >= 1 << 31 else h


@njit(inline="always")
def _bucket(h: int, bucket: int) -> int:
    """``FeatureHasher``'s column of the signed hash ``h``: ``abs(h) % bucket``, with
    ``abs(-2**31)`` taken as ``2**31`` the way scikit-learn defines it."""
    if h == -(1 << 31):
        return (2147483647 - (bucket - 1)) % bucket
    return abs(h) % bucket


@njit(cache=True)
def _murmur(data: np.ndarray) -> int:
    """The signed MurmurHash3_x86_32 (seed 0) of a uint8 array."""
    h, k, n = 0, 0, 0
    for i in range(data.size):
        k |= int(data[i]) << (8 * n)
        n += 1
        if n == 4:
            h, k, n = _block(h, k), 0, 0
    return _finish(h, k, n, data.size)


@njit(cache=True, nogil=True)
def _renumber(ids: np.ndarray) -> None:
    """``ids[k]``, the position of the first occurrence of token ``k``'s string, becomes that
    string's number in order of first occurrence, in place (``ids[k] <= k``: one pass)."""
    number = np.empty(ids.size, np.int64)
    n = 0
    for k in range(ids.size):
        if ids[k] == k:
            number[k] = n
            n += 1
        ids[k] = number[ids[k]]


@njit(cache=True, nogil=True)
def _count_rows(
    ids: np.ndarray,
    doc_ptr: np.ndarray,
    column: np.ndarray,
    text: np.ndarray,
    starts: np.ndarray,
    word_ngrams: int,
    bucket: int,
    n_words: int,
    indptr: np.ndarray,
    indices: np.ndarray,
    data: np.ndarray,
) -> int:
    """The CSR arrays of :func:`count_matrix` written into ``indptr``, ``indices`` and
    ``data`` (long enough); returns the number of entries. Each row's columns are sorted and
    counted once. Token ``t``'s UTF-8 bytes are ``text[starts[t]:starts[t + 1]]``."""
    n_docs = doc_ptr.size - 1
    indptr[0] = 0
    pos = 0
    for d in range(n_docs):
        a, b, first = doc_ptr[d], doc_ptr[d + 1], pos
        for i in range(a, b):
            c = column[ids[i]]
            if c >= 0:
                indices[pos] = c
                pos += 1
        for n in range(2, word_ngrams + 1):
            for i in range(a, b - n + 1):
                h, k, m, length = 0, 0, 0, 0
                for j in range(n):
                    t = ids[i + j]
                    lo = starts[t] - 1 if j > 0 else starts[t]  # -1: the space before it
                    for p in range(lo, starts[t + 1]):
                        byte = 32 if p < starts[t] else int(text[p])
                        k |= byte << (8 * m)
                        m += 1
                        if m == 4:
                            h, k, m = _block(h, k), 0, 0
                    length += starts[t + 1] - lo
                indices[pos] = n_words + _bucket(_finish(h, k, m, length), bucket)
                pos += 1
        # sort the row's columns and count repeats in place
        indices[first:pos].sort()
        out = first
        for i in range(first, pos):
            if i > first and indices[i] == indices[out - 1]:
                data[out - 1] += 1
            else:
                indices[out] = indices[i]
                data[out] = 1
                out += 1
        pos = out
        indptr[d + 1] = pos
    return pos
