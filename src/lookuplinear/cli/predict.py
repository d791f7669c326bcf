"""``lookuplinear predict``: the k most likely labels of each line, as fastText prints them."""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

from ._args import write_stdout
from ._textinput import add_input_options, add_k, load_text_model, read_input

__all__ = ["add_parser", "run"]


def add_parser(sub: Any, name: str = "predict") -> argparse.ArgumentParser:
    """``predict``, or ``predict-prob`` (``predict --prob``, as fastText names it)."""
    p: argparse.ArgumentParser = sub.add_parser(
        name,
        help="print the k most likely labels of each example of a text file"
        + (" with their probabilities" if name == "predict-prob" else ""),
        description=(
            "For every example of INPUT (fastText lines, labels on them ignored, or CSV/TSV "
            "with --text-column) print its K most likely labels on one line, best first (K -1: "
            "every label, as fastText); a fastText-format INPUT gets one output line per line, "
            "a blank line included, as in fastText (on a model fastText wrote, one per example "
            "fastText reads: a '</s>' token starts another); with "
            "--prob each label is followed by its probability (fastText's predict-prob)."
        ),
    )
    p.add_argument("model", metavar="MODEL", help="model file written by `lookuplinear train`")
    p.add_argument("input", metavar="INPUT", help="texts ('-' for stdin)")
    add_k(p, "labels per example", "print only labels with probability >= THRESHOLD")
    if name == "predict-prob":
        p.set_defaults(prob=True)
    else:
        p.add_argument("--prob", action="store_true", help="print probabilities too")
    add_input_options(p, labels=False, model=True)
    return p


def run(args: argparse.Namespace) -> int:

    model = load_text_model(args, "predict")
    data = read_input(args, need_labels=False, model=model, every_line=True)
    # the model's ranking (a model fastText wrote ranks as fastText, ties in its order)
    names, probs = model.top_k(data.texts, args.top, args.threshold)
    # probabilities as C++'s ostream prints a float by default, as fastText does: 6
    # significant digits (printf's %g: 0.994666, 1.02239e-05)
    lines = [" ".join(f"{n} {float(v):g}" for n, v in zip(kept, p, strict=True)) if args.prob
             else " ".join(kept) for kept, p in zip(names, probs, strict=True)]
    try:
        write_stdout("".join(line + "\n" for line in lines))  # no line, nothing
        sys.stdout.flush()
    except BrokenPipeError:  # `lookuplinear predict ... | head`: the reader left, not an error
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    return 0
