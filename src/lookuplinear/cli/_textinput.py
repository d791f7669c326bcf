"""Input options shared by ``train``, ``predict`` and ``test``: fastText format or CSV/TSV."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any, TypeGuard

if TYPE_CHECKING:
    from ..sklearn._fasttext_bin import FastTextModel

__all__ = ["add_input_options", "add_k", "check_labels", "input_format", "load_text_model",
           "read_input"]


def add_k(p: argparse.ArgumentParser, what: str, threshold: str) -> None:
    """``k`` and ``threshold`` as fastText takes them, positional after INPUT, or ``-k K`` and
    ``--threshold T``; ``threshold`` says what the threshold does."""
    p.add_argument("k_pos", nargs="?", type=int, default=None, metavar="K",
                   help=f"{what} (default 1; -1: every label, as fastText; also -k K)")
    p.add_argument("-k", type=int, default=None, help=argparse.SUPPRESS)
    p.add_argument("threshold_pos", nargs="?", type=float, default=None, metavar="THRESHOLD",
                   help=f"{threshold} (default 0; also --threshold THRESHOLD)")
    p.add_argument("--threshold", "-threshold", type=float, default=None, help=argparse.SUPPRESS)


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
              f"are unknown to the model and left out, as fastText's test leaves them: "
              f"{shown}", file=sys.stderr)


def add_input_options(p: argparse.ArgumentParser, *, labels: bool, model: bool = False) -> None:
    """``--label``, ``--text-column``, ``--label-column``, ``--sep``; ``model``: the defaults
    are the format MODEL was trained on."""
    g = p.add_argument_group(
        "input format (fastText lines by default, or CSV/TSV)" if not model else
        "input format (default: as MODEL's training file was read, fastText lines or CSV/TSV "
        "with the same columns)"
    )
    g.add_argument("--label", "-label", default=None, metavar="PREFIX",
                   help="label prefix of fastText-format lines (default: __label__"
                        + (", or the one MODEL was trained with; given, INPUT is read as "
                           "fastText lines even when MODEL was trained on a table)"
                           if model else ")"))
    g.add_argument("--text-column", default=None, metavar="COL",
                   help="read INPUT as CSV/TSV with a header; the text is in column COL "
                        "(name or 0-based position)"
                        + ("; default: MODEL's text column when it was trained on a table"
                           if model else ""))
    if labels:
        g.add_argument("--label-column", default=None, metavar="COL",
                       help="CSV/TSV column with the label(s), space-separated if several"
                            + ("; default: MODEL's" if model else ""))
    g.add_argument("--sep", default=None, metavar="CHAR",
                   help="CSV/TSV delimiter (default: tab for .tsv/.tab, comma for .csv"
                        + (", else MODEL's)" if model else ", comma otherwise)"))


#: file names that ``predict``/``test`` take for a table when MODEL cannot say
TABLE_SUFFIXES = (".csv", ".tsv", ".tab")


def input_format(args: argparse.Namespace) -> dict[str, Any]:
    """How ``train`` read ``args.input``, for the model file: fastText lines and their label
    prefix, or a table's columns and delimiter."""
    from ..text import LABEL_PREFIX, table_delimiter

    if args.text_column is None:
        return {"format": "fasttext", "label": args.label or LABEL_PREFIX}
    return {"format": "table", "text_column": args.text_column,
            "label_column": args.label_column, "sep": args.sep or table_delimiter(args.input)}


