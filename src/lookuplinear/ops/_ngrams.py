"""Word and word n-gram counts of tokenized texts, n-grams hashed as scikit-learn hashes them.

scikit-learn's ``HashingVectorizer(ngram_range=(2, n), alternate_sign=False, norm=None)`` joins
the words of each n-gram with a space and puts it in column ``abs(h) % n_features``, where ``h``
is the signed 32-bit MurmurHash3 (x86, seed 0) of its UTF-8 bytes (``FeatureHasher``'s
``_hashing_fast.transform``). :func:`count_matrix` streams the bytes of the n-gram's words, and
the spaces between them, through the same MurmurHash3 in C (``csrc/ngrams.c``): the same column for
every n-gram, without building its string. Joining and hashing the strings in Python would be
most of the time of ``FastTextVectorizer.fit_transform`` (benchmarks/bench_text.py).

Where the C library is not built (or with the ``torch`` backend) the same matrix is computed in
Python, each n-gram string hashed by scikit-learn's own ``murmurhash3_32`` (text features need
the ``[sklearn]`` extra, so it is there); the tests hold both to ``HashingVectorizer``.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from itertools import chain, count
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np

from ._backend import use_c
from ._clib import function
from ._hashing import murmur3_bytes as murmur

if TYPE_CHECKING:
    import scipy.sparse as sp

__all__ = ["Tokens", "bucket", "count_matrix", "murmur", "ngram_column", "token_ids"]

_INT32_MIN = -(2**31)


class Tokens(NamedTuple):
    """Tokenized texts as integers: ``unique[ids[k]]`` is token ``k`` of the concatenated
    texts, and text ``i``'s tokens are ``ids[doc_ptr[i]:doc_ptr[i + 1]]``."""

    ids: np.ndarray  # int64, one per token
    doc_ptr: np.ndarray  # int64, n_texts + 1
    unique: list[str]  # each distinct token once, in order of first occurrence


def _at(a: np.ndarray) -> int:
    """The address of a C-contiguous numpy array's first element."""
    address: int = a.__array_interface__["data"][0]
    return address


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
    string's number in order of first occurrence, in place (``ll_renumber_ids``: one pass)."""
    if use_c():
        function("ll_renumber_ids")(_at(ids), ids.size)
        return
    first = ids == np.arange(ids.size)  # a string's first occurrence: ids[k] == k
    number = np.cumsum(first) - 1
    ids[:] = number[ids]


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
    size = tokens.ids.size * max(word_ngrams, 1)  # at most one word and n-1 n-grams a token
    index_dtype = np.int32 if n_columns <= np.iinfo(np.int32).max else np.int64
    indices: np.ndarray[Any, np.dtype[np.signedinteger[Any]]] = np.empty(size, index_dtype)
    data = np.empty(size, np.float32)
    indptr = np.empty(len(tokens.doc_ptr), np.int64)
    if use_c():
        encoded = [w.encode("utf-8") for w in tokens.unique]
        starts = np.zeros(len(encoded) + 1, np.int64)
        np.cumsum(np.fromiter(map(len, encoded), np.int64, len(encoded)), out=starts[1:])
        text = np.frombuffer(b"".join(encoded) or b"\0", np.uint8)  # a valid address if empty
        ids = np.ascontiguousarray(tokens.ids, np.int64)
        doc_ptr = np.ascontiguousarray(tokens.doc_ptr, np.int64)
        col = np.ascontiguousarray(column, np.int64)
        sfx = "i32" if index_dtype is np.int32 else "i64"
        fn = function("ll_count_rows", sfx)
        nnz = fn(_at(ids), _at(doc_ptr), doc_ptr.size - 1, _at(col), _at(text), _at(starts),
                 word_ngrams, bucket, n_words, _at(indptr), _at(indices), _at(data))
    else:
        nnz = _count_rows_python(tokens, column, word_ngrams, bucket, n_words, indptr, indices,
                                 data)
    import scipy.sparse as sp

    return sp.csr_matrix((data[:nnz], indices[:nnz], indptr),
                         shape=(len(tokens.doc_ptr) - 1, n_columns))


def _count_rows_python(tokens: Tokens, column: np.ndarray, word_ngrams: int, n_buckets: int,
                       n_words: int, indptr: np.ndarray, indices: np.ndarray,
                       data: np.ndarray) -> int:
    """``ll_count_rows`` in Python: the same CSR arrays, each n-gram's string built and hashed
    by scikit-learn's ``murmurhash3_32``. Returns the number of entries."""
    from sklearn.utils import murmurhash3_32

    ids, doc_ptr, unique = tokens.ids, tokens.doc_ptr, tokens.unique
    rows: list[int] = []
    cols: list[int] = []
    for d in range(doc_ptr.size - 1):
        a, b = int(doc_ptr[d]), int(doc_ptr[d + 1])
        words = [unique[t] for t in ids[a:b].tolist()]
        found = [int(c) for c in column[ids[a:b]].tolist() if c >= 0]
        for n in range(2, word_ngrams + 1):
            found += [n_words + bucket(murmurhash3_32(" ".join(words[i:i + n]), seed=0,
                                                      positive=False), n_buckets)
                      for i in range(len(words) - n + 1)]
        rows += [d] * len(found)
        cols += found
    r = np.array(rows, np.int64)
    c = np.array(cols, np.int64)
    order = np.lexsort((c, r))  # by row, then column
    r, c = r[order], c[order]
    new = np.ones(r.size, bool)  # the first of each (row, column)
    new[1:] = (r[1:] != r[:-1]) | (c[1:] != c[:-1])
    starts = np.flatnonzero(new)
    nnz = starts.size
    indices[:nnz] = c[starts]
    data[:nnz] = np.diff(np.append(starts, r.size))  # the repeats of each
    indptr[0] = 0
    np.cumsum(np.bincount(r[starts], minlength=doc_ptr.size - 1), out=indptr[1:])
    return nnz


def bucket(h: int, n: int) -> int:
    """``FeatureHasher``'s column of the signed 32-bit hash ``h`` among ``n``: ``abs(h) % n``,
    with ``abs(-2**31)`` taken as ``2**31`` the way scikit-learn defines it
    (``ll_ngram_bucket``).

    Examples
    --------
    >>> bucket(-7, 5), bucket(-(2**31), 10)
    (2, 8)
    """
    if use_c():
        b: int = function("ll_ngram_bucket")(h, n)
        return b
    return (2**31 if h == _INT32_MIN else abs(h)) % n


def ngram_column(words: list[str], n_buckets: int) -> int:
    """The bucket of one n-gram ``" ".join(words)`` among ``n_buckets`` (for tests).

    Examples
    --------
    >>> ngram_column(["a", "b"], 1000) == bucket(murmur(b"a b"), 1000)
    True
    """
    return bucket(murmur(" ".join(words).encode("utf-8")), n_buckets)
