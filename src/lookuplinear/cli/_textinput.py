"""Input options shared by ``train``, ``predict`` and ``test``: fastText format or CSV/TSV."""

from __future__ import annotations

import argparse
from typing import Any

__all__ = ["add_input_options", "add_k", "check_labels", "load_text_model", "read_input"]


def add_k(p: argparse.ArgumentParser, what: str) -> None:
    """``k`` as fastText takes it, positional after INPUT, or ``-k K``."""
    p.add_argument("k_pos", nargs="?", type=int, default=None, metavar="K",
                   help=f"{what} (default 1; also -k K)")
    p.add_argument("-k", type=int, default=None, help=argparse.SUPPRESS)


def check_labels(known: list[str], labels: list[list[str]], args: argparse.Namespace) -> None:
    """Stop when the input's labels share none with the model's; say which are unseen."""
    import sys

    from ..errors import InputValueError

    seen = {lab for ls in labels for lab in ls}
    unseen = sorted(seen - set(known))
    if seen and len(unseen) == len(seen):
        prefix = args.label
        hint = (
            f"the model's labels carry the prefix '{prefix}' and the input's do not: add it "
            "(or --label PREFIX) or give the right --label-column"
            if any(k.startswith(prefix) for k in known)
            and any(f"{prefix}{u}" in known for u in unseen)
            else "check --label, --label-column, or that MODEL was trained on these labels"
        )
        raise InputValueError(
            f"none of the {len(seen)} labels of {args.input} is a label of the model: the "
            f"input has {unseen[:3]}, the model {sorted(known)[:3]}. Likely fix: {hint}."
        )
    if unseen:
        shown = ", ".join(unseen[:10]) + (", ..." if len(unseen) > 10 else "")
        print(f"lookuplinear {args.command}: {len(unseen)} of the input's {len(seen)} labels "
              f"are unknown to the model and count as missed: {shown}", file=sys.stderr)


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

    if args.k is not None and args.k_pos is not None and args.k != args.k_pos:
        raise InputValueError(f"k given twice, {args.k_pos} and -k {args.k}; give it once.")
    args.k = args.k if args.k is not None else (args.k_pos if args.k_pos is not None else 1)
    if args.k < 1:
        raise InputValueError(f"k must be >= 1, got {args.k}.")
    model = load_model(args.model)
    if model.vectorizer is None or not model.labels:
        raise InputValueError(
            f"{args.model} holds an estimator without a text vectorizer and labels; {command} "
            "needs a model written by `lookuplinear train`."
        )
    return model
