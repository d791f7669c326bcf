"""fastText-style text features as a thin layer over scikit-learn's vectorizers.

fastText represents a text as the bag of its words plus hashed word n-grams and character
n-grams; :class:`FastTextVectorizer` builds that bag as a scipy.sparse count matrix from
scikit-learn's own tokenizer and hash function, so ``LookupClassifier(mode="mean",
hidden=dim)`` on it is fastText's supervised model::

    columns  [0, n_words)                  words seen at least min_count times (CountVectorizer)
             [n_words, n_words + bucket)   word 2..word_ngrams-grams and char minn..maxn-grams,
                                           hashed into one shared space (HashingVectorizer)

Each text is tokenized once, by scikit-learn's tokenizer; the words are counted against the
vocabulary and the word n-grams hashed with the hashing inside ``HashingVectorizer``
(scikit-learn's MurmurHash3 of the space-joined n-gram, streamed through a C kernel without
building the string, :mod:`lookuplinear.ops._ngrams`), the character n-grams by
scikit-learn's ``FeatureHasher``: with the default ``whitespace="unicode"`` the matrix equals
that of ``CountVectorizer(vocabulary=...)``
next to ``HashingVectorizer(ngram_range=(2, word_ngrams), alternate_sign=False, norm=None)``
(plus the ``char_wb`` one), which tokenize the texts again each (tests/test_text_cli.py compares
them).

Requires the ``[sklearn]`` extra.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np
import scipy.sparse as sp
from sklearn.base import BaseEstimator, TransformerMixin
from sklearn.utils.validation import check_is_fitted

from ..errors import InputValueError
from ..ops import Tokens, token_ids
from ._features import TextFeatures, check_buckets, check_params, check_vocabulary, tokenize

__all__ = ["TOKEN_PATTERN", "FastTextVectorizer"]

#: fastText splits on whitespace only: every run of non-space characters is a token
TOKEN_PATTERN = r"\S+"


def _check_documents(raw_documents: Any) -> None:
    """Refuse a single string, which would otherwise be read as one text per character, with
    scikit-learn's vectorizers' message."""
    if isinstance(raw_documents, str):
        raise InputValueError(
            "Iterable over raw text documents expected, string object received. Pass a list "
            "of texts (a single text as [text])."
        )


# auto_wrap_output_keys=None: scikit-learn's set_output machinery (its __init_subclass__, which
# mypy does not see through sklearn's untyped base) leaves transform's sparse matrix as it is
class FastTextVectorizer(  # type: ignore[call-arg]
    TransformerMixin, BaseEstimator, auto_wrap_output_keys=None
):
    """Texts to fastText's bag of words + hashed n-grams, a CSR count matrix.

    Dense equivalent: row ``i`` counts, for text ``i``, each vocabulary word and each hash bucket
    of its word n-grams (``2..word_ngrams``) and character n-grams (``minn..maxn`` within each
    word; fastText marks word ends with ``<`` ``>``, scikit-learn's ``char_wb`` analyzer with
    spaces). Tokens are whitespace-separated, case kept, as in fastText; which characters are
    whitespace is ``whitespace``'s choice.

    Parameters
    ----------
    word_ngrams : int, default 1
        Longest word n-gram (fastText's ``-wordNgrams``); 1 means words only.
    minn, maxn : int, default 0
        Character n-gram lengths (fastText's ``-minn``/``-maxn``); ``maxn=0`` turns them
        off. As in fastText, ``minn=0`` is ``minn=1``, and ``minn > maxn`` gives no character
        n-gram (the ``bucket`` columns are still there when ``maxn > 0``).
    bucket : int, default 2_000_000
        Hash buckets shared by word and character n-grams (fastText's ``-bucket``); used only
        when ``word_ngrams > 1`` or ``maxn > 0``.
    min_count : int, default 1
        Minimum total count of a word in the training texts (fastText's ``-minCount``).
    lowercase : bool, default False
        Lower-case texts first (fastText does not).
    whitespace : {"unicode", "fasttext"}, default "unicode"
        The characters that separate tokens. ``"unicode"``: every character ``str.isspace``
        names (``str.split()``), the tokens of scikit-learn's
        ``CountVectorizer(token_pattern=r"\\S+")``, so the matrix equals scikit-learn's
        vectorizers'. ``"fasttext"``: only space, tab, ``\\n``, ``\\v``, ``\\f``, ``\\r`` and NUL,
        where fastText splits a line, so a no-break space (U+00A0), U+3000, U+2028, U+0085 or
        ``\\x1c``-``\\x1f`` is part of a token, as in fastText (``lookuplinear train`` uses it).

    Attributes
    ----------
    vocabulary_ : dict of str to int
        Word -> column.
    n_features_out_ : int
        ``len(vocabulary_)`` plus ``bucket`` when n-grams are on (plus ``len(buckets_)``
        after :meth:`prune`): the width of ``transform``'s matrix with the parameters as they
        are now.
    buckets_ : numpy.ndarray or None
        After :meth:`prune`: the hash buckets kept, sorted (int64); bucket ``buckets_[j]`` is
        column ``len(vocabulary_) + j`` and the others are dropped. None: every bucket.

    Raises
    ------
    InputValueError
        A parameter out of range, no word reaches ``min_count``, or a document is missing
        (None, NaN, ``pd.NA``: fill missing texts with ``""``).
    InputTypeError
        A document that is not ``str`` or ``bytes`` (``bytes`` are decoded as UTF-8).

    Examples
    --------
    >>> vec = FastTextVectorizer(word_ngrams=2, bucket=1000)
    >>> X = vec.fit_transform(["the cat sat", "the dog sat"])
    >>> X.shape, sorted(vec.vocabulary_)
    ((2, 1004), ['cat', 'dog', 'sat', 'the'])
    >>> X[0, :4].toarray()                       # cat dog sat the
    array([[1., 0., 1., 1.]], dtype=float32)
    >>> int(X[0, 4:].sum())                      # "the cat", "cat sat"
    2

    As scikit-learn's text vectorizers, it always returns the sparse matrix: it has no
    ``set_output`` and ``sklearn.set_config(transform_output="pandas")`` leaves its output as
    it is (``auto_wrap_output_keys=None``).
    """

    vocabulary_: dict[str, int]
    buckets_: np.ndarray | None

    def __init__(
        self,
        *,
        word_ngrams: int = 1,
        minn: int = 0,
        maxn: int = 0,
        bucket: int = 2_000_000,
        min_count: int = 1,
        lowercase: bool = False,
        whitespace: str = "unicode",
    ) -> None:
        self.word_ngrams = word_ngrams
        self.minn = minn
        self.maxn = maxn
        self.bucket = bucket
        self.min_count = min_count
        self.lowercase = lowercase
        self.whitespace = whitespace

    def __sklearn_tags__(self) -> Any:
        """``CountVectorizer``'s input tags: it reads an iterable of texts, not a 2-D array."""
        tags = super().__sklearn_tags__()
        tags.input_tags.string = True
        tags.input_tags.two_d_array = False
        return tags

    def fit(self, raw_documents: Iterable[str], y: Any = None) -> FastTextVectorizer:
        """Learn the vocabulary: every whitespace token seen at least ``min_count`` times."""
        _check_documents(raw_documents)
        self._check_params()
        self._fit_tokens(token_ids(self._tokenize(raw_documents)))
        self.buckets_ = None
        return self

    def fit_transform(self, raw_documents: Iterable[str], y: Any = None) -> sp.csr_matrix:
        """``fit(raw_documents).transform(raw_documents)``, tokenizing each text once."""
        _check_documents(raw_documents)
        self._check_params()
        docs = list(raw_documents)
        tokens = token_ids(self._tokenize(docs))
        self.buckets_ = None
        column = self._fit_tokens(tokens)
        return self._transform().features(docs, tokens, column)

    def transform(self, raw_documents: Iterable[str]) -> sp.csr_matrix:
        """The count matrix, shape ``(n_texts, n_features_out_)``, float32 CSR."""
        _check_documents(raw_documents)
        check_is_fitted(self, "vocabulary_")
        return self._transform().transform(raw_documents)

    def get_feature_names_out(self, input_features: Any = None) -> np.ndarray:
        """The name of each column of :meth:`transform`'s matrix, as scikit-learn's
        ``CountVectorizer`` names them: the vocabulary's words in column order, then, when
        n-grams are on, ``"bucket B"`` for the column of hash bucket ``B`` (a space is never
        part of a word, so no word has such a name); after :meth:`prune`, the buckets kept.

        Parameters
        ----------
        input_features : ignored
            Not used, as in ``CountVectorizer`` (texts have no input feature names).

        Returns
        -------
        numpy.ndarray of str (object dtype), of length ``n_features_out_``

        Examples
        --------
        >>> vec = FastTextVectorizer(word_ngrams=2, bucket=3).fit(["the cat", "a dog"])
        >>> vec.get_feature_names_out().tolist()
        ['a', 'cat', 'dog', 'the', 'bucket 0', 'bucket 1', 'bucket 2']
        """
        check_is_fitted(self, "vocabulary_")
        names: list[str] = sorted(self.vocabulary_, key=self.vocabulary_.__getitem__)
        if self._hashed():
            buckets = getattr(self, "buckets_", None)
            kept = range(self.bucket) if buckets is None else buckets.tolist()
            names += [f"bucket {b}" for b in kept]
        return np.asarray(names, dtype=object)

    def prune(self, columns: Any) -> FastTextVectorizer:
        """Keep only ``columns`` (of :meth:`transform`'s matrix), as fastText's ``quantize
        -cutoff`` prunes its dictionary; returns ``self``.

        Afterwards ``transform`` gives ``X[:, sorted(columns)]`` of the matrix before: a word
        left out is unknown (still part of word n-grams, as in fastText), a hash bucket left
        out is dropped, so a text's mean runs over the features kept only, as fastText's does.

        Parameters
        ----------
        columns : array-like of int, or of bool
            Columns to keep, each in ``[0, n_features_out_)``; or a boolean mask of
            ``n_features_out_`` values, True for a column to keep (as scikit-learn's
            ``X[:, mask]`` and a selector's ``get_support()`` give).

        Raises
        ------
        LookupIndexError
            A column out of range.
        InputTypeError
            Columns that are not integers (floats), or a boolean mask of another length.

        Examples
        --------
        >>> vec = FastTextVectorizer(word_ngrams=2, bucket=1000)
        >>> X = vec.fit_transform(["the cat sat", "the dog sat"])
        >>> keep = [0, 3] + [4 + int(b) for b in X[0, 4:].nonzero()[1]]   # cat, the, 2 bigrams
        >>> (vec.prune(keep).transform(["the cat sat"]) != X[0][:, keep]).nnz
        0
        """
        from ..errors import InputTypeError, LookupIndexError

        check_is_fitted(self, "vocabulary_")
        given = np.asarray(columns).ravel()
        if given.dtype == np.bool_:
            if given.size != self.n_features_out_:
                raise InputTypeError(
                    f"prune: a boolean mask must hold one value per column "
                    f"({self.n_features_out_}), got {given.size}; pass the mask of "
                    "transform's matrix, or the column numbers."
                )
            given = np.flatnonzero(given)
        elif given.size and given.dtype.kind not in "iu":
            raise InputTypeError(
                f"prune: columns must be integers (or a boolean mask), got dtype {given.dtype}; "
                "pass the column numbers of transform's matrix."
            )
        cols = np.unique(given.astype(np.int64))
        if cols.size and (cols[0] < 0 or cols[-1] >= self.n_features_out_):
            raise LookupIndexError(
                f"prune: columns must lie in [0, {self.n_features_out_}), got "
                f"{int(cols[0] if cols[0] < 0 else cols[-1])}; pass columns of transform's "
                "matrix."
            )
        n_words = len(self.vocabulary_)
        words = sorted(self.vocabulary_, key=self.vocabulary_.__getitem__)
        self.vocabulary_ = {words[c]: i for i, c in enumerate(cols[cols < n_words].tolist())}
        ngrams = cols[cols >= n_words] - n_words
        old = getattr(self, "buckets_", None)
        self.buckets_ = (ngrams if old is None else old[ngrams]) if self._hashed() else None
        return self

    def get_config(self) -> dict[str, Any]:
        """Everything needed to rebuild the fitted vectorizer, as JSON-compatible values."""
        check_is_fitted(self, "vocabulary_")
        words = sorted(self.vocabulary_, key=self.vocabulary_.__getitem__)
        config: dict[str, Any] = {**self.get_params(), "vocabulary": words}
        buckets = getattr(self, "buckets_", None)
        if buckets is not None:  # a pruned vectorizer: the hash buckets it keeps
            config["buckets"] = buckets.tolist()
        return config

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> FastTextVectorizer:
        """The fitted vectorizer that :meth:`get_config` describes (a parameter it lacks, from
        a configuration written before the parameter existed, takes its default)."""
        defaults = cls().get_params()
        params = {k: config.get(k, default) for k, default in defaults.items()}
        vec = cls(**params)
        vec._check_params()
        vec.vocabulary_ = check_vocabulary(config["vocabulary"])
        vec.buckets_ = None
        if config.get("buckets") is not None:
            vec.buckets_ = check_buckets(config["buckets"], vec.bucket)
        return vec

    # ------------------------------------------------------------------ helpers
    def _check_params(self) -> None:
        if not isinstance(self.lowercase, (bool, np.bool_)):  # "no" would be true
            raise InputValueError(
                f"FastTextVectorizer: lowercase must be a bool, got {self.lowercase!r} "
                f"({type(self.lowercase).__name__}). Pass lowercase=True or lowercase=False."
            )
        check_params(word_ngrams=self.word_ngrams, minn=self.minn, maxn=self.maxn,
                     bucket=self.bucket, min_count=self.min_count, whitespace=self.whitespace)

    def _tokenize(self, docs: Iterable[Any]) -> Any:
        return tokenize(docs, lowercase=self.lowercase, whitespace=self.whitespace)

    def _hashed(self) -> bool:
        return self.word_ngrams > 1 or self.maxn > 0

    @property
    def n_features_out_(self) -> int:
        """The columns of ``transform``'s matrix with the parameters as they are now (a
        ``set_params`` after ``fit`` changes them, as it changes ``transform``)."""
        check_is_fitted(self, "vocabulary_")
        return self._transform().n_features_out

    def _fit_tokens(self, tokens: Tokens) -> np.ndarray:
        """Set the vocabulary: the tokens counted at least ``min_count`` times, sorted as
        ``CountVectorizer`` sorts them. Returns each of ``tokens.unique``'s column, or -1."""
        counts = np.bincount(tokens.ids, minlength=len(tokens.unique))
        kept = sorted(np.flatnonzero(counts >= self.min_count).tolist(),
                      key=tokens.unique.__getitem__)
        if len(kept) == 0:
            raise InputValueError(
                f"no word occurs at least min_count={self.min_count} times in the "
                f"{len(tokens.doc_ptr) - 1} training texts. Lower min_count or pass more text."
            )
        self.vocabulary_ = {tokens.unique[t]: i for i, t in enumerate(kept)}
        column = np.full(len(tokens.unique), -1, np.int64)
        column[kept] = np.arange(len(kept))
        return column

    def _transform(self) -> TextFeatures:
        """The fitted transform: the words and word n-grams counted by the C kernel, the
        character n-grams hashed by scikit-learn's ``FeatureHasher``."""
        return TextFeatures(self.vocabulary_, word_ngrams=self.word_ngrams, minn=self.minn,
                            maxn=self.maxn, bucket=self.bucket, lowercase=self.lowercase,
                            buckets=getattr(self, "buckets_", None), whitespace=self.whitespace)
