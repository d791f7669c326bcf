"""Input options shared by ``train``, ``predict`` and ``test``: fastText format or CSV/TSV."""

from __future__ import annotations

import argparse
from typing import Any

__all__ = ["add_input_options", "load_text_model", "read_input"]


def add_input_options(p: argparse.ArgumentParser, *, labels: bool) -> None:
    """``--label``, ``--text-column``, ``--label-column``, ``--sep``."""
    g = p.add_argument_group("input format (fastText lines by default, or CSV/TSV)")
    g.add_argument("--label", default="__label__", metavar="PREFIX",
                   help="label prefix of fastText-format lines (default: __label__)")
    g.add_argument("--text-column", default=None, metavar="COL",
                   help="read INPUT as CSV/TSV with a header; the text is in column COL "
                        "(name or 0-based position)")
    if labels:
        g.add_argument("--label-column", default=None, metavar="COL",
                       help="CSV/TSV column with the label(s), space-separated if several")
    g.add_argument("--sep", default=None, metavar="CHAR",
                   help="CSV/TSV delimiter (default: tab for .tsv/.tab, comma otherwise)")


def read_input(args: argparse.Namespace, *, need_labels: bool) -> Any:
    """The ``LabelledTexts`` of ``args.input``; raises ``InputValueError`` on bad usage."""
    from ..errors import InputValueError
    from ..text import read_fasttext, read_table

    label_column = getattr(args, "label_column", None)
    if args.text_column is None:
        if label_column is not None:
            raise InputValueError(
                "--label-column needs --text-column (it selects CSV/TSV input); for "
                "fastText-format lines drop --label-column."
            )
        data = read_fasttext(args.input, label_prefix=args.label)
    else:
        if need_labels and label_column is None:
            raise InputValueError(
                "CSV/TSV input needs --label-column COL as well as --text-column."
            )
        data = read_table(args.input, text_column=args.text_column, label_column=label_column,
                          delimiter=args.sep)
    if len(data) == 0:
        raise InputValueError(f"{args.input} holds no examples (no non-empty line).")
    if need_labels:
        missing = [i for i, ls in enumerate(data.labels) if not ls]
        if missing:
            where = "line" if args.text_column is None else "data row"
            raise InputValueError(
                f"{len(missing)} of {len(data)} examples have no label (first: {where} "
                f"{missing[0] + 1}). fastText lines need a '{args.label}...' token; CSV rows a "
                "non-empty --label-column."
            )
    return data


def load_text_model(args: argparse.Namespace, command: str) -> Any:
    """The model of ``args.model`` for ``predict``/``test``, after checking ``-k``; raises
    ``InputValueError`` when ``-k < 1`` or the file holds no text vectorizer and labels."""
    from ..errors import InputValueError
    from ..sklearn import load_model

    if args.k < 1:
        raise InputValueError(f"-k must be >= 1, got {args.k}.")
    model = load_model(args.model)
    if model.vectorizer is None or not model.labels:
        raise InputValueError(
            f"{args.model} holds an estimator without a text vectorizer and labels; {command} "
            "needs a model written by `lookuplinear train`."
        )
    return model
