"""``lookuplinear print-ngrams`` / ``nn`` / ``analogies``: a word's subword vectors, and the
words nearest to a word or to an analogy, computed and printed as fastText's do."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Iterator
from typing import Any

import numpy as np

from ._args import positive_int, write_stdout
from .vectors import format_vector, load_vector_model

__all__ = ["add_parser", "nearest", "ngram_vectors", "run", "unit_rows"]

_F32 = np.float32
#: rows compared at once before the exact top-k pass (a vocabulary of millions stays in numpy)
_CHUNK = 65536

_HELP = {
    "print-ngrams": "print each subword of a word and its vector",
    "nn": "print the nearest neighbours of each word read from stdin",
    "analogies": "print the words nearest to A - B + C for each triplet read from stdin",
}
_DESCRIPTION = {
    "print-ngrams": (
        "Print each subword of WORD and its table row, as fastText's print-ngrams does: the "
        "word itself when the model knows it, then its character n-grams (none on a model "
        "trained without them). Values are printed with 5 significant digits, each followed "
        "by a space."),
    "nn": (
        "Read words from stdin (after the prompt 'Query word? ') and print, for each, the K "
        "vocabulary words nearest to it, one 'WORD SIMILARITY' a line, most similar first, as "
        "fastText's nn does: the cosine similarity of the word's vector to each vocabulary "
        "word's vector, the query word left out."),
    "analogies": (
        "Read triplets 'A B C' from stdin (after the prompt 'Query triplet (A - B + C)? ') and "
        "print, for each, the K vocabulary words nearest to A - B + C (each of the three "
        "vectors scaled to length 1 first), one 'WORD SIMILARITY' a line, as fastText's "
        "analogies does; A, B and C are left out."),
}


def add_parser(sub: Any, name: str = "nn") -> argparse.ArgumentParser:
    """``print-ngrams``, ``nn`` or ``analogies``."""
    p: argparse.ArgumentParser = sub.add_parser(name, help=_HELP[name],
                                                description=_DESCRIPTION[name])
    p.add_argument("model", metavar="MODEL", help="model file written by `lookuplinear train` "
                   "or by fastText")
    if name == "print-ngrams":
        p.add_argument("word", metavar="WORD", help="the word whose subwords to print")
    else:
        p.add_argument("k", metavar="K", type=_every_or_positive if name == "nn" else positive_int,
                       nargs="?", default=10,
                       help="neighbours printed per query (default 10, as fastText"
                       + ("; -1: every word, as fastText's nn)" if name == "nn" else ")"))
    return p


def _every_or_positive(text: str) -> int:
    """``nn``'s ``K``: a positive integer, or -1 for every word of the vocabulary (fastText's
    ``getNN`` then never drops a candidate)."""
    return -1 if text.strip() == "-1" else positive_int(text)


def ngram_vectors(model: Any, word: str) -> list[tuple[str, np.ndarray]]:
    """The subwords of ``word`` and their table rows (float32), in fastText's order: the word
    itself when in the vocabulary, then its character n-grams (``getNgramVectors``). A
    lookuplinear model's n-grams are its vectorizer's (scikit-learn's ``char_wb`` n-grams,
    spaces marking the word's ends)."""
    from ..sklearn._fasttext_bin import FastTextModel

    if isinstance(model, FastTextModel):
        ids, names = model.subwords(word)
        table = model.input_matrix
        zero = np.zeros(table.shape[1], _F32)
        # fastText pairs the i-th row with the i-th string (a pruned n-gram has no row)
        return [(names[i], table[r] if r < len(table) else zero) for i, r in enumerate(ids)]
    return _lookuplinear_ngrams(model, word)


def _lookuplinear_ngrams(model: Any, word: str) -> list[tuple[str, np.ndarray]]:
    import scipy.sparse as sp

    from ..text._features import _char_wb_ngrams, keep_buckets

    vec = model.vectorizer
    vocabulary: dict[str, int] = vec.vocabulary_
    key = word.lower() if getattr(vec, "lowercase", False) else word
    found: list[tuple[str, int]] = []
    if key in vocabulary:
        found.append((word, vocabulary[key]))
    maxn = getattr(vec, "maxn", 0)
    if maxn > 0:
        from sklearn.feature_extraction import FeatureHasher

        grams = _char_wb_ngrams([key], max(vec.minn, 1), maxn)  # minn 0 is 1, as fastText's
        hasher = FeatureHasher(n_features=vec.bucket, input_type="string",
                               alternate_sign=False)
        buckets = hasher.transform([[g] for g in grams]).indices.tolist() if grams else []
        found += [(gram, len(vocabulary) + b) for gram, b in zip(grams, buckets, strict=True)]
    if not found:
        return []
    cols = [c for _, c in found]
    X = sp.csr_matrix((np.ones(len(cols), _F32), (np.arange(len(cols)), cols)),
                      shape=(len(cols), len(vocabulary) + (vec.bucket if vec._hashed() else 0)))
    kept = getattr(vec, "buckets_", None)
    if kept is not None:  # a pruned vectorizer: the n-grams of the buckets it keeps
        X = keep_buckets(X, len(vocabulary), kept)
    at = np.flatnonzero(np.diff(X.indptr))  # the subwords with a column
    if not at.size:
        return []
    rows = model._hidden(X[at], "print-ngrams")
    return [(found[i][0], rows[j]) for j, i in enumerate(at.tolist())]


def _vocabulary(model: Any) -> list[str]:
    """The vocabulary's words in the order fastText scans them (the dictionary's, or the
    vectorizer's columns)."""
    from ..sklearn._fasttext_bin import FastTextModel, as_text

    if isinstance(model, FastTextModel):
        return [as_text(w) for w in model.words[:model.n_words]]
    vocabulary: dict[str, int] = model.vectorizer.vocabulary_
    return sorted(vocabulary, key=vocabulary.__getitem__)


def unit_rows(vectors: np.ndarray) -> np.ndarray:
    """``precomputeWordVectors``: each row times ``1.0 / norm`` (a float32 factor), zero rows
    kept zero."""
    from ..sklearn._fasttext_bin import _norms

    norms = _norms(vectors)
    scale = np.zeros(len(vectors), _F32)
    has = norms > 0
    scale[has] = (1.0 / norms[has].astype(np.float64)).astype(_F32)
    return (vectors * scale[:, None]).astype(_F32)


def nearest(columns: list[np.ndarray], words: list[str], query: np.ndarray, k: int,
            banned: set[str]) -> list[tuple[float, str]]:
    """fastText's ``getNN``: the ``k`` best (similarity, word) of the unit rows (given as
    ``columns``, one array per dimension), best first, the ``banned`` words left out; each
    similarity is the dot product (added in order in float32) over the query's norm, and
    equal ones come out in fastText's order (its heap, step for step)."""
    from ..sklearn._fasttext_bin import _norms, _pop_heap, _push_heap, _sort_heap

    qnorm = _norms(query[None, :])[0]
    if abs(float(qnorm)) < 1e-8:
        qnorm = _F32(1)
    heap: list[tuple[float, int]] = []
    n = len(words)
    for start in range(0, n, _CHUNK):
        stop = min(n, start + _CHUNK)
        dp = np.zeros(stop - start, _F32)
        for j, col in enumerate(columns):
            dp += col[start:stop] * query[j]
        sims = dp / qnorm
        if len(heap) == k:  # the heap's smallest only grows: fewer can enter, none leaves
            candidates = np.flatnonzero(sims >= heap[0][0])
        else:
            candidates = np.arange(stop - start)
        for i in candidates.tolist():
            if words[start + i] in banned:
                continue
            s = float(sims[i])
            if len(heap) == k and s < heap[0][0]:
                continue
            _push_heap(heap, (s, start + i))
            if len(heap) > k:
                _pop_heap(heap)
                heap.pop()
    _sort_heap(heap)
    return [(s, words[i]) for s, i in heap]


def _tokens(errors: str) -> Iterator[str]:
    """The words of stdin as C++'s ``cin >> word`` reads them (split at ASCII whitespace), a
    line at a time so that a terminal's queries are answered as they are typed."""
    for line in sys.stdin.buffer:
        for w in line.split():
            yield w.decode("utf-8", errors=errors)


def _predictions(found: list[tuple[float, str]]) -> str:
    """fastText's ``printPredictions``: 'WORD SIMILARITY' lines, the similarity as C++'s
    ``cout`` prints a float by default (6 significant digits, printf's ``%g``)."""
    return "".join(f"{word} {s:g}\n" for s, word in found)


def run(args: argparse.Namespace) -> int:
    from ..errors import InputValueError
    from ..sklearn._fasttext_bin import FastTextModel, _norms

    model = load_vector_model(args)
    try:
        if args.command == "print-ngrams":
            write_stdout("".join(f"{name} {format_vector(v)}\n"
                                 for name, v in ngram_vectors(model, args.word)))
            return 0
        errors = "surrogateescape" if isinstance(model, FastTextModel) else "replace"
        words = _vocabulary(model)
        table = unit_rows(model.word_vectors(words)) if words else np.zeros((0, 0), _F32)
        columns = [np.ascontiguousarray(table[:, j]) for j in range(table.shape[1])]
        tokens = _tokens(errors)
        if args.command == "nn":
            prompt = "Query word? "
            write_stdout(prompt)
            sys.stdout.flush()
            k = len(words) if args.k == -1 else args.k
            for word in tokens:
                query = model.word_vectors([word])[0]
                write_stdout(_predictions(nearest(columns, words, query, k, {word}))
                             + prompt)
                sys.stdout.flush()
            return 0
        prompt = "Query triplet (A - B + C)? "
        write_stdout(f"Loading model {args.model}\n{prompt}")
        sys.stdout.flush()
        while True:
            triplet = [w for _, w in zip(range(3), tokens, strict=False)]
            if len(triplet) < 3:
                if triplet:
                    raise InputValueError(
                        f"the last query has {len(triplet)} word(s) ({' '.join(triplet)}), "
                        "expected a triplet A B C; give three words per query.")
                return 0
            vectors = model.word_vectors(triplet)
            norms = _norms(vectors).astype(np.float64)
            query = np.zeros(vectors.shape[1], _F32)
            for v, nv, sign in zip(vectors, norms, (1.0, -1.0, 1.0), strict=True):
                query += _F32(sign / (nv + 1e-8)) * v  # query.addVector(buffer, ±1/(norm+1e-8))
            found = nearest(columns, words, query, args.k, set(triplet))
            write_stdout(_predictions(found) + prompt)
            sys.stdout.flush()
    except BrokenPipeError:  # `... | head`: the reader left, not an error
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    return 0
