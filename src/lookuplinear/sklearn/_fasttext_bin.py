"""fastText's own model files (``.bin``, ``.ftz``): read, and predicted with as fastText does.

The file is fastText's binary format, little-endian, as ``FastText::saveModel`` writes it::

    int32 magic 793712314, int32 version (11 or 12)
    Args        int32 dim ws epoch minCount neg wordNgrams loss model bucket minn maxn
                lrUpdateRate, float64 t            (loss: 1 hs 2 ns 3 softmax 4 ova;
                                                    model: 1 cbow 2 skipgram 3 supervised)
    Dictionary  int32 size nwords nlabels, int64 ntokens pruneidx_size,
                size x (word bytes, NUL, int64 count, int8 type 0 word / 1 label),
                pruneidx_size x (int32 bucket, int32 row)          (quantize -cutoff)
    bool quant_input, then the input matrix (nwords + buckets rows, dim columns):
        dense      int64 m n, float32 m*n
        quantized  bool qnorm, int64 m n, int32 codesize, uint8 codes[codesize],
                   ProductQuantizer (int32 dim nsubq dsub lastdsub, float32 dim*256),
                   if qnorm: uint8 norm_codes[m], ProductQuantizer of the norms (dim 1)
    bool qout, then the output matrix (nlabels rows): quantized when quant_input and qout

A text's prediction, as ``Dictionary::getLine`` + ``Model::predict``: its tokens (split at
``' ' \\t \\n \\v \\f \\r \\0``) up to the first ``</s>`` (fastText ends a line at that
token), and the end-of-line token ``</s>`` (not on the last line of a file read without its
final ``\\n``, :meth:`FastTextModel.examples`); each word contributes its row
(a word seen in training) and, with ``maxn > 0``, its character n-grams of ``<word>``
(``minn..maxn`` UTF-8 characters, hashed with fastText's FNV-1a over signed bytes into
``bucket`` rows); then every word n-gram (``2..wordNgrams`` consecutive words, their hashes
combined as ``h = h * 116049371 + h_next``). ``hidden`` is the mean of those rows, the logits
``output @ hidden``; probabilities are softmax (``-loss softmax``), the product of the sigmoids
on the label's path in fastText's Huffman tree (``hs``), or fastText's table sigmoid per label
(``ova``, ``ns``). Every step repeats fastText's float32 operations in its order, so the
probabilities are the ones the ``fasttext`` module returns (``exp(log(p + 1e-5))``, as it
prints them) and ``top_k`` orders ties as fastText's heap does; a probability can differ in
the last bit of its float32, as fastText's ``std::exp`` of a float is the C library's ``expf``
(its variant chosen at run time), here numpy's double ``exp`` rounded to float32.

Requires numpy only.
"""

from __future__ import annotations

import re
import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import ModelFileError
from ._modelfile import TextModel, check_one_line

__all__ = ["MAGIC", "VERSIONS", "FastTextArgs", "FastTextFeatures", "FastTextHead", "FastTextModel",
           "char_ngrams", "is_fasttext", "label_prefix", "load_fasttext", "mean_rows",
           "save_fasttext"]

#: ``FASTTEXT_FILEFORMAT_MAGIC_INT32``, the file's first four bytes (little-endian)
MAGIC = 793712314
#: the format versions read: 12 (fastText 0.9 and later) and 11 (supervised models of
#: fastText 0.1, which had no character n-grams)
VERSIONS = (11, 12)
_LOSSES = {1: "hs", 2: "ns", 3: "softmax", 4: "ova"}
_MODELS = {1: "cbow", 2: "skipgram", 3: "supervised"}
#: the label prefix fastText uses at prediction time: ``-label`` is not saved in the file
_LABEL = b"__label__"
_EOS = b"</s>"
_SPLIT = re.compile(rb"[ \n\r\t\v\f\0]+")
#: C++'s ``istream >> word`` splits at these (no NUL): a word-vector model's sentence words
_CIN_SPLIT = re.compile(rb"[ \n\r\t\v\f]+")
_TOKEN = re.compile(rb"[^ \n\r\t\v\f\0]+")
_F32 = np.float32


class _Unended(str):
    """The text of an example that fastText reads with no ``</s>`` after it: the end of the
    last line of a file that has no final ``\\n`` (``Dictionary::readWord`` returns the last
    token at the end of the file, never ``</s>`` there). Its rows have no ``</s>`` row."""

    __slots__ = ()


@dataclass(frozen=True)
class FastTextArgs:
    """The training arguments stored in a fastText model file (fastText's ``Args``)."""

    dim: int
    ws: int
    epoch: int
    min_count: int
    neg: int
    word_ngrams: int
    loss: str
    model: str
    bucket: int
    minn: int
    maxn: int
    lr_update_rate: int
    t: float


def label_prefix(labels: list[str]) -> str:
    """The label prefix of a fastText model's labels: ``__label__`` when every label has it
    (or there is no common prefix), else their longest common prefix (``#`` for a model
    trained with ``-label '#'``; the file keeps its labels, not ``-label``).

    Examples
    --------
    >>> label_prefix(["#pos", "#neg"]), label_prefix(["__label__a", "__label__b"])
    ('#', '__label__')
    """
    default = _LABEL.decode()
    if not labels or all(lab.startswith(default) for lab in labels):
        return default
    first, last = min(labels), max(labels)  # the common prefix of all is theirs
    n = 0
    while n < min(len(first), len(last)) and first[n] == last[n]:
        n += 1
    common = first[:n]
    if len(labels) == 1:  # one label: its start up to the first letter or digit, or itself
        common = common[:len(common) - len(common.lstrip("#@!$%&*+-=~^_:;.,/|"))] or common
    return common or default


def as_text(token: bytes) -> str:
    """A token of fastText (its bytes) as ``str``: UTF-8, each byte that is not UTF-8 kept as
    its surrogate escape (U+DC80 + byte, Python's ``"surrogateescape"``, what the ``fasttext``
    module gives with ``on_unicode_error="surrogateescape"``); :func:`as_bytes` gives the
    bytes back.

    Examples
    --------
    >>> as_text(b"caf\\xe9"), as_text("café".encode())
    ('caf\\udce9', 'café')
    """
    return token.decode("utf-8", "surrogateescape")


