"""The transform of a fitted :class:`~lookuplinear.text.FastTextVectorizer`, without
scikit-learn's estimator classes.

``FastTextVectorizer.transform`` and a model file loaded for prediction
(``lookuplinear predict`` / ``test``) both run :func:`text_features`: the words and word n-grams
are counted by the C kernel of :mod:`lookuplinear.ops._ngrams`, so scikit-learn (about a second
of imports) is imported only for character n-grams (``maxn > 0``), whose hashing is its
``FeatureHasher``.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from itertools import repeat
from typing import TYPE_CHECKING, Any

import numpy as np

from .._sizes import as_size
from ..errors import InputTypeError, InputValueError
from ..ops import Tokens, count_matrix, token_ids
from ._files import FASTTEXT_WHITESPACE

if TYPE_CHECKING:
    import scipy.sparse as sp

__all__ = ["WHITESPACE", "TextFeatures", "check_buckets", "check_params", "check_vocabulary",
           "keep_buckets", "text_features", "tokenize"]

#: ``FastTextVectorizer(whitespace=...)``: what separates tokens. ``"unicode"``: every
#: character ``str.isspace`` names (``str.split()``, scikit-learn's ``token_pattern=r"\S+"``);
#: ``"fasttext"``: only those fastText splits at (``Dictionary::readWord``)
WHITESPACE = ("unicode", "fasttext")
#: a fastText token: a run of characters other than fastText's whitespace (a no-break space,
#: U+3000 or U+2028 is part of a token)
_FASTTEXT_TOKEN = re.compile(f"[^{FASTTEXT_WHITESPACE}]+")


def _decoded(doc: Any, lowercase: bool) -> str:
    """``CountVectorizer``'s decoding (``bytes`` as UTF-8) and preprocessor (``str.lower``
    when ``lowercase``); raises :class:`_NotTextError` for anything but ``str`` or ``bytes``."""
    if isinstance(doc, bytes):
        doc = doc.decode("utf-8", "strict")
    elif not isinstance(doc, str):
        raise _NotTextError(doc)
    return doc.lower() if lowercase else str(doc)


class _NotTextError(Exception):
    """A document that is not ``str`` or ``bytes``; :func:`tokenize` names its position."""

    def __init__(self, doc: Any) -> None:
        super().__init__()
        self.doc = doc


def _missing(doc: Any) -> bool:
    """Whether ``doc`` is a missing value: None, a float NaN, ``pd.NA`` or ``pd.NaT``."""
    if doc is None or type(doc).__name__ in ("NAType", "NaTType"):
        return True
    return isinstance(doc, (float, np.floating)) and bool(np.isnan(doc))


def _not_text_error(doc: Any, position: int) -> Exception:
    """The error for document ``position``, which is not a string: an
    :class:`InputValueError` for a missing value, an :class:`InputTypeError` otherwise."""
    if _missing(doc):
        return InputValueError(
            f"Each document must be a str or bytes, got the missing value {doc!r} at position "
            f"{position}. Drop the missing texts or fill them with an empty string "
            f"(Series.fillna(\"\"))."
        )
    return InputTypeError(
        f"Each document must be a str or bytes, got {type(doc).__name__} {doc!r:.40} at "
        f"position {position}. Convert the texts to strings first (Series.astype(str))."
    )


def tokenize(docs: Iterable[Any], *, lowercase: bool, whitespace: str = "unicode"
             ) -> Iterator[list[str]]:
    """Each text's words, one list at a time: ``CountVectorizer``'s decoding and preprocessor,
    then, with ``whitespace="unicode"``, ``str.split()``, which gives the lists
    ``TOKEN_PATTERN``'s ``re.findall`` gives (both split at the characters ``str.isspace``
    names; tests/test_text_cli.py checks every code point); with ``"fasttext"``, the runs of
    characters other than fastText's whitespace (space, tab, ``\\n``, ``\\v``, ``\\f``, ``\\r``,
    NUL), as fastText reads a line's words.

    Raises :class:`InputValueError` for a missing document (None, NaN, ``pd.NA``) and
    :class:`InputTypeError` for any other that is not ``str`` or ``bytes``, naming the first
    one's position.
    """
    split = _FASTTEXT_TOKEN.findall if whitespace == "fasttext" else str.split
    position = 0
    try:
        for doc in docs:
            yield split(_decoded(doc, lowercase))
            position += 1
    except _NotTextError as bad:
        raise _not_text_error(bad.doc, position) from None


def _char_wb_ngrams(words: list[str], minn: int, maxn: int) -> list[str]:
    """scikit-learn's ``char_wb`` n-grams (``_VectorizerMixin._char_wb_ngrams``) of the words
    given, instead of the words of ``str.split()``: each word padded with a space either side,
    its ``minn..maxn``-grams, a word shorter than ``n`` counted once."""
    ngrams: list[str] = []
    append = ngrams.append
    for w in words:
        w = " " + w + " "
        w_len = len(w)
        for n in range(minn, maxn + 1):
            offset = 0
            append(w[offset : offset + n])
            while offset + n < w_len:
                offset += 1
                append(w[offset : offset + n])
            if offset == 0:  # count a short word (w_len < n) only once
                break
    return ngrams


def text_features(
    docs: list[Any],
    tokens: Tokens,
    column: np.ndarray,
    *,
    n_words: int,
    word_ngrams: int,
    minn: int,
    maxn: int,
    bucket: int,
    lowercase: bool,
    buckets: np.ndarray | None,
    whitespace: str = "unicode",
) -> sp.csr_matrix:
    """Word and word n-gram counts, plus the hashed character n-grams: ``[words | buckets]``,
    float32 CSR of shape ``(len(docs), n_words + (bucket or len(buckets)))``.

    ``column`` maps each of ``tokens.unique`` to its word column or -1; ``buckets`` (sorted)
    keeps those hash buckets only (a pruned vectorizer), None keeps every one. With
    ``whitespace="fasttext"`` the character n-grams are those of the words fastText reads
    (``char_wb``'s n-grams of each token of :func:`tokenize`).
    """
    hashed = word_ngrams > 1 or maxn > 0
    width = n_words + (bucket if hashed else 0)
    X = count_matrix(tokens, column, word_ngrams, bucket, n_words, width)
    minn = max(minn, 1)  # fastText's lengths: minn 0 is 1, minn > maxn none (buckets kept)
    if minn <= maxn:  # scikit-learn's char_wb analyzer and FeatureHasher define these columns
        import scipy.sparse as sp
        from sklearn.feature_extraction import FeatureHasher
        from sklearn.feature_extraction.text import HashingVectorizer

        if whitespace == "fasttext":  # char_wb's n-grams of fastText's words
            def chars(doc: Any) -> list[str]:
                return _char_wb_ngrams(_FASTTEXT_TOKEN.findall(_decoded(doc, lowercase)),
                                       minn, maxn)
        else:
            chars = HashingVectorizer(analyzer="char_wb", ngram_range=(minn, maxn),
                                      lowercase=lowercase).build_analyzer()
        # the hashing of HashingVectorizer(alternate_sign=False, norm=None): n-gram ->
        # murmurhash3_32(n-gram) % bucket, counts summed
        hasher = FeatureHasher(n_features=bucket, input_type="string", alternate_sign=False,
                               dtype=np.float32)
        try:
            C = hasher.transform(map(chars, docs))  # (n_texts, bucket)
        except UnicodeEncodeError:  # a lone surrogate: its surrogatepass bytes, as the words'
            C = hasher.transform([g.encode("utf-8", "surrogatepass") for g in chars(doc)]
                                 for doc in docs)
        cols = C.indices  # int32 while its values fit; a wider matrix's columns need int64
        if width - 1 > np.iinfo(cols.dtype).max:
            cols = cols.astype(np.int64)
        X = X + sp.csr_matrix((C.data, cols + n_words, C.indptr), shape=X.shape)
    return X if buckets is None else keep_buckets(X, n_words, buckets)


def keep_buckets(X: sp.csr_matrix, n_words: int, buckets: np.ndarray) -> sp.csr_matrix:
    """``X`` (words, then every bucket) with only ``buckets`` (sorted) after the words,
    renumbered ``n_words + position``; the entries of the other buckets are dropped."""
    import scipy.sparse as sp

    col = X.indices.astype(np.int64)
    b = col - n_words
    at = np.searchsorted(buckets, b)
    hit = np.zeros(b.shape, dtype=bool)
    inside = (b >= 0) & (at < len(buckets))
    hit[inside] = buckets[at[inside]] == b[inside]
    keep = (b < 0) | hit
    new = np.where(b < 0, col, n_words + at)[keep]
    indptr = np.concatenate([[0], np.cumsum(keep)])[X.indptr]  # entries kept before each row
    return sp.csr_matrix((X.data[keep], new.astype(X.indices.dtype), indptr),
                         shape=(X.shape[0], n_words + len(buckets)))


def check_params(*, word_ngrams: int, minn: int, maxn: int, bucket: int, min_count: int = 1,
                 whitespace: str = "unicode", where: str = "FastTextVectorizer") -> None:
    """Refuse a parameter out of range, as ``FastTextVectorizer`` names it; ``minn`` 0 and
    ``minn > maxn`` are taken, as fastText takes them."""
    if not isinstance(whitespace, str) or whitespace not in WHITESPACE:
        raise InputValueError(
            f"{where}: whitespace must be one of {list(WHITESPACE)} ('unicode': split at every "
            f"Unicode space, as scikit-learn; 'fasttext': at fastText's), got {whitespace!r}."
        )
    for name, value, low in (("word_ngrams", word_ngrams, 1), ("bucket", bucket, 1),
                             ("min_count", min_count, 1), ("minn", minn, 0), ("maxn", maxn, 0)):
        as_size(value, name, low=low, where=where)


def check_buckets(buckets: Any, bucket: int) -> np.ndarray:
    """A pruned vectorizer's kept hash buckets as int64, refused unless increasing in
    ``[0, bucket)``."""
    kept = np.asarray(buckets, dtype=np.int64).ravel()
    if kept.size and (kept.min() < 0 or kept.max() >= bucket or np.any(np.diff(kept) <= 0)):
        raise InputValueError(
            f"FastTextVectorizer.from_config: 'buckets' must be increasing bucket numbers in "
            f"[0, {bucket}); the configuration was damaged."
        )
    return kept


def check_vocabulary(words: Any) -> dict[str, int]:
    """A configuration's vocabulary (its words in column order) as word -> column, refused
    unless every entry is a distinct string (a repeated word would leave a column unused and
    its counts in another's, as ``CountVectorizer(vocabulary=...)`` refuses it).

    Examples
    --------
    >>> check_vocabulary(["the", "cat"])
    {'the': 0, 'cat': 1}
    """
    vocabulary: dict[str, int] = {}
    for i, w in enumerate(words):
        if not isinstance(w, str) or w in vocabulary:
            raise InputValueError(
                f"FastTextVectorizer.from_config: 'vocabulary' must list distinct words; entry "
                f"{i}, {w!r}, is {'a repeat' if w in vocabulary else 'not a string'}. The "
                "configuration was damaged."
            )
        vocabulary[w] = i
    return vocabulary


class TextFeatures:
    """A fitted ``FastTextVectorizer``'s ``transform`` as a plain object: the vocabulary
    (word -> column) and the hashing parameters; ``transform(docs)`` is the vectorizer's.

    Examples
    --------
    >>> f = TextFeatures({"the": 0, "cat": 1}, word_ngrams=1, minn=0, maxn=0, bucket=10,
    ...                  lowercase=False)
    >>> f.transform(["the cat the", "dog"]).toarray().tolist()
    [[2.0, 1.0], [0.0, 0.0]]
    """

    def __init__(self, vocabulary: dict[str, int], *, word_ngrams: int, minn: int, maxn: int,
                 bucket: int, lowercase: bool, buckets: np.ndarray | None = None,
                 whitespace: str = "unicode") -> None:
        self.vocabulary = vocabulary
        self.word_ngrams, self.minn, self.maxn = word_ngrams, minn, maxn
        self.bucket, self.lowercase, self.buckets = bucket, lowercase, buckets
        self.whitespace = whitespace

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> TextFeatures:
        """The transform that ``FastTextVectorizer.get_config``'s ``config`` describes, checked
        as ``FastTextVectorizer.from_config`` checks it (a configuration without
        ``whitespace``, written before it existed, splits at Unicode whitespace)."""
        params = {k: config[k] for k in ("word_ngrams", "minn", "maxn", "bucket")}
        whitespace = config.get("whitespace", "unicode")
        check_params(**params, min_count=config["min_count"], whitespace=whitespace)
        buckets = config.get("buckets")
        return cls(check_vocabulary(config["vocabulary"]), **params,
                   lowercase=config["lowercase"], whitespace=whitespace,
                   buckets=None if buckets is None else check_buckets(buckets, params["bucket"]))

    @property
    def n_features_out(self) -> int:
        """Columns of ``transform``'s matrix: the words, then the hash buckets kept."""
        hashed = self.word_ngrams > 1 or self.maxn > 0
        return len(self.vocabulary) + (0 if not hashed else self.bucket if self.buckets is None
                                       else len(self.buckets))

    def transform(self, raw_documents: Iterable[Any]) -> sp.csr_matrix:
        """The count matrix, float32 CSR of shape ``(n_texts, n_features_out)``."""
        docs = list(raw_documents)
        tokens = token_ids(tokenize(docs, lowercase=self.lowercase, whitespace=self.whitespace))
        return self.features(docs, tokens, self.columns(tokens))

    def columns(self, tokens: Tokens) -> np.ndarray:
        """Each of ``tokens.unique``'s word column, or -1 for a word not in the vocabulary."""
        return np.fromiter(map(self.vocabulary.get, tokens.unique, repeat(-1)), np.int64,
                           len(tokens.unique))

    def features(self, docs: list[Any], tokens: Tokens, column: np.ndarray) -> sp.csr_matrix:
        """:func:`text_features` of ``docs`` (tokenized as ``tokens``) with these parameters."""
        return text_features(docs, tokens, column, n_words=len(self.vocabulary),
                             word_ngrams=self.word_ngrams, minn=self.minn, maxn=self.maxn,
                             bucket=self.bucket, lowercase=self.lowercase,
                             buckets=self.buckets, whitespace=self.whitespace)