def read_input(args: argparse.Namespace, *, need_labels: bool, model: Any = None,
               every_line: bool = False) -> Any:
    """The ``LabelledTexts`` of ``args.input``; raises ``InputValueError`` on bad usage.

    ``need_labels`` (``train``, ``test``): no example has a label is an error; the examples
    without one are kept, for the caller to skip (as fastText's training and test skip them).

    ``every_line`` (``predict``): every line of fastText-format input is an example, a blank
    one included, so that the output has one line per input line, as fastText's (on a model
    fastText wrote, one per example fastText reads: a ``</s>`` token starts another).

    With ``model`` (``predict``, ``test``), the options not given are those of the file MODEL
    was trained on (``model.input_format``); a MODEL that does not record it (an older file)
    refuses an INPUT named like a table unless ``--text-column`` says how to read it. An
    explicit ``--label`` reads fastText lines whatever MODEL was trained on; their labels lose
    that prefix when MODEL's labels (from a table) have none.
    """
    import sys

    from ..errors import InputValueError
    from ..text import LABEL_PREFIX, read_fasttext, read_table

    label_column = getattr(args, "label_column", None)
    text_column, sep, option, hint = args.text_column, args.sep, "--text-column", ""
    trained = None if model is None else model.input_format
    named_table = str(args.input).endswith(TABLE_SUFFIXES)
    as_lines = args.label is not None and text_column is None  # --label: fastText lines
    if model is not None and text_column is None and not as_lines:
        if trained is None and named_table:
            raise InputValueError(
                f"{args.model} does not record how its training file was read (it was written "
                f"by an older lookuplinear) and {args.input} is named like a CSV/TSV table. "
                "Pass --text-column COL" + (" and --label-column COL" if need_labels else "")
                + " to read it as a table (its header row is not an example), or give fastText "
                "lines on stdin ('-')."
            )
        if trained is not None and trained["format"] == "table":
            text_column = trained["text_column"]
            option = "--text-column (MODEL's, from training)"
            hint = (f" MODEL was trained on a table, so {args.input} is read as one, its first "
                    f"line as the header. If {args.input} holds fastText lines ('__label__x "
                    "some text'), add --label __label__ (the prefix of its labels) to read it "
                    "as such; if it is a table, give --text-column COL.")
            if need_labels and label_column is None:
                label_column = trained["label_column"]
            if sep is None and not named_table:
                sep = trained["sep"]
    explicit_label = args.label
    if args.label is None:
        args.label = trained["label"] if trained and trained["format"] == "fasttext" else (
            LABEL_PREFIX)
    as_fasttext = text_column is None and label_column is None and _written_by_fasttext(model)
    if as_fasttext:
        data = _read_as_fasttext(args, model, explicit_label, every_line=every_line)
    elif text_column is None:
        if label_column is not None:
            raise InputValueError(
                "--label-column needs --text-column (it selects CSV/TSV input); for "
                "fastText-format lines drop --label-column."
            )
        data = read_fasttext(args.input, label_prefix=args.label, keep_blank=every_line)
        bare = [[lab.removeprefix(args.label) for lab in ls] for ls in data.labels]
        if trained is not None and trained["format"] == "table" and bare != data.labels:
            data.labels = bare
            print(f"lookuplinear {args.command}: note: MODEL was trained on a table, its labels "
                  f"have no prefix: the '{args.label}' of {args.input}'s labels is dropped to "
                  "match them.", file=sys.stderr)
    else:
        if need_labels and label_column is None:
            raise InputValueError(
                "CSV/TSV input needs --label-column COL as well as --text-column."
            )
        data = read_table(args.input, text_column=text_column, label_column=label_column,
                          delimiter=sep, option=option, hint=hint)
        if _written_by_fasttext(model):  # it reads a line per example: a cell's line breaks
            data.texts = [t.replace("\n", " ") for t in data.texts]  # split words as spaces do
    if data.undecodable:
        bad = data.undecodable
        shown = ", ".join(map(str, bad[:5])) + (", ..." if len(bad) > 5 else "")
        read = "kept as fastText reads them" if as_fasttext else "read as U+FFFD"
        print(f"lookuplinear {args.command}: {args.input}: {len(bad)} line(s) hold bytes that "
              f"are not UTF-8, {read} (line {shown})", file=sys.stderr)
    if as_fasttext and need_labels:  # as fastText's test: N 0 (P and R nan) when none is kept
        return data
    if len(data) == 0 and not every_line:  # predict: no line, no prediction (fastText's)
        raise InputValueError(f"{args.input} holds no examples (no non-empty line).")
    if need_labels and not any(data.labels):
        table = (f" {args.input} is named like a CSV/TSV table and was read as fastText "
                 "lines because no --text-column was given: to read it as a table, give "
                 "--text-column COL --label-column COL (its header names the columns)."
                 if named_table and text_column is None else "")
        raise InputValueError(
            f"none of the {len(data)} examples of {args.input} has a label. fastText lines "
            f"need a '{args.label}...' token; CSV rows a non-empty --label-column." + table
        )
    if named_table and text_column is None and not as_lines:
        print(f"lookuplinear {args.command}: note: {args.input} is named like a CSV/TSV table "
              "but is read as fastText lines (its first line is an example); give "
              "--text-column COL" + (" --label-column COL" if need_labels else "")
              + " to read it as a table.", file=sys.stderr)
    return data