def as_bytes(text: str) -> bytes:
    """The bytes fastText reads for ``text``: its UTF-8, a surrogate escape (U+DC80..U+DCFF,
    a byte that was not UTF-8, see :func:`as_text`) as its byte, and any other lone surrogate
    as its three ``"surrogatepass"`` bytes.

    Examples
    --------
    >>> as_bytes("caf\\udce9"), as_bytes("café"), as_bytes("\\ud800")
    (b'caf\\xe9', b'caf\\xc3\\xa9', b'\\xed\\xa0\\x80')
    """
    try:
        return text.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError:  # another lone surrogate: character by character
        return b"".join(c.encode("utf-8", "surrogateescape" if "\udc80" <= c <= "\udcff"
                                 else "surrogatepass") for c in text)


def is_fasttext(path: str | Path) -> bool:
    """Whether ``path`` starts with fastText's magic number (a ``.bin``/``.ftz`` model)."""
    with open(path, "rb") as f:
        return f.read(4) == MAGIC.to_bytes(4, "little")


class _Reader:
    """The file's bytes and a position; each read names what it reads and where."""

    def __init__(self, data: bytearray, path: Path) -> None:
        self.data, self.pos, self.path = data, 0, path

    def take(self, n: int, what: str) -> memoryview:
        if n < 0 or self.pos + n > len(self.data):
            raise ModelFileError(
                f"{self.path} is truncated: {what} needs {n} bytes at offset {self.pos}, the "
                f"file has {len(self.data)} bytes. Copy the fastText model again."
            )
        view = memoryview(self.data)[self.pos:self.pos + n]
        self.pos += n
        return view

    def unpack(self, fmt: str, what: str) -> tuple[Any, ...]:
        return struct.unpack("<" + fmt, self.take(struct.calcsize("<" + fmt), what))

    def array(self, dtype: Any, count: int, what: str) -> np.ndarray:
        dt = np.dtype(dtype).newbyteorder("<")
        return np.frombuffer(self.take(count * dt.itemsize, what), dtype=dt)

    def cstring(self, what: str) -> bytes:
        end = self.data.find(b"\0", self.pos)
        if end < 0:
            raise ModelFileError(
                f"{self.path} is truncated: {what} starting at offset {self.pos} has no "
                f"terminating NUL before the end of the file ({len(self.data)} bytes). Copy "
                "the fastText model again."
            )
        word = bytes(self.data[self.pos:end])
        self.pos = end + 1
        return word

    def damaged(self, what: str) -> ModelFileError:
        return ModelFileError(
            f"{self.path} is not a valid fastText model: {what} (before offset {self.pos}). "
            "The file was damaged; copy it again or train it again with fastText."
        )


def _listed(items: Any, method: str, what: str = "texts") -> list[Any]:
    """``items`` as a list; ``InputTypeError`` for one ``str`` or ``bytes``, which would be
    read character by character (``method`` takes a list of them, as its name says)."""
    from ..errors import InputTypeError

    if isinstance(items, str | bytes):
        raise InputTypeError(
            f"{method} takes a list of {what}, got one {type(items).__name__} (it would be "
            f"read one character at a time). Pass [{what[:-1]}].")
    return list(items)


def _lines(texts: Any, method: str) -> list[Any]:
    """``texts`` as a list (:func:`_listed`), each one line (:func:`check_one_line`)."""
    listed = _listed(texts, method)
    check_one_line(listed, method)
    return listed


