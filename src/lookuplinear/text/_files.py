"""Labelled text files (fastText format, CSV/TSV) and fastText's P@k / R@k.

fastText format: one example per line, its labels as tokens with a prefix, the rest is text::

    __label__pos __label__short a fine film , really
    __label__neg not worth it

Requires nothing beyond the standard library and numpy.
"""

from __future__ import annotations

import csv
import re
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ..errors import InputValueError

__all__ = ["LABEL_PREFIX", "LabelledTexts", "check_threshold", "precision_recall_at_k",
           "read_fasttext", "read_table", "read_word_vectors", "table_delimiter"]

#: fastText's default label prefix (its ``-label`` option)
LABEL_PREFIX = "__label__"
#: the characters fastText splits a line's tokens at (``Dictionary::readWord``); other Unicode
#: spaces (U+00A0, U+3000, ...) are part of a token
FASTTEXT_WHITESPACE = " \t\n\v\f\r\0"
_FASTTEXT_SPACES = re.compile(f"[{FASTTEXT_WHITESPACE}]+")


def _fasttext_split(line: str) -> list[str]:
    """``line``'s tokens, split where fastText splits them."""
    return [t for t in _FASTTEXT_SPACES.split(line) if t]


@dataclass
class LabelledTexts:
    """Texts with zero or more labels each, as read from a file.

    ``lines[i]`` is the file's line number (1-based) where example ``i`` starts, for messages;
    ``undecodable`` the numbers of the lines that held bytes that are not UTF-8 (each read as
    U+FFFD, as fastText reads such a line instead of stopping); ``newlines`` the number of
    ``\\n`` of a fastText-format file, blank lines' included (fastText's dictionary counts its
    end-of-line token ``</s>`` once for each), ``None`` for a table.
    """

    texts: list[str]
    labels: list[list[str]]
    lines: list[int] = field(default_factory=list)
    undecodable: list[int] = field(default_factory=list)
    newlines: int | None = None

    def __len__(self) -> int:
        return len(self.texts)


#: the UTF-8 byte order mark some editors write at the start of a file
_BOM = b"\xef\xbb\xbf"


def _open_lines(path: str | Path, *, keep_bom: bool = False, errors: str = "replace"
                ) -> tuple[list[str], list[int], bool]:
    """The lines of ``path`` (``-``: stdin) split at ``\\n`` only (a ``\\r`` before it dropped),
    as fastText splits them, a leading BOM removed unless ``keep_bom`` (fastText keeps it, as
    U+FEFF at the start of the first token); the numbers of the lines with bytes that are
    not UTF-8, decoded with the ``errors`` handler: ``"replace"``, U+FFFD in their place, or
    ``"surrogateescape"``, each byte kept (U+DC80 + byte) as fastText keeps its bytes; and
    whether the last line ended with ``\\n`` (True for an empty file): fastText reads no
    ``</s>`` at the end of a last line without it."""
    data = sys.stdin.buffer.read() if str(path) == "-" else Path(path).read_bytes()
    if not keep_bom:
        data = data.removeprefix(_BOM)
    try:
        text = data.decode("utf-8")
        undecodable: list[int] = []
    except UnicodeDecodeError:  # rare: find the lines, decode each as well as it goes
        raw = data.split(b"\n")
        undecodable = []
        decoded = []
        for n, line in enumerate(raw, start=1):
            try:
                decoded.append(line.decode("utf-8"))
            except UnicodeDecodeError:
                decoded.append(line.decode("utf-8", errors=errors))
                undecodable.append(n)
        text = "\n".join(decoded)
    lines = text.split("\n")
    ended = lines[-1] == ""
    if ended:  # the newline that ends the last line
        lines.pop()
    else:  # the last line, without "\n": a "\r" at its end ends no CRLF, it stays
        tail = lines.pop()
    lines = [line.removesuffix("\r") for line in lines]
    if not ended:
        lines.append(tail)
    return lines, undecodable, ended


