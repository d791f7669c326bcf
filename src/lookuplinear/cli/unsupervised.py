"""``lookuplinear skipgram`` / ``cbow``: fastText's word-vector training, refused with what to
use instead."""

from __future__ import annotations

import argparse
from typing import Any

__all__ = ["add_parser", "run"]


def add_parser(sub: Any, name: str = "skipgram") -> argparse.ArgumentParser:
    """``skipgram`` or ``cbow``: every argument is taken, and the command says what to use."""
    p: argparse.ArgumentParser = sub.add_parser(
        name,
        help=f"fastText's {name} word vectors: not built here (says what to use instead)",
        description=(
            f"fastText's `{name}` learns word vectors without labels. lookuplinear trains "
            "supervised classifiers only; this command stops with a message naming what to "
            "use instead."
        ),
    )
    p.add_argument("rest", nargs=argparse.REMAINDER, help=argparse.SUPPRESS)
    p.set_defaults(_takes_any=True)
    return p


def run(args: argparse.Namespace) -> int:
    from ..errors import InputValueError

    raise InputValueError(
        f"{args.command} (unsupervised word vectors) is not built: lookuplinear trains "
        "supervised classifiers (`lookuplinear supervised` / `train`). Train the vectors with "
        f"fastText itself (`fasttext {args.command} -input TEXT -output VECS`) or gensim's "
        "FastText, then start a classifier from them with `lookuplinear supervised -input "
        "TRAIN -output MODEL -pretrainedVectors VECS.vec` (the -dim of the .vec). The VECS.bin "
        "fastText writes is read here by print-word-vectors, print-sentence-vectors, "
        "print-ngrams, nn, analogies and dump."
    )
