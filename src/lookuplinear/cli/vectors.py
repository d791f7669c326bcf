"""``lookuplinear print-word-vectors`` / ``print-sentence-vectors``: a model's vectors of the
words or lines on stdin, printed as fastText prints them."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import IO, Any

__all__ = ["add_parser", "format_vector", "load_vector_model", "run", "write_vec"]

#: lines of stdin turned into vectors at once when stdin is a pipe or a file (a terminal's
#: lines are answered one at a time, as they are typed)
BATCH_LINES = 4096


def add_parser(sub: Any, name: str = "print-word-vectors") -> argparse.ArgumentParser:
    """``print-word-vectors``, or ``print-sentence-vectors``."""
    words = name == "print-word-vectors"
    p: argparse.ArgumentParser = sub.add_parser(
        name,
        help=("print the vector of each word read from stdin" if words else
              "print the vector of each line read from stdin"),
        description=(
            "Read words (separated by spaces, tabs or newlines) from stdin and print, for each, "
            "the word and its vector, as fastText's print-word-vectors does: the mean of the "
            "table rows of the word and its character n-grams (zeros for a word the model does "
            "not know and that has no character n-gram)." if words else
            "Read lines from stdin and print, for each, its vector, as fastText's "
            "print-sentence-vectors does for a supervised model: the mean of the table rows "
            "of the line's words and n-grams (tokens with the label prefix left out), the input "
            "of the output layer. A line with no known word or n-gram (a blank one) prints "
            "zeros. On a classifier fastText wrote, a '</s>' token ends a line there and the "
            "rest of it prints another vector, as in fastText; on a fastText word-vector model "
            "(-model skipgram or cbow) a line's vector is the mean of its words' vectors, each "
            "scaled to length 1 (words with a zero vector left out), as fastText's."
        ) + " Values are printed with 5 significant digits, each followed by a space.",
    )
    p.add_argument("model", metavar="MODEL", help="model file written by `lookuplinear train` "
                   "or by fastText (a classifier, or skipgram or cbow word vectors)")
    return p


def format_vector(values: Any) -> str:
    """A vector as fastText's ``operator<<`` writes it: each value with 5 significant digits
    (C++'s ``setprecision(5)``, printf's ``%.5g``) followed by a space.

    Examples
    --------
    >>> format_vector([0.123456, -1e-05, 0.0, 123456.0])
    '0.12346 -1e-05 0 1.2346e+05 '
    """
    return "".join(f"{float(v):.5g} " for v in values)


def write_vec(path: Path, names: Sequence[bytes], rows: Any) -> None:
    """Write ``rows`` named ``names`` in fastText's ``.vec`` text format (``saveVectors``,
    ``saveOutput``): a line ``rows dim``, then each name and its row (:func:`format_vector`);
    the file is replaced in one step."""
    from .._atomic import replacing

    with replacing(path) as tmp, open(tmp, "wb") as f:
        f.write(f"{len(names)} {rows.shape[1]}\n".encode())
        f.writelines(name + b" " + format_vector(row).encode() + b"\n"
                     for name, row in zip(names, rows, strict=True))


def _batches(stream: IO[bytes]) -> Iterator[list[bytes]]:
    """The lines of ``stream``, each with its ``\\n`` (the last one may have none), a batch at
    a time; one line at a time from a terminal."""
    size = 1 if stream.isatty() else BATCH_LINES
    batch: list[bytes] = []
    for line in stream:
        batch.append(line)
        if len(batch) >= size:
            yield batch
            batch = []
    if batch:
        yield batch


def _sentences(model: Any, batch: list[bytes], errors: str) -> list[str]:
    """The texts whose vectors ``print-sentence-vectors`` prints for ``batch``'s lines: each
    line, its labels left out; for a classifier fastText wrote, the examples fastText reads
    from it (``FastTextModel.examples``: a ``</s>`` token starts another, a vector each; no
    ``</s>`` at the end of a last line without ``\\n``); for a fastText word-vector model,
    each line whole (fastText's ``getline``)."""
    from ..sklearn._fasttext_bin import FastTextModel

    texts: list[str] = []
    for raw in batch:
        line = raw.removesuffix(b"\n").decode("utf-8", errors=errors)
        if isinstance(model, FastTextModel) and model.is_classifier:
            found = model.examples(line, ended=raw.endswith(b"\n"))
            texts += [text for text, _ in found]
        else:
            texts.append(model._without_labels(line))
    return texts


def load_vector_model(args: argparse.Namespace) -> Any:
    """The model of ``args.model`` for a command that reads its word vectors
    (``print-word-vectors``, ``print-sentence-vectors``, ``print-ngrams``, ``nn``,
    ``analogies``): one written by ``lookuplinear train`` or by fastText, with its text
    vectorizer."""
    from ..errors import InputValueError
    from ..sklearn import load_model

    model = load_model(args.model)
    if model.vectorizer is None:
        raise InputValueError(
            f"{args.model} holds an estimator without a text vectorizer; {args.command} needs "
            "a model written by `lookuplinear train` or by fastText."
        )
    return model


def run(args: argparse.Namespace) -> int:
    from ..sklearn._fasttext_bin import FastTextModel
    from ._args import write_stdout

    model = load_vector_model(args)
    words = args.command == "print-word-vectors"
    # a model fastText wrote reads bytes: those that are not UTF-8 kept (surrogate escapes),
    # as fastText reads them; lookuplinear's models read them as U+FFFD
    errors = "surrogateescape" if isinstance(model, FastTextModel) else "replace"
    try:
        for batch in _batches(sys.stdin.buffer):
            if words:  # read as C++'s `cin >> word`: split at ASCII whitespace only
                tokens = [w.decode("utf-8", errors=errors)
                          for line in batch for w in line.split()]  # "\n" too
                out = [f"{w} {format_vector(v)}"
                       for w, v in zip(tokens, model.word_vectors(tokens), strict=True)]
            else:
                out = [format_vector(v)
                       for v in model.sentence_vectors(_sentences(model, batch, errors))]
            if out:
                write_stdout("\n".join(out) + "\n")
                sys.stdout.flush()
    except BrokenPipeError:  # `... | head`: the reader left, not an error
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    return 0