def read_fasttext(path: str | Path, *, label_prefix: str = LABEL_PREFIX,
                  keep_blank: bool = False) -> LabelledTexts:
    """Read a fastText-format file (``-`` for stdin); blank lines are skipped unless
    ``keep_blank``.

    With ``keep_blank=True`` every line is an example, a blank or whitespace-only one an empty
    text with no label, so that example ``i`` is line ``i + 1`` (what ``predict`` needs to
    print one line per input line, as fastText's ``predict`` does).

    Tokens are split at the characters fastText splits at (space, tab, ``\\v``, ``\\f``,
    ``\\r``, NUL), so a token with another Unicode space (U+00A0) is one token, as in fastText.
    Lines end at ``\\n`` (as in fastText; other Unicode line breaks are part of the text), a
    UTF-8 byte order mark at the start is skipped (fastText reads it as the start of the first
    token), and bytes that are not UTF-8 read as U+FFFD (the lines are listed in
    ``undecodable``).

    Examples
    --------
    >>> import tempfile, os
    >>> with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False) as f:
    ...     _ = f.write("__label__a __label__b hello world\\n\\n__label__c bye\\n")
    >>> data = read_fasttext(f.name); os.unlink(f.name)
    >>> data.labels, data.texts, data.lines
    ([['__label__a', '__label__b'], ['__label__c']], ['hello world', 'bye'], [1, 3])
    """
    texts, labels, numbers = [], [], []
    lines, undecodable, ended = _open_lines(path)
    for n, line in enumerate(lines, start=1):
        tokens = [t for t in _FASTTEXT_SPACES.split(line) if t]
        if not tokens and not keep_blank:
            continue
        k = 0  # labels usually lead the line: take those, then look for others in one search
        while k < len(tokens) and tokens[k].startswith(label_prefix):
            k += 1
        rest = tokens[k:]
        # the search starts at or before the text's first token, so it misses no label
        if rest and label_prefix in line[line.find(rest[0]):]:  # a label later on: every token
            labels.append([t for t in tokens if t.startswith(label_prefix)])
            rest = [t for t in tokens if not t.startswith(label_prefix)]
        else:
            labels.append(tokens[:k])
        texts.append(" ".join(rest))
        numbers.append(n)
    return LabelledTexts(texts, labels, numbers, undecodable,
                         newlines=len(lines) - (not ended))


def read_table(
    path: str | Path,
    *,
    text_column: str,
    label_column: str | None,
    delimiter: str | None = None,
    option: str = "--text-column",
    hint: str = "",
) -> LabelledTexts:
    """Read a CSV/TSV file with a header row; columns by name or 0-based position.

    ``delimiter`` defaults to a tab for ``.tsv``/``.tab`` files and a comma otherwise. A label
    cell may hold several labels separated by spaces. The file is decoded as by
    :func:`read_fasttext`; errors name the line (a quoted field may span lines). ``option``
    names where ``text_column`` came from, for the message when it is not a column, and
    ``hint`` says there what to do (instead of naming a column of the header).
    """
    lines, undecodable, _ = _open_lines(path)
    sep = delimiter or table_delimiter(path)
    # each line with its "\n" back: a quoted field that spans lines keeps its line breaks
    reader = csv.reader((line + "\n" for line in lines), delimiter=sep)
    rows: list[tuple[int, list[str]]] = []
    try:
        for row in reader:
            rows.append((reader.line_num, row))
    except csv.Error as e:
        raise InputValueError(
            f"{path}:{reader.line_num}: not a valid CSV/TSV row ({e}). Check the delimiter "
            f"(now {sep!r}) and the quoting of that line."
        ) from None
    if not rows:
        raise InputValueError(f"{path} is empty; a CSV/TSV input needs a header row.")
    header = rows[0][1]
    t = _column(header, text_column, path, option, hint)
    lab = (None if label_column is None
           else _column(header, label_column, path, "--label-column", hint))
    texts, labels, numbers = [], [], []
    start = rows[0][0] + 1  # the line where the next row starts
    for end, row in rows[1:]:
        n, start = start, end + 1
        if not row:
            continue
        need = max(t, -1 if lab is None else lab)
        if len(row) <= need:
            raise InputValueError(
                f"{path}:{n}: the row has {len(row)} fields but column {need} is needed "
                f"(header: {_shown(header)}). Check the delimiter (now {sep!r}) and quoting."
            )
        texts.append(row[t])
        labels.append([] if lab is None else row[lab].split())
        numbers.append(n)
    return LabelledTexts(texts, labels, numbers, undecodable)


def read_word_vectors(path: str | Path) -> tuple[list[str], np.ndarray]:
    """Read the word vectors of a fastText ``.vec`` file, as ``-pretrainedVectors`` reads it.

    The format: a first line ``count dim``, then ``count`` lines of a word and its ``dim``
    values, separated by spaces. Returns the words and their vectors, float32 of shape
    ``(count, dim)``; lines after the ``count``-th are not read, as in fastText. Fields are
    split at fastText's whitespace only (a word may hold a no-break space). Raises
    ``InputValueError`` naming the line when the file is not in that format.

    Examples
    --------
    >>> import tempfile, os
    >>> with tempfile.NamedTemporaryFile("w", suffix=".vec", delete=False) as f:
    ...     _ = f.write("2 3\\ngood 0.1 0.2 0.3\\nbad -1 0 1e-2\\n")
    >>> words, vectors = read_word_vectors(f.name); os.unlink(f.name)
    >>> words, vectors.shape, vectors.dtype
    (['good', 'bad'], (2, 3), dtype('float32'))
    """
    lines, _, _ = _open_lines(path)
    head = _fasttext_split(lines[0]) if lines else []
    if len(head) != 2 or not all(x.isdigit() for x in head):
        raise InputValueError(
            f"{path}:1: a .vec file starts with 'COUNT DIM' (two integers), got "
            f"{(lines[0][:60] if lines else '')!r}. Give the .vec fastText writes beside its "
            "model (NAME.vec), not the .bin."
        )
    count, dim = int(head[0]), int(head[1])
    if len(lines) - 1 < count:
        raise InputValueError(
            f"{path} announces {count} vectors on line 1 but holds {len(lines) - 1}; the file "
            "is truncated."
        )
    words, values = [], []
    for n, line in enumerate(lines[1 : count + 1], start=2):
        parts = _fasttext_split(line)  # a word keeps a no-break space, as fastText's
        if len(parts) != dim + 1:
            raise InputValueError(
                f"{path}:{n}: expected a word and {dim} values (DIM from line 1), got "
                f"{len(parts)} fields."
            )
        words.append(parts[0])
        values.append(parts[1:])
    try:
        vectors = np.asarray(values, dtype=np.float32).reshape(count, dim)
    except ValueError as e:
        raise InputValueError(f"{path}: a vector value is not a number ({e}).") from None
    return words, vectors


