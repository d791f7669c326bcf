"""Labelled text files (fastText format, CSV/TSV) and fastText's P@k / R@k.

fastText format: one example per line, its labels as tokens with a prefix, the rest is text::

    __label__pos __label__short a fine film , really
    __label__neg not worth it

Requires nothing beyond the standard library and numpy.
"""

from __future__ import annotations

import csv
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..errors import InputValueError

__all__ = ["LABEL_PREFIX", "LabelledTexts", "precision_recall_at_k", "read_fasttext",
           "read_table"]

#: fastText's default label prefix (its ``-label`` option)
LABEL_PREFIX = "__label__"


@dataclass
class LabelledTexts:
    """Texts with zero or more labels each, as read from a file."""

    texts: list[str]
    labels: list[list[str]]

    def __len__(self) -> int:
        return len(self.texts)


def _open_lines(path: str | Path) -> list[str]:
    if str(path) == "-":
        return sys.stdin.read().splitlines()
    try:
        return Path(path).read_text(encoding="utf-8").splitlines()
    except UnicodeDecodeError as e:
        raise InputValueError(
            f"{path} is not UTF-8 text ({e.reason} at byte {e.start}). Convert it with "
            "iconv -t utf-8, or pass the right file."
        ) from None


def read_fasttext(path: str | Path, *, label_prefix: str = LABEL_PREFIX) -> LabelledTexts:
    """Read a fastText-format file (``-`` for stdin); blank lines are skipped.

    Examples
    --------
    >>> import tempfile, os
    >>> with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False) as f:
    ...     _ = f.write("__label__a __label__b hello world\\n__label__c bye\\n")
    >>> data = read_fasttext(f.name); os.unlink(f.name)
    >>> data.labels, data.texts
    ([['__label__a', '__label__b'], ['__label__c']], ['hello world', 'bye'])
    """
    texts, labels = [], []
    for line in _open_lines(path):
        tokens = line.split()
        if not tokens:
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
    return LabelledTexts(texts, labels)


def read_table(
    path: str | Path,
    *,
    text_column: str,
    label_column: str | None,
    delimiter: str | None = None,
) -> LabelledTexts:
    """Read a CSV/TSV file with a header row; columns by name or 0-based position.

    ``delimiter`` defaults to a tab for ``.tsv``/``.tab`` files and a comma otherwise. A label
    cell may hold several labels separated by spaces.
    """
    lines = _open_lines(path)
    sep = delimiter or ("\t" if str(path).endswith((".tsv", ".tab")) else ",")
    rows = list(csv.reader(lines, delimiter=sep))
    if not rows:
        raise InputValueError(f"{path} is empty; a CSV/TSV input needs a header row.")
    header, body = rows[0], rows[1:]
    t = _column(header, text_column, path, "--text-column")
    lab = None if label_column is None else _column(header, label_column, path, "--label-column")
    texts, labels = [], []
    for n, row in enumerate(body, start=2):
        if not row:
            continue
        need = max(t, -1 if lab is None else lab)
        if len(row) <= need:
            raise InputValueError(
                f"{path}:{n}: the row has {len(row)} fields but column {need} is needed "
                f"(header: {header}). Check the delimiter (now {sep!r}) and quoting."
            )
        texts.append(row[t])
        labels.append([] if lab is None else row[lab].split())
    return LabelledTexts(texts, labels)


def _column(header: Sequence[str], name: str, path: str | Path, option: str) -> int:
    if name in header:
        return list(header).index(name)
    if name.isdigit() and int(name) < len(header):
        return int(name)
    raise InputValueError(
        f"{option} {name!r} is not a column of {path}; its header is {list(header)}. Pass a "
        "column name from the header or a 0-based position."
    )


def precision_recall_at_k(
    true_labels: Sequence[Sequence[int]], scores: np.ndarray, k: int = 1
) -> tuple[float, float]:
    """fastText's P@k and R@k: the k highest-scoring labels of each example against its truth.

    ``P@k = hits / predicted`` and ``R@k = hits / true``, summed over all examples, where each
    example predicts its ``min(k, n_labels)`` best labels.

    Parameters
    ----------
    true_labels : sequence of sequences of int
        The label indices of each example (columns of ``scores``).
    scores : ndarray of shape (n_examples, n_labels)
    k : int, default 1

    Examples
    --------
    >>> scores = np.array([[0.7, 0.2, 0.1], [0.1, 0.3, 0.6]])
    >>> precision_recall_at_k([[0], [1, 2]], scores, k=2)   # hits: 1 + 2, predicted 4, true 3
    (0.75, 1.0)
    """
    if k < 1:
        raise InputValueError(f"k must be >= 1, got {k}.")
    kk = min(k, scores.shape[1])
    top = np.argsort(-scores, axis=1, kind="stable")[:, :kk]
    hits = sum(len(set(t) & set(p.tolist())) for t, p in zip(true_labels, top, strict=True))
    n_true = sum(len(t) for t in true_labels)
    predicted = kk * len(true_labels)
    return (hits / predicted if predicted else 0.0, hits / n_true if n_true else 0.0)