def _written_by_fasttext(model: Any) -> TypeGuard[FastTextModel]:
    """Whether ``model`` is a fastText ``.bin``/``.ftz`` file, whose input is read as
    fastText reads it (:func:`_read_as_fasttext`)."""
    from ..sklearn._fasttext_bin import FastTextModel

    return isinstance(model, FastTextModel)


def _read_as_fasttext(args: argparse.Namespace, model: Any, label: str | None, *,
                      every_line: bool) -> Any:
    """``args.input`` read as fastText's ``predict`` and ``test`` read it for a model it wrote
    (``FastTextModel.examples``): a token is a label when it is one of the model's labels,
    an unknown one starting with ``label`` (``__label__`` unless ``--label`` gives it, as the
    file does not keep fastText's ``-label``) is left out, and every other is a word.

    ``every_line`` (``predict``): every example of every line, a blank line's included, as
    fastText's ``predict`` reads them, each printed on its own line: a new one after each
    ``</s>`` token. Otherwise (``test``) the examples of fastText's ``FastText::test``, those
    with no label of the model or no row (no known word, n-gram or ``</s>``) skipped, with a
    note on stderr.
    A UTF-8 byte order mark at the start is kept, as fastText keeps it: U+FEFF begins the first
    token, which is then no label of the model and no known word. Bytes that are not UTF-8 are
    kept (as surrogate escapes, ``FastTextModel`` reads them back as the bytes), so they match
    the model's words and labels and hash as fastText hashes them. A last line without a
    final ``\\n`` has no ``</s>`` at its end, as fastText reads it.
    """
    import sys

    from ..text import LabelledTexts
    from ..text._files import _open_lines

    lines, undecodable, ended = _open_lines(args.input, keep_bom=True, errors="surrogateescape")
    texts: list[str] = []
    labels: list[list[str]] = []
    numbers: list[int] = []
    skipped = 0
    for n, line in enumerate(lines, start=1):
        found = model.examples(line, label, ended=ended or n < len(lines))
        if not every_line:
            if not line.strip(" \t\v\f\r\0"):
                continue
            kept = [(text, labs) for text, labs in found if labs and model.rows(text)]
            skipped += not kept
            found = kept
        for text, labs in found:
            texts.append(text)
            labels.append(labs)
            numbers.append(n)
    if skipped:
        print(f"lookuplinear {args.command}: {skipped} line(s) of {args.input} have no label "
              "of the model (or no known word) and are skipped, as fastText's test skips them",
              file=sys.stderr)
    return LabelledTexts(texts, labels, numbers, undecodable)


def load_text_model(args: argparse.Namespace, command: str) -> Any:
    """The model of ``args.model`` for ``predict``/``test``, after checking ``-k`` (and the
    threshold); sets ``args.top``, the labels to rank (``-k``, or every label for ``-k -1`` as
    in fastText). Raises ``InputValueError`` when ``-k`` is neither >= 1 nor -1, a threshold
    is not in [0, 1], or the file holds no text vectorizer and labels."""
    from ..errors import InputValueError
    from ..sklearn import load_model
    from ..text._files import check_threshold

    if args.k is not None and args.k_pos is not None and args.k != args.k_pos:
        raise InputValueError(f"k given twice, {args.k_pos} and -k {args.k}; give it once.")
    args.k = args.k if args.k is not None else (args.k_pos if args.k_pos is not None else 1)
    if args.k < 1 and args.k != -1:
        raise InputValueError(
            f"k must be >= 1, or -1 for every label (as in fastText), got {args.k}.")
    if (args.threshold is not None and args.threshold_pos is not None
            and args.threshold != args.threshold_pos):
        raise InputValueError(f"threshold given twice, {args.threshold_pos} and --threshold "
                              f"{args.threshold}; give it once.")
    if args.threshold is None:
        args.threshold = args.threshold_pos if args.threshold_pos is not None else 0.0
    check_threshold(args.threshold)
    model = load_model(args.model, lazy=True)
    if _written_by_fasttext(model):  # word vectors (-model skipgram, cbow): no labels
        model.check_classifier(command)
    if not model.has_vectorizer or not model.labels:
        raise InputValueError(
            f"{args.model} holds an estimator without a text vectorizer and labels; {command} "
            "needs a model written by `lookuplinear train`."
        )
    args.top = len(model.labels) if args.k == -1 else args.k  # k = -1: every label
    return model