def table_delimiter(path: str | Path) -> str:
    """``read_table``'s default delimiter: a tab for ``.tsv``/``.tab`` files, else a comma."""
    return "\t" if str(path).endswith((".tsv", ".tab")) else ","


def _column(header: Sequence[str], name: str, path: str | Path, option: str,
            hint: str = "") -> int:
    if name in header:
        return list(header).index(name)
    if name.isdigit() and int(name) < len(header):
        return int(name)
    raise InputValueError(
        f"{option} {name!r} is not a column of {path}; its header (first line) is "
        f"{_shown(header)}." + (hint or " Pass a column name from the header or a 0-based "
                                "position.")
    )


def _shown(header: Sequence[str], fields: int = 8, chars: int = 40) -> str:
    """A header row for a message: at most ``fields`` fields of at most ``chars`` characters
    (a file that is not a table has one long line as its "header").

    Examples
    --------
    >>> _shown(["id", "x" * 50], chars=10)
    "['id', 'xxxxxxxxx...' (50 characters)]"
    """
    shown = [repr(f) if len(f) <= chars else f"{f[: chars - 1] + '...'!r} ({len(f)} characters)"
             for f in header[:fields]]
    more = [f"... ({len(header) - fields} more)"] if len(header) > fields else []
    return "[" + ", ".join(shown + more) + "]"


def check_threshold(threshold: float) -> float:
    """``threshold`` as a probability in [0, 1]; raises ``InputValueError`` otherwise (NaN,
    which no probability reaches, included)."""
    if not 0.0 <= threshold <= 1.0:
        raise InputValueError(f"threshold is a probability in [0, 1], got {threshold}.")
    return float(threshold)


def precision_recall_at_k(
    true_labels: Sequence[Sequence[int]], scores: np.ndarray, k: int = 1,
    threshold: float = 0.0,
) -> tuple[float, float]:
    """fastText's P@k and R@k: the k highest-scoring labels of each example against its truth.

    ``P@k = hits / predicted`` and ``R@k = hits / true``, summed over all examples, where each
    example predicts those of its ``min(k, n_labels)`` best labels whose score is at least
    ``threshold`` (``fasttext test MODEL FILE k threshold``). P@k is NaN when nothing is
    predicted, R@k when the examples have no label, as fastText prints them.

    Parameters
    ----------
    true_labels : sequence of sequences of int
        The label indices of each example (columns of ``scores``).
    scores : ndarray of shape (n_examples, n_labels)
        Probabilities (the threshold compares with them).
    k : int, default 1
    threshold : float, default 0.0
        In [0, 1].

    Examples
    --------
    >>> scores = np.array([[0.7, 0.2, 0.1], [0.1, 0.3, 0.6]])
    >>> precision_recall_at_k([[0], [1, 2]], scores, k=2)   # hits: 1 + 2, predicted 4, true 3
    (0.75, 1.0)
    >>> precision_recall_at_k([[0], [1, 2]], scores, k=2, threshold=0.5)  # predicted 0, 2
    (1.0, 0.6666666666666666)
    """
    if k < 1:
        raise InputValueError(f"k must be >= 1, got {k}.")
    check_threshold(threshold)
    kk = min(k, scores.shape[1])
    top = np.argsort(-scores, axis=1, kind="stable")[:, :kk]
    kept = [p[row[p] >= threshold].tolist() for row, p in zip(scores, top, strict=True)]
    hits = sum(len(set(t) & set(p)) for t, p in zip(true_labels, kept, strict=True))
    n_true = sum(len(t) for t in true_labels)
    predicted = sum(len(p) for p in kept)
    return (hits / predicted if predicted else float("nan"),
            hits / n_true if n_true else float("nan"))
