"""fastText-style text features as a thin layer over scikit-learn's vectorizers.

fastText represents a text as the bag of its words plus hashed word n-grams and character
n-grams; :class:`FastTextVectorizer` builds that bag as a scipy.sparse count matrix from
scikit-learn's own tokenizer and hashing, so ``LookupClassifier(mode="mean", hidden=dim)`` on it
is fastText's supervised model::

    columns  [0, n_words)                  words seen at least min_count times (CountVectorizer)
             [n_words, n_words + bucket)   word 2..word_ngrams-grams and char minn..maxn-grams,
                                           hashed into one shared space (HashingVectorizer)

Each text is tokenized once, by scikit-learn's analyzer; the words are counted against the
vocabulary and the n-grams hashed by scikit-learn's ``FeatureHasher``, the hashing inside
``HashingVectorizer``: the matrix equals that of ``CountVectorizer(vocabulary=...)`` next to
``HashingVectorizer(ngram_range=(2, word_ngrams), alternate_sign=False, norm=None)`` (plus the
``char_wb`` one), which tokenize the texts again each (tests/test_text_cli.py compares them).

Requires the ``[sklearn]`` extra.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Iterator
from itertools import chain, repeat
from typing import Any

import numpy as np
import scipy.sparse as sp
from sklearn.base import BaseEstimator, TransformerMixin
from sklearn.feature_extraction import FeatureHasher
from sklearn.feature_extraction.text import CountVectorizer, HashingVectorizer
from sklearn.utils.validation import check_is_fitted

from .errors import InputValueError

__all__ = ["TOKEN_PATTERN", "FastTextVectorizer"]

#: fastText splits on whitespace only: every run of non-space characters is a token
TOKEN_PATTERN = r"\S+"


class FastTextVectorizer(TransformerMixin, BaseEstimator):
    """Texts to fastText's bag of words + hashed n-grams, a CSR count matrix.

    Dense equivalent: row ``i`` counts, for text ``i``, each vocabulary word and each hash bucket
    of its word n-grams (``2..word_ngrams``) and character n-grams (``minn..maxn`` within each
    word; fastText marks word ends with ``<`` ``>``, scikit-learn's ``char_wb`` analyzer with
    spaces). Tokens are whitespace-separated, case kept, as in fastText.

    Parameters
    ----------
    word_ngrams : int, default 1
        Longest word n-gram (fastText's ``-wordNgrams``); 1 means words only.
    minn, maxn : int, default 0
        Character n-gram lengths (fastText's ``-minn``/``-maxn``); 0 turns them off.
    bucket : int, default 2_000_000
        Hash buckets shared by word and character n-grams (fastText's ``-bucket``); used only
        when ``word_ngrams > 1`` or ``maxn > 0``.
    min_count : int, default 1
        Minimum total count of a word in the training texts (fastText's ``-minCount``).
    lowercase : bool, default False
        Lower-case texts first (fastText does not).

    Attributes
    ----------
    vocabulary_ : dict of str to int
        Word -> column.
    n_features_out_ : int
        ``len(vocabulary_)`` plus ``bucket`` when n-grams are on.

    Raises
    ------
    InputValueError
        A parameter out of range, or no word reaches ``min_count``.

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
    """

    def __init__(
        self,
        *,
        word_ngrams: int = 1,
        minn: int = 0,
        maxn: int = 0,
        bucket: int = 2_000_000,
        min_count: int = 1,
        lowercase: bool = False,
    ) -> None:
        self.word_ngrams = word_ngrams
        self.minn = minn
        self.maxn = maxn
        self.bucket = bucket
        self.min_count = min_count
        self.lowercase = lowercase

    def fit(self, raw_documents: Iterable[str], y: Any = None) -> FastTextVectorizer:
        """Learn the vocabulary: every whitespace token seen at least ``min_count`` times."""
        self._check_params()
        self._fit_tokens(self._tokenize(raw_documents))
        return self

    def fit_transform(self, raw_documents: Iterable[str], y: Any = None) -> sp.csr_matrix:
        """``fit(raw_documents).transform(raw_documents)``, tokenizing each text once."""
        self._check_params()
        docs = list(raw_documents)
        tokens = self._tokenize(docs)
        self._fit_tokens(tokens)
        return self._features(docs, tokens)

    def transform(self, raw_documents: Iterable[str]) -> sp.csr_matrix:
        """The count matrix, shape (n_texts, n_features_out_), float32 CSR."""
        check_is_fitted(self, "vocabulary_")
        docs = list(raw_documents)
        return self._features(docs, self._tokenize(docs))

    def get_config(self) -> dict[str, Any]:
        """Everything needed to rebuild the fitted vectorizer, as JSON-compatible values."""
        check_is_fitted(self, "vocabulary_")
        words = sorted(self.vocabulary_, key=self.vocabulary_.__getitem__)
        return {**self.get_params(), "vocabulary": words}

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> FastTextVectorizer:
        """The fitted vectorizer that :meth:`get_config` describes."""
        params = {k: config[k] for k in cls().get_params()}
        vec = cls(**params)
        vec._check_params()
        vec.vocabulary_ = {str(w): i for i, w in enumerate(config["vocabulary"])}
        vec.n_features_out_ = len(vec.vocabulary_) + (vec.bucket if vec._hashed() else 0)
        return vec

    # ------------------------------------------------------------------ helpers
    def _check_params(self) -> None:
        for name, low in (("word_ngrams", 1), ("bucket", 1), ("min_count", 1),
                          ("minn", 0), ("maxn", 0)):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int | np.integer) or value < low:
                raise InputValueError(
                    f"FastTextVectorizer: {name} must be an int >= {low}, got {value!r}."
                )
        if self.maxn and not 1 <= self.minn <= self.maxn:
            raise InputValueError(
                f"FastTextVectorizer: character n-grams need 1 <= minn <= maxn, got "
                f"minn={self.minn}, maxn={self.maxn}. Set maxn=0 to turn them off."
            )

    def _hashed(self) -> bool:
        return self.word_ngrams > 1 or self.maxn > 0

    def _tokenize(self, docs: Iterable[str]) -> list[list[str]]:
        """Each text's words: scikit-learn's decoder, preprocessor and tokenizer (its word
        analyzer without the n-gram step, which only copies the list for unigrams)."""
        words = CountVectorizer(token_pattern=TOKEN_PATTERN, lowercase=self.lowercase)
        decode, tokenize = words.decode, words.build_tokenizer()
        if not self.lowercase:  # the preprocessor is the identity
            return [tokenize(decode(doc)) for doc in docs]
        preprocess = words.build_preprocessor()
        return [tokenize(preprocess(decode(doc))) for doc in docs]

    def _fit_tokens(self, tokens: list[list[str]]) -> None:
        counts = Counter(chain.from_iterable(tokens))
        words = sorted(w for w, c in counts.items() if c >= self.min_count)
        if len(words) == 0:
            raise InputValueError(
                f"no word occurs at least min_count={self.min_count} times in the "
                f"{len(tokens)} training texts. Lower min_count or pass more text."
            )
        self.vocabulary_: dict[str, int] = {w: i for i, w in enumerate(words)}
        self.n_features_out_ = len(words) + (self.bucket if self._hashed() else 0)

    def _features(self, docs: list[str], tokens: list[list[str]]) -> sp.csr_matrix:
        """Word counts, then the hashed n-gram counts: ``[words | buckets]``."""
        blocks = [self._word_counts(tokens)]
        if self._hashed():
            blocks.append(self._hasher().transform(self._ngrams(docs, tokens)))
        return sp.hstack(blocks, format="csr", dtype=np.float32)

    def _word_counts(self, tokens: list[list[str]]) -> sp.csr_matrix:
        """``CountVectorizer(vocabulary=vocabulary_).transform`` of the tokenized texts."""
        vocab = self.vocabulary_
        flat = list(chain.from_iterable(tokens))
        ids = np.fromiter(map(vocab.get, flat, repeat(-1)), np.int64, len(flat))
        known = ids >= 0
        rows = np.repeat(np.arange(len(tokens)), np.fromiter(map(len, tokens), np.int64,
                                                             len(tokens)))
        indptr = np.zeros(len(tokens) + 1, np.int64)
        np.cumsum(np.bincount(rows[known], minlength=len(tokens)), out=indptr[1:])
        ids = ids[known]
        X = sp.csr_matrix((np.ones(ids.size, np.float32), ids, indptr),
                          shape=(len(tokens), len(vocab)))
        X.sum_duplicates()  # a word's entries -> its count, indices sorted
        return X

    def _ngrams(self, docs: list[str], tokens: list[list[str]]) -> Iterator[list[str]]:
        """Each text's word 2..word_ngrams-grams (joined with a space, as scikit-learn's word
        analyzer joins them) and its character n-grams (scikit-learn's ``char_wb`` analyzer)."""
        chars = None
        if self.maxn > 0:
            chars = HashingVectorizer(analyzer="char_wb", ngram_range=(self.minn, self.maxn),
                                      lowercase=self.lowercase).build_analyzer()
        for doc, words in zip(docs, tokens, strict=True):
            out: list[str] = []
            for n in range(2, self.word_ngrams + 1):
                out += map(" ".join, zip(*(words[i:] for i in range(n)), strict=False))
            if chars is not None:
                out += chars(doc)
            yield out

    def _hasher(self) -> FeatureHasher:
        """The hashing of ``HashingVectorizer(alternate_sign=False, norm=None)``: n-gram ->
        ``murmurhash3_32(n-gram) % bucket``, counts summed."""
        return FeatureHasher(n_features=self.bucket, input_type="string",
                             alternate_sign=False, dtype=np.float32)