@dataclass(eq=False)
class FastTextModel(TextModel):
    """A fastText model read from its ``.bin``/``.ftz`` file: a classifier (``fasttext
    supervised``), or word vectors (``-model skipgram``/``cbow``, :attr:`is_classifier` False:
    its word and sentence vectors, no labels to predict).

    Dense equivalent: ``hidden = mean of input[rows of the text]`` (fastText's words, character
    n-grams and word n-grams), ``logits = output @ hidden``, then fastText's softmax,
    hierarchical softmax or one-vs-all sigmoid: ``LookupLinear(mode="mean")`` on the text's
    count vector followed by ``nn.Linear(dim, n_labels, bias=False)`` and that head.
    ``labels[j]`` names column ``j`` of :meth:`scores`. Built by :func:`load_fasttext`.
    """

    args: FastTextArgs | None = None
    version: int = 12
    #: the word and label entries (``words[:n_words]`` are words)
    words: list[bytes] = field(default_factory=list)
    n_words: int = 0
    #: input rows (float32, quantized ones decoded): the words, then the n-gram buckets
    input_matrix: np.ndarray = field(default_factory=lambda: np.zeros((0, 0), _F32))
    #: output rows (float32; a quantized one decoded without its norms)
    output_matrix: np.ndarray = field(default_factory=lambda: np.zeros((0, 0), _F32))
    #: a quantized output's row norms (its dot products are scaled by them), else None
    output_norms: np.ndarray | None = None
    #: the kept buckets of a pruned (``quantize -cutoff``) model: bucket -> row after the words;
    #: None: every bucket is a row; empty: no n-gram rows
    pruneidx: dict[int, int] | None = None
    label_counts: list[int] = field(default_factory=list)
    #: every entry's count in the training file (``words`` order)
    counts: list[int] = field(default_factory=list)
    #: whether the input matrix was quantized (an ``.ftz``): no dense matrices to dump
    quantized: bool = False
    path: Path | None = None
    _ids: dict[bytes, int] = field(default_factory=dict, repr=False)
    _tree: Any = field(default=None, repr=False)

    def __post_init__(self) -> None:
        labels = [as_text(w) for w in self.words[self.n_words:]]
        TextModel.__init__(self, None, None, labels,
                           {"format": "fasttext", "label": label_prefix(labels)})
        self._estimator, self._vectorizer = FastTextHead(self), FastTextFeatures(self)

    @property
    def is_classifier(self) -> bool:
        """Whether the model is a classifier (``-model supervised``), not word vectors."""
        return self.args is None or self.args.model == "supervised"

    def check_classifier(self, what: str) -> None:
        """Raise :class:`ModelFileError` naming ``what`` when the model holds word vectors
        (``-model skipgram``/``cbow``): it has no labels to predict."""
        if self.is_classifier:
            return
        assert self.args is not None
        raise ModelFileError(
            f"{self.path} is a fastText word-vector model (-model {self.args.model}), not a "
            f"classifier: it has no labels, so {what} cannot run on it. Its vectors are read by "
            "print-word-vectors, print-sentence-vectors, print-ngrams, nn, analogies and dump "
            "(word_vectors / sentence_vectors in Python); for labels, train a classifier "
            "(`fasttext supervised` or `lookuplinear train`)."
        )

    def predict(self, text: str | list[str], k: int = 1, threshold: float = 0.0
                ) -> tuple[Any, Any]:
        """:meth:`TextModel.predict`; :class:`ModelFileError` for a word-vector model."""
        self.check_classifier("predict")
        return super().predict(text, k, threshold)

    def _without_labels(self, line: str) -> str:
        """``line`` itself: its rows leave the labels out as fastText's ``getLine`` does (a
        label of the dictionary, or an unknown token starting with ``__label__``)."""
        return line

    def examples(self, line: str, label: str | None = None, *, ended: bool = True
                 ) -> list[tuple[str, list[str]]]:
        """The examples fastText's ``Dictionary::getLine`` reads from one line of a file, each
        as its text (its word tokens, space-joined) and its labels (in the line's order,
        repeats kept), a new one after each ``</s>`` token, as fastText's ``predict``,
        ``test`` and ``print-sentence-vectors`` read them (one output line each).

        ``ended=False``: ``line`` is the last of its file and no ``\\n`` ends it. fastText then
        reads no ``</s>`` at its end: the last example's rows have no ``</s>`` row, and after
        a ``</s>`` token there is another example only when more than the one whitespace
        character that ends the token is left (fastText reads on while a character is left).

        A token is a label when it is one of the model's labels; an unknown token starting
        with ``label`` (fastText's ``-label``, which the file does not keep: ``__label__``
        unless given) is left out; every other token is a word, ``#tag`` of a model trained
        with ``-label '#'`` included.
        """
        prefix = label or _LABEL.decode()
        out: list[tuple[str, list[str]]] = []
        words: list[str] = []
        labels: list[str] = []
        data = as_bytes(line)
        left = 0  # where the characters not read yet start
        for match in _TOKEN.finditer(data):
            token = match.group()
            if token == _EOS:  # getLine ends an example at "</s>"
                out.append((" ".join(words), labels))
                words, labels = [], []
                left = match.end() + 1  # readWord takes the character after a token
                continue
            wid = self._ids.get(token, -1)
            name = as_text(token)
            if wid >= self.n_words:
                labels.append(name)
            elif wid >= 0 or not name.startswith(prefix):
                words.append(name)
        if ended:  # and at the line's end, the "\n" read as "</s>"
            out.append((" ".join(words), labels))
        elif left < len(data):
            out.append((_Unended(" ".join(words)), labels))
        return out

    # ------------------------------------------------------------------ features
    def rows(self, text: str) -> list[int]:
        """The input rows fastText averages for ``text`` (one line), in fastText's order:
        those of its tokens up to the first ``</s>``, then ``</s>`` (the line's end; not for
        the last example of a file's last line without ``\\n``, see :meth:`examples`)."""
        cache: dict[bytes, tuple[list[int], int, bool]] = {}
        return self._rows(text, cache)

    def _rows(self, text: str, cache: dict[bytes, tuple[list[int], int, bool]]) -> list[int]:
        assert self.args is not None
        out: list[int] = []
        hashes: list[int] = []
        tokens = [t for t in _SPLIT.split(as_bytes(text)) if t]
        if not isinstance(text, _Unended):
            tokens.append(_EOS)
        for token in tokens:
            got = cache.get(token)
            if got is None:
                got = cache[token] = self._token(token)
            ids, h, is_word = got
            if is_word:
                out.extend(ids)
                hashes.append(h)
            if token == _EOS:  # Dictionary::getLine ends the line at a "</s>" token
                break
        n = self.args.word_ngrams
        bucket = self.args.bucket
        for i in range(len(hashes)):  # Dictionary::addWordNgrams, uint64 arithmetic
            h = hashes[i] & 0xFFFFFFFFFFFFFFFF
            for j in range(i + 1, min(len(hashes), i + n)):
                h = (h * 116049371 + (hashes[j] & 0xFFFFFFFFFFFFFFFF)) & 0xFFFFFFFFFFFFFFFF
                self._push(out, h % bucket)
        return out

    def _token(self, token: bytes) -> tuple[list[int], int, bool]:
        """A token's rows, its hash as fastText's int32, and whether it is a word."""
        assert self.args is not None
        h = _hash(token)
        wid = self._ids.get(token, -1)
        is_word = (wid < self.n_words) if wid >= 0 else not token.startswith(_LABEL)
        if not is_word:
            return [], 0, False
        ids: list[int] = []
        if wid >= 0:
            ids.append(wid)
            if self.args.maxn > 0 and token != _EOS:
                self._subwords(b"<" + token + b">", ids)
        elif token != _EOS:
            self._subwords(b"<" + token + b">", ids)
        return ids, h - (1 << 32) if h >= 1 << 31 else h, True

    def _subwords(self, word: bytes, out: list[int], names: list[bytes] | None = None
                  ) -> None:
        """``Dictionary::computeSubwords``: n-grams of ``minn..maxn`` UTF-8 characters (their
        strings appended to ``names`` too, when given)."""
        assert self.args is not None
        for ngram in char_ngrams(word, self.args.minn, self.args.maxn):
            self._push(out, _hash(ngram) % self.args.bucket)
            if names is not None:
                names.append(ngram)

    def subwords(self, word: str) -> tuple[list[int], list[str]]:
        """``Dictionary::getSubwords`` with its strings: the input rows of ``word`` (its own,
        if in the dictionary, then its character n-grams') and the strings they stand for.
        A pruned model's n-gram left out has a string but no row, as in fastText (whose
        ``print-ngrams`` pairs the ``i``-th row with the ``i``-th string)."""
        assert self.args is not None
        token = as_bytes(word)
        wid = self._ids.get(token, -1)
        ids = [wid] if wid >= 0 else []
        names = [token] if wid >= 0 else []
        if token != _EOS:
            self._subwords(b"<" + token + b">", ids, names)
        return ids, [as_text(n) for n in names]

    def _push(self, out: list[int], bucket: int) -> None:
        """``Dictionary::pushHash``: a bucket's row, through a pruned model's map."""
        if self.pruneidx is not None:
            row = self.pruneidx.get(bucket)
            if row is None:
                return
            bucket = row
        out.append(self.n_words + bucket)

    # ------------------------------------------------------------------ prediction
    def hidden(self, texts: list[str]) -> tuple[np.ndarray, np.ndarray]:
        """fastText's hidden vectors, shape (n_texts, dim) float32, and which texts have any
        input row (fastText predicts nothing for the others)."""
        cache: dict[bytes, tuple[list[int], int, bool]] = {}
        return self._mean_rows([self._rows(t, cache) for t in texts])

    def _mean_rows(self, rows: list[list[int]]) -> tuple[np.ndarray, np.ndarray]:
        """The mean of each list's input rows (:func:`mean_rows`), and which lists are not
        empty."""
        return mean_rows(self.input_matrix, rows), np.array([len(r) > 0 for r in rows], bool)

    def sentence_vectors(self, texts: list[str]) -> np.ndarray:
        """Each text's vector as fastText's ``get_sentence_vector`` (and
        ``print-sentence-vectors``) gives it, shape (n_texts, dim), float32. A classifier's:
        the mean of the input rows of its words, n-grams and ``</s>``, the output layer's
        input. A word-vector model's: the mean of its words' vectors (:meth:`word_vectors`;
        words split at ASCII whitespace, ``</s>`` and labels included) each scaled to length
        1, words whose vector is zero left out (zeros when none is left). A text holding
        ``"\\n"`` raises ``InputValueError``, as ``get_sentence_vector`` refuses it."""
        texts = _lines(texts, "sentence_vectors")
        if self.is_classifier:
            return self.hidden(texts)[0]
        lines = [[as_text(w) for w in _CIN_SPLIT.split(as_bytes(t)) if w] for t in texts]
        known: dict[str, int] = {}
        for words in lines:
            for w in words:
                known.setdefault(w, len(known))
        vectors = self.word_vectors(list(known))  # each distinct word once
        norms = _norms(vectors)
        out = np.zeros((len(texts), self.input_matrix.shape[1]), _F32)
        for i, words in enumerate(lines):  # FastText::getSentenceVector, not supervised
            count = 0
            for w in words:
                j = known[w]
                if norms[j] > 0:  # vec.mul(1.0 / norm); svec.addVector(vec)
                    out[i] += vectors[j] * _F32(1.0 / float(norms[j]))
                    count += 1
            if count:
                out[i] *= _F32(1.0 / count)
        return out

    def word_vectors(self, words: list[str]) -> np.ndarray:
        """Each word's vector as fastText's ``get_word_vector`` (and ``print-word-vectors``)
        gives it: the mean of the input rows of the word (if in the dictionary) and of its
        character n-grams (with ``maxn > 0``); zeros for an unknown word without n-grams;
        shape (n_words, dim), float32."""
        rows = []
        for word in _listed(words, "word_vectors", "words"):
            token = as_bytes(word)
            wid = self._ids.get(token, -1)
            # a label's id names a row too in fastText (one past the words); never past the end
            ids = [wid] if 0 <= wid < len(self.input_matrix) else []
            if token != _EOS:  # Dictionary::getSubwords: the n-grams of "<word>"
                self._subwords(b"<" + token + b">", ids)
            rows.append(ids)
        return self._mean_rows(rows)[0]

    def logits(self, hidden: np.ndarray) -> np.ndarray:
        """``output @ hidden`` per text, shape (n_texts, n_output_rows), summed in order."""
        self.check_classifier("logits")
        w = self.output_matrix
        d = np.zeros((len(hidden), len(w)), _F32)
        for j in range(w.shape[1]):  # d += w[i, j] * h[j], j = 0..dim-1: DenseMatrix::dotRow
            d += hidden[:, j:j + 1] * w[:, j]
        if self.output_norms is not None:  # ProductQuantizer::mulcode: res * alpha
            d *= self.output_norms
        return d

    def _probabilities(self, texts: list[str]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Raw probabilities p (float32; for hs the leaf log-scores), hidden's logits, and
        which texts have input rows."""
        hidden, has = self.hidden(texts)
        x = self.logits(hidden)
        return self._head(x), x, has

    def _head(self, x: np.ndarray) -> np.ndarray:
        """The loss's probabilities from the logits (for hs: the leaves' log-scores)."""
        assert self.args is not None
        if self.args.loss == "softmax":
            m = x.max(axis=1, keepdims=True)
            e = np.exp((x - m).astype(np.float64)).astype(_F32)
            z = np.cumsum(e, axis=1, dtype=_F32)[:, -1:]  # z += output[i], in order
            return e / z
        if self.args.loss in ("ova", "ns"):
            return _table_sigmoid(x)
        return self._hs_scores(x)

    def _printed(self, p: np.ndarray) -> np.ndarray:
        """``exp(std_log(p))`` (hs: ``exp(score)``), the probability fastText returns."""
        assert self.args is not None
        logp = p if self.args.loss == "hs" else _std_log(p)
        return np.exp(logp.astype(np.float64)).astype(_F32)

    def scores(self, texts: list[str]) -> np.ndarray:
        """Each label's probability as fastText returns it, shape (n_texts, n_labels), float32.

        ``exp(log(p + 1e-5))`` in float32, as the ``fasttext`` module's ``predict`` gives it
        (for ``-loss hs``, ``p`` is the product of the path's ``sigmoid + 1e-5``). A text with
        no input row (no known word, n-gram or ``</s>``), for which fastText predicts nothing,
        has NaN scores. :class:`ModelFileError` for a word-vector model; ``InputValueError``
        for a text holding ``"\\n"`` (fastText's ``predict`` reads one line at a time).
        """
        self.check_classifier("scores")
        texts = _lines(texts, "scores")
        p, _, has = self._probabilities(texts)
        out = self._printed(p)
        out[~has] = np.nan
        return out

    def top_k(self, texts: list[str], k: int = 1, threshold: float = 0.0
              ) -> tuple[list[list[str]], list[np.ndarray]]:
        """The ``k`` best labels of each text with probability >= ``threshold``, and their
        probabilities, as ``fasttext.load_model(path).predict(texts, k, threshold)`` returns
        them (ties in fastText's order); ``k=-1``: every label, as fastText's ``k=-1``.

        Raises
        ------
        InputValueError
            ``k`` neither >= 1 nor -1, a threshold outside [0, 1], or a text holding
            ``"\\n"`` (fastText's ``predict`` reads one line at a time).
        ModelFileError
            A word-vector model (``-model skipgram``/``cbow``): no labels.
        """
        from ..errors import InputValueError
        from ..text._files import check_threshold

        assert self.args is not None
        self.check_classifier("top_k")
        texts = _lines(texts, "top_k")
        if k == -1:
            k = len(self.labels)
        if k < 1:
            raise InputValueError(f"k must be >= 1, or -1 for every label, got {k}.")
        thr = float(_F32(check_threshold(threshold)))
        p, x, has = self._probabilities(texts)
        labels: list[list[str]] = []
        probs: list[np.ndarray] = []
        names = self.labels
        for i in range(len(p)):
            if not has[i]:
                best: list[tuple[float, int]] = []
            elif self.args.loss == "hs":
                best = self._hs_top(x[i], k, thr)
            else:
                best = _find_k_best(p[i], k, thr)
            labels.append([names[j] for _, j in best])
            probs.append(np.exp(np.array([s for s, _ in best], np.float64)).astype(_F32))
        return labels, probs

    # ------------------------------------------------------------------ hierarchical softmax
    def _hs(self) -> tuple[list[tuple[int, int]], list[list[tuple[int, bool]]]]:
        """fastText's Huffman tree (``HierarchicalSoftmaxLoss::buildTree``): each node's
        (left, right) children, and each label's path root-first as (internal row, right?)."""
        if self._tree is None:
            n = len(self.label_counts)
            count = [*self.label_counts, *[10**15] * max(n - 1, 0)]
            parent, binary = [-1] * (2 * n - 1), [False] * (2 * n - 1)
            children = [(-1, -1)] * (2 * n - 1)
            leaf, node = n - 1, n
            for i in range(n, 2 * n - 1):
                mini = [0, 0]
                for j in range(2):
                    if leaf >= 0 and count[leaf] < count[node]:
                        mini[j], leaf = leaf, leaf - 1
                    else:
                        mini[j], node = node, node + 1
                children[i] = (mini[0], mini[1])
                count[i] = count[mini[0]] + count[mini[1]]
                parent[mini[0]] = parent[mini[1]] = i
                binary[mini[1]] = True
            paths = []
            for i in range(n):
                path, j = [], i
                while parent[j] != -1:
                    path.append((parent[j] - n, binary[j]))
                    j = parent[j]
                paths.append(path[::-1])
            self._tree = (children, paths)
        return self._tree

    def _hs_scores(self, x: np.ndarray) -> np.ndarray:
        """Each leaf's score: the sum, root first, of ``std_log(sigmoid)`` on its path."""
        _, paths = self._hs()
        f = _exact_sigmoid(x)
        right, left = _std_log(f), _std_log((1.0 - f.astype(np.float64)).astype(_F32))
        out = np.zeros((len(x), len(paths)), _F32)
        for leaf, path in enumerate(paths):
            s = np.zeros(len(x), _F32)
            for node, is_right in path:
                s = s + (right[:, node] if is_right else left[:, node])
            out[:, leaf] = s
        return out

    def _hs_top(self, x: np.ndarray, k: int, thr: float) -> list[tuple[float, int]]:
        """``HierarchicalSoftmaxLoss::dfs`` on one text's logits: its pruning and its heap."""
        children, _ = self._hs()
        n = len(self.label_counts)
        f = _exact_sigmoid(x)
        right, left = _std_log(f), _std_log((1.0 - f.astype(np.float64)).astype(_F32))
        floor = float(_std_log(np.array([thr], _F32))[0])
        heap: list[tuple[float, int]] = []
        stack = [(2 * n - 2, _F32(0.0))]
        while stack:  # depth first, left child first: the recursion's order
            node, score = stack.pop()
            if float(score) < floor or (len(heap) == k and float(score) < heap[0][0]):
                continue
            a, b = children[node]
            if a == -1 and b == -1:
                _push_heap(heap, (float(score), node))
                if len(heap) > k:
                    _pop_heap(heap)
                    heap.pop()
                continue
            r = node - n
            stack.append((b, _F32(score + right[r])))
            stack.append((a, _F32(score + left[r])))
        _sort_heap(heap)
        return heap


class FastTextFeatures:
    """A fastText model's features as a count matrix (``FastTextModel.vectorizer``).

    ``transform(texts)[i, r]`` counts row ``r`` of the input matrix among the rows fastText
    averages for text ``i`` (:meth:`FastTextModel.rows`), shape (n_texts, n_rows), float32 CSR.
    """

    def __init__(self, model: FastTextModel) -> None:
        self.model = model

    def transform(self, texts: list[str]) -> Any:
        """The count matrix of ``texts``."""
        import scipy.sparse as sp

        cache: dict[bytes, tuple[list[int], int, bool]] = {}
        rows = [self.model._rows(t, cache) for t in texts]
        indptr = np.cumsum([0, *map(len, rows)])
        flat = np.fromiter((r for row in rows for r in row), np.int64, int(indptr[-1]))
        X = sp.csr_matrix((np.ones(len(flat), _F32), flat, indptr),
                          shape=(len(rows), len(self.model.input_matrix)))
        X.sum_duplicates()
        return X


class FastTextHead:
    """A fastText model's layers on :class:`FastTextFeatures`' counts
    (``FastTextModel.estimator``).

    ``predict_proba(X)`` is ``lookup_linear(X, input_matrix, mode="mean")`` (fastText's mean of
    the rows), ``@ output_matrix.T``, then the loss's probabilities as
    :meth:`FastTextModel.scores` gives them; equal to ``scores`` up to the order of float32
    additions (``scores`` adds in fastText's order).
    """

    def __init__(self, model: FastTextModel) -> None:
        self.model = model
        self.classes_ = np.arange(len(model.labels))

    def predict_proba(self, X: Any) -> np.ndarray:
        """Label probabilities of the count rows ``X``, shape (n, n_labels); NaN for an empty
        row, as :meth:`FastTextModel.scores`; :class:`ModelFileError` for a word-vector
        model."""
        import torch

        from ..functional import lookup_linear

        self.model.check_classifier("predict_proba")
        weight = torch.from_numpy(self.model.input_matrix)
        hidden = lookup_linear(X, weight, mode="mean").numpy()  # (n, dim)
        out = self.model._printed(self.model._head(self.model.logits(hidden)))
        out[np.diff(X.indptr) == 0] = np.nan
        return out


def char_ngrams(word: bytes, minn: int, maxn: int) -> list[bytes]:
    """``Dictionary::computeSubwords``' n-grams of ``word`` (``<token>``, its bytes): each run of
    ``minn..maxn`` UTF-8 characters, in fastText's order, but the lone ``<`` and ``>``.

    Examples
    --------
    >>> char_ngrams(b"<ab>", 1, 2)
    [b'<a', b'a', b'ab', b'b', b'b>']
    """
    out: list[bytes] = []
    size = len(word)
    for i in range(size):
        if word[i] & 0xC0 == 0x80:
            continue
        j, n = i, 1
        while j < size and n <= maxn:
            j += 1
            while j < size and word[j] & 0xC0 == 0x80:
                j += 1
            if n >= minn and not (n == 1 and (i == 0 or j == size)):
                out.append(word[i:j])
            n += 1
    return out


# ---------------------------------------------------------------------- float32 helpers
def _hash(data: bytes) -> int:
    """``Dictionary::hash``: FNV-1a over the bytes read as signed chars, uint32."""
    h = 2166136261
    for b in data:
        h = ((h ^ (b | 0xFFFFFF00 if b >= 128 else b)) * 16777619) & 0xFFFFFFFF
    return h


def mean_rows(table: np.ndarray, rows: list[list[int]]) -> np.ndarray:
    """The mean of each list's rows of ``table``, added in its order in float32 as fastText
    adds them (``getWordVector``, ``computeHidden``; zeros for an empty list)."""
    dim = table.shape[1]
    out = np.zeros((len(rows), dim), _F32)
    lengths = np.array([len(r) for r in rows], dtype=np.int64)
    zero = len(table)  # a zero row for padding: x + 0 is x, the order of the sums is kept
    padded = np.vstack([table, np.zeros((1, dim), _F32)])
    for start in range(0, len(rows), 256):
        part = rows[start:start + 256]
        width = max((len(r) for r in part), default=0)
        idx = np.full((len(part), width), zero, dtype=np.int64)
        for i, r in enumerate(part):
            idx[i, :len(r)] = r
        acc = np.zeros((len(part), dim), _F32)
        for c in range(width):  # the rows in fastText's order, one addition each
            acc += padded[idx[:, c]]
        out[start:start + len(part)] = acc
    has = lengths > 0
    scale = np.zeros(len(rows), _F32)
    scale[has] = (1.0 / lengths[has]).astype(_F32)  # x.mul(1.0 / rows.size())
    out *= scale[:, None]
    return out


def _norms(rows: np.ndarray) -> np.ndarray:
    """``Vector::norm`` of each row: squares added in order in float32, then the root."""
    acc = np.zeros(len(rows), _F32)
    for j in range(rows.shape[1]):
        acc += rows[:, j] * rows[:, j]
    return np.sqrt(acc)


def _std_log(p: np.ndarray) -> np.ndarray:
    """fastText's ``std_log``: ``log(p + 1e-5)`` in double, returned as float32."""
    return np.log(p.astype(np.float64) + 1e-5).astype(_F32)


def _exact_sigmoid(x: np.ndarray) -> np.ndarray:
    """``1. / (1 + std::exp(-x))`` with float32 ``x``: expf, a float sum, a double quotient.

    Below about -88 (a diverged model's logits) ``expf`` is ``inf`` and the sigmoid 0, as in
    fastText, without a warning: numpy's overflow, in ``exp`` past -709 or in the float32 cast
    past -88, is that ``inf``."""
    with np.errstate(over="ignore"):
        e = np.exp(-x.astype(np.float64)).astype(_F32)
    return (1.0 / (_F32(1) + e).astype(np.float64)).astype(_F32)


def _sigmoid_table() -> np.ndarray:
    i = np.arange(513, dtype=np.int64)
    x = (((i * 16).astype(_F32) / _F32(512)) - _F32(8)).astype(_F32)
    e = np.exp(-x.astype(np.float64)).astype(_F32)
    return (1.0 / (1.0 + e.astype(np.float64))).astype(_F32)


_SIGMOID = _sigmoid_table()


def _table_sigmoid(x: np.ndarray) -> np.ndarray:
    """``Loss::sigmoid``: 0 below -8, 1 above 8, else fastText's 512-entry table."""
    inside = np.clip(x, -8, 8)
    idx = ((((inside + _F32(8)) * _F32(512)) / _F32(8)) / _F32(2)).astype(np.int64)
    out = _SIGMOID[np.clip(idx, 0, 512)]
    return np.where(x < -8, _F32(0), np.where(x > 8, _F32(1), out)).astype(_F32)


def _find_k_best(p: np.ndarray, k: int, thr: float) -> list[tuple[float, int]]:
    """``Loss::findKBest`` then ``sort_heap``: (std_log(p), label) best first."""
    logp = _std_log(p)
    heap: list[tuple[float, int]] = []
    for i in range(len(p)):
        if float(p[i]) < thr:
            continue
        s = float(logp[i])
        if len(heap) == k and s < heap[0][0]:
            continue
        _push_heap(heap, (s, i))
        if len(heap) > k:
            _pop_heap(heap)
            heap.pop()
    _sort_heap(heap)
    return heap


# libstdc++'s heap algorithms with fastText's comparePairs (a.first > b.first: the smallest
# score on top), step for step, so that equal scores come out in fastText's order
def _sift_up(h: list[tuple[float, int]], hole: int, top: int, value: tuple[float, int]) -> None:
    parent = (hole - 1) // 2
    while hole > top and h[parent][0] > value[0]:
        h[hole] = h[parent]
        hole = parent
        parent = (hole - 1) // 2
    h[hole] = value


def _push_heap(h: list[tuple[float, int]], value: tuple[float, int]) -> None:
    h.append(value)
    _sift_up(h, len(h) - 1, 0, value)


def _adjust(h: list[tuple[float, int]], hole: int, n: int, value: tuple[float, int]) -> None:
    top, child = hole, hole
    while child < (n - 1) // 2:
        child = 2 * (child + 1)
        if h[child][0] > h[child - 1][0]:
            child -= 1
        h[hole] = h[child]
        hole = child
    if n % 2 == 0 and child == (n - 2) // 2:
        child = 2 * (child + 1)
        h[hole] = h[child - 1]
        hole = child - 1
    _sift_up(h, hole, top, value)


def _pop_heap(h: list[tuple[float, int]], end: int | None = None) -> None:
    """``std::pop_heap(h, h + end)``: the top moves to ``end - 1``."""
    last = (len(h) if end is None else end) - 1
    if last > 0:
        value = h[last]
        h[last] = h[0]
        _adjust(h, 0, last, value)


def _sort_heap(h: list[tuple[float, int]]) -> None:
    for end in range(len(h), 1, -1):
        _pop_heap(h, end)


# ---------------------------------------------------------------------- the file
def load_fasttext(path: str | Path) -> FastTextModel:
    """Read a model written by fastText (``.bin``, or ``.ftz`` from ``quantize``).

    A classifier (``fasttext supervised``) predicts as the ``fasttext`` module does on the
    same file:
    ``model.top_k(texts, k, threshold)`` equals ``fasttext.load_model(path).predict(texts, k,
    threshold)`` (labels exactly, probabilities to float32 rounding), and ``model.scores``
    gives every label's probability. ``lookuplinear.sklearn.load_model``, ``lookuplinear
    predict`` and ``lookuplinear test`` take such a file wherever they take a lookuplinear
    model. A word-vector model (``fasttext skipgram``/``cbow``) gives fastText's word and
    sentence vectors (``word_vectors``, ``sentence_vectors``; ``lookuplinear
    print-word-vectors``, ``print-sentence-vectors``, ``print-ngrams``, ``nn``, ``analogies``,
    ``dump``), and :class:`ModelFileError` where labels are needed (``predict``, ``scores``,
    ``top_k``). A quantized matrix is decoded to float32 rows when the file is read (rows x dim
    x 4 bytes of memory).

    Raises
    ------
    FileNotFoundError
        ``path`` does not exist.
    ModelFileError
        Not a fastText file, a format version other than 11 or 12, a truncated file (the
        message names the offset), or inconsistent content.

    Examples
    --------
    >>> model = load_fasttext("model.bin")                              # doctest: +SKIP
    >>> model.top_k(["a fine film"], k=2)                               # doctest: +SKIP
    ([['__label__pos', '__label__neg']], [array([0.91, 0.09], dtype=float32)])
    """
    p = Path(path)
    if not p.is_file():
        raise FileNotFoundError(f"no model file at {p}.")
    data = bytearray(p.stat().st_size)
    with open(p, "rb") as f:
        f.readinto(data)
    r = _Reader(data, p)
    magic, version = r.unpack("ii", "the magic number and version")
    if magic != MAGIC:
        raise r.damaged(f"it does not start with fastText's magic number {MAGIC}")
    if version not in VERSIONS:
        raise ModelFileError(
            f"{p} is a fastText model of file format version {version}; this reader reads "
            f"versions {', '.join(map(str, VERSIONS))} (fastText 0.1 to 0.9.x). Save it again "
            "with a fastText that writes version 12."
        )
    a = r.unpack("12id", "the training arguments (Args)")
    loss, kind = _LOSSES.get(a[6]), _MODELS.get(a[7])
    if loss is None or kind is None:
        raise r.damaged(f"unknown loss {a[6]} or model {a[7]} in the arguments")
    supervised = kind == "supervised"
    # fastText reads a version-11 supervised model without char n-grams (it had none)
    maxn = 0 if version == 11 and supervised else a[10]
    args = FastTextArgs(dim=a[0], ws=a[1], epoch=a[2], min_count=a[3], neg=a[4],
                        word_ngrams=a[5], loss=loss, model=kind, bucket=a[8], minn=a[9],
                        maxn=maxn, lr_update_rate=a[11], t=a[12])
    size, nwords, nlabels, _ntokens, prune_size = r.unpack("iiiqq", "the dictionary's sizes")
    # a word-vector model's labels are the label-prefixed tokens of its text: often none
    if not (nwords >= 0 and nlabels >= (1 if supervised else 0) and size == nwords + nlabels):
        raise r.damaged(f"a dictionary of {size} entries with {nwords} words and {nlabels} "
                        "labels")
    words, counts = [], []
    for i in range(size):
        word = r.cstring(f"dictionary entry {i}")
        count, kind_byte = r.unpack("qb", f"the count and type of dictionary entry {i}")
        if kind_byte != (0 if i < nwords else 1):
            raise r.damaged(f"dictionary entry {i} has type {kind_byte}, expected "
                            f"{'0 (word)' if i < nwords else '1 (label)'}")
        words.append(word)
        counts.append(count)
    pruneidx = None
    if prune_size >= 0:
        pairs = r.array(np.int32, 2 * prune_size, "the pruned buckets (pruneidx)")
        pruneidx = dict(zip(pairs[0::2].tolist(), pairs[1::2].tolist(), strict=True))
    (quant_input,) = r.unpack("?", "the input matrix's quantization flag")
    if not quant_input and pruneidx is not None:
        raise r.damaged("a pruned dictionary with an unquantized input matrix")
    inp, _ = _matrix(r, quant_input, "input")
    (qout,) = r.unpack("?", "the output matrix's quantization flag")
    out, norms = _matrix(r, quant_input and qout, "output")
    if r.pos != len(data):
        raise r.damaged(f"{len(data) - r.pos} bytes after the output matrix")
    ngrams = args.maxn > 0 or args.word_ngrams > 1
    need = nwords + ((args.bucket if pruneidx is None else len(pruneidx)) if ngrams else 0)
    if ngrams and args.bucket <= 0:
        raise r.damaged(f"n-grams are on (maxn {args.maxn}, wordNgrams {args.word_ngrams}) "
                        f"with bucket {args.bucket}")
    if pruneidx and (min(pruneidx.values()) < 0 or max(pruneidx.values()) >= len(pruneidx)):
        raise r.damaged("a pruned bucket maps outside the kept rows")
    n_out = nlabels if supervised else nwords  # a word-vector model's output rows are words
    if inp.shape[0] < need or inp.shape[1] != args.dim or out.shape != (n_out, args.dim):
        raise r.damaged(
            f"matrices of shapes {inp.shape} and {out.shape} for {nwords} words, {nlabels} "
            f"labels, dim {args.dim}, {need - nwords} n-gram rows and {n_out} output rows "
            f"(-model {kind})")
    ids: dict[bytes, int] = {}
    for i, w in enumerate(words):  # word2int: a later duplicate wins, as in fastText
        ids[w] = i
    model = FastTextModel(
        args=args, version=version, words=words, n_words=nwords, input_matrix=inp,
        output_matrix=out, output_norms=norms, pruneidx=pruneidx,
        label_counts=counts[nwords:], counts=counts, quantized=quant_input, path=p, _ids=ids)
    return model


def save_fasttext(path: str | Path, args: FastTextArgs, words: list[bytes], counts: list[int],
                  n_words: int, ntokens: int, input_matrix: np.ndarray,
                  output_matrix: np.ndarray) -> Path:
    """Write a model in fastText's format, version 12, as ``FastText::saveModel`` writes it
    (the layout in this module's docstring; matrices dense, no pruned buckets): what
    :func:`load_fasttext` and the ``fasttext`` module's ``load_model`` read.

    ``words`` are the dictionary's entries in its order (``words[:n_words]`` words, the rest
    labels), ``counts`` their counts, ``ntokens`` the tokens read; ``input_matrix`` has the
    words' rows then ``args.bucket`` n-gram rows, ``output_matrix`` a row per output (a word of
    a ``skipgram``/``cbow`` model, a label of a classifier). The file is replaced in one step.

    Raises
    ------
    ModelFileError
        Shapes or lengths that do not fit together (the file is then not written).
    """
    from .._atomic import replacing

    p = Path(path)
    inp = np.ascontiguousarray(input_matrix, dtype="<f4")
    out = np.ascontiguousarray(output_matrix, dtype="<f4")
    n_out = n_words if args.model != "supervised" else len(words) - n_words
    rows = n_words + (args.bucket if args.maxn > 0 or args.word_ngrams > 1 else 0)
    if (len(counts) != len(words) or not 0 <= n_words <= len(words) or inp.ndim != 2
            or inp.shape[0] < rows or inp.shape[1] != args.dim or out.shape != (n_out, args.dim)):
        raise ModelFileError(
            f"cannot write {p}: {len(words)} words with {len(counts)} counts ({n_words} words), "
            f"matrices {inp.shape} and {out.shape}; expected at least {rows} input rows and "
            f"{n_out} output rows of dim {args.dim} (-model {args.model}). Pass the matrices "
            "that go with the dictionary."
        )
    losses = {v: k for k, v in _LOSSES.items()}
    models = {v: k for k, v in _MODELS.items()}
    head = struct.pack("<ii", MAGIC, 12) + struct.pack(
        "<12id", args.dim, args.ws, args.epoch, args.min_count, args.neg, args.word_ngrams,
        losses[args.loss], models[args.model], args.bucket, args.minn, args.maxn,
        args.lr_update_rate, args.t)
    head += struct.pack("<iiiqq", len(words), n_words, len(words) - n_words, ntokens, -1)
    with replacing(p) as tmp, open(tmp, "wb") as f:
        f.write(head)
        for i, (word, count) in enumerate(zip(words, counts, strict=True)):
            f.write(word + b"\0" + struct.pack("<qb", count, int(i >= n_words)))
        for matrix in (inp, out):  # quant_input / qout False, then a DenseMatrix
            f.write(struct.pack("<?qq", False, *matrix.shape))
            f.write(matrix.tobytes())
    return p


def _matrix(r: _Reader, quantized: bool, name: str) -> tuple[np.ndarray, np.ndarray | None]:
    """A DenseMatrix, or a QuantMatrix decoded to float32 rows: (rows, norms) where the output
    keeps its norms apart (its dot products are scaled after the sum, as fastText does)."""
    if not quantized:
        m, n = r.unpack("qq", f"the {name} matrix's shape")
        if m < 0 or n <= 0:
            raise r.damaged(f"an {name} matrix of shape ({m}, {n})")
        return r.array(np.float32, m * n, f"the {name} matrix").reshape(m, n), None
    qnorm, m, n, codesize = r.unpack("?qqi", f"the quantized {name} matrix's header")
    if m < 0 or n <= 0:
        raise r.damaged(f"a quantized {name} matrix of shape ({m}, {n})")
    codes = r.array(np.uint8, codesize, f"the {name} matrix's codes")
    centroids, nsubq, dsub, lastdsub = _quantizer(r, f"the {name} matrix's quantizer", n)
    if codesize != m * nsubq:
        raise r.damaged(f"{codesize} codes for {m} rows of {nsubq} subquantizers")
    rows = np.empty((m, n), _F32)
    codes = codes.reshape(m, nsubq)
    for q in range(nsubq):
        d = lastdsub if q == nsubq - 1 else dsub
        table = centroids[q * 256 * dsub:q * 256 * dsub + 256 * d].reshape(256, d)
        rows[:, q * dsub:q * dsub + d] = table[codes[:, q]]
    norms = None
    if qnorm:
        norm_codes = r.array(np.uint8, m, f"the {name} matrix's norm codes")
        norm_centroids, *_ = _quantizer(r, f"the {name} matrix's norm quantizer", 1)
        norms = norm_centroids[norm_codes]
    if name == "output":
        return rows, norms
    if norms is not None:  # addcode: x += norm * c, one float32 product per value
        rows = (rows * norms[:, None]).astype(_F32)
    return rows, None


def _quantizer(r: _Reader, what: str, dim: int) -> tuple[np.ndarray, int, int, int]:
    """A ProductQuantizer: its centroids and (nsubq, dsub, lastdsub), checked against dim."""
    qdim, nsubq, dsub, lastdsub = r.unpack("iiii", what)
    if (qdim != dim or dsub <= 0 or nsubq != -(-dim // dsub)
            or lastdsub != dim - (nsubq - 1) * dsub):
        raise r.damaged(f"{what}: dim {qdim}, {nsubq} subquantizers of {dsub} "
                        f"(last {lastdsub}) for {dim} columns")
    return r.array(np.float32, qdim * 256, f"{what}'s centroids"), nsubq, dsub, lastdsub
